//! The worker thread: it owns the [`Session`] (which is not `Sync`, and whose `execute`
//! blocks) and answers shell requests one at a time, in the order they came. Each request is
//! framed by `busy` and `idle` status messages on iopub, as ipykernel frames them.
//!
//! After a cell fails (or is interrupted) with `stop_on_error`, the execute requests waiting
//! in the queue when its reply is sent are answered `aborted` without running (other requests
//! among them are answered as usual); a request the client sends after it saw the error runs.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, OnceLock};

use neuronlab_session::{Interrupter, Session};
use tokio::sync::watch;

use crate::handlers::{execute, history, info, introspect};
use crate::history_store::History;
use crate::log;
use crate::outbox::{Outbox, Outgoing};
use crate::wire::Request;
use jupyter_protocol::{ShutdownReply, Status};

/// The worker thread's stack: parsing deeply nested cells recurses.
const STACK_BYTES: usize = 16 << 20;

/// The state the worker keeps.
struct Worker {
    session: Result<Session, String>,
    history: History,
    outbox: Outbox,
    /// Set (by anyone) to stop the kernel; the worker sets it on a shell `shutdown_request`.
    shutdown: watch::Sender<bool>,
}

/// Starts the worker: it makes the session (publishing its interrupter in `interrupter`),
/// opens the history, and serves `requests` until the queue closes or the kernel stops.
pub fn spawn(
    requests: Receiver<Request>,
    outbox: Outbox,
    interrupter: Arc<OnceLock<Interrupter>>,
    shutdown: watch::Sender<bool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("neuronlab-cells".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            // However the thread ends, the kernel stops with it (a kernel that no longer
            // answers shell would hang its clients; a dead one is restarted by them).
            let _stop = StopOnExit(shutdown.clone());
            let session = Session::from_env();
            match &session {
                Ok(s) => {
                    let _ = interrupter.set(s.interrupter());
                }
                Err(e) => log!("no session: {e}"),
            }
            let mut worker = Worker {
                session,
                history: History::open(crate::history_store::default_path()),
                outbox,
                shutdown,
            };
            worker.serve(&requests);
            // The session is dropped here, which removes its cell crate.
        })
}

/// Stops the kernel when dropped: when the worker thread ends, returning or panicking.
struct StopOnExit(watch::Sender<bool>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            log!("the worker thread panicked; the kernel stops");
        }
        self.0.send_replace(true);
    }
}

impl Worker {
    /// Answers requests until the queue closes or the kernel stops.
    fn serve(&mut self, requests: &Receiver<Request>) {
        while let Ok(request) = requests.recv() {
            if self.stopping() {
                break;
            }
            self.handle(request, requests);
            if self.stopping() {
                break;
            }
        }
    }

    fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Answers one request between `busy` and `idle`. After a failed cell with
    /// `stop_on_error`, the execute requests queued before its reply are aborted.
    fn handle(&mut self, request: Request, requests: &Receiver<Request>) {
        let request = Arc::new(request);
        self.iopub(request.child(Status::busy()));
        let mut queued = Vec::new();
        match request.msg_type() {
            "execute_request" => {
                let session = self.session.as_mut().map_err(|e| e.as_str());
                let (executed, reply) =
                    execute::execute(session, &mut self.history, &request, &self.outbox);
                if let execute::Executed::Failed {
                    stop_on_error: true,
                } = executed
                {
                    // Taken before the reply goes out: a request sent after the client saw
                    // the error is not aborted.
                    queued.extend(requests.try_iter());
                }
                self.reply(reply);
            }
            "kernel_info_request" => self.reply(request.child(info::kernel_info())),
            "complete_request" => {
                let reply = introspect::complete(self.session.as_ref().ok(), &request);
                self.reply(request.child(reply));
            }
            "inspect_request" => {
                let reply = introspect::inspect(self.session.as_ref().ok(), &request);
                self.reply(request.child(reply));
            }
            "is_complete_request" => {
                let reply = introspect::is_complete(self.session.as_ref().ok(), &request);
                self.reply(request.child(reply));
            }
            "history_request" => {
                let reply = history::reply(&self.history, &request);
                self.reply(request.child_json("history_reply", reply));
            }
            "comm_info_request" => self.reply(request.child(info::comm_info())),
            "shutdown_request" => {
                // Deprecated on shell (clients send it on control), but still honoured.
                let reply = ShutdownReply {
                    restart: request.flag("restart", false),
                    ..ShutdownReply::default()
                };
                self.iopub(request.child(reply.clone()));
                self.reply(request.child(reply));
                let _ = self.shutdown.send_replace(true);
            }
            other => {
                log!("ignored {other} on shell");
                if let Some(reply) = request.unknown_reply() {
                    self.reply(reply);
                }
            }
        }
        self.iopub(request.child(Status::idle()));
        for request in queued {
            if request.msg_type() == "execute_request" {
                self.abort(request);
            } else {
                self.handle(request, requests);
            }
        }
    }

    /// Answers an execute request `aborted`, without running it.
    fn abort(&mut self, request: Request) {
        let count = self.session.as_ref().map_or(0, Session::execution_count);
        self.iopub(request.child(Status::busy()));
        self.reply(request.child(execute::aborted_reply(count)));
        self.iopub(request.child(Status::idle()));
    }

    fn iopub(&self, message: jupyter_protocol::JupyterMessage) {
        let _ = self.outbox.send(Outgoing::IoPub(message));
    }

    fn reply(&self, message: jupyter_protocol::JupyterMessage) {
        let _ = self.outbox.send(Outgoing::Shell(message));
    }
}

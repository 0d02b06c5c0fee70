//! What reaches the running cell's front end from other threads: the output of its guests
//! (which run on threads of their own) and `NEURONLAB_LOGS` lines (published on whichever
//! thread ran the op). Lines that arrive while no cell streams wait for the next flush.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};

use neuronlab_sandbox::{GuestOutput, OutputSink};

use super::convert::OutputConverter;
use super::Output;

/// One item on the way to the front end.
enum Routed {
    Guest(Box<GuestOutput>),
    Log(String),
}

/// Where the session's guests and its log filter send their output: the current cell's
/// channel while one streams.
#[derive(Clone, Default)]
pub(super) struct OutputRouter(Arc<Mutex<RouterState>>);

#[derive(Default)]
struct RouterState {
    tx: Option<mpsc::Sender<Routed>>,
    /// Log lines that came while nothing streamed.
    pending: Vec<String>,
}

impl OutputRouter {
    fn state(&self) -> std::sync::MutexGuard<'_, RouterState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A sink for a new guest instance.
    pub(super) fn sink(&self) -> OutputSink {
        let router = self.clone();
        Box::new(move |o| {
            if let Some(tx) = &router.state().tx {
                let _ = tx.send(Routed::Guest(Box::new(o)));
            }
        })
    }

    /// A `NEURONLAB_LOGS` line: to the streaming cell, else kept for [`OutputRouter::flush_logs`].
    pub(super) fn log(&self, line: String) {
        let mut state = self.state();
        let unsent = match &state.tx {
            Some(tx) => tx.send(Routed::Log(line)).err().map(|e| match e.0 {
                Routed::Log(line) => line,
                Routed::Guest(_) => unreachable!("a log line was sent"),
            }),
            None => Some(line),
        };
        state.pending.extend(unsent);
    }

    /// Passes the log lines that came while nothing streamed to `out`, as stderr.
    pub(super) fn flush_logs(&self, out: &mut dyn FnMut(Output)) {
        let pending = std::mem::take(&mut self.state().pending);
        for line in pending {
            out(Output::Stderr(format!("{line}\n")));
        }
    }

    /// Runs `call` on its own thread while this thread passes its output, and the log lines
    /// published meanwhile, to `out`.
    pub(super) fn stream<R: Send>(
        &self,
        converter: &mut OutputConverter,
        out: &mut dyn FnMut(Output),
        call: impl FnOnce() -> R + Send,
    ) -> R {
        self.flush_logs(out);
        let (tx, rx) = mpsc::channel();
        self.state().tx = Some(tx);
        let result = std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let r = call();
                // Closing the channel ends the loop below once everything is delivered.
                self.state().tx = None;
                r
            });
            for routed in rx {
                match routed {
                    Routed::Guest(o) => {
                        if let Some(o) = converter.convert(*o) {
                            out(o);
                        }
                    }
                    Routed::Log(line) => out(Output::Stderr(format!("{line}\n"))),
                }
            }
            worker.join()
        });
        match result {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

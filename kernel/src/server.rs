//! The kernel process: it binds the five sockets of the connection file and runs, until a
//! shutdown request (or SIGTERM):
//!
//! - the **shell reader** task, which checks each request's signature and queues it for the
//!   [`worker`] thread that owns the session;
//! - the **control** task ([`crate::control`]): interrupt, shutdown, kernel info;
//! - the **outbox** task ([`crate::outbox`]), which sends replies on shell and everything on
//!   iopub, in order;
//! - the **heartbeat** task, which echoes pings, and a **stdin** task that reads and drops
//!   what comes (cells cannot ask for input yet);
//! - a **signal** task: SIGINT interrupts the running cell, as an `interrupt_request` does,
//!   and SIGTERM stops the kernel as a shutdown request does.
//!
//! A socket error (a client that left) is logged and the kernel goes on. On shutdown, the
//! running cell is interrupted, queued requests are dropped, the worker drops the session
//! (which removes its cell crate), queued messages are flushed, and the process exits. A
//! restart (`shutdown_request` with `restart: true`) is the same: the client that asked
//! starts a new kernel process, as jupyter_client does for every kernel, ipykernel included.

use std::path::Path;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use jupyter_protocol::Status;
use jupyter_zmq_client::{KernelHeartbeatConnection, KernelStdinConnection};
use neuronlab_session::Interrupter;
use tokio::sync::watch;
use zeromq::{SocketRecv, SocketSend};

use crate::wire::{self, ReceiveError, Request};
use crate::{connection, control, log, outbox, worker};

/// How long a stopping kernel waits for the running cell to end before it exits anyway.
const WORKER_GRACE: Duration = Duration::from_secs(5);

/// Runs the kernel of the connection file at `path` until it is shut down.
pub fn run(path: &Path) -> Result<(), String> {
    let info = connection::read(path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(serve(info))
}

async fn serve(info: jupyter_protocol::ConnectionInfo) -> Result<(), String> {
    let session_id = uuid::Uuid::new_v4().to_string();
    let sockets = connection::bind(&info, &session_id).await?;
    let (shell_send, shell_recv) = sockets.shell.split();

    let (outbox, queue) = tokio::sync::mpsc::unbounded_channel();
    let drain = tokio::spawn(outbox::drain(queue, sockets.iopub, shell_send));
    let _ = outbox.send(outbox::Outgoing::IoPub(
        wire::unparented(Status::starting()),
    ));

    let (shutdown, mut stopping) = watch::channel(false);
    let interrupter: Arc<OnceLock<Interrupter>> = Arc::default();
    let (requests, queued) = mpsc::channel::<Request>();
    let worker = worker::spawn(
        queued,
        outbox.clone(),
        interrupter.clone(),
        shutdown.clone(),
    )
    .map_err(|e| format!("cannot start the worker thread: {e}"))?;

    let shell = tokio::spawn(read_shell(shell_recv, requests));
    tokio::spawn(control::serve(
        sockets.control,
        outbox.clone(),
        interrupter.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(heartbeat(sockets.heartbeat));
    tokio::spawn(drop_stdin(sockets.stdin));
    tokio::spawn(signals(interrupter.clone(), shutdown.clone()));

    let _ = stopping.wait_for(|stop| *stop).await;

    // Stop: no more requests, the running cell interrupted, the session dropped.
    shell.abort();
    if let Some(interrupter) = interrupter.get() {
        interrupter.interrupt();
    }
    let deadline = Instant::now() + WORKER_GRACE;
    while !worker.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !worker.is_finished() {
        log!("the running cell did not stop; exiting anyway");
    }
    outbox::flush(&outbox, Duration::from_secs(1)).await;
    drop(outbox);
    let _ = tokio::time::timeout(Duration::from_millis(200), drain).await;
    // Let the sockets' writers put the last replies on the wire.
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

/// Queues shell requests for the worker, dropping (and logging) what is not properly signed
/// or framed.
async fn read_shell(
    mut shell: jupyter_zmq_client::RouterRecvConnection,
    requests: mpsc::Sender<Request>,
) {
    loop {
        match wire::receive(&mut shell).await {
            Ok(request) => {
                if requests.send(request).is_err() {
                    return;
                }
            }
            Err(e @ ReceiveError::Rejected(_)) => log!("shell: {e}"),
            Err(e @ ReceiveError::Socket(_)) => {
                log!("shell: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Echoes every heartbeat ping.
async fn heartbeat(mut hb: KernelHeartbeatConnection) {
    loop {
        match hb.socket.recv().await {
            Ok(ping) => {
                if let Err(e) = hb.socket.send(ping).await {
                    log!("heartbeat: {e}");
                }
            }
            // A client that left; wait for the next.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Reads the stdin channel and drops what comes: cells cannot ask for input yet, so no
/// `input_reply` is expected.
async fn drop_stdin(mut stdin: KernelStdinConnection) {
    loop {
        match wire::receive(&mut stdin).await {
            Ok(message) => log!("ignored {} on stdin", message.msg_type()),
            Err(e @ ReceiveError::Rejected(_)) => log!("stdin: {e}"),
            Err(ReceiveError::Socket(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// SIGINT interrupts the running cell; SIGTERM stops the kernel.
async fn signals(interrupter: Arc<OnceLock<Interrupter>>, shutdown: watch::Sender<bool>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            log!("cannot handle signals; interrupt with interrupt_request messages");
            return;
        };
        loop {
            tokio::select! {
                _ = int.recv() => {
                    if let Some(interrupter) = interrupter.get() {
                        interrupter.interrupt();
                    }
                }
                _ = term.recv() => {
                    let _ = shutdown.send_replace(true);
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        while tokio::signal::ctrl_c().await.is_ok() {
            if let Some(interrupter) = interrupter.get() {
                interrupter.interrupt();
            }
        }
        let _ = shutdown;
    }
}

//! The control channel, served on its own task so that it answers while a cell runs:
//! `interrupt_request` stops the running cell through the session's [`Interrupter`] (the
//! session and its variables stay), `shutdown_request` replies and stops the kernel, and
//! `kernel_info_request` is answered here too.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use jupyter_protocol::{InterruptReply, ShutdownReply};
use jupyter_zmq_client::KernelControlConnection;
use neuronlab_session::Interrupter;
use tokio::sync::watch;

use crate::handlers::info;
use crate::log;
use crate::outbox::{Outbox, Outgoing};
use crate::wire::{self, ReceiveError};

/// Serves control requests until the process ends.
pub async fn serve(
    mut control: KernelControlConnection,
    outbox: Outbox,
    interrupter: Arc<OnceLock<Interrupter>>,
    shutdown: watch::Sender<bool>,
) {
    loop {
        let request = match wire::receive(&mut control).await {
            Ok(request) => request,
            Err(e @ ReceiveError::Rejected(_)) => {
                log!("control: {e}");
                continue;
            }
            Err(e @ ReceiveError::Socket(_)) => {
                log!("control: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let reply = match request.msg_type() {
            "interrupt_request" => {
                if let Some(interrupter) = interrupter.get() {
                    interrupter.interrupt();
                }
                Some(request.child(InterruptReply::new()))
            }
            "shutdown_request" => {
                let reply = ShutdownReply {
                    restart: request.flag("restart", false),
                    ..ShutdownReply::default()
                };
                // The reply is also broadcast, so every client learns the kernel is going.
                let _ = outbox.send(Outgoing::IoPub(request.child(reply.clone())));
                if let Err(e) = control.send(request.child(reply)).await {
                    log!("cannot send shutdown_reply: {e}");
                }
                let _ = shutdown.send_replace(true);
                continue;
            }
            "kernel_info_request" => Some(request.child(info::kernel_info())),
            other => {
                log!("ignored {other} on control");
                request.unknown_reply()
            }
        };
        if let Some(reply) = reply {
            let msg_type = reply.header.msg_type.clone();
            if let Err(e) = control.send(reply).await {
                log!("cannot send {msg_type} on control: {e}");
            }
        }
    }
}

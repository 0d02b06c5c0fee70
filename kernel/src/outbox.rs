//! Everything the kernel sends on shell and iopub goes through one ordered queue, drained by
//! one task: so a cell's outputs reach iopub before its reply reaches shell, and the worker
//! thread that runs cells never waits on a socket.
//!
//! Stream text is batched briefly: pieces of the same stream of the same request that come
//! within [`STREAM_WINDOW`] of the first go out as one `stream` message (a cell that prints
//! a line per iteration does not flood the front end), and anything else in the queue ends
//! the batch at once, so order is kept.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use jupyter_protocol::{JupyterMessage, StreamContent};
use jupyter_zmq_client::{KernelIoPubConnection, RouterSendConnection};
use tokio::sync::{mpsc, oneshot};

use crate::log;
use crate::wire::{Request, USERNAME};

/// How long stream text is gathered before it is sent.
pub const STREAM_WINDOW: Duration = Duration::from_millis(10);

/// The most text one `stream` message gathers.
const STREAM_BATCH_BYTES: usize = 64 * 1024;

/// Which stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// `stdout`.
    Stdout,
    /// `stderr`.
    Stderr,
}

/// One item of the queue.
pub enum Outgoing {
    /// A message to broadcast on iopub.
    IoPub(JupyterMessage),
    /// A reply on shell (it carries its recipient's routing identity).
    Shell(JupyterMessage),
    /// Stream text of the cell that `parent` runs.
    Stream {
        /// The execute request.
        parent: Arc<Request>,
        /// Which stream.
        stream: Stream,
        /// The text.
        text: String,
    },
    /// Answered once everything queued before it has been sent.
    Flush(oneshot::Sender<()>),
}

/// The sending side of the queue.
pub type Outbox = mpsc::UnboundedSender<Outgoing>;

/// Sends the queue's messages until every sender is gone. Send failures (a client that left)
/// are logged and the queue goes on.
pub async fn drain(
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
    mut iopub: KernelIoPubConnection,
    mut shell: RouterSendConnection,
) {
    let mut next: Option<Outgoing> = None;
    loop {
        let item = match next.take() {
            Some(item) => item,
            None => match queue.recv().await {
                Some(item) => item,
                None => break,
            },
        };
        match item {
            Outgoing::IoPub(message) => publish(&mut iopub, message).await,
            Outgoing::Shell(message) => {
                let msg_type = message.header.msg_type.clone();
                if let Err(e) = shell.send(message).await {
                    log!("cannot send {msg_type} on shell: {e}");
                }
            }
            Outgoing::Stream {
                parent,
                stream,
                mut text,
            } => {
                let deadline = tokio::time::Instant::now() + STREAM_WINDOW;
                while text.len() < STREAM_BATCH_BYTES {
                    match tokio::time::timeout_at(deadline, queue.recv()).await {
                        Ok(Some(Outgoing::Stream {
                            parent: p,
                            stream: s,
                            text: more,
                        })) if s == stream && Arc::ptr_eq(&p, &parent) => text.push_str(&more),
                        Ok(Some(other)) => {
                            next = Some(other);
                            break;
                        }
                        Ok(None) | Err(_) => break,
                    }
                }
                let content = match stream {
                    Stream::Stdout => StreamContent::stdout(&text),
                    Stream::Stderr => StreamContent::stderr(&text),
                };
                publish(&mut iopub, parent.child(content)).await;
            }
            Outgoing::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Broadcasts `message` on iopub with the topic `kernel.neuronlab.<msg_type>`, as ipykernel
/// names its topics (clients subscribe to everything).
async fn publish(iopub: &mut KernelIoPubConnection, mut message: JupyterMessage) {
    message.header.username = USERNAME.to_string();
    let topic = format!("kernel.neuronlab.{}", message.header.msg_type);
    message.zmq_identities = vec![Bytes::from(topic)];
    let msg_type = message.header.msg_type.clone();
    if let Err(e) = iopub.send(message).await {
        log!("cannot publish {msg_type}: {e}");
    }
}

/// Waits until everything queued so far has been sent, or `timeout` passed.
pub async fn flush(outbox: &Outbox, timeout: Duration) {
    let (done, sent) = oneshot::channel();
    if outbox.send(Outgoing::Flush(done)).is_ok() {
        let _ = tokio::time::timeout(timeout, sent).await;
    }
}

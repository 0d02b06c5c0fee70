//! Messages on the wire: a signed multipart message in, a [`Request`] out; and the messages
//! the kernel sends, each with its request as parent.
//!
//! Framing and HMAC-SHA256 come from `jupyter-zmq-client` ([`RawMessage::from_multipart`]
//! verifies the signature in constant time; [`Connection::send`] signs). Contents are read
//! leniently as JSON, not through `jupyter-protocol`'s typed requests, so a request with a
//! missing optional field still gets a reply instead of being dropped.

use bytes::Bytes;
use jupyter_protocol::{Header, JupyterMessage, JupyterMessageContent, UnknownMessage};
use jupyter_zmq_client::{Connection, RawMessage, RuntimeError};
use serde_json::Value;
use zeromq::SocketRecv;

/// The `username` in the headers the kernel sends.
pub const USERNAME: &str = "neuronlab-kernel";

/// A request from a client: its header (with the routing identities), and its content and
/// metadata as JSON.
#[derive(Clone, Debug)]
pub struct Request {
    /// The message as received; its content is not decoded (see [`Request::content`]).
    pub message: JupyterMessage,
    /// The content, a JSON object.
    pub content: Value,
}

/// Why a message was not received.
#[derive(Debug)]
pub enum ReceiveError {
    /// The socket failed (the message, if any, is lost).
    Socket(String),
    /// A message came but was dropped: unsigned, mis-signed or malformed.
    Rejected(String),
}

impl std::fmt::Display for ReceiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReceiveError::Socket(e) => write!(f, "socket error: {e}"),
            ReceiveError::Rejected(e) => write!(f, "dropped a message: {e}"),
        }
    }
}

/// Receives the next message on `conn`, checking its signature under the connection's key.
pub async fn receive<S: SocketRecv + Send>(
    conn: &mut Connection<S>,
) -> Result<Request, ReceiveError> {
    let multipart = conn
        .socket
        .recv()
        .await
        .map_err(|e| ReceiveError::Socket(e.to_string()))?;
    let raw = RawMessage::from_multipart(multipart, &conn.mac)
        .map_err(|e| ReceiveError::Rejected(rejection(&e)))?;
    decode(raw.zmq_identities, &raw.jparts).map_err(ReceiveError::Rejected)
}

/// Why `jupyter-zmq-client` refused a message, in words.
fn rejection(error: &RuntimeError) -> String {
    match error {
        RuntimeError::VerifyError(_) | RuntimeError::DecodeError(_) => {
            "its signature is not the HMAC-SHA256 of its frames under the connection key \
             (unsigned, or signed with another key)"
                .to_string()
        }
        RuntimeError::MissingDelimiter => "no <IDS|MSG> delimiter".to_string(),
        RuntimeError::MissingHmac => "no signature frame".to_string(),
        RuntimeError::InsufficientMessageParts(n) => {
            format!("{n} frames after the signature, 4 expected")
        }
        other => other.to_string(),
    }
}

/// Decodes the frames after the signature: header, parent header, metadata, content and
/// buffers. The header must be a Jupyter header and the content a JSON object.
pub fn decode(identities: Vec<Bytes>, parts: &[Bytes]) -> Result<Request, String> {
    if parts.len() < 4 {
        return Err(format!(
            "{} frames after the signature, 4 expected",
            parts.len()
        ));
    }
    let header: Header =
        serde_json::from_slice(&parts[0]).map_err(|e| format!("bad header: {e}"))?;
    let metadata: Value = serde_json::from_slice(&parts[2])
        .map_err(|e| format!("bad metadata in {}: {e}", header.msg_type))?;
    let content: Value = serde_json::from_slice(&parts[3])
        .map_err(|e| format!("bad content in {}: {e}", header.msg_type))?;
    if !content.is_object() {
        return Err(format!(
            "the content of {} is not an object",
            header.msg_type
        ));
    }
    let message = JupyterMessage {
        zmq_identities: identities,
        parent_header: None,
        metadata,
        content: JupyterMessageContent::UnknownMessage(UnknownMessage {
            msg_type: header.msg_type.clone(),
            content: Value::Null,
        }),
        header,
        buffers: parts[4..].to_vec(),
        channel: None,
    };
    Ok(Request { message, content })
}

impl Request {
    /// The message type, `execute_request`, ...
    pub fn msg_type(&self) -> &str {
        &self.message.header.msg_type
    }

    /// The message id.
    pub fn msg_id(&self) -> &str {
        &self.message.header.msg_id
    }

    /// A string field of the content, `""` when absent.
    pub fn text(&self, key: &str) -> &str {
        self.content.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// A boolean field of the content, `default` when absent or not a boolean.
    pub fn flag(&self, key: &str, default: bool) -> bool {
        self.content
            .get(key)
            .and_then(Value::as_bool)
            .unwrap_or(default)
    }

    /// An integer field of the content, `None` when absent, null or not an integer.
    pub fn number(&self, key: &str) -> Option<i64> {
        self.content.get(key).and_then(Value::as_i64)
    }

    /// A message in reply to (or caused by) this request: the request's header is its parent,
    /// and a reply goes back to the request's sender.
    pub fn child(&self, content: impl Into<JupyterMessageContent>) -> JupyterMessage {
        let mut message = JupyterMessage::new(content, Some(&self.message));
        message.header.username = USERNAME.to_string();
        message
    }

    /// Like [`Request::child`], with content given as JSON.
    pub fn child_json(&self, msg_type: &str, content: Value) -> JupyterMessage {
        self.child(json_content(msg_type, content))
    }

    /// The reply of an unknown request type (`x_request` gets `x_reply`), with an error
    /// status; `None` for a message that is not a request.
    pub fn unknown_reply(&self) -> Option<JupyterMessage> {
        let base = self.msg_type().strip_suffix("_request")?;
        Some(self.child_json(
            &format!("{base}_reply"),
            serde_json::json!({
                "status": "error",
                "ename": "UnknownMessageType",
                "evalue": format!("neuronlab-kernel does not handle {}", self.msg_type()),
                "traceback": [],
            }),
        ))
    }
}

/// Message content given as JSON, for messages `jupyter-protocol` has no type for.
pub fn json_content(msg_type: &str, content: Value) -> JupyterMessageContent {
    JupyterMessageContent::UnknownMessage(UnknownMessage {
        msg_type: msg_type.to_string(),
        content,
    })
}

/// A message with no parent (the kernel's `starting` status).
pub fn unparented(content: impl Into<JupyterMessageContent>) -> JupyterMessage {
    let mut message = JupyterMessage::new(content, None);
    message.header.username = USERNAME.to_string();
    message
}

/// The JSON a message's content serializes to, for tests and logs.
pub fn content_json(message: &JupyterMessage) -> Value {
    serde_json::to_value(&message.content).unwrap_or(Value::Null)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request as jupyter_client would send it.
    pub(crate) fn request(msg_type: &str, content: Value) -> Request {
        let header = serde_json::json!({
            "msg_id": format!("id-{msg_type}"), "username": "u", "session": "client-session",
            "date": "2024-01-01T00:00:00.000000Z", "msg_type": msg_type, "version": "5.3",
        });
        let parts: Vec<Bytes> = [
            header,
            serde_json::json!({}),
            serde_json::json!({}),
            content,
        ]
        .iter()
        .map(|v| Bytes::from(serde_json::to_vec(v).unwrap()))
        .collect();
        decode(vec![Bytes::from_static(b"peer")], &parts).unwrap()
    }

    #[test]
    fn decodes_a_request_and_reads_its_fields_leniently() {
        let r = request(
            "execute_request",
            serde_json::json!({"code": "1 + 2", "silent": false, "n": 3, "session": null}),
        );
        assert_eq!(r.msg_type(), "execute_request");
        assert_eq!(r.text("code"), "1 + 2");
        assert_eq!(r.text("missing"), "");
        assert!(!r.flag("silent", true));
        assert!(r.flag("store_history", true));
        assert_eq!(r.number("n"), Some(3));
        assert_eq!(r.number("session"), None);
    }

    #[test]
    fn a_child_has_the_request_as_parent_and_goes_back_to_its_sender() {
        let r = request("kernel_info_request", serde_json::json!({}));
        let reply = r.child_json("kernel_info_reply", serde_json::json!({"status": "ok"}));
        assert_eq!(reply.parent_header.as_ref().unwrap().msg_id, r.msg_id());
        assert_eq!(reply.zmq_identities, vec![Bytes::from_static(b"peer")]);
        assert_eq!(reply.header.msg_type, "kernel_info_reply");
        assert_eq!(content_json(&reply), serde_json::json!({"status": "ok"}));
    }

    #[test]
    fn unknown_requests_get_an_error_reply_and_other_messages_none() {
        let r = request("frobnicate_request", serde_json::json!({}));
        let reply = r.unknown_reply().unwrap();
        assert_eq!(reply.header.msg_type, "frobnicate_reply");
        assert_eq!(content_json(&reply)["status"], "error");
        assert!(request("comm_msg", serde_json::json!({}))
            .unknown_reply()
            .is_none());
    }

    #[test]
    fn malformed_messages_are_rejected() {
        let ok = |v: Value| Bytes::from(serde_json::to_vec(&v).unwrap());
        let header = ok(serde_json::json!({"msg_id": "x"}));
        let parts = vec![
            header,
            ok(serde_json::json!({})),
            ok(serde_json::json!({})),
            ok(serde_json::json!({})),
        ];
        assert!(decode(vec![], &parts).unwrap_err().contains("bad header"));
        assert!(decode(vec![], &parts[..2])
            .unwrap_err()
            .contains("2 frames"));
        let good = request("x_request", serde_json::json!({})).message.header;
        let parts = vec![
            ok(serde_json::to_value(good).unwrap()),
            ok(serde_json::json!({})),
            ok(serde_json::json!({})),
            ok(serde_json::json!([1])),
        ];
        assert!(decode(vec![], &parts)
            .unwrap_err()
            .contains("not an object"));
    }
}

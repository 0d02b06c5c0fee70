//! The connection file Jupyter writes for a kernel, and the five sockets it describes.
//!
//! The kernel binds every socket (the client connects): shell, control and stdin are ROUTER
//! sockets, iopub a PUB socket, heartbeat a REP socket. Messages on shell, control and
//! stdin are signed with HMAC-SHA256 under the file's key, by `jupyter-zmq-client`'s
//! [`Connection`](jupyter_zmq_client::Connection) (see [`crate::wire`]).

use std::path::Path;

use jupyter_protocol::ConnectionInfo;
use jupyter_zmq_client::{
    create_kernel_control_connection, create_kernel_heartbeat_connection,
    create_kernel_iopub_connection, create_kernel_shell_connection, create_kernel_stdin_connection,
    KernelControlConnection, KernelHeartbeatConnection, KernelIoPubConnection,
    KernelShellConnection, KernelStdinConnection,
};

/// The only signature scheme Jupyter defines (an empty key turns signing off).
pub const SIGNATURE_SCHEME: &str = "hmac-sha256";

/// Reads and checks a connection file.
pub fn read(path: &Path) -> Result<ConnectionInfo, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the connection file {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses the text of a connection file.
pub fn parse(text: &str) -> Result<ConnectionInfo, String> {
    let info: ConnectionInfo =
        serde_json::from_str(text).map_err(|e| format!("not a Jupyter connection file: {e}"))?;
    if !info.key.is_empty() && info.signature_scheme != SIGNATURE_SCHEME {
        return Err(format!(
            "signature scheme '{}' is not supported (only {SIGNATURE_SCHEME})",
            info.signature_scheme
        ));
    }
    Ok(info)
}

/// The kernel's bound sockets.
pub struct Sockets {
    /// Requests from clients, answered in order.
    pub shell: KernelShellConnection,
    /// Interrupt and shutdown, served while a cell runs.
    pub control: KernelControlConnection,
    /// Broadcast of status and outputs.
    pub iopub: KernelIoPubConnection,
    /// Input requests to clients (cells cannot read input yet; bound for clients that connect).
    pub stdin: KernelStdinConnection,
    /// Echoes pings.
    pub heartbeat: KernelHeartbeatConnection,
}

/// Binds the five sockets of `info`; `session_id` is the kernel's session in every header it
/// sends.
pub async fn bind(info: &ConnectionInfo, session_id: &str) -> Result<Sockets, String> {
    let fail = |channel: &str, e: jupyter_zmq_client::RuntimeError| {
        format!("cannot bind the {channel} socket: {e}")
    };
    Ok(Sockets {
        shell: create_kernel_shell_connection(info, session_id)
            .await
            .map_err(|e| fail("shell", e))?,
        control: create_kernel_control_connection(info, session_id)
            .await
            .map_err(|e| fail("control", e))?,
        iopub: create_kernel_iopub_connection(info, session_id)
            .await
            .map_err(|e| fail("iopub", e))?,
        stdin: create_kernel_stdin_connection(info, session_id)
            .await
            .map_err(|e| fail("stdin", e))?,
        heartbeat: create_kernel_heartbeat_connection(info)
            .await
            .map_err(|e| fail("heartbeat", e))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_jupyter_client_writes() {
        let text = r#"{"shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003,
            "control_port": 5004, "hb_port": 5005, "ip": "127.0.0.1", "key": "k",
            "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_name": "neuronlab",
            "jupyter_session": "extra fields are ignored"}"#;
        let info = parse(text).unwrap();
        assert_eq!(info.shell_url(), "tcp://127.0.0.1:5001");
        assert_eq!(info.key, "k");
    }

    #[test]
    fn rejects_other_signature_schemes() {
        let text = r#"{"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4,
            "hb_port": 5, "ip": "127.0.0.1", "key": "k", "transport": "tcp",
            "signature_scheme": "hmac-md5"}"#;
        assert!(parse(text).unwrap_err().contains("hmac-md5"));
        assert!(parse("{}")
            .unwrap_err()
            .contains("not a Jupyter connection file"));
    }
}

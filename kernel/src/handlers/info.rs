//! `kernel_info_request` and `comm_info_request`: what the kernel is, and its comms (none).

use std::process::Command;
use std::sync::OnceLock;

use jupyter_protocol::{
    CodeMirrorMode, CommInfoReply, HelpLink, KernelInfoReply, LanguageInfo, ReplyStatus,
};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_session::toolchain::Toolchain;

/// The messaging protocol version the kernel speaks.
pub const PROTOCOL_VERSION: &str = "5.3";

/// The reply to `kernel_info_request`.
pub fn kernel_info() -> KernelInfoReply {
    KernelInfoReply {
        status: ReplyStatus::Ok,
        protocol_version: PROTOCOL_VERSION.to_string(),
        implementation: "neuronlab".to_string(),
        implementation_version: env!("CARGO_PKG_VERSION").to_string(),
        language_info: LanguageInfo {
            name: "rust".to_string(),
            version: rust_version().to_string(),
            mimetype: Some("text/rust".to_string()),
            file_extension: Some(".rs".to_string()),
            pygments_lexer: Some("rust".to_string()),
            codemirror_mode: Some(CodeMirrorMode::Simple("rust".to_string())),
            nbconvert_exporter: None,
        },
        banner: banner(),
        help_links: [
            (
                "The Rust Programming Language",
                "https://doc.rust-lang.org/book/",
            ),
            ("Rust standard library", "https://doc.rust-lang.org/std/"),
            (
                "AWS Neuron documentation",
                "https://awsdocs-neuron.readthedocs-hosted.com/",
            ),
        ]
        .into_iter()
        .map(|(text, url)| HelpLink {
            text: text.to_string(),
            url: url.to_string(),
        })
        .collect(),
        debugger: false,
        error: None,
    }
}

/// The reply to `comm_info_request`: the kernel opens no comms.
pub fn comm_info() -> CommInfoReply {
    CommInfoReply {
        status: ReplyStatus::Ok,
        comms: Default::default(),
        error: None,
    }
}

/// The version, the simulated instance of a new session, and how to get around.
fn banner() -> String {
    let instance = match RuntimeOptions::from_env() {
        Ok(options) => format!(
            "simulated {} ({} NeuronCores, LNC={}) on the CPU",
            options.topology.instance_name(),
            options.topology.num_cores(),
            options.topology.lnc()
        ),
        Err(e) => format!("the instance settings are invalid: {e}"),
    };
    format!(
        "neuronlab {} · {instance}\n\
         Cells are Rust (a function body, built for wasm32 and run in a sandbox) or %magics.\n\
         %help lists the magics; Tab completes; Shift-Tab inspects; interrupt stops a cell \
         and keeps the session.",
        env!("CARGO_PKG_VERSION")
    )
}

/// The version of the Rust compiler that builds cells (`1.85.0`), found once; `unknown` when
/// there is no wasm32 toolchain.
pub fn rust_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let rustc = match Toolchain::detect() {
            Ok(Toolchain::DebianBuildStd { rustc, .. }) => rustc,
            Ok(Toolchain::Rustup { cargo }) => cargo.with_file_name("rustc"),
            Err(_) => return "unknown".to_string(),
        };
        Command::new(&rustc)
            .arg("--version")
            .output()
            .ok()
            .and_then(|out| parse_rustc_version(&String::from_utf8_lossy(&out.stdout)))
            .unwrap_or_else(|| "unknown".to_string())
    })
}

/// `1.85.0` from `rustc 1.85.0 (4d91de4e4 2025-02-17)`.
fn parse_rustc_version(text: &str) -> Option<String> {
    let mut words = text.split_whitespace();
    (words.next()? == "rustc").then_some(())?;
    words.next().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_info_describes_rust() {
        let json = serde_json::to_value(kernel_info()).unwrap();
        let lang = &json["language_info"];
        assert_eq!(lang["name"], "rust");
        assert_eq!(lang["mimetype"], "text/rust");
        assert_eq!(lang["file_extension"], ".rs");
        assert_eq!(lang["pygments_lexer"], "rust");
        assert_eq!(lang["codemirror_mode"], "rust");
        assert_eq!(json["status"], "ok");
        assert_eq!(json["protocol_version"], PROTOCOL_VERSION);
        assert!(json["banner"].as_str().unwrap().contains("%help"));
        assert!(json["help_links"].as_array().unwrap().len() >= 2);
        assert_eq!(
            serde_json::to_value(comm_info()).unwrap(),
            serde_json::json!({"status": "ok", "comms": {}})
        );
    }

    #[test]
    fn rustc_versions_parse() {
        assert_eq!(
            parse_rustc_version("rustc 1.85.0 (4d91de4e4 2025-02-17)\n").as_deref(),
            Some("1.85.0")
        );
        assert_eq!(parse_rustc_version("cargo 1.0"), None);
        assert_eq!(parse_rustc_version(""), None);
    }
}

//! Rebuilding a changed cell with rustc alone.
//!
//! Cargo spends most of a small cell's build starting up and fingerprinting a crate graph
//! that has not changed: only the cell's own sources have. So the first cargo build of a
//! session records how cargo ran rustc for the cell's crate (through a `sh` wrapper given as
//! `RUSTC_WORKSPACE_WRAPPER`, which cargo uses only for the cell's crate), and later builds
//! run that command directly while the toolchain, the SDK and the manifest are unchanged
//! (the session checks, see `cache::build_inputs`). A direct build that fails without a
//! compiler error falls back to cargo, which also records the command again.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;

use super::build::{finish, read_all, spawn, wait, BuildFailure, Diagnostic};

/// The wrapper cargo runs rustc through. The target folder is shared by sessions, and the
/// wrapper's path is part of cargo's fingerprint of the crate, so it has one fixed path and
/// text.
const WRAPPER_NAME: &str = "neuronlab-record-rustc.sh";
const WRAPPER: &str = r#"#!/bin/sh
# Written by neuronlab. Cargo runs rustc through this script; when rustc compiles the crate
# named by NEURONLAB_RUSTC_CRATE, the script first writes the command, its folder and cargo's
# variables to NEURONLAB_RUSTC_RECORD, so the session can run rustc again without cargo.
record=no
for arg in "$@"; do
    if [ "$arg" = "$NEURONLAB_RUSTC_CRATE" ]; then record=yes; fi
done
if [ "$record" = yes ] && [ -n "$NEURONLAB_RUSTC_RECORD" ]; then
    {
        printf 'cwd\t%s\n' "$PWD"
        for arg in "$@"; do printf 'arg\t%s\n' "$arg"; done
        env | while IFS= read -r line; do
            case "$line" in
                CARGO*=* | RUSTC_BOOTSTRAP=*) printf 'env\t%s\n' "$line" ;;
            esac
        done
    } > "$NEURONLAB_RUSTC_RECORD.tmp" && mv -f "$NEURONLAB_RUSTC_RECORD.tmp" "$NEURONLAB_RUSTC_RECORD"
fi
exec "$@"
"#;

/// Makes the cargo `command` record its rustc run for `crate_name` at `record`, writing the
/// wrapper into `target_dir` first if it is not there yet.
pub(super) fn record_rustc(
    command: &mut Command,
    target_dir: &Path,
    record: &Path,
    crate_name: &str,
) -> Result<(), String> {
    let wrapper = target_dir.join(WRAPPER_NAME);
    if std::fs::read_to_string(&wrapper).ok().as_deref() != Some(WRAPPER) {
        std::fs::create_dir_all(target_dir)
            .and_then(|_| {
                // Written aside and renamed, so a session never runs a half-written script.
                let partial = target_dir.join(format!("{WRAPPER_NAME}.{}", std::process::id()));
                std::fs::write(&partial, WRAPPER)?;
                make_executable(&partial)?;
                std::fs::rename(&partial, &wrapper)
            })
            .map_err(|e| format!("cannot write {}: {e}", wrapper.display()))?;
    }
    let _ = std::fs::remove_file(record);
    command
        .env("RUSTC_WORKSPACE_WRAPPER", &wrapper)
        .env("NEURONLAB_RUSTC_RECORD", record)
        .env("NEURONLAB_RUSTC_CRATE", crate_name);
    Ok(())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> std::io::Result<()> {
    Ok(())
}

/// How cargo ran rustc for a cell's crate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RustcCommand {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    /// The module it writes.
    wasm: PathBuf,
}

impl RustcCommand {
    /// What the wrapper recorded at `record`, if cargo compiled the cell's crate.
    pub(crate) fn recorded(record: &Path) -> Option<RustcCommand> {
        RustcCommand::parse(&std::fs::read_to_string(record).ok()?)
    }

    fn parse(text: &str) -> Option<RustcCommand> {
        let (mut cwd, mut words, mut env) = (None, Vec::new(), Vec::new());
        for line in text.lines() {
            match line.split_once('\t')? {
                ("cwd", dir) => cwd = Some(PathBuf::from(dir)),
                ("arg", arg) => words.push(arg.to_string()),
                ("env", pair) => {
                    let (name, value) = pair.split_once('=')?;
                    env.push((name.to_string(), value.to_string()));
                }
                _ => return None,
            }
        }
        let value_of = |flag: &str| {
            let at = words.iter().position(|w| w == flag)?;
            words.get(at + 1).cloned()
        };
        let out_dir = PathBuf::from(value_of("--out-dir")?);
        let extra = words
            .iter()
            .find_map(|w| w.strip_prefix("extra-filename="))
            .unwrap_or("");
        let wasm = out_dir.join(format!("{}{extra}.wasm", value_of("--crate-name")?));
        let mut words = words.into_iter();
        Some(RustcCommand {
            program: words.next()?,
            args: words.collect(),
            env,
            cwd: cwd?,
            wasm,
        })
    }

    /// Runs rustc again on the crate's current sources.
    pub(crate) fn build(&self, interrupt: &AtomicBool) -> Result<PathBuf, BuildFailure> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd);
        let mut child = spawn(&mut command, "rustc")?;
        let output = read_all(child.stdout.take().expect("piped"));
        // rustc writes its JSON diagnostics on stderr, one per line.
        let stderr = child.stderr.take().expect("piped");
        let messages = std::thread::spawn(move || {
            let (mut diagnostics, mut other) = (Vec::new(), String::new());
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                match serde_json::from_str::<RustcMessage>(&line) {
                    Ok(m) if m.message_type == "diagnostic" => {
                        diagnostics.extend(serde_json::from_str::<Diagnostic>(&line).ok());
                    }
                    Ok(_) => {}
                    Err(_) => {
                        other.push_str(&line);
                        other.push('\n');
                    }
                }
            }
            (diagnostics, other)
        });
        let status = wait(&mut child, interrupt, "rustc", &mut || {})?;
        let (diagnostics, other) = messages.join().unwrap_or_default();
        let _ = output.join();
        finish(status, self.wasm.clone(), diagnostics, &other, "rustc")
    }
}

/// The kind of a line rustc prints in JSON.
#[derive(serde::Deserialize)]
struct RustcMessage {
    #[serde(rename = "$message_type")]
    message_type: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_command_names_its_module() {
        let text = "cwd\t/s/1\narg\t/usr/bin/rustc\narg\t--crate-name\narg\tneuronlab_cell_ab\n\
                    arg\tsrc/lib.rs\narg\t--out-dir\narg\t/t/deps\nenv\tCARGO_PKG_NAME=x=y\n";
        let command = RustcCommand::parse(text).expect("a whole record");
        assert_eq!(command.program, "/usr/bin/rustc");
        assert_eq!(
            command.args[..3],
            ["--crate-name", "neuronlab_cell_ab", "src/lib.rs"]
        );
        assert_eq!(command.env, [("CARGO_PKG_NAME".into(), "x=y".into())]);
        assert_eq!(command.wasm, Path::new("/t/deps/neuronlab_cell_ab.wasm"));
        assert_eq!(
            RustcCommand::parse("cwd\t/s\narg\trustc\n"),
            None,
            "no --out-dir"
        );
        assert_eq!(RustcCommand::parse("garbage"), None);
    }
}

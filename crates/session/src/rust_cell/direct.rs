//! Rebuilding a changed cell with rustc alone.
//!
//! Cargo spends most of a small cell's build starting up and fingerprinting a crate graph
//! that has not changed: only the cell's own sources have. So the first cargo build of a
//! session records how cargo ran rustc for the cell's crate (through a `sh` wrapper given as
//! `RUSTC_WORKSPACE_WRAPPER`, which cargo uses only for the cell's crate), and later builds
//! run that command directly while the toolchain, the SDK and the manifest are unchanged
//! (the session checks, see `cache::build_inputs`). A direct build that fails without a
//! compiler error falls back to cargo, which also records the command again.
//!
//! Starting rustc is itself a good part of a small cell's build: it maps and relocates
//! librustc_driver and libLLVM before it reads a byte of the cell (25-35 ms for
//! `rustc --version` on a 2-core VM). So when a cell is done, the session starts the next
//! build's rustc, reading the crate root from a named pipe ([`PIPE_ROOT`]): that rustc does
//! its start-up while the user writes the next cell and then waits in the pipe's `open`, and
//! the next build writes `src/lib.rs` into the pipe.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
                    // Names cargo's jobserver descriptors, which a direct build does not
                    // have open: rustc would warn about them at every start.
                    if name != "CARGO_MAKEFLAGS" {
                        env.push((name.to_string(), value.to_string()));
                    }
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
}

/// The crate root a direct build's rustc reads: a named pipe beside `src/lib.rs`, so that the
/// root's `include!`s of the cell and the kept items resolve as they do from `src/lib.rs`.
const PIPE_ROOT: &str = "src/lib-pipe.rs";
/// The crate root as cargo passes it to rustc.
const ROOT: &str = "src/lib.rs";
/// How long a build waits for a started rustc to open the pipe (its start-up, with room for
/// a loaded machine) before it gives up and lets cargo build.
const OPEN_PATIENCE: Duration = Duration::from_secs(30);
/// A cell's link is small, and on a 2-core VM lld's thread pool cost more than it saved
/// (34 against 26 ms for a `1 + n` cell, `perf stat -r 20`).
const LINK_ONE_THREAD: &str = "-Clink-arg=--threads=1";
/// glibc's malloc (Debian's rustc and lld use it) growing its heap in 64 MiB steps on
/// transparent huge pages: a cell's rustc faults in about 80 MiB, and this halves its page
/// faults (11,900 to 6,600). Unknown tunables are ignored; a user's own setting wins.
const MALLOC_TUNABLES: &str = "glibc.malloc.hugetlb=1:glibc.malloc.top_pad=67108864";

/// The direct builds of one session's cell crate: the recorded command, and the rustc started
/// ahead of the next build.
pub(crate) struct DirectBuild {
    command: RustcCommand,
    /// The named pipe rustc reads the crate root from; `None` when none could be made (or
    /// `setpriv` is missing), and rustc then reads `src/lib.rs` itself and starts at each
    /// build.
    pipe: Option<PathBuf>,
    /// A rustc started after the last build, waiting to open `pipe`.
    standby: Option<Child>,
}

impl DirectBuild {
    /// Direct builds by `command`, with the first rustc started at once.
    pub(crate) fn new(command: RustcCommand) -> DirectBuild {
        let pipe = command.cwd.join(PIPE_ROOT);
        let reads_root = command.args.iter().any(|a| a == ROOT);
        let pipe = (reads_root && setpriv().is_some() && make_pipe(&pipe).is_ok()).then_some(pipe);
        DirectBuild {
            command,
            pipe,
            standby: None,
        }
    }

    /// Starts the next build's rustc, unless one is waiting. The session calls this when a
    /// cell is done, not when its build is: a rustc starting up would otherwise take a core
    /// from the module's compile and the cell's run.
    pub(crate) fn start_next(&mut self) {
        if self.pipe.is_some() && self.standby.is_none() {
            self.standby = self.start_rustc().ok();
        }
    }

    /// Runs rustc again on the crate's current sources, with the rustc [`start_next`]
    /// started when there is one.
    ///
    /// [`start_next`]: DirectBuild::start_next
    pub(crate) fn build(&mut self, interrupt: &AtomicBool) -> Result<PathBuf, BuildFailure> {
        // A standby that has exited (killed from outside, say) is replaced.
        let standby = self.standby.take().and_then(|mut c| match c.try_wait() {
            Ok(None) => Some(c),
            _ => None,
        });
        let mut child = match standby {
            Some(child) => child,
            None => self.start_rustc()?,
        };
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
        if let Some(pipe) = &self.pipe {
            let root = self.command.cwd.join(ROOT);
            let text = std::fs::read(&root)
                .map_err(|e| BuildFailure::Tool(format!("cannot read {}: {e}", root.display())))?;
            feed(&mut child, pipe, &text, interrupt)?;
        }
        let status = wait(&mut child, interrupt, "rustc", &mut || {})?;
        let (diagnostics, other) = messages.join().unwrap_or_default();
        let _ = output.join();
        finish(
            status,
            self.command.wasm.clone(),
            diagnostics,
            &other,
            "rustc",
        )
    }

    /// Starts the recorded rustc, reading the crate root from the pipe when there is one.
    fn start_rustc(&self) -> Result<Child, BuildFailure> {
        let command = &self.command;
        let args = command.args.iter().map(|arg| match &self.pipe {
            Some(_) if arg == ROOT => PIPE_ROOT,
            _ => arg.as_str(),
        });
        let mut rustc = match (&self.pipe, setpriv()) {
            (Some(_), Some(setpriv)) => {
                // The signal is set once setpriv runs, so a session killed between the spawn
                // and then would leave rustc waiting forever: the shell setpriv starts checks
                // that its parent is still this process before it becomes rustc.
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--", "sh", "-c", PARENT_CHECK, "sh"])
                    .arg(std::process::id().to_string())
                    .arg(&command.program);
                c
            }
            _ => Command::new(&command.program),
        };
        rustc
            .args(args)
            .arg(LINK_ONE_THREAD)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&command.cwd);
        if std::env::var_os("GLIBC_TUNABLES").is_none() {
            rustc.env("GLIBC_TUNABLES", MALLOC_TUNABLES);
        }
        spawn(&mut rustc, "rustc")
    }
}

impl Drop for DirectBuild {
    /// Stops the waiting rustc and removes the pipe.
    fn drop(&mut self) {
        if let Some(mut child) = self.standby.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pipe) = &self.pipe {
            let _ = std::fs::remove_file(pipe);
        }
    }
}

/// Makes the named pipe at `path` (an existing one is kept).
#[cfg(unix)]
fn make_pipe(path: &Path) -> std::io::Result<()> {
    use rustix::fs::{mkfifoat, Mode, CWD};
    match mkfifoat(CWD, path, Mode::RUSR | Mode::WUSR) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) if is_pipe(path) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(unix)]
fn is_pipe(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

#[cfg(not(unix))]
fn make_pipe(_: &Path) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Writes the crate root `text` into `pipe` for `child`, which opens the pipe once its
/// start-up is done. A rustc that exits first, or never opens it, is a tool failure (cargo
/// then builds).
#[cfg(unix)]
fn feed(
    child: &mut Child,
    pipe: &Path,
    text: &[u8],
    interrupt: &AtomicBool,
) -> Result<(), BuildFailure> {
    use rustix::fs::{fcntl_setfl, open, Mode, OFlags};
    use std::io::Write;
    let started = Instant::now();
    let fd = loop {
        // Non-blocking, so a rustc that never opens the pipe cannot hang the session.
        match open(
            pipe,
            OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => break fd,
            // No reader yet: rustc is still starting.
            Err(rustix::io::Errno::NXIO) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BuildFailure::Tool(format!(
                    "cannot open {}: {e}",
                    pipe.display()
                )));
            }
        }
        if interrupt.load(Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BuildFailure::Interrupted);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(BuildFailure::Tool(format!(
                "rustc exited ({status}) before it read the cell"
            )));
        }
        if started.elapsed() > OPEN_PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BuildFailure::Tool(format!(
                "rustc did not open {} within {} s",
                pipe.display(),
                OPEN_PATIENCE.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let written = fcntl_setfl(&fd, OFlags::empty())
        .map_err(std::io::Error::from)
        .and_then(|()| std::fs::File::from(fd).write_all(text));
    written.map_err(|e| BuildFailure::Tool(format!("cannot write the cell to rustc: {e}")))
}

#[cfg(not(unix))]
fn feed(_: &mut Child, _: &Path, _: &[u8], _: &AtomicBool) -> Result<(), BuildFailure> {
    Err(BuildFailure::Tool("named pipes need Unix".into()))
}

/// The script between `setpriv` and rustc: its first argument is the session's process id,
/// the rest the rustc command line.
const PARENT_CHECK: &str = r#"[ "$PPID" = "$1" ] || exit 1; shift; exec "$@""#;

/// `setpriv` (util-linux), which starts a waiting rustc with a parent-death signal: it
/// would otherwise outlive a kernel killed before it could drop its session. Setting the
/// signal in the forked child instead (`pre_exec`) would make std fork the whole session
/// process rather than `posix_spawn` it, and every page the session then writes would
/// fault once more (copy-on-write).
fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            let supported = Command::new("setpriv")
                .args(["--pdeathsig", "KILL", "true"])
                .status()
                .is_ok_and(|s| s.success());
            supported.then(|| PathBuf::from("setpriv"))
        })
        .as_deref()
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
                    arg\tsrc/lib.rs\narg\t--out-dir\narg\t/t/deps\nenv\tCARGO_PKG_NAME=x=y\n\
                    env\tCARGO_MAKEFLAGS=-j --jobserver-fds=6,7\n";
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

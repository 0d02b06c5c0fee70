//! The session engine behind both front ends (the REPL and the Jupyter kernel): cells in,
//! outputs out, state kept between cells.
//!
//! [`Session::execute`] takes a cell and reports its [`Output`]s as they happen through a
//! callback: stream text, rich displays, the final expression's value, an error, and the
//! cell's event summary. It knows nothing of terminals or Jupyter.
//!
//! - [`cell`]: what kind of cell a text is (Rust, line magics, a cell magic).
//! - [`complete`]: completion, inspection and `is_complete` of text being written.
//! - [`rust_cell`]: a Rust cell becomes a guest crate (parse, generate, build, map errors).
//! - [`guests`]: running modules: built cells, `%%wat` cells, `%load`ed modules, `%spmd`.
//! - [`launch`]: a module as N ranks, for `%spmd` and `neuronlab run`.
//! - [`magics`]: the `%` commands, their help and their completion, from one table.
//! - [`display`]: the HTML of tensors and of the cell's event summary.
//! - [`output`]: what a cell produces, and how its error is shaped for the front ends.
//! - [`toolchain`]: the wasm32 toolchain that builds Rust cells and experiments.
//! - `convert.rs` turns guest output into outputs; `router.rs` carries it, and log lines, from
//!   the threads that produce it to the cell.

#![deny(missing_docs)]

pub mod toolchain;

pub mod cell;
pub mod complete;
mod convert;
pub mod display;
pub mod guests;
pub mod launch;
pub mod magics;
pub mod output;
mod router;
pub mod rust_cell;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use complete::{Completion, CompletionItem, IsComplete};
pub use output::{CellError, MimeBundle, Output};

use guests::LoadedModule;
use neuronlab_compile::recorder::ProgramCache;
use neuronlab_core::events::{EventKind, LogFilter, SummaryWindow};
use neuronlab_core::paths::CacheDir;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::Runtime;
use neuronlab_dist::WorldOptions;
use neuronlab_sandbox::grants::{Access, Grant};
use neuronlab_sandbox::spmd::SpmdInterrupt;
use neuronlab_sandbox::var_store::VarStore;
use neuronlab_sandbox::{InterruptHandle, Limits, Sandbox, Shared};
use rust_cell::codegen::KeptItem;

/// How a cell ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It ran to its end.
    Ok,
    /// It failed; an [`Output::Error`] said why.
    Error,
    /// It was interrupted; the session and its variables are intact.
    Interrupted,
}

/// The environment variable that sets how long one cell may run, in seconds.
pub const CELL_DEADLINE_ENV: &str = "NEURONLAB_CELL_DEADLINE";

/// Settings of a [`Session`].
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// The simulated instance and the host memory cap.
    pub runtime: RuntimeOptions,
    /// Each guest's sandbox limits (the deadline is per cell, or per `neuronlab run`).
    pub limits: Limits,
    /// How ranks meet in collectives (the collective timeout).
    pub world: WorldOptions,
    /// The folder of the on-disk program cache, so a compile of an earlier session or run is
    /// loaded instead of redone; `None` keeps programs in memory only.
    pub program_cache: Option<PathBuf>,
    /// The `NEURONLAB_LOGS` topics printed (to the cell's stderr) as their events happen.
    pub logs: LogFilter,
    /// Where the session's cell crate is built. Default: a new folder under the cache root.
    pub work_dir: Option<PathBuf>,
    /// The guest SDK folder. Default: `NEURONLAB_SDK`, else the SDK of the source tree this
    /// binary was built from.
    pub sdk_dir: Option<PathBuf>,
}

impl SessionOptions {
    /// A session on `runtime` with `limits`, on its own: programs in memory only, no logs,
    /// the default collective timeout.
    pub fn new(runtime: RuntimeOptions, limits: Limits) -> SessionOptions {
        SessionOptions {
            runtime,
            limits,
            world: WorldOptions::default(),
            program_cache: None,
            logs: LogFilter::default(),
            work_dir: None,
            sdk_dir: None,
        }
    }

    /// Options from the environment, as every front end starts: the runtime's variables,
    /// `NEURONLAB_CELL_DEADLINE`, `NEURONLAB_COLLECTIVE_TIMEOUT`, `NEURONLAB_LOGS`,
    /// `NEURONLAB_SDK`, and the program cache under the cache root. The cell deadline is 10
    /// minutes by default: interactive cells are stopped with an interrupt, the deadline
    /// only catches what nobody is watching.
    pub fn from_env() -> neuronlab_core::Result<SessionOptions> {
        let invalid = neuronlab_core::Error::Invalid;
        let deadline = match std::env::var(CELL_DEADLINE_ENV) {
            Ok(text) => neuronlab_dist::comm::parse_timeout(&text)
                .map_err(|e| invalid(format!("{CELL_DEADLINE_ENV}: {e}")))?,
            Err(_) => Duration::from_secs(600),
        };
        let limits = Limits {
            deadline,
            ..Limits::default()
        };
        Ok(SessionOptions {
            world: WorldOptions::from_env()?,
            program_cache: Some(CacheDir::Programs.path()),
            logs: LogFilter::from_env().map_err(invalid)?,
            sdk_dir: std::env::var_os("NEURONLAB_SDK").map(PathBuf::from),
            ..SessionOptions::new(RuntimeOptions::from_env()?, limits)
        })
    }
}

/// Stops the running cell from another thread: its guest (at the next epoch tick), its host
/// op (at the next chunk), a collective it waits in, or the cargo build of the cell.
#[derive(Clone, Default)]
pub struct Interrupter {
    inner: Arc<InterruptState>,
}

#[derive(Default)]
struct InterruptState {
    /// Set by [`Interrupter::interrupt`], cleared when a cell starts.
    requested: Arc<AtomicBool>,
    running: Mutex<Running>,
}

/// What the current cell is running, to stop it.
#[derive(Default)]
enum Running {
    #[default]
    Nothing,
    Guest(InterruptHandle),
    Ranks(SpmdInterrupt),
}

impl Interrupter {
    /// Stops what the current cell is doing. Harmless when nothing runs.
    pub fn interrupt(&self) {
        self.inner.requested.store(true, Ordering::SeqCst);
        match &*self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Running::Nothing => {}
            Running::Guest(h) => h.interrupt(),
            Running::Ranks(r) => r.interrupt(),
        }
    }

    /// Whether an interrupt came since the cell started.
    pub fn requested(&self) -> bool {
        self.inner.requested.load(Ordering::SeqCst)
    }

    fn flag(&self) -> &Arc<AtomicBool> {
        &self.inner.requested
    }

    fn start_cell(&self) {
        self.inner.requested.store(false, Ordering::SeqCst);
    }

    /// Registers what runs now; an interrupt that came before it is passed on at once.
    fn set(&self, running: Running) {
        let mut slot = self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *slot = running;
        if self.requested() {
            match &*slot {
                Running::Nothing => {}
                Running::Guest(h) => h.interrupt(),
                Running::Ranks(r) => r.interrupt(),
            }
        }
    }
}

/// One interactive session: a runtime, its variables and kept items, loaded modules, and
/// the cell crate it builds.
pub struct Session {
    runtime: Arc<Runtime>,
    sandbox: &'static Sandbox,
    limits: Limits,
    world: WorldOptions,
    logs: LogFilter,
    shared: Shared,
    kept: Vec<KeptItem>,
    modules: Vec<LoadedModule>,
    execution_count: u32,
    work_dir: PathBuf,
    /// Whether the session made `work_dir` (and removes it when it ends).
    owns_work_dir: bool,
    sdk_dir: Option<PathBuf>,
    interrupter: Interrupter,
    router: router::OutputRouter,
    /// The column shifts of the cell just built, for the locations its run prints.
    cell_columns: Option<convert::CellColumns>,
    /// The cells that published events, oldest first: what `%events` and `%timeline` read.
    cell_events: Vec<CellEvents>,
    /// `(function, explanation)` of the functions the last cell compiled.
    explanations: Vec<(String, String)>,
    /// The wasm32 toolchain, once a Rust cell found it.
    toolchain: Option<toolchain::Toolchain>,
    /// The session's latest Rust cell builds, reused when a cell is built again unchanged.
    built_cells: rust_cell::cache::BuiltCells,
    /// How cargo last ran rustc for the cell crate (with the rustc started for the next
    /// build), and the build inputs it is valid for.
    rustc_command: Option<(blake3::Hash, rust_cell::direct::DirectBuild)>,
}

impl Session {
    /// A session as every front end starts one: [`SessionOptions::from_env`].
    pub fn from_env() -> Result<Session, String> {
        Session::new(SessionOptions::from_env().map_err(|e| e.to_string())?)
    }

    /// A session with `options`.
    pub fn new(options: SessionOptions) -> Result<Session, String> {
        let sandbox = Sandbox::shared().map_err(|e| e.to_string())?;
        let owns_work_dir = options.work_dir.is_none();
        let work_dir = match options.work_dir {
            Some(dir) => dir,
            None => new_work_dir()?,
        };
        let sdk_dir = options.sdk_dir.or_else(default_sdk_dir);
        let router = router::OutputRouter::default();
        let shared = Shared {
            vars: Arc::default(),
            programs: Arc::new(ProgramCache::with_disk_dir(options.program_cache)),
            files: Arc::default(),
            args: Arc::default(),
        };
        Ok(Session {
            runtime: new_runtime(options.runtime, &options.logs, &router),
            sandbox,
            limits: options.limits,
            world: options.world,
            logs: options.logs,
            shared,
            kept: Vec::new(),
            modules: Vec::new(),
            execution_count: 0,
            work_dir,
            owns_work_dir,
            sdk_dir,
            interrupter: Interrupter::default(),
            router,
            cell_columns: None,
            cell_events: Vec::new(),
            explanations: Vec::new(),
            toolchain: None,
            built_cells: Default::default(),
            rustc_command: None,
        })
    }

    /// Runs one cell, reporting its outputs to `out` as they happen.
    pub fn execute(&mut self, code: &str, out: &mut dyn FnMut(Output)) -> Outcome {
        self.execute_with(code, true, out)
    }

    /// [`Session::execute`], counting the cell (the Jupyter execution count) only when
    /// `counted`: a notebook's silent cells and cells kept out of history do not take a
    /// number. An uncounted cell is labelled with the number the next counted cell will get.
    pub fn execute_with(
        &mut self,
        code: &str,
        counted: bool,
        out: &mut dyn FnMut(Output),
    ) -> Outcome {
        self.interrupter.start_cell();
        self.execution_count += 1;
        let outcome = self.run_cell(code, out);
        // The next Rust cell's rustc starts now, while the user writes that cell.
        if let Some((_, direct)) = self.rustc_command.as_mut() {
            direct.start_next();
        }
        if !counted {
            self.execution_count -= 1;
        }
        outcome
    }

    fn run_cell(&mut self, code: &str, sink: &mut dyn FnMut(Output)) -> Outcome {
        let first_event = self.runtime.bus().next_seq();
        let counted = SummaryWindow::open(self.runtime.bus());
        // The cell's error is held back to be its last output, with the summary of what the
        // cell ran folded in: a failing cell has exactly one output that says why.
        let mut failed: Option<CellError> = None;
        let mut held = |output: Output| match output {
            Output::Error(e) if failed.is_none() => failed = Some(e),
            output => sink(output),
        };
        let out = &mut held;
        let outcome = match cell::classify(code) {
            cell::Cell::Empty => Outcome::Ok,
            cell::Cell::LineMagics(lines) => {
                let mut outcome = Outcome::Ok;
                for (name, args) in lines {
                    outcome = self.run_magic(name, args, None, out);
                    if outcome != Outcome::Ok {
                        break;
                    }
                }
                outcome
            }
            cell::Cell::CellMagic { name, args, body } => {
                self.run_magic(name, args, Some(body), out)
            }
            cell::Cell::Rust(code) => match cell::stray_magic(code) {
                Some((line, magic)) => fail(
                    out,
                    CellError::new(
                        "MagicError",
                        format!(
                            "line {line}: `{magic}` is a magic, but this cell is Rust: put magics \
                             in a cell of their own (or start the cell with a %% cell magic)"
                        ),
                    ),
                ),
                None => self.run_rust_cell(code, out),
            },
        };
        self.interrupter.set(Running::Nothing);
        let outcome = if self.interrupter.requested() && outcome == Outcome::Error {
            Outcome::Interrupted
        } else {
            outcome
        };
        self.router.flush_logs(out);
        let last_event = self.runtime.bus().next_seq();
        let events = self.runtime.bus().since(first_event);
        if !events.is_empty() {
            self.cell_events.push(CellEvents {
                cell: self.execution_count,
                start: first_event,
                end: last_event,
                device_work: events
                    .iter()
                    .any(|e| matches!(e.kind, EventKind::Op(_) | EventKind::Collective(_))),
            });
        }
        let summary = counted.finish().with_peak_roles(self.runtime.memory());
        let worth_showing = summary.ops > 0 || summary.collectives > 0 || summary.compiles > 0;
        match failed {
            Some(mut error) => {
                if worth_showing {
                    error
                        .traceback
                        .push(format!("before it stopped, the cell ran: {summary}"));
                }
                sink(Output::Error(error));
            }
            None if worth_showing => {
                let cores_per_chip = self.runtime.topology().cores_per_chip();
                let html = display::summary_html(&summary, &events, cores_per_chip);
                sink(Output::Summary(
                    MimeBundle::text(summary.to_string()).with("text/html", html),
                ));
            }
            None => {}
        }
        outcome
    }

    /// A handle that interrupts the running cell from another thread.
    pub fn interrupter(&self) -> Interrupter {
        self.interrupter.clone()
    }

    /// The session's runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The session's variables.
    pub fn vars(&self) -> &Arc<VarStore> {
        &self.shared.vars
    }

    /// Grants the session's guests the folder at `path` (`%dir`, `neuronlab run --dir`): they
    /// address its files by the folder's name. Why not, when it cannot be granted.
    pub fn grant_folder(&self, path: &std::path::Path, access: Access) -> Result<Grant, String> {
        self.shared.files.grant(path, access)
    }

    /// How many cells have run (the Jupyter execution count).
    pub fn execution_count(&self) -> u32 {
        self.execution_count
    }

    /// The items kept from items-only cells.
    pub fn kept_items(&self) -> &[KeptItem] {
        &self.kept
    }
}

impl Drop for Session {
    /// Removes the session's cell crate when the session made it. The shared build of the
    /// standard library and the SDK stays, for the next session.
    fn drop(&mut self) {
        if self.owns_work_dir {
            rust_cell::build::remove_artifacts(&self.work_dir, &cell_target_dir());
            let _ = std::fs::remove_dir_all(&self.work_dir);
        }
    }
}

/// The events one cell published: `[start, end)` of the bus's sequence numbers.
#[derive(Clone, Copy, Debug)]
struct CellEvents {
    cell: u32,
    start: u64,
    end: u64,
    /// Whether it ran ops or collectives, what a timeline draws.
    device_work: bool,
}

/// A runtime with `options` whose warnings and the events `logs` selects become log lines of
/// the running cell.
fn new_runtime(
    options: RuntimeOptions,
    logs: &LogFilter,
    router: &router::OutputRouter,
) -> Arc<Runtime> {
    let runtime = Runtime::new(options);
    let (logs, router) = (logs.clone(), router.clone());
    runtime.bus().subscribe(Box::new(move |event| {
        if let Some(line) = logs.line(event) {
            router.log(line);
        }
    }));
    Arc::new(runtime)
}

/// Reports `error` and returns [`Outcome::Error`].
fn fail(out: &mut dyn FnMut(Output), error: CellError) -> Outcome {
    out(Output::Error(error));
    Outcome::Error
}

/// The target folder every session's cell crate builds into, so the standard library and the
/// SDK are built once per machine.
pub(crate) fn cell_target_dir() -> PathBuf {
    CacheDir::CellTarget.path()
}

/// A fresh folder for a session's cell crate, under the cache root.
fn new_work_dir() -> Result<PathBuf, String> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = CacheDir::Sessions
        .path()
        .join(format!("{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the session folder {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The SDK of the source tree this binary was built from, if it is still there.
fn default_sdk_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk");
    dir.join("Cargo.toml")
        .is_file()
        .then(|| dir.canonicalize().unwrap_or(dir))
}

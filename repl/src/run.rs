//! `neuronlab run`: one guest module, as one rank or as N ranks (`--nproc`), through a session
//! like every other front end. Its output streams to the terminal (prefixed with the rank when
//! there are several), then the event summary; a trap or host error on any rank exits non-zero
//! with the error.

use std::path::{Path, PathBuf};

use neuronlab_core::events::save_chrome_trace;
use neuronlab_dist::comm::parse_timeout;
use neuronlab_sandbox::grants::Access;
use neuronlab_sandbox::spmd::RankResult;
use neuronlab_sandbox::{Limits, ModuleSource};
use neuronlab_session::launch::{RunReport, RunRequest};
use neuronlab_session::{Session, SessionOptions};

use crate::repl::interrupt::CtrlC;
use crate::repl::render::Renderer;

/// What `neuronlab run` was asked to do.
pub struct RunOptions {
    /// The exported function to call.
    pub entry: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// What follows `--`, for the guest's `neuronlab::args()`.
    pub guest_args: Vec<String>,
    /// Each rank's sandbox limits.
    pub limits: Limits,
    /// Number of ranks (1: a plain run).
    pub nproc: u32,
    /// Show every rank's output, not only rank 0's.
    pub all_ranks: bool,
    /// Seconds a collective waits for missing ranks (default: the environment or 5 s).
    pub collective_timeout: Option<String>,
    /// Where to write the run's events as a Chrome trace.
    pub trace: Option<PathBuf>,
    /// The folders granted to the guest (`--dir`, `--dir-rw`).
    pub dirs: Vec<(PathBuf, Access)>,
}

/// Runs the module at `path` as `options.nproc` ranks.
pub fn run(path: &Path, options: RunOptions) -> Result<(), String> {
    let mut session_options = SessionOptions::from_env().map_err(|e| e.to_string())?;
    session_options.limits = options.limits.clone();
    if let Some(text) = &options.collective_timeout {
        session_options.world.timeout =
            parse_timeout(text).map_err(|e| format!("--collective-timeout: {e}"))?;
    }
    let collective_timeout = session_options.world.timeout;
    let mut session = Session::new(session_options)?;
    for (dir, access) in &options.dirs {
        let flag = match access {
            Access::ReadOnly => "--dir",
            Access::ReadWrite => "--dir-rw",
        };
        session
            .grant_folder(dir, *access)
            .map_err(|e| format!("{flag}: {e}"))?;
    }
    let _ctrlc = CtrlC::install(session.interrupter())?;
    let mut renderer = Renderer::new();
    if options.trace.is_some() {
        // A trace of the whole run: the recorder keeps every event, not only the last ones.
        session.runtime().bus().set_capacity(usize::MAX);
    }
    let module = session
        .load_module(path)
        .map_err(|e| format!("{}: {}", e.ename, e.evalue))?;
    let processes = processes()?;
    if let Some(p) = &processes {
        renderer = Renderer::plain();
        stop_on_sigterm(session.interrupter())?;
        if p.process() == 0 {
            // Said first, so that mpirun's word on a process that died (`process rank 1
            // exited on signal 9`) reads as the ranks it ran.
            eprintln!("-- {}", placement(p.count(), options.nproc));
        }
    }
    let spread = processes.as_ref().map(Launched::processes);
    let request = RunRequest {
        nproc: options.nproc,
        entry: &options.entry,
        args: &options.args,
        guest_args: &options.guest_args,
        all_ranks: options.all_ranks,
        processes: spread.as_ref(),
    };
    // Process 0 shows every rank's output and reports for all; the others stay quiet.
    let shows = processes.as_ref().is_none_or(|p| p.process() == 0);
    let report = session.run_module(&module, &request, &mut |o| {
        if shows {
            renderer.output(0, o)
        }
    });
    renderer.finish();
    // Every process waits here for the others before MPI shuts down; when one does not
    // answer, MPI cannot shut down, and the launch is aborted once this one has reported.
    // An interrupted process waits briefly: mpirun kills the survivors of a process that
    // died a second after interrupting them, and their report must come out first.
    let patience = match session.interrupter().requested() {
        true => INTERRUPTED_FINISH.min(collective_timeout),
        false => collective_timeout,
    };
    let stranded = processes.filter(|p| !p.finish(patience));
    let result = report_run(report, shows, &session, &options);
    if let Some(p) = stranded {
        if let Err(e) = &result {
            eprintln!("error: {e}");
        }
        eprintln!(
            "neuronlab: process {}: another process stopped answering; aborting the launch",
            p.process()
        );
        p.abort(1);
    }
    result
}

/// Prints the run's summary and outcome where this process reports (process 0 of a launch
/// across processes).
fn report_run(
    report: Result<RunReport, neuronlab_session::CellError>,
    shows: bool,
    session: &Session,
    options: &RunOptions,
) -> Result<(), String> {
    if !shows {
        return report
            .map(|_| ())
            .map_err(|e| format!("{}: {}", e.ename, e.evalue));
    }
    let report = report.map_err(|e| format!("{}: {}", e.ename, e.evalue))?;
    let world_size = report.ranks.len() as u32;
    eprintln!(
        "\n-- {}\n-- {}",
        headline(&report, world_size),
        report.summary.to_string().replace('\n', "\n-- ")
    );
    if let Some(path) = &options.trace {
        // Under mpirun, process 0's bus holds every process's events (see spmd::launch).
        let events = session.runtime().bus().events();
        save_chrome_trace(path, &events).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!(
            "-- trace written to {} (open it in Perfetto or chrome://tracing)",
            path.display()
        );
    }
    outcome(&options.entry, report.ranks)
}

/// The processes of an `mpirun` launch, when this binary has the `mpi` feature; a clear
/// error when it runs under mpirun without it (each process would run the whole world).
#[cfg(feature = "mpi")]
fn processes() -> Result<Option<Launched>, String> {
    neuronlab_dist::mpi::MpiPeers::from_launcher().map(|p| p.map(Launched))
}

#[cfg(not(feature = "mpi"))]
fn processes() -> Result<Option<Launched>, String> {
    match std::env::var("OMPI_COMM_WORLD_SIZE") {
        Ok(n) => Err(format!(
            "this neuronlab was built without MPI, so each of the {n} processes mpirun started \
             would run a whole world of its own. Build it with `cargo build --release -p \
             neuronlab-repl --features mpi` (needs libopenmpi-dev and libclang-dev)"
        )),
        Err(_) => Ok(None),
    }
}

/// How long an interrupted process waits for the others to finish before it reports and
/// aborts the launch.
const INTERRUPTED_FINISH: std::time::Duration = std::time::Duration::from_millis(300);

/// A launch ended with SIGTERM (a scheduler's cancel, or a user's `kill`) interrupts the
/// ranks as Ctrl-C does, so their collectives fail naming the ranks that never arrived and
/// process 0 reports before it goes.
#[cfg(feature = "mpi")]
fn stop_on_sigterm(interrupter: neuronlab_session::Interrupter) -> Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM])
        .map_err(|e| format!("cannot watch for SIGTERM: {e}"))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!("neuronlab: SIGTERM: interrupting this process's ranks");
            interrupter.interrupt();
        }
    });
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn stop_on_sigterm(_: neuronlab_session::Interrupter) -> Result<(), String> {
    Ok(())
}

/// This process's place in an `mpirun` launch.
#[cfg(feature = "mpi")]
struct Launched(std::sync::Arc<neuronlab_dist::mpi::MpiPeers>);

#[cfg(feature = "mpi")]
impl Launched {
    fn processes(&self) -> neuronlab_dist::peers::Processes {
        neuronlab_dist::peers::Processes(self.0.clone())
    }
    fn process(&self) -> u32 {
        neuronlab_dist::peers::Peers::process(&*self.0)
    }
    fn count(&self) -> u32 {
        neuronlab_dist::peers::Peers::processes(&*self.0)
    }
    fn finish(&self, deadline: std::time::Duration) -> bool {
        self.0.finish(deadline)
    }
    fn abort(&self, code: i32) -> ! {
        self.0.abort(code)
    }
}

/// Without the `mpi` feature there is never a launch of several processes.
#[cfg(not(feature = "mpi"))]
enum Launched {}

#[cfg(not(feature = "mpi"))]
impl Launched {
    fn processes(&self) -> neuronlab_dist::peers::Processes {
        match *self {}
    }
    fn process(&self) -> u32 {
        match *self {}
    }
    fn count(&self) -> u32 {
        match *self {}
    }
    fn finish(&self, _: std::time::Duration) -> bool {
        match *self {}
    }
    fn abort(&self, _: i32) -> ! {
        match *self {}
    }
}

/// `2 processes x 2 ranks: process 0 runs ranks 0-1, process 1 runs ranks 2-3`.
fn placement(processes: u32, per_process: u32) -> String {
    let each: Vec<String> = (0..processes)
        .map(|p| match per_process {
            1 => format!("process {p} runs rank {p}"),
            n => format!("process {p} runs ranks {}-{}", p * n, p * n + n - 1),
        })
        .collect();
    format!(
        "{processes} processes x {per_process} ranks: {}",
        each.join(", ")
    )
}

/// `hello compiled in 12.3 ms, run as 4 ranks`.
fn headline(report: &RunReport, nproc: u32) -> String {
    let source = match &report.source {
        ModuleSource::Compiled => "compiled".to_string(),
        ModuleSource::DiskCache => "loaded from the module cache".to_string(),
        ModuleSource::Recompiled(why) => format!("recompiled ({why})"),
    };
    let ranks = match nproc {
        1 => String::new(),
        n => format!(" as {n} ranks"),
    };
    format!(
        "{} {source} in {:.1} ms, run{ranks}",
        report.module,
        report.load_time.as_secs_f64() * 1e3
    )
}

/// Prints rank 0's return values, or fails with every rank's error (ranks that failed the
/// same way are listed together).
fn outcome(entry: &str, results: Vec<RankResult>) -> Result<(), String> {
    let nproc = results.len();
    let mut failures: Vec<(String, Vec<u32>)> = Vec::new();
    let mut returned = None;
    for RankResult { rank, result } in results {
        match result {
            Ok(values) if rank == 0 => returned = Some(values),
            Ok(_) => {}
            Err(e) => {
                let message = e.to_string();
                match failures.iter_mut().find(|(m, _)| *m == message) {
                    Some((_, ranks)) => ranks.push(rank),
                    None => failures.push((message, vec![rank])),
                }
            }
        }
    }
    match failures.as_slice() {
        [] => {
            if let Some(values) = returned.filter(|v| !v.is_empty()) {
                println!("{entry} returned {}", values.join(", "));
            }
            Ok(())
        }
        [(message, ranks)] if ranks == &[0] => Err(message.clone()),
        _ => Err(failures
            .iter()
            .map(|(message, ranks)| {
                let ranks: Vec<String> = ranks.iter().map(u32::to_string).collect();
                match ranks.len() {
                    n if n == nproc => format!("all {n} ranks: {message}"),
                    1 => format!("rank {}: {message}", ranks[0]),
                    _ => format!("ranks {}: {message}", ranks.join(", ")),
                }
            })
            .collect::<Vec<_>>()
            .join("\n")),
    }
}

//! `neuronlab run`: one guest module, as one rank or as N ranks (`--nproc`), through a session
//! like every other front end. Its output streams to the terminal (prefixed with the rank when
//! there are several), then the event summary; a trap or host error on any rank exits non-zero
//! with the error.

use std::path::{Path, PathBuf};

use neuronlab_core::events::Summary;
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
    /// The folders granted to the guest (`--dir`, `--dir-rw`).
    pub dirs: Vec<(PathBuf, Access)>,
}

/// Runs the module at `path` as `options.nproc` ranks.
pub fn run(path: &Path, options: RunOptions) -> Result<(), String> {
    let mut session_options = SessionOptions::from_env().map_err(|e| e.to_string())?;
    session_options.limits = options.limits;
    if let Some(text) = &options.collective_timeout {
        session_options.world.timeout =
            parse_timeout(text).map_err(|e| format!("--collective-timeout: {e}"))?;
    }
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
    let module = session
        .load_module(path)
        .map_err(|e| format!("{}: {}", e.ename, e.evalue))?;
    let request = RunRequest {
        nproc: options.nproc,
        entry: &options.entry,
        args: &options.args,
        guest_args: &options.guest_args,
        all_ranks: options.all_ranks,
    };
    let report = session
        .run_module(&module, &request, &mut |o| renderer.output(0, o))
        .map_err(|e| format!("{}: {}", e.ename, e.evalue))?;
    renderer.finish();
    let events = session.runtime().bus().events();
    eprintln!(
        "\n-- {}\n-- {}",
        headline(&report, options.nproc),
        Summary::from_events(&events)
            .to_string()
            .replace('\n', "\n-- ")
    );
    outcome(&options.entry, report.ranks)
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

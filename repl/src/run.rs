//! `neuronlab run`: one guest module, as one rank or as N ranks (`--nproc`), its output
//! streamed to the terminal (prefixed with the rank when there are several), then the event
//! summary; a trap or host error on any rank exits non-zero with the error.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use neuronlab_core::events::{LogFilter, Summary};
use neuronlab_core::tensor::{format_tensor, FormatOptions};
use neuronlab_core::Runtime;
use neuronlab_dist::comm::parse_timeout;
use neuronlab_dist::WorldOptions;
use neuronlab_sandbox::spmd::{
    launch, RankOutputs, RankResult, RankView, SpmdInterrupt, SpmdOptions,
};
use neuronlab_sandbox::Shared;
use neuronlab_sandbox::{GuestOutput, Limits, ModuleSource, Sandbox};

/// Renders one piece of guest output on a terminal.
fn show(output: GuestOutput) {
    match output {
        GuestOutput::Stdout(text) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
        GuestOutput::Stderr(text) => eprint!("{text}"),
        GuestOutput::Tensor(t) => println!("{}", format_tensor(&t, &FormatOptions::default())),
        GuestOutput::Display { mime, data } if mime.starts_with("text/plain") => {
            println!("{}", String::from_utf8_lossy(&data))
        }
        GuestOutput::Display { mime, data } => {
            println!("[{mime}: {} bytes; shown in notebooks]", data.len())
        }
        GuestOutput::Plot(plot) => println!("{}", neuronlab_plot::text::render(&plot)),
        // Requests about how a notebook arranges its output; a terminal prints in order.
        GuestOutput::ResultNext
        | GuestOutput::DisplayIdNext { .. }
        | GuestOutput::ClearOutput { .. } => {}
    }
}

/// What `neuronlab run` was asked to do.
pub struct RunOptions {
    /// The exported function to call.
    pub entry: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Each rank's sandbox limits.
    pub limits: Limits,
    /// Number of ranks (1: a plain run).
    pub nproc: u32,
    /// Show every rank's output, not only rank 0's.
    pub all_ranks: bool,
    /// Seconds a collective waits for missing ranks (default: the environment or 5 s).
    pub collective_timeout: Option<String>,
}

/// Runs the module at `path` as `options.nproc` ranks.
pub fn run(path: &Path, options: RunOptions) -> Result<(), String> {
    let sandbox = Sandbox::shared().map_err(|e| e.to_string())?;
    let module = sandbox.load_file(path).map_err(|e| e.to_string())?;
    let runtime = Arc::new(Runtime::from_env().map_err(|e| e.to_string())?);
    let logs = LogFilter::from_env()?;
    if !logs.is_empty() {
        runtime.bus().subscribe(Box::new(move |event| {
            if let Some(line) = logs.line(event) {
                eprintln!("{line}");
            }
        }));
    }
    let mut world = WorldOptions::from_env().map_err(|e| e.to_string())?;
    if let Some(text) = &options.collective_timeout {
        world.timeout = parse_timeout(text).map_err(|e| format!("--collective-timeout: {e}"))?;
    }
    let view = RankView {
        all_ranks: options.all_ranks,
        prefix: options.nproc > 1,
    };
    let outputs = Arc::new(RankOutputs::new(view, Box::new(show)));
    let spmd = SpmdOptions {
        nproc: options.nproc,
        entry: options.entry.clone(),
        args: options.args,
        limits: options.limits,
        world,
    };
    let sink = outputs.clone();
    let results = launch(
        sandbox,
        &module,
        runtime.clone(),
        Shared::default(),
        &spmd,
        Arc::new(move |rank, o| sink.emit(rank, o)),
        &SpmdInterrupt::new(),
    )
    .map_err(|e| e.to_string())?;
    outputs.finish();
    let events = runtime.bus().events();
    let source = match &module.source {
        ModuleSource::Compiled => "compiled".to_string(),
        ModuleSource::DiskCache => "loaded from the module cache".to_string(),
        ModuleSource::Recompiled(why) => format!("recompiled ({why})"),
    };
    let ranks = match options.nproc {
        1 => String::new(),
        n => format!(" as {n} ranks"),
    };
    eprintln!(
        "\n-- {} {source} in {:.1} ms, run{ranks}\n-- {}",
        module.name,
        module.load_time.as_secs_f64() * 1e3,
        Summary::from_events(&events)
            .to_string()
            .replace('\n', "\n-- ")
    );
    report(&options.entry, results)
}

/// Prints rank 0's return values, or fails with every rank's error (ranks that failed the
/// same way are listed together).
fn report(entry: &str, results: Vec<RankResult>) -> Result<(), String> {
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

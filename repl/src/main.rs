//! `neuronlab`: the command-line front end. With no subcommand it is the REPL; each
//! subcommand is a thin layer over the session engine (`neuronlab-session`) and the library
//! crates under it; the logic lives there.

mod bench;
mod demo;
mod exec;
mod repl;
mod run;
mod tour;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use neuronlab_core::device::topology::Topology;
use neuronlab_core::ops::Registry;
use neuronlab_core::paths::CacheDir;
use neuronlab_sandbox::grants::Access;
use neuronlab_sandbox::Limits;
use neuronlab_session::toolchain::{self, Toolchain};

// The front ends run on mimalloc: see "The front ends run on mimalloc" in ARCHITECTURE.md.
#[global_allocator]
static ALLOCATOR: neuronlab_core::allocator::MiMalloc = neuronlab_core::allocator::MiMalloc;

/// An interactive lab for the eager Neuron tensor runtime, simulated on the CPU.
///
/// With no subcommand, neuronlab starts the REPL: cells are Rust (a function body, built for
/// wasm32 and run as a sandboxed guest) or %magics (%help lists them). Tab completes, Enter on
/// an unfinished cell continues it on a new line, Ctrl-C interrupts a running cell and Ctrl-D
/// leaves. The history is kept in $XDG_DATA_HOME/neuronlab/history (default
/// ~/.local/share/neuronlab/history).
#[derive(Parser)]
#[command(name = "neuronlab", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a file of cells in one session, without a prompt, printing each cell's outputs
    /// under a `# %% [n]` header.
    ///
    /// Cells are separated by lines that start with `# %%`; text before the first such line is
    /// the first cell. Cells are what the REPL takes: Rust, %magics, or a %% cell magic such as
    /// %%wat. It stops at the first failed cell with exit code 1, unless --keep-going.
    Exec {
        /// The file of cells.
        file: PathBuf,
        /// Run the cells after a failed one too (the exit code is still 1).
        #[arg(long)]
        keep_going: bool,
    },
    /// Runs the bundled prebuilt experiments through a session, with narration: eager ops,
    /// recompiles and their reasons, bucketing, 4 and 32 ranks, the timeline and memory.
    ///
    /// It needs no wasm32 toolchain: the experiments ship as prebuilt modules in
    /// notebooks/experiments.
    Tour {
        /// The experiments folder (default: notebooks/experiments here, else in the source
        /// tree this binary was built from).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Runs a small transformer block eagerly on a simulated NeuronCore and shows every op with
    /// its host time and modeled Trainium time.
    Demo {
        /// Also write a Chrome trace (open it in Perfetto or chrome://tracing).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Tokens in the batch.
        #[arg(long, default_value_t = 128)]
        tokens: usize,
    },
    /// Runs a guest module (.wasm or .wat), streaming its output, then prints the event summary.
    Run {
        /// The module.
        module: PathBuf,
        /// The exported function to call.
        #[arg(long, default_value = "run")]
        entry: String,
        /// Seconds one call may run before it is stopped.
        #[arg(long, default_value_t = 60.0)]
        deadline: f64,
        /// The largest linear memory the guest may have, in MiB.
        #[arg(long, default_value_t = 1024)]
        memory_mib: usize,
        /// Run as this many ranks, one per NeuronCore, as `torchrun --nproc_per_node`. Under
        /// `mpirun -n P` (a build with the `mpi` feature), the ranks of each process: the
        /// world is P x nproc ranks, rank = process * nproc + thread.
        #[arg(long, default_value_t = 1)]
        nproc: u32,
        /// Show every rank's output (by default only rank 0's); what several ranks print
        /// alike shows once, as `[ranks 0-3]: `.
        #[arg(long)]
        all_ranks: bool,
        /// Seconds a collective waits for missing ranks before it reports a deadlock
        /// (default: NEURONLAB_COLLECTIVE_TIMEOUT, or 5).
        #[arg(long)]
        collective_timeout: Option<String>,
        /// Writes the run's events as a Chrome trace (Perfetto, chrome://tracing): every rank's
        /// track, of every process under mpirun, with every event of the run (held in memory
        /// until the run ends).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Grants the guest this folder, read-only; it addresses the files as
        /// NAME/relative/path, NAME being the folder's name. Repeatable.
        #[arg(long = "dir", value_name = "PATH")]
        dirs: Vec<PathBuf>,
        /// Grants the guest this folder to read and write. Repeatable.
        #[arg(long = "dir-rw", value_name = "PATH")]
        dirs_rw: Vec<PathBuf>,
        /// Numeric arguments for the entry.
        #[arg(allow_negative_numbers = true)]
        args: Vec<String>,
        /// Arguments for the guest, after `--`: it reads them with `neuronlab::args()`.
        #[arg(last = true, value_name = "GUEST_ARGS")]
        guest_args: Vec<String>,
    },
    /// Builds a guest crate to .wasm with whichever wasm32 toolchain this machine has.
    Build {
        /// The crate's folder.
        crate_dir: PathBuf,
        /// Where to put the module (default: <crate-dir>/<name>.wasm).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Rebuilds the experiments' prebuilt modules and their manifest of source hashes, or
    /// with --check fails when a prebuilt module is stale.
    Prebuilt {
        /// The experiments folder.
        #[arg(long, default_value = "notebooks/experiments")]
        dir: PathBuf,
        /// The guest SDK folder (its sources are part of each experiment's hash).
        #[arg(long, default_value = "guest-sdk")]
        sdk: PathBuf,
        /// Check instead of update.
        #[arg(long)]
        check: bool,
    },
    /// Measures the suite and prints each case's median: matmul, elementwise ops, casts,
    /// reductions and norms, eager vs compiled, dispatch from a guest and the host, the
    /// compiled-function cache hit, module loads (use a release build).
    ///
    /// Each case warms up once, then repeats (more often the cheaper it is) and reports the
    /// median. Progress goes to stderr. The collectives (all_reduce vs memcpy) and session
    /// (cell latency) tables are slower and run only when --filter names them: `--filter
    /// collectives`, `--filter session`.
    Bench {
        /// Only cases whose id contains this (`matmul_f32`, `softmax`, `dispatch`, ...).
        #[arg(long)]
        filter: Option<String>,
        /// Print one JSON document on stdout (each case's id, description, median seconds,
        /// repetitions, and GFLOP/s or GB/s) and nothing else there; bench/compare.py reads it.
        #[arg(long)]
        json: bool,
    },
    /// Lists the op registry, or shows one op.
    Ops {
        /// An op name.
        name: Option<String>,
        /// Print the registry as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describes the simulated instance (honours NEURONLAB_INSTANCE,
    /// NEURON_LOGICAL_NC_CONFIG and NEURON_RT_VISIBLE_CORES).
    Devices {
        /// An instance preset: trn2.48xlarge, trn2.3xlarge, trn1.32xlarge, trn1.2xlarge.
        #[arg(long)]
        instance: Option<String>,
        /// Logical NeuronCore config (1 or 2 on Trainium2).
        #[arg(long)]
        lnc: Option<u32>,
    },
}

fn main() -> ExitCode {
    neuronlab_core::allocator::keep_freed_memory();
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        return exit(repl::run());
    };
    let result = match command {
        Command::Exec { file, keep_going } => exec::run(&file, keep_going),
        Command::Tour { dir } => tour::run(dir.as_deref()),
        Command::Demo { trace, tokens } => demo::run(tokens, trace.as_deref()),
        Command::Run {
            module,
            entry,
            deadline,
            memory_mib,
            nproc,
            all_ranks,
            collective_timeout,
            trace,
            dirs,
            dirs_rw,
            args,
            guest_args,
        } => {
            let limits = Limits {
                deadline: Duration::from_secs_f64(deadline),
                memory_bytes: memory_mib << 20,
                ..Limits::default()
            };
            let options = run::RunOptions {
                entry,
                args,
                guest_args,
                limits,
                nproc,
                all_ranks,
                collective_timeout,
                trace,
                dirs: dirs
                    .into_iter()
                    .map(|d| (d, Access::ReadOnly))
                    .chain(dirs_rw.into_iter().map(|d| (d, Access::ReadWrite)))
                    .collect(),
            };
            run::run(&module, options)
        }
        Command::Build { crate_dir, output } => build(&crate_dir, output.as_deref()).map(|_| ()),
        Command::Prebuilt { dir, sdk, check } => prebuilt(&dir, &sdk, check),
        Command::Bench { filter, json } => bench::run(filter.as_deref(), json),
        Command::Ops { name, json } => ops(name.as_deref(), json),
        Command::Devices { instance, lnc } => devices(instance.as_deref(), lnc),
    };
    exit(result)
}

fn exit(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn ops(name: Option<&str>, json: bool) -> Result<(), String> {
    let registry = Registry::global();
    match (name, json) {
        (Some(name), _) => {
            let (_, op) = registry.lookup(name)?;
            println!(
                "{}\n    {}\n    group: {}",
                op.schema(),
                op.doc,
                op.group.name()
            );
        }
        (None, true) => {
            let ops: Vec<serde_json::Value> = registry
                .ops()
                .iter()
                .map(|op| {
                    serde_json::json!({
                        "name": op.name,
                        "group": op.group.name(),
                        "schema": op.schema(),
                        "doc": op.doc,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(ops));
        }
        (None, false) => print!("{}", registry.listing()),
    }
    Ok(())
}

fn devices(instance: Option<&str>, lnc: Option<u32>) -> Result<(), String> {
    let topology = match instance {
        Some(name) => Topology::preset(name, lnc),
        None if lnc.is_some() => Topology::preset("trn2.48xlarge", lnc),
        None => Topology::from_env(),
    }
    .map_err(|e| e.to_string())?;
    println!("{}", topology.report());
    Ok(())
}

/// Builds a guest crate and copies its module to `output` (default `<crate>/<name>.wasm`).
fn build(crate_dir: &Path, output: Option<&Path>) -> Result<PathBuf, String> {
    let toolchain = Toolchain::detect()?;
    let name = toolchain::package_name(crate_dir)?;
    eprintln!("building {name} with {}", toolchain.describe());
    let wasm = toolchain.build(crate_dir, &CacheDir::GuestTarget.path())?;
    let dest = output.map_or_else(
        || toolchain::prebuilt_path(&name, crate_dir),
        Path::to_path_buf,
    );
    std::fs::copy(&wasm, &dest).map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
    let size = std::fs::metadata(&dest).map(|m| m.len()).unwrap_or(0);
    eprintln!("wrote {} ({} KiB)", dest.display(), size / 1024);
    Ok(dest)
}

fn prebuilt(dir: &Path, sdk: &Path, check: bool) -> Result<(), String> {
    if check {
        let problems = toolchain::stale_prebuilt(dir, sdk)?;
        if !problems.is_empty() {
            return Err(format!(
                "stale prebuilt modules:\n  {}\nrebuild them with `neuronlab prebuilt` and commit the result",
                problems.join("\n  ")
            ));
        }
        eprintln!("prebuilt modules match their sources");
        return Ok(());
    }
    let mut manifest = toolchain::Manifest::default();
    for (name, crate_dir) in toolchain::experiments(dir)? {
        let dest = build(&crate_dir, None)?;
        let bytes = std::fs::read(&dest).map_err(|e| format!("{}: {e}", dest.display()))?;
        manifest.experiments.insert(
            name,
            toolchain::ManifestEntry {
                sources: toolchain::source_hash(&crate_dir, sdk)?,
                wasm: blake3::hash(&bytes).to_hex().to_string(),
            },
        );
    }
    toolchain::write_manifest(dir, &manifest)?;
    eprintln!("updated {}", dir.join(toolchain::MANIFEST).display());
    Ok(())
}

//! The host's cost of the sft experiment's training step at 1, 8 and 32 ranks: what
//! simulating a sharded run costs the machine, beside what the ranks compute.
//!
//! Each world runs the prebuilt `sft.wasm` through a session, as `neuronlab run` does, twice:
//! with [`SHORT`] and with [`LONG`] steps. Everything else a run does (loading, the model's
//! setup, the step's compile on one rank, the accuracy before and after, which decodes a
//! fixed three tokens per sum) is the same in both, so the difference over the extra steps is
//! the host wall time of one step. The 32-rank world is the seed's mesh (TP 4 x FSDP 8); its
//! ranks do 1/32 of the work each, so its step should cost the host about what one rank's
//! does in all (the goal is at most 1.5x).
//!
//! The one-rank step runs twice, compiled (as sft runs it) and eagerly (`--eager`), because
//! sharded steps run eagerly: the 32-rank step is compared with the eager one.
//!
//! Host memory: the most bytes every rank's tensors held at once (the runtime's host
//! accounting), against how far the process's resident set rose at its peak in the run (its
//! high-water mark, reset before the run) above where it was just before it, once the
//! allocator has given back what earlier runs freed. The rest of the resident set is the
//! guests' linear memories and instances, the recorded events, each thread's scratch and what
//! the allocator keeps of memory freed during the run (the goal is within 1.2x).

use std::time::Instant;

use neuronlab_core::events::fmt::{bytes, duration};
use neuronlab_sandbox::GuestModule;
use neuronlab_session::launch::RunRequest;
use neuronlab_session::Session;

/// The table's name, which `--filter` matches.
pub const NAME: &str = "training: host cost of one sft step at 1, 8 and 32 ranks";

/// The step counts of the two runs of each world.
const SHORT: usize = 2;
const LONG: usize = 6;

/// The worlds: ranks, tensor-parallel size, FSDP size, and whether the step runs eagerly
/// (sharded steps always do; one rank compiles it unless asked not to).
const WORLDS: [(u32, u32, u32, bool); 4] = [
    (1, 1, 1, false),
    (1, 1, 1, true),
    (8, 1, 8, true),
    (32, 4, 8, true),
];

/// One run's wall time and memory.
struct Run {
    seconds: f64,
    /// The most bytes of tensors all ranks held at once.
    tensors: u64,
    /// How far the process's resident set rose, at its peak, above where it was before the
    /// run.
    resident: u64,
}

/// Runs `module` (sft) on `world`'s ranks for `steps` steps.
fn run_sft(
    s: &mut Session,
    module: &GuestModule,
    world: (u32, u32, u32, bool),
    steps: usize,
) -> Result<Run, String> {
    let (nproc, tp, fsdp, eager) = world;
    let guest_args: Vec<String> = [
        "--tp",
        &tp.to_string(),
        "--fsdp",
        &fsdp.to_string(),
        "--steps",
        &steps.to_string(),
        "--batch",
        "32",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain((eager && nproc == 1).then(|| "--eager".to_string()))
    .collect();
    let request = RunRequest {
        nproc,
        entry: "run",
        args: &[],
        guest_args: &guest_args,
        all_ranks: false,
        processes: None,
    };
    // What earlier runs freed and the allocator kept is not this run's.
    neuronlab_core::allocator::release_freed_memory();
    let baseline = resident_now()?;
    s.runtime().memory().reset_host_peak();
    reset_resident_peak()?;
    let start = Instant::now();
    let report = s
        .run_module(module, &request, &mut |_| {})
        .map_err(|e| format!("{}: {}", e.ename, e.evalue))?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(failure) = report.failures().first() {
        return Err(format!("sft on {nproc} ranks failed: {failure}"));
    }
    s.runtime().bus().clear();
    Ok(Run {
        seconds,
        tensors: s.runtime().memory().host_peak(),
        resident: resident_peak()?.saturating_sub(baseline),
    })
}

/// How a world reads in the table.
fn label((nproc, tp, fsdp, eager): (u32, u32, u32, bool)) -> String {
    let how = if eager { "eager" } else { "compiled" };
    format!("{nproc} rank(s), tp {tp} fsdp {fsdp}, {how}")
}

/// A field of /proc/self/status, in bytes (the kernel gives kB).
fn status_bytes(field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e} (the memory figures need Linux)"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
        .ok_or_else(|| format!("/proc/self/status has no {field}"))
}

fn resident_now() -> Result<u64, String> {
    status_bytes("VmRSS:")
}

fn resident_peak() -> Result<u64, String> {
    status_bytes("VmHWM:")
}

/// Starts the high-water mark of the resident set over from the current use.
fn reset_resident_peak() -> Result<(), String> {
    std::fs::write("/proc/self/clear_refs", "5")
        .map_err(|e| format!("resetting the resident set's peak (/proc/self/clear_refs): {e}"))
}

/// Runs and prints the table.
pub fn run() -> Result<(), String> {
    let mut s = Session::from_env()?;
    let dir = crate::tour::experiments_dir(None)?;
    let module = s
        .load_module(&dir.join("sft/sft.wasm"))
        .map_err(|e| format!("{}: {}", e.ename, e.evalue))?;
    let mut rows = Vec::new();
    for world in WORLDS {
        let label = label(world);
        eprintln!("{NAME}: {label}: {SHORT} and {LONG} steps...");
        let short = run_sft(&mut s, &module, world, SHORT)?;
        let long = run_sft(&mut s, &module, world, LONG)?;
        let step = (long.seconds - short.seconds) / (LONG - SHORT) as f64;
        rows.push((label, step, long));
    }
    println!("{NAME}");
    println!(
        "  sft.wasm (--batch 32, wrapped packing) through a session, as `neuronlab run`: host \
         wall time per step from a run of {LONG} steps less one of {SHORT}.\n  \
         tensors: the most bytes all ranks' tensors held at once; resident: how far the \
         process's resident set rose, at its peak in the {LONG}-step run, above where it was \
         before it, with what earlier runs freed given back."
    );
    println!(
        "  {:<30} {:>12} {:>10} {:>12} {:>12} {:>10}",
        "world", "host/step", "vs 1 eager", "tensors", "resident", "resident/tensors"
    );
    // Against the eager rank: every sharded step runs eagerly.
    let one = rows.get(1).map_or(f64::NAN, |r| r.1);
    for (label, step, long) in &rows {
        println!(
            "  {:<30} {:>12} {:>9.2}x {:>12} {:>12} {:>9.2}x",
            label,
            duration(*step),
            step / one,
            bytes(long.tensors),
            bytes(long.resident),
            long.resident as f64 / long.tensors.max(1) as f64
        );
    }
    Ok(())
}

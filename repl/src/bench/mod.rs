//! `neuronlab bench`: measured figures, printed, never asserted (timings are noisy). Each case
//! has a stable id (`matmul_f32_1024`), warms up once, repeats, and reports the median; with
//! `--json` the results are one JSON document on stdout, which `bench/compare.py` reads.
//!
//! The suite: `kernels` (matmul, elementwise, casts, reductions and norms), `compile` (eager
//! vs compiled, host compile time, the compiled-function cache hit), `train` (an MLP training
//! step) and the dispatch and module-load cases here. The `collectives`, `session` and
//! `training` (the sft experiment's step at 1, 8 and 32 ranks) tables are slower and print
//! their own layout, so they run only when `--filter` names them, and never with `--json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use neuronlab_core::device::topology::CoreId;
use neuronlab_core::events::fmt::duration;
use neuronlab_core::ops::Attrs;
use neuronlab_core::Runtime;
use neuronlab_sandbox::{Limits, Sandbox};

const TINY_OP_WAT: &[u8] = include_bytes!("tiny_op.wat");

mod by_hand;
mod collectives;
mod compile;
mod ops;
mod session;
mod train;
mod training;

/// About how long the timed runs of one case take together: the repetition count is this
/// divided by the warm-up run's time, within [`MIN_REPS`, `MAX_REPS`].
const BUDGET: Duration = Duration::from_millis(600);
const MIN_REPS: usize = 5;
/// High enough that a sub-millisecond case fills the budget too: this VM's speed drifts for
/// seconds at a time, and a median over 100 runs of a 200 µs case saw only 20 ms of it.
const MAX_REPS: usize = 5_000;

/// Calls per timed run for the dispatch cases, whose single call is too short to time alone.
const DISPATCH_CALLS: usize = 20_000;

/// How much useful work one call does, for a throughput figure.
#[derive(Clone, Copy)]
pub enum Work {
    /// Floating-point operations (a matmul's `2 * m * n * k`).
    Flops(f64),
    /// Bytes an ideal kernel reads and writes once each (inputs in, output out).
    Bytes(f64),
    /// Nothing meaningful to divide by (dispatch, compile times).
    None,
}

/// What one case measured.
pub struct Sample {
    /// Median seconds of one call.
    seconds: f64,
    /// Timed runs after the warm-up.
    reps: usize,
    /// Calls in each timed run (the run's time is divided by it).
    calls_per_rep: usize,
    work: Work,
    /// What the measurement found out along the way (a compiled program's kernel count).
    note: Option<String>,
    /// Figures for the JSON document beside the time (bytes a step held), by name.
    figures: Vec<(&'static str, u64)>,
}

impl Sample {
    fn new(timing: Timing, work: Work) -> Sample {
        Sample {
            seconds: timing.median,
            reps: timing.reps,
            calls_per_rep: 1,
            work,
            note: None,
            figures: Vec::new(),
        }
    }

    /// A sample whose timed runs each made `calls` calls: the median is per call.
    fn per_call(timing: Timing, calls: usize) -> Sample {
        Sample {
            seconds: timing.median / calls as f64,
            calls_per_rep: calls,
            ..Sample::new(timing, Work::None)
        }
    }

    fn with_note(mut self, note: impl Into<String>) -> Sample {
        self.note = Some(note.into());
        self
    }

    fn with_figure(mut self, name: &'static str, value: u64) -> Sample {
        self.figures.push((name, value));
        self
    }

    fn gflop_per_s(&self) -> Option<f64> {
        match self.work {
            Work::Flops(f) => Some(f / self.seconds / 1e9),
            _ => None,
        }
    }

    fn gb_per_s(&self) -> Option<f64> {
        match self.work {
            Work::Bytes(b) => Some(b / self.seconds / 1e9),
            _ => None,
        }
    }
}

/// Measures one case on the suite's runtime.
type Measure = Box<dyn FnOnce(&Arc<Runtime>) -> Result<Sample, String>>;

/// One benchmark case.
pub struct Case {
    /// Stable and machine-readable: `--filter` and compare.py select by it.
    id: String,
    /// What is measured, for people: op, shapes, dtype.
    description: String,
    /// The issue section it belongs to: matmul, elementwise, reduction, compile, train,
    /// dispatch, or extra (figures beyond the list).
    group: &'static str,
    measure: Measure,
}

impl Case {
    fn new(
        id: impl Into<String>,
        description: impl Into<String>,
        group: &'static str,
        measure: impl FnOnce(&Arc<Runtime>) -> Result<Sample, String> + 'static,
    ) -> Case {
        Case {
            id: id.into(),
            description: description.into(),
            group,
            measure: Box::new(measure),
        }
    }
}

/// A median and the number of timed runs it is the median of.
#[derive(Clone, Copy)]
pub struct Timing {
    median: f64,
    reps: usize,
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// Runs `f` `reps` times after one warm-up and returns the median seconds.
pub fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// Runs `f` once to warm up (page faults, thread pools, lazily built state), then as many
/// times as fill [`BUDGET`] by the warm-up's time; `settle` runs untimed before each timed run.
pub fn measure(mut f: impl FnMut(), mut settle: impl FnMut()) -> Timing {
    settle();
    let t = Instant::now();
    f();
    let warm_up = t.elapsed().as_secs_f64().max(1e-9);
    let reps = ((BUDGET.as_secs_f64() / warm_up) as usize).clamp(MIN_REPS, MAX_REPS);
    let samples = (0..reps)
        .map(|_| {
            settle();
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    Timing {
        median: median(samples),
        reps,
    }
}

fn quiet_runtime() -> Result<Arc<Runtime>, String> {
    Ok(Arc::new(Runtime::from_env().map_err(|e| e.to_string())?))
}

fn guest_tiny_op(_: &Arc<Runtime>) -> Result<Sample, String> {
    guest_loop("loop")
}

fn guest_host_call(_: &Arc<Runtime>) -> Result<Sample, String> {
    guest_loop("rank_loop")
}

/// Times `entry(DISPATCH_CALLS)` of tiny_op.wat, per iteration of its loop.
fn guest_loop(entry: &str) -> Result<Sample, String> {
    let sandbox = Sandbox::new(None).map_err(|e| e.to_string())?;
    let module = sandbox
        .load("tiny_op.wat", TINY_OP_WAT)
        .map_err(|e| e.to_string())?;
    // Its own runtime: the guest's tensors live there, as in a session.
    let runtime = quiet_runtime()?;
    let mut guest = sandbox
        .instantiate(
            &module,
            runtime.clone(),
            CoreId(0),
            Limits::default(),
            Box::new(|_| {}),
        )
        .map_err(|e| e.to_string())?;
    let arg = [DISPATCH_CALLS.to_string()];
    let timing = measure(
        || {
            let status = guest.call(entry, &arg).expect("the benchmark guest runs");
            assert_eq!(status, ["0"], "{entry} failed in the guest");
        },
        || runtime.bus().clear(),
    );
    Ok(Sample::per_call(timing, DISPATCH_CALLS))
}

fn host_tiny_op(rt: &Arc<Runtime>) -> Result<Sample, String> {
    let one = rt
        .call1("ones", &[], &Attrs::new().with("shape", Vec::<i64>::new()))
        .map_err(|e| e.to_string())?;
    let attrs = Attrs::new();
    let timing = measure(
        || {
            for _ in 0..DISPATCH_CALLS {
                let out = rt.call("add", &[&one, &one], &attrs).expect("add runs");
                drop(out);
            }
        },
        || rt.bus().clear(),
    );
    Ok(Sample::per_call(timing, DISPATCH_CALLS))
}

/// The module the load cases compile: an experiment when run from the repository root,
/// else the tiny-op module.
fn module_bytes() -> Result<Vec<u8>, String> {
    std::fs::read("notebooks/experiments/hello-tensors/hello-tensors.wasm")
        .or_else(|_| wat::parse_bytes(TINY_OP_WAT).map(|b| b.into_owned()))
        .map_err(|e| e.to_string())
}

fn module_cache_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("neuronlab-bench-cache-{}", std::process::id()))
}

fn module_load_compile(_: &Arc<Runtime>) -> Result<Sample, String> {
    let wasm = module_bytes()?;
    let dir = module_cache_dir();
    let timing = measure(
        || {
            let sandbox = Sandbox::new(Some(dir.clone())).expect("sandbox");
            sandbox.load("bench", &wasm).expect("module loads");
        },
        || {
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Sample::new(timing, Work::None).with_note(format!("{} KiB module", wasm.len() / 1024)))
}

fn module_load_cached(_: &Arc<Runtime>) -> Result<Sample, String> {
    let wasm = module_bytes()?;
    let dir = module_cache_dir();
    let sandbox = Sandbox::new(Some(dir.clone())).map_err(|e| e.to_string())?;
    sandbox.load("bench", &wasm).map_err(|e| e.to_string())?;
    let timing = measure(
        || {
            sandbox.load("bench", &wasm).expect("module loads");
        },
        || {},
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Sample::new(timing, Work::None).with_note(format!("{} KiB module", wasm.len() / 1024)))
}

/// Every case, in the order they run and print.
fn suite() -> Vec<Case> {
    let mut cases = ops::cases();
    cases.extend(compile::cases());
    cases.push(by_hand::case());
    cases.extend(train::cases());
    cases.push(Case::new(
        "dispatch_guest_tiny_op",
        format!(
            "add of two 1-element f32 tensors called from a wasm guest, per call \
             ({DISPATCH_CALLS} calls per run)"
        ),
        "dispatch",
        guest_tiny_op,
    ));
    cases.push(Case::new(
        "dispatch_host_tiny_op",
        format!(
            "add of two 1-element f32 tensors called from the host API (Runtime::call), per \
             call ({DISPATCH_CALLS} calls per run)"
        ),
        "dispatch",
        host_tiny_op,
    ));
    cases.push(Case::new(
        "dispatch_guest_host_call",
        format!(
            "the rank of a tensor asked from a wasm guest (the cheapest host call with a \
             handle lookup: the cost of crossing into the host and back), per call \
             ({DISPATCH_CALLS} calls per run)"
        ),
        "dispatch",
        guest_host_call,
    ));
    cases.push(compile::cache_hit_case());
    cases.push(Case::new(
        "module_load_compile",
        "load a module: compile with Cranelift and store in an empty on-disk cache",
        "extra",
        module_load_compile,
    ));
    cases.push(Case::new(
        "module_load_cached",
        "load a module: from the on-disk cache",
        "extra",
        module_load_cached,
    ));
    cases
}

/// One measured case, ready to print.
struct Measured {
    case_id: String,
    description: String,
    group: &'static str,
    sample: Sample,
}

impl Measured {
    fn json(&self) -> serde_json::Value {
        let s = &self.sample;
        let mut v = serde_json::json!({
            "id": self.case_id,
            "description": self.description,
            "group": self.group,
            "median_s": s.seconds,
            "reps": s.reps,
            "calls_per_rep": s.calls_per_rep,
        });
        let fields = v.as_object_mut().expect("an object");
        match s.work {
            Work::Flops(f) => {
                fields.insert("flop".into(), f.into());
            }
            Work::Bytes(b) => {
                fields.insert("bytes".into(), b.into());
            }
            Work::None => {}
        }
        if let Some(g) = s.gflop_per_s() {
            fields.insert("gflop_per_s".into(), g.into());
        }
        if let Some(g) = s.gb_per_s() {
            fields.insert("gb_per_s".into(), g.into());
        }
        if let Some(note) = &s.note {
            fields.insert("note".into(), note.as_str().into());
        }
        for &(name, value) in &s.figures {
            fields.insert(name.into(), value.into());
        }
        v
    }

    fn throughput(&self) -> String {
        let s = &self.sample;
        match (s.gflop_per_s(), s.gb_per_s()) {
            (Some(g), _) => format!("{g:.1} GFLOP/s"),
            (_, Some(g)) => format!("{g:.2} GB/s"),
            _ => String::new(),
        }
    }
}

/// The `--json` document.
fn json_document(results: &[Measured]) -> serde_json::Value {
    serde_json::json!({
        "tool": "neuronlab bench",
        "version": env!("CARGO_PKG_VERSION"),
        "release_build": !cfg!(debug_assertions),
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "median_s_is": "the median seconds of one call over `reps` timed runs after one warm-up",
        "cases": results.iter().map(Measured::json).collect::<Vec<_>>(),
    })
}

fn print_table(results: &[Measured]) {
    let width = results.iter().map(|r| r.case_id.len()).max().unwrap_or(0);
    println!(
        "{:<width$} {:>10} {:>5} {:>14}  description",
        "case", "median", "reps", "throughput"
    );
    for r in results {
        let note = r
            .sample
            .note
            .as_ref()
            .map_or(String::new(), |n| format!(" [{n}]"));
        println!(
            "{:<width$} {:>10} {:>5} {:>14}  {}{note}",
            r.case_id,
            duration(r.sample.seconds),
            r.sample.reps,
            r.throughput(),
            r.description
        );
    }
    // Each compiled case next to its eager twin, as the ratio the compile issue is judged by.
    for compiled in results.iter().filter(|r| r.case_id.ends_with("_compiled")) {
        let base = compiled.case_id.trim_end_matches("_compiled");
        if let Some(eager) = results
            .iter()
            .find(|r| r.case_id == format!("{base}_eager"))
        {
            println!(
                "{base}: eager / compiled = {:.2}x",
                eager.sample.seconds / compiled.sample.seconds
            );
        }
    }
}

/// A table that prints its own layout: its name (which `--filter` matches) and its runner.
type Table = (&'static str, fn() -> Result<(), String>);

/// Runs the cases whose id contains `filter` (all when `None`) and prints a table, or with
/// `json` one JSON document and nothing else on stdout. Progress goes to stderr.
pub fn run(filter: Option<&str>, json: bool) -> Result<(), String> {
    if cfg!(debug_assertions) {
        eprintln!(
            "note: this is a debug build; `cargo build --release -p neuronlab-repl` for real figures"
        );
    }
    let selected: Vec<Case> = suite()
        .into_iter()
        .filter(|c| filter.is_none_or(|p| c.id.contains(p)))
        .collect();
    let tables: Vec<Table> = vec![
        (collectives::NAME, collectives::run),
        (session::NAME, session::run),
        (training::NAME, training::run),
    ];
    let tables: Vec<_> = match filter {
        Some(p) if !json => tables.into_iter().filter(|(n, _)| n.contains(p)).collect(),
        _ => Vec::new(),
    };
    if selected.is_empty() && tables.is_empty() {
        return Err(format!(
            "no case matches --filter {:?}; the ids are:\n  {}\n(without --json, `collectives`, \
             `session` and `training` select those tables)",
            filter.unwrap_or_default(),
            suite()
                .iter()
                .map(|c| c.id.as_str())
                .collect::<Vec<_>>()
                .join("\n  ")
        ));
    }
    let rt = quiet_runtime()?;
    let total = selected.len();
    let mut results = Vec::with_capacity(total);
    for (i, case) in selected.into_iter().enumerate() {
        eprint!("[{}/{total}] {} ... ", i + 1, case.id);
        let sample = (case.measure)(&rt).map_err(|e| format!("{}: {e}", case.id))?;
        rt.bus().clear();
        eprintln!("{} x {}", duration(sample.seconds), sample.reps);
        results.push(Measured {
            case_id: case.id,
            description: case.description,
            group: case.group,
            sample,
        });
    }
    if json {
        println!("{}", json_document(&results));
        return Ok(());
    }
    if !results.is_empty() {
        print_table(&results);
    }
    for (_, table) in tables {
        table()?;
    }
    Ok(())
}

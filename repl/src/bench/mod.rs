//! `neuronlab bench`: measured figures, printed, never asserted (timings are noisy). Each case
//! warms up, repeats, and reports the median.

use std::sync::Arc;
use std::time::Instant;

use neuronlab_runtime::device::topology::CoreId;
use neuronlab_runtime::ops::Attrs;
use neuronlab_runtime::sandbox::{Limits, Sandbox};
use neuronlab_runtime::Runtime;

const TINY_OP_WAT: &[u8] = include_bytes!("tiny_op.wat");

mod collectives;
mod compile;
mod session;

/// One result: a case name, its median, and the unit it is given in.
pub struct Figure {
    case: String,
    value: f64,
    unit: &'static str,
}

impl Figure {
    fn new(case: impl Into<String>, value: f64, unit: &'static str) -> Figure {
        Figure {
            case: case.into(),
            value,
            unit,
        }
    }
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

fn quiet_runtime() -> Result<Arc<Runtime>, String> {
    Ok(Arc::new(Runtime::from_env().map_err(|e| e.to_string())?))
}

fn guest_tiny_op() -> Result<Figure, String> {
    let sandbox = Sandbox::new(None).map_err(|e| e.to_string())?;
    let module = sandbox
        .load("tiny_op.wat", TINY_OP_WAT)
        .map_err(|e| e.to_string())?;
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
    const N: usize = 20_000;
    let arg = [N.to_string()];
    let secs = time(7, || {
        guest.call("loop", &arg).expect("the benchmark guest runs");
        runtime.bus().clear();
    });
    Ok(Figure::new(
        "tiny op (add of 1-element f32) from a guest",
        secs / N as f64 * 1e9,
        "ns/call",
    ))
}

fn host_tiny_op() -> Result<Figure, String> {
    let runtime = quiet_runtime()?;
    let one = runtime
        .call1("ones", &[], &Attrs::new().with("shape", Vec::<i64>::new()))
        .map_err(|e| e.to_string())?;
    const N: usize = 20_000;
    let attrs = Attrs::new();
    let secs = time(7, || {
        for _ in 0..N {
            let out = runtime
                .call("add", &[&one, &one], &attrs)
                .expect("add runs");
            drop(out);
        }
        runtime.bus().clear();
    });
    Ok(Figure::new(
        "tiny op (add of 1-element f32) from the host API",
        secs / N as f64 * 1e9,
        "ns/call",
    ))
}

fn module_loads() -> Result<Vec<Figure>, String> {
    let wasm = std::fs::read("notebooks/experiments/hello-tensors/hello-tensors.wasm")
        .or_else(|_| wat::parse_bytes(TINY_OP_WAT).map(|b| b.into_owned()))
        .map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("neuronlab-bench-cache-{}", std::process::id()));
    let compile = time(5, || {
        let _ = std::fs::remove_dir_all(&dir);
        let sandbox = Sandbox::new(Some(dir.clone())).expect("sandbox");
        sandbox.load("bench", &wasm).expect("module loads");
    });
    let sandbox = Sandbox::new(Some(dir.clone())).map_err(|e| e.to_string())?;
    sandbox.load("bench", &wasm).map_err(|e| e.to_string())?;
    let cached = time(5, || {
        sandbox.load("bench", &wasm).expect("module loads");
    });
    let _ = std::fs::remove_dir_all(&dir);
    Ok(vec![
        Figure::new(
            "load a module: compile with Cranelift (and store)",
            compile * 1e3,
            "ms",
        ),
        Figure::new("load a module: from the on-disk cache", cached * 1e3, "ms"),
    ])
}

/// Runs the suite (cases whose name contains `filter`) and prints a table.
pub fn run(filter: Option<&str>) -> Result<(), String> {
    if cfg!(debug_assertions) {
        eprintln!("note: this is a debug build; run `cargo run --release -p neuronlab-repl -- bench` for real figures");
    }
    let mut figures = vec![guest_tiny_op()?, host_tiny_op()?];
    figures.extend(module_loads()?);
    let rt = quiet_runtime()?;
    figures.extend(compile::eager_vs_compiled(&rt)?);
    figures.push(compile::cache_hit(&rt)?);
    for f in figures
        .iter()
        .filter(|f| filter.is_none_or(|p| f.case.contains(p)))
    {
        println!("{:<72} {:>10.2} {}", f.case, f.value, f.unit);
    }
    if filter.is_none_or(|p| collectives::NAME.contains(p)) {
        collectives::run()?;
    }
    if filter.is_none_or(|p| session::NAME.contains(p)) {
        session::run()?;
    }
    Ok(())
}

//! Cell latency of the session engine, as a front end sees it: the wall time of
//! `Session::execute` for a Rust cell (edit, build, run), a `%%wat` cell, and a `%run` of an
//! export of a module already loaded. Outputs go to a callback that keeps nothing but an error.
//!
//! Every timed Rust cell has a new constant, so cargo really rebuilds the cell crate. The
//! session does not say how long its build took, so the run part of a cell is measured in
//! pieces on the last cell's module (found in the shared cell target folder): its Cranelift
//! compile (a sandbox without a module cache), a `%load` of it (the session's sandbox: the
//! on-disk module cache, then a new instance) and a `%run` of its `run` export; the build is
//! the cell's time minus those. An items-only cell, which the session only builds, is timed
//! too: the build of a smaller crate (no restored variables, no result shown).

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use neuronlab_core::events::fmt::{bytes, duration};
use neuronlab_core::paths::CacheDir;
use neuronlab_sandbox::Sandbox;
use neuronlab_session::toolchain::{Toolchain, TARGET};
use neuronlab_session::{Outcome, Output, Session};

use super::median;

/// The table's name, which `--filter` matches.
pub const NAME: &str = "session: cell latency (Rust edit-build-run, %%wat, %run)";

/// Timed iterations of each case (after one warm-up).
const RUST_ITERS: usize = 10;
const PIECE_ITERS: usize = 5;
const RERUN_ITERS: usize = 20;
const WAT_ITERS: usize = 50;
const RUN_ITERS: usize = 200;

/// One row: a case and its per-cell seconds, or a figure derived from other rows.
struct Row {
    case: String,
    samples: Vec<f64>,
    derived: Option<f64>,
}

impl Row {
    fn measured(case: impl Into<String>, samples: Vec<f64>) -> Row {
        Row {
            case: case.into(),
            samples,
            derived: None,
        }
    }

    fn median(&self) -> f64 {
        self.derived.unwrap_or_else(|| median(self.samples.clone()))
    }
}

/// Runs `code` as one cell; its seconds, or the cell's error.
fn cell(s: &mut Session, code: &str) -> Result<f64, String> {
    let mut error = None;
    let start = Instant::now();
    let outcome = s.execute(code, &mut |o| {
        if let Output::Error(e) = o {
            error = Some(format!("{}: {}", e.ename, e.evalue));
        }
    });
    let secs = start.elapsed().as_secs_f64();
    match outcome {
        Outcome::Ok => Ok(secs),
        _ => Err(format!(
            "the cell `{}` failed: {}",
            code.lines().next().unwrap_or(""),
            error.unwrap_or_else(|| format!("{outcome:?}"))
        )),
    }
}

/// Runs `code` once, then `iters` times; the timed seconds.
fn cells(s: &mut Session, code: &str, iters: usize) -> Result<Vec<f64>, String> {
    cell(s, code)?;
    (0..iters).map(|_| cell(s, code)).collect()
}

/// A `%%wat` cell whose `run` returns `value`; `bump` adds one to a global and returns it.
fn wat_cell(value: i64) -> String {
    format!(
        "%%wat\n(module\n  \
         (memory (export \"memory\") 1)\n  \
         (global $n (mut i32) (i32.const 0))\n  \
         (func (export \"neuronlab_abi_version\") (result i32) (i32.const 0x10000))\n  \
         (func (export \"run\") (result i32) (i32.const {value}))\n  \
         (func (export \"bump\") (result i32)\n    \
         (global.set $n (i32.add (global.get $n) (i32.const 1)))\n    \
         (global.get $n)))\n"
    )
}

/// The newest cell module written in `window`: the session's last cell, unless another
/// session built one in the same moments.
fn newest_cell_module(window: RangeInclusive<SystemTime>) -> Option<PathBuf> {
    let dir = CacheDir::CellTarget.path().join(TARGET).join("release");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("neuronlab_cell_") && name.ends_with(".wasm")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .filter(|(modified, _)| window.contains(modified))
        .max()
        .map(|(_, path)| path)
}

/// The pieces of the run part of a cell whose module is `wasm`, and the build derived from
/// `total` (the running cells' row).
fn run_pieces(s: &mut Session, wasm: &PathBuf, total: &Row) -> Result<Vec<Row>, String> {
    let bytes_of = std::fs::read(wasm).map_err(|e| format!("{}: {e}", wasm.display()))?;
    let sandbox = Sandbox::new(None).map_err(|e| e.to_string())?;
    let mut compile = Vec::new();
    for _ in 0..=PIECE_ITERS {
        let start = Instant::now();
        sandbox.load("cell", &bytes_of).map_err(|e| e.to_string())?;
        compile.push(start.elapsed().as_secs_f64());
    }
    compile.remove(0);
    let load = cells(s, &format!("%load {}", wasm.display()), PIECE_ITERS)?;
    let name = wasm
        .file_stem()
        .map(|n| n.to_string_lossy().replace('-', "_"))
        .unwrap_or_default();
    let rerun = cells(s, &format!("%run {name}.run"), RERUN_ITERS)?;
    let pieces = [
        Row::measured(
            format!(
                "  of it: Cranelift compile of the module ({}, no cache)",
                bytes(bytes_of.len() as u64)
            ),
            compile,
        ),
        Row::measured(
            "  of it: %load of the module (disk cache, instantiate)",
            load,
        ),
        Row::measured(
            "  of it: %run of its `run` export (a loaded instance)",
            rerun,
        ),
    ];
    let build = total.median() - pieces.iter().map(Row::median).sum::<f64>();
    let mut rows = vec![Row {
        case: "  of it: build (the cell minus the three below)".into(),
        samples: Vec::new(),
        derived: Some(build),
    }];
    rows.extend(pieces);
    Ok(rows)
}

/// The Rust rows, the warm-up's seconds and the toolchain, or why they were skipped.
fn rust_rows(s: &mut Session, salt: i64) -> Result<(Vec<Row>, f64, String), String> {
    // The whole message: it ends with the commands that install a toolchain.
    let toolchain = Toolchain::detect().map_err(|e| e.replace('\n', "\n    "))?;
    eprintln!(
        "{NAME}: warm-up Rust cell (the first cell of a machine also builds the standard \
         library and the SDK: about a minute)..."
    );
    let since = SystemTime::now();
    let warm_up = cell(s, &format!("let a = {salt}; a + 1"))?;
    cell(s, &format!("fn bench_item() -> i64 {{ {salt} }}"))?;
    eprintln!(
        "{NAME}: warm-up took {}; {RUST_ITERS} x (items-only cell, running cell)...",
        duration(warm_up)
    );
    let (mut total, mut items) = (Vec::new(), Vec::new());
    let mut last_built = since..=since;
    for i in 1..=RUST_ITERS as i64 {
        let n = salt + i;
        items.push(cell(s, &format!("fn bench_item() -> i64 {{ {n} }}"))?);
        // The running cell comes last: its module is the one left in the target folder.
        let start = SystemTime::now();
        total.push(cell(s, &format!("let a = {n}; a + 1"))?);
        last_built = start..=SystemTime::now();
    }
    let total = Row::measured("Rust: edit, build, run (`let a = N; a + 1`)", total);
    let items = Row::measured(
        "Rust: items-only cell, built only (`fn bench_item() -> i64 { N }`)",
        items,
    );
    eprintln!("{NAME}: the pieces of the last Rust cell's run...");
    let pieces = match newest_cell_module(last_built) {
        Some(wasm) => run_pieces(s, &wasm, &total)?,
        None => Vec::new(),
    };
    let mut rows = vec![total];
    rows.extend(pieces);
    rows.push(items);
    Ok((rows, warm_up, toolchain.describe()))
}

/// The `%%wat` and `%run` rows.
fn wat_rows(s: &mut Session, salt: i64) -> Result<Vec<Row>, String> {
    eprintln!("{NAME}: {WAT_ITERS} + {WAT_ITERS} %%wat cells, {RUN_ITERS} %run cells...");
    cell(s, &wat_cell(salt))?;
    let edited = (1..=WAT_ITERS as i64)
        .map(|i| cell(s, &wat_cell(salt + i)))
        .collect::<Result<Vec<_>, _>>()?;
    let same = cells(s, &wat_cell(salt), WAT_ITERS)?;
    let runs = cells(
        s,
        &format!("%run wat{}.bump", s.execution_count()),
        RUN_ITERS,
    )?;
    Ok(vec![
        Row::measured("%%wat: edited each time (Cranelift compile)", edited),
        Row::measured("%%wat: same text again (on-disk module cache hit)", same),
        Row::measured("%run module.bump (the loaded module's instance)", runs),
    ])
}

fn print_row(case: &str, iters: &str, median: &str, min: &str, max: &str) {
    let line = format!("  {case:<66} {iters:>5} {median:>10} {min:>10} {max:>10}");
    println!("{}", line.trim_end());
}

fn print_stats(r: &Row) {
    if r.derived.is_some() {
        print_row(&r.case, "", &duration(r.median()), "", "");
        return;
    }
    let min = r.samples.iter().copied().fold(f64::INFINITY, f64::min);
    let max = r.samples.iter().copied().fold(0.0, f64::max);
    print_row(
        &r.case,
        &r.samples.len().to_string(),
        &duration(r.median()),
        &duration(min),
        &duration(max),
    );
}

/// Measures every case and prints the table.
pub fn run() -> Result<(), String> {
    let mut s = Session::from_env()?;
    // Constants (i32, as Rust infers `let a = N`) that no recent run of the benchmark used,
    // so no edited cell is a cache hit by accident.
    let salt = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| (d.as_millis() % 1_000_000_000) as i64);
    let rust = rust_rows(&mut s, salt);
    let wat = wat_rows(&mut s, salt)?;
    println!("{NAME}");
    println!(
        "  wall time of Session::execute for one cell, outputs to a callback that keeps only \
         errors; one session (Session::from_env).\n  \
         median, min, max over the iterations after one warm-up cell.\n  \
         Rust: each cell has a new constant N, so the cell crate really rebuilds (parse, \
         generate, cargo build for wasm32), then its module is\n  \
         compiled with Cranelift, instantiated, and its `run` restores `a`, shows the value \
         and keeps `a`. The pieces of the run are timed\n  \
         on the last cell's module (Cranelift: a sandbox without a module cache; %load and \
         %run: cells); the build is what remains.\n  \
         The items-only cell is built and not run (a smaller crate: no restored variables, \
         no result shown).\n  \
         %%wat: a module with `run` (returns a constant) and `bump` exports: load, \
         instantiate, call `run`, keep it for %run.\n  \
         %run: calls `bump` (adds one to a global) on the instance kept by the last %%wat cell."
    );
    match &rust {
        Ok((_, warm_up, toolchain)) => println!(
            "  toolchain: {toolchain}. warm-up, the session's first Rust cell: {} (the first \
             cell of a machine also builds the standard library and the SDK, about a minute).",
            duration(*warm_up)
        ),
        Err(why) => println!("  Rust cells skipped: {why}"),
    }
    print_row("cell", "iters", "median", "min", "max");
    let rust_rows = rust.as_ref().map(|(rows, _, _)| &rows[..]).unwrap_or(&[]);
    for r in rust_rows.iter().chain(&wat) {
        print_stats(r);
    }
    Ok(())
}

//! The session engine driven directly, without a toolchain: `%%wat` cells, `%load` and `%run`
//! of the WAT fixtures, an interrupt from another thread, and every magic with good and bad
//! arguments. After each failure the next cell runs and the variables and their tensors are
//! intact. (Rust cells need a wasm32 toolchain: tests/rust_cells.rs.)

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use neuronlab_core::device::topology::{CoreId, Topology};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_sandbox::var_store::Var;
use neuronlab_sandbox::Limits;
use neuronlab_session::{CellError, Outcome, Output, Session, SessionOptions};

/// A cache folder of this test process, so `%cache clear` never touches the user's caches.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("neuronlab-session-test-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sandbox/tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn session_with(deadline: Duration) -> Session {
    static CACHE: Once = Once::new();
    // Every test comes here before anything reads the environment.
    CACHE.call_once(|| std::env::set_var("NEURONLAB_CACHE_DIR", scratch("cache")));
    Session::new(SessionOptions {
        runtime: RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 1 << 32,
        },
        limits: Limits {
            deadline,
            ..Limits::default()
        },
        work_dir: Some(scratch("work")),
        world: Default::default(),
        program_cache: None,
        logs: Default::default(),
        sdk_dir: None,
    })
    .unwrap()
}

fn session() -> Session {
    session_with(Duration::from_secs(30))
}

/// What one cell did.
struct Ran {
    outcome: Outcome,
    outputs: Vec<Output>,
}

impl Ran {
    /// Every text the cell showed (stdout, displays, results, summary), in order.
    fn text(&self) -> String {
        self.outputs
            .iter()
            .filter_map(|o| match o {
                Output::Stdout(t) => Some(t.clone()),
                Output::Display(b) | Output::Result(b) | Output::Summary(b) => {
                    Some(format!("{}\n", b.plain()))
                }
                _ => None,
            })
            .collect()
    }

    fn error(&self) -> Option<&CellError> {
        self.outputs.iter().find_map(|o| match o {
            Output::Error(e) => Some(e),
            _ => None,
        })
    }
}

fn run(s: &mut Session, code: &str) -> Ran {
    let mut outputs = Vec::new();
    let outcome = s.execute(code, &mut |o| outputs.push(o));
    Ran { outcome, outputs }
}

/// Runs a cell that must succeed; returns its text.
fn ok(s: &mut Session, code: &str) -> String {
    let ran = run(s, code);
    assert_eq!(ran.outcome, Outcome::Ok, "{code}: {:?}", ran.outputs);
    assert!(ran.error().is_none(), "{code}: {:?}", ran.outputs);
    ran.text()
}

/// Runs a cell that must fail with `ename`; returns the error message, and checks that the
/// session still runs a cell and still holds the variables of [`VARS_WAT`].
fn fails(s: &mut Session, code: &str, ename: &str) -> String {
    let ran = run(s, code);
    assert_eq!(ran.outcome, Outcome::Error, "{code}: {:?}", ran.outputs);
    let error = ran
        .error()
        .unwrap_or_else(|| panic!("{code}: no error in {:?}", ran.outputs));
    assert_eq!(error.ename, ename, "{code}: {error:?}");
    assert_intact(s);
    error.evalue.clone()
}

/// The next cell runs, and the variables set by [`VARS_WAT`] (when it ran) are intact.
fn assert_intact(s: &mut Session) {
    assert!(ok(s, HELLO_CELL).contains("sum ok"));
    if let Some(Var::Tensor(x)) = s.vars().get("x") {
        assert_eq!(x.to_vec::<f32>(), [1.0, 2.0, 3.0]);
        let stats = s.runtime().memory().stats(CoreId(0)).unwrap();
        assert!(stats.in_use >= 12, "{stats:?}");
    }
}

/// A cell that adds two tensors and prints "sum ok".
const HELLO_CELL: &str = concat!(
    "%%wat\n",
    include_str!("../../sandbox/tests/fixtures/hello.wat")
);

/// Sets the variables `x` (a tensor [1, 2, 3]), `n` (an i64) and `v` (a local).
const VARS_WAT: &str = r#"%%wat
(module
  (import "neuronlab" "tensor_create" (func $create (param i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "var_set_tensor" (func $set_tensor (param i32 i32 i32) (result i32)))
  (import "neuronlab" "var_set_value" (func $set_value (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\03\00\00\00\00\00\00\00")
  (data (i32.const 16) "\00\00\80\3f\00\00\00\40\00\00\40\40")
  (data (i32.const 32) "x")
  (data (i32.const 40) "n")
  (data (i32.const 48) "i64\n42")
  (data (i32.const 64) "v")
  (data (i32.const 72) "Vec<i32>")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10001))
  (func (export "run") (result i32)
    (drop (call $set_tensor (i32.const 32) (i32.const 1)
      (call $create (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16) (i32.const 12))))
    (drop (call $set_value (i32.const 40) (i32.const 1) (i32.const 1) (i32.const 48) (i32.const 6)))
    (call $set_value (i32.const 64) (i32.const 1) (i32.const 0) (i32.const 72) (i32.const 8))))
"#;

/// Compiles `f(x) = exp(x)` and calls it on a [3] and then a [4] tensor.
const COMPILE_WAT: &str = r#"%%wat
(module
  (import "neuronlab" "tensor_create" (func $create (param i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "op_lookup" (func $lookup (param i32 i32) (result i32)))
  (import "neuronlab" "op_call" (func $call (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "compile_fn" (func $compile_fn (param i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "compile_call" (func $compile_call (param i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "compile_arg" (func $arg (param i32) (result i32)))
  (import "neuronlab" "compile_result" (func $result (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "exp")
  (data (i32.const 8) "f")
  (data (i32.const 16) "\03\00\00\00\00\00\00\00")
  (data (i32.const 24) "\04\00\00\00\00\00\00\00")
  (data (i32.const 32) "\00\00\80\3f\00\00\00\40\00\00\40\40\00\00\80\40")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10001))
  (func (export "neuronlab_trampoline") (param $fn i32) (param $n i32) (result i32)
    (i32.store (i32.const 64) (call $arg (i32.const 0)))
    (drop (call $call (call $lookup (i32.const 0) (i32.const 3))
      (i32.const 64) (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 68) (i32.const 1)))
    (drop (call $result (i32.load (i32.const 68))))
    (i32.const 1))
  (func $apply (param $f i32) (param $shape i32) (param $len i32) (result i32)
    (i32.store (i32.const 96)
      (call $create (i32.const 0) (local.get $shape) (i32.const 1) (i32.const 32) (local.get $len)))
    (call $compile_call (local.get $f) (i32.const 96) (i32.const 1) (i32.const 100) (i32.const 1)))
  (func (export "run") (result i32)
    (local $f i32)
    (local.set $f (call $compile_fn (i32.const 0) (i32.const 8) (i32.const 1) (i32.const 0) (i32.const 0)))
    (drop (call $apply (local.get $f) (i32.const 16) (i32.const 12)))
    (call $apply (local.get $f) (i32.const 24) (i32.const 16))))
"#;

/// Marks `w` = [1, 2, 3] as requiring a gradient, computes `z = exp(w) * w` and runs backward
/// from `z` with a gradient of ones, then keeps `w` (and so its gradient) as a variable. `exp`
/// saves its output and `mul` both inputs: two storages of 12 B, saved until backward frees
/// them. A failing import traps.
const BACKWARD_WAT: &str = r#"%%wat
(module
  (import "neuronlab" "tensor_create" (func $create (param i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "op_lookup" (func $lookup (param i32 i32) (result i32)))
  (import "neuronlab" "op_call" (func $call (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "grad_requires" (func $requires (param i32) (result i32)))
  (import "neuronlab" "grad_backward" (func $backward (param i32 i32 i32) (result i32)))
  (import "neuronlab" "var_set_tensor" (func $set_tensor (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "exp")
  (data (i32.const 8) "mul")
  (data (i32.const 16) "\03\00\00\00\00\00\00\00")
  (data (i32.const 32) "\00\00\80\3f\00\00\00\40\00\00\40\40")
  (data (i32.const 48) "\00\00\80\3f\00\00\80\3f\00\00\80\3f")
  (data (i32.const 64) "w")
  (func $ok (param $status i32) (result i32)
    (if (i32.lt_s (local.get $status) (i32.const 0)) (then unreachable))
    (local.get $status))
  (func $vector (param $data i32) (result i32)
    (call $ok (call $create (i32.const 0) (i32.const 16) (i32.const 1) (local.get $data) (i32.const 12))))
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10004))
  (func (export "run")
    (local $w i32)
    (local.set $w (call $vector (i32.const 32)))
    (drop (call $ok (call $requires (local.get $w))))
    (i32.store (i32.const 128) (local.get $w))
    (drop (call $ok (call $call (call $ok (call $lookup (i32.const 0) (i32.const 3)))
      (i32.const 128) (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 136) (i32.const 1))))
    (i32.store (i32.const 140) (local.get $w))
    (drop (call $ok (call $call (call $ok (call $lookup (i32.const 8) (i32.const 3)))
      (i32.const 136) (i32.const 2) (i32.const 0) (i32.const 0) (i32.const 144) (i32.const 1))))
    (drop (call $ok (call $backward (i32.load (i32.const 144)) (call $vector (i32.const 48)) (i32.const 0))))
    (drop (call $ok (call $set_tensor (i32.const 64) (i32.const 1) (local.get $w))))))
"#;

/// The rows of an `%events` table whose kind column is `kind`.
fn rows_of_kind(table: &str, kind: &str) -> usize {
    table
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(kind))
        .count()
}

/// A session whose variables `x`, `n` and `v` are set.
fn session_with_vars() -> Session {
    let mut s = session();
    ok(&mut s, VARS_WAT);
    s
}

#[test]
fn wat_cells_run_and_stay_loaded_for_run() {
    let mut s = session();
    let text = ok(&mut s, HELLO_CELL);
    assert!(text.contains("sum ok"), "{text}");
    assert!(
        text.contains("loaded wat1: %run wat1.<export> [args] calls run()"),
        "{text}"
    );
    assert!(text.contains("ops on neuron:0"), "the summary: {text}");
    assert!(ok(&mut s, "%run wat1.run").contains("sum ok"));
    assert!(
        ok(&mut s, "%run run").contains("sum ok"),
        "the last module loaded"
    );
    assert_eq!(s.execution_count(), 3);
    fails(
        &mut s,
        concat!(
            "%%wat\n(module (memory (export \"memory\") 1)\n",
            "(func (export \"neuronlab_abi_version\") (result i32) i32.const 0x10000)\n",
            "(func (export \"run\") unreachable))"
        ),
        "GuestTrap",
    );
    fails(&mut s, "%%wat\n(module (oops", "LoadError");
    // Running the same %%wat text again (each `fails` checks the session with it) replaced
    // wat1: a notebook that re-runs a cell keeps one instance of it.
    let e = fails(&mut s, "%run wat1.nothing", "MagicError");
    assert!(e.contains("no module named 'wat1' is loaded"), "{e}");
    let names: Vec<&str> = s.loaded_modules().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names.len(),
        2,
        "the re-run cell once, and the cell that trapped: {names:?}"
    );
    fails(&mut s, "%run nothing", "MissingEntry");
    fails(&mut s, "%run nope.run", "MagicError");
    fails(&mut s, "%run", "MagicError");
}

#[test]
fn load_and_run_fixtures_and_survive_their_failures() {
    let mut s = session_with_vars();
    let text = ok(&mut s, &format!("%load {}", fixture("hello.wat")));
    assert!(text.contains("loaded hello"), "{text}");
    assert!(ok(&mut s, "%run hello.run").contains("sum ok"));
    let completion = s.complete("%run hel", 8);
    assert_eq!(completion.start, 5);
    assert_eq!(completion.matches[0].text, "hello.run");
    assert_eq!(completion.matches[0].detail, "()");
    ok(&mut s, &format!("%load {}", fixture("memory_bomb.wat")));
    let e = fails(&mut s, "%run memory_bomb.run", "ResourceLimit");
    assert!(e.contains("limit"), "{e}");
    fails(&mut s, "%load /no/such/module.wat", "LoadError");
    fails(&mut s, "%load", "MagicError");
    fails(
        &mut s,
        &format!("%load {}", fixture("unknown_import.wat")),
        "LinkError",
    );
    assert!(
        ok(&mut s, "%run hello.run").contains("sum ok"),
        "modules stay loaded"
    );
}

#[test]
fn an_interrupt_from_another_thread_stops_the_cell_and_keeps_the_session() {
    let mut s = session_with_vars();
    ok(&mut s, &format!("%load {}", fixture("infinite_loop.wat")));
    let interrupter = s.interrupter();
    let done = Arc::new(AtomicBool::new(false));
    let stopper = {
        let done = done.clone();
        std::thread::spawn(move || {
            // Again and again: an interrupt that comes before the cell starts is forgotten.
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
                interrupter.interrupt();
            }
        })
    };
    let ran = run(&mut s, "%run infinite_loop.run");
    done.store(true, Ordering::SeqCst);
    stopper.join().unwrap();
    assert_eq!(ran.outcome, Outcome::Interrupted, "{:?}", ran.outputs);
    assert_intact(&mut s);
    assert!(ok(&mut s, "%vars").contains("x"));
}

#[test]
fn a_long_run_shows_its_progress_and_clears_it_at_the_end() {
    let mut s = session_with_vars();
    ok(&mut s, &format!("%load {}", fixture("infinite_loop.wat")));
    let interrupter = s.interrupter();
    let mut reports = Vec::new();
    let outcome = s.execute("%run infinite_loop.run", &mut |o| {
        if let Output::Progress(p) = o {
            // The first report comes after two quiet seconds; then the cell is stopped.
            if !p.finished {
                interrupter.interrupt();
            }
            reports.push(p);
        }
    });
    assert_eq!(outcome, Outcome::Interrupted);
    let first = reports.first().expect("a progress report");
    assert!(
        first.text().starts_with("running cell [") && first.text().contains("]: 0 events · "),
        "{}",
        first.text()
    );
    assert!(first.elapsed >= Duration::from_secs(2), "{first:?}");
    let last = reports.last().unwrap();
    assert!(last.finished && last.transient, "{reports:?}");
    assert_eq!(last.terminal_text(false), None, "a log gets no line");
    assert_eq!(last.terminal_text(true).as_deref(), Some("\r\x1b[K"));
    assert_intact(&mut s);
}

#[test]
fn the_deadline_stops_a_runaway_cell() {
    let mut s = session_with(Duration::from_millis(300));
    ok(&mut s, &format!("%load {}", fixture("infinite_loop.wat")));
    let e = fails(&mut s, "%run infinite_loop.run", "DeadlineExceeded");
    assert!(e.contains("deadline") || e.contains("300"), "{e}");
}

#[test]
fn help_and_magic_mistakes() {
    let mut s = session();
    let text = ok(&mut s, "%help");
    for magic in ["%events", "%timeline", "%%wat", "%device"] {
        assert!(text.contains(magic), "{text}");
    }
    assert!(
        ok(&mut s, "%help events").starts_with("%events [kind] [forward|backward] [--last N]\n\n")
    );
    assert!(ok(&mut s, "%help %mem").starts_with("%mem"));
    fails(&mut s, "%help nope", "MagicError");
    let e = fails(&mut s, "%evnts", "MagicError");
    assert!(e.contains("did you mean %events, %explain?"), "{e}");
    let e = fails(&mut s, "%%vars\nx", "MagicError");
    assert!(e.contains("line magic"), "{e}");
    let e = fails(&mut s, "%wat", "MagicError");
    assert!(e.contains("cell magic"), "{e}");
    let e = fails(&mut s, "%time", "MagicError");
    assert!(e.contains("usage: %time"), "{e}");
    fails(&mut s, "let x = 1;\n%vars", "MagicError");
    // Several line magics run in order; the first failure stops the cell.
    let ran = run(&mut s, "%vars\n%mem x\n%help");
    assert_eq!(ran.outcome, Outcome::Error);
    assert!(!ran.text().contains("Cells are Rust"));
}

#[test]
fn events_shows_the_last_cell() {
    let mut s = session_with_vars();
    ok(&mut s, HELLO_CELL);
    let text = ok(&mut s, "%events");
    let header = text.lines().next().unwrap();
    for column in ["seq", "kind", "core", "name", "host", "modeled", "details"] {
        assert!(header.contains(column), "{text}");
    }
    assert!(
        text.contains(" add ") && text.contains("f32[3], f32[3] -> f32[3]"),
        "{text}"
    );
    assert!(text.contains("memory") && text.contains("alloc"), "{text}");
    // `%events` reads the last cell that published events: a cell of magics that only look,
    // like `%events` itself, does not count.
    assert_eq!(ok(&mut s, "%events"), text);
    ok(&mut s, HELLO_CELL);
    let ops = ok(&mut s, "%events op");
    assert_eq!(rows_of_kind(&ops, "op"), 1, "{ops}");
    assert_eq!(rows_of_kind(&ops, "memory"), 0, "{ops}");
    assert!(ops.contains("1 event of kind op in cell ["), "{ops}");
    ok(&mut s, HELLO_CELL);
    let last = ok(&mut s, "%events memory --last 2");
    assert!(
        last.contains("the last 2 of ") && last.contains(" events of kind memory"),
        "{last}"
    );
    assert_eq!(rows_of_kind(&last, "memory"), 2, "{last}");
    ok(&mut s, HELLO_CELL);
    let none = ok(&mut s, "%events collective");
    assert!(
        none.starts_with("cell [")
            && none.contains(
                "the last that published events, published no collective events; it published"
            ),
        "{none}"
    );
    // The table also comes as HTML.
    ok(&mut s, HELLO_CELL);
    let ran = run(&mut s, "%events --last=1");
    let html = ran.outputs.iter().find_map(|o| match o {
        Output::Display(b) => b.get("text/html").map(str::to_string),
        _ => None,
    });
    assert!(html.unwrap().contains("<table>"));
    for bad in [
        "%events bogus",
        "%events --last",
        "%events --last 0",
        "%events --last x",
        "%events op memory",
        "%events --first 2",
        "%events --last 1 --last 2",
    ] {
        let e = fails(&mut s, bad, "MagicError");
        assert!(
            e.contains("usage: %events [kind] [forward|backward] [--last N]"),
            "{bad}: {e}"
        );
    }
    let e = fails(&mut s, "%events bogus", "MagicError");
    assert!(e.contains("the kinds are op, memory, compile"), "{e}");
}

#[test]
fn a_backward_shows_in_events_timeline_trace_and_mem() {
    let mut s = session();
    ok(&mut s, BACKWARD_WAT);
    let row = |table: &str, seq_name: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some(seq_name))
            .unwrap_or_else(|| panic!("no {seq_name} row: {table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let ops = ok(&mut s, "%events op");
    assert!(ops.lines().next().unwrap().contains(" phase "), "{ops}");
    // Forward ran exp and mul; backward its own muls, the sum of w's two gradients, and more.
    assert_eq!(
        row(&ops, "exp")[1..5],
        ["op", "forward", "neuron:0", "exp"],
        "{ops}"
    );
    let backward = ok(&mut s, "%events backward");
    let rows: Vec<&str> = backward.lines().filter(|l| l.contains(" op ")).collect();
    assert!(rows.len() >= 4, "{backward}");
    assert_eq!(row(&backward, "add")[2], "backward", "{backward}");
    assert!(
        rows.iter()
            .all(|l| l.split_whitespace().nth(2) == Some("backward")),
        "{backward}"
    );
    assert!(
        !backward.contains(" exp "),
        "exp ran forward only: {backward}"
    );
    assert!(
        backward.contains(&format!("{} backward ops in cell [1]", rows.len())),
        "{backward}"
    );
    assert_eq!(ok(&mut s, "%events op backward"), backward);
    let forward = ok(&mut s, "%events forward --last 1");
    assert!(
        forward.contains("the last 1 of 2 forward ops in cell [1]"),
        "{forward}"
    );
    let e = fails(&mut s, "%events memory backward", "MagicError");
    assert!(e.contains("only op events have a phase"), "{e}");
    fails(&mut s, "%events forward backward", "MagicError");

    let timeline = ok(&mut s, "%timeline 1");
    assert!(timeline.contains("\nneuron:0          |"), "{timeline}");
    assert!(timeline.contains("\nneuron:0 backward |"), "{timeline}");
    assert!(
        timeline.contains("  neuron:N backward: the ops backward ran on that core"),
        "{timeline}"
    );

    let file = scratch("trace").join("backward.json");
    ok(&mut s, &format!("%trace save {}", file.display()));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let cats = |phase: &str| -> Vec<String> {
        json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["args"]["phase"] == phase)
            .map(|e| e["cat"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(cats("backward").iter().all(|c| c == "op,backward"));
    assert!(!cats("backward").is_empty() && cats("forward").iter().all(|c| c == "op"));

    // exp's output and w are saved (24 B) until backward frees them; w keeps its 12 B
    // gradient as a variable.
    let mem = ok(&mut s, "%mem");
    let (hbm, autograd) = mem
        .split_once("\n\nautograd (part of the HBM in use): ")
        .unwrap_or_else(|| panic!("{mem}"));
    assert!(hbm.contains("host: "), "{mem}");
    let lines: Vec<Vec<&str>> = autograd
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[1][..],
        [
            "core",
            "saved",
            "saved",
            "peak",
            "saved",
            "tensors",
            "gradients"
        ]
    );
    assert_eq!(
        lines[2][..],
        ["neuron:0", "0", "B", "24", "B", "0", "12", "B"],
        "{mem}"
    );
    assert_eq!(lines.len(), 3, "only the core that trained: {mem}");
    let ran = run(&mut s, "%mem");
    let html = ran.outputs.iter().find_map(|o| match o {
        Output::Display(b) => b.get("text/html").map(str::to_string),
        _ => None,
    });
    let html = html.unwrap();
    assert!(
        html.contains("<p><b>autograd (part of the HBM in use): "),
        "{html}"
    );
    assert!(
        html.contains("<p><b>at each core&#39;s peak, by role")
            || html.contains("<p><b>at each core's peak, by role"),
        "{html}"
    );
    assert_eq!(html.matches("<table>").count(), 3, "{html}");
    // At the peak: w (a parameter), exp's output saved for backward, and w's gradient.
    let roles = hbm
        .split_once("at each core's peak, by role (what the peak held)\n")
        .unwrap_or_else(|| panic!("{mem}"))
        .1;
    let header: Vec<&str> = roles
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .filter(|c| !c.trim().is_empty())
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        [
            "core",
            "parameters",
            "gradients",
            "optimizer state",
            "activations",
            "collective buffers",
            "other"
        ],
        "{mem}"
    );
    let row: Vec<&str> = roles.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row[..9],
        ["neuron:0", "12", "B", "12", "B", "0", "B", "12", "B"],
        "{mem}"
    );

    // Without the variable, and with the peaks reset, nothing is left to show.
    ok(&mut s, "%reset");
    ok(&mut s, HELLO_CELL);
    assert!(!ok(&mut s, "%mem").contains("autograd"));
}

#[test]
fn recompiles_explain_and_timeline_read_compiles() {
    let mut s = session();
    let none = ok(&mut s, "%recompiles");
    assert!(
        none.starts_with("nothing has compiled in this session"),
        "{none}"
    );
    let none = ok(&mut s, "%explain");
    assert_eq!(
        none,
        "the last cell compiled no functions; neuronlab::compile(...) in a cell makes one\n"
    );
    ok(&mut s, COMPILE_WAT);
    let table = ok(&mut s, "%recompiles");
    assert!(
        table.contains("function") && table.contains("reason"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains(" f ") && l.contains("first")),
        "{table}"
    );
    let explained = ok(&mut s, "%explain");
    assert!(
        explained.starts_with("compiled function 'f'"),
        "{explained}"
    );
    assert_eq!(ok(&mut s, "%explain f"), explained);
    // A failure runs HELLO_CELL next (see `fails`), which compiles nothing.
    let e = fails(&mut s, "%explain g", "MagicError");
    assert!(
        e.contains("the last cell compiled no function 'g'; it compiled f"),
        "{e}"
    );
    assert!(ok(&mut s, "%explain").starts_with("the last cell compiled no functions"));
    fails(&mut s, "%explain f g", "MagicError");
    fails(&mut s, "%recompiles now", "MagicError");

    ok(&mut s, COMPILE_WAT);
    let compiles = ok(&mut s, "%events compile");
    assert!(
        compiles.contains(" f ") && compiles.contains("cache"),
        "{compiles}"
    );

    ok(&mut s, HELLO_CELL);
    let timeline = ok(&mut s, "%timeline");
    assert!(
        timeline.starts_with("cell [")
            && timeline.contains("], the last that did device work: modeled device time "),
        "{timeline}"
    );
    assert!(timeline.contains("neuron:0 |A"), "{timeline}");
    assert!(timeline.contains("  A add: 1 × "), "{timeline}");
    // Magic cells do no device work, so `%timeline` again draws the same cell.
    assert_eq!(ok(&mut s, "%timeline"), timeline);
    // Cell 1 made tensors from data (memory events) but ran no op.
    let quiet = ok(&mut s, "%timeline 1");
    assert!(quiet.starts_with("cell [1] did no device work"), "{quiet}");
    let all = ok(&mut s, "%timeline all");
    assert!(all.starts_with("every cell: modeled device time "), "{all}");
    fails(&mut s, "%timeline svg", "MagicError");
}

/// A cell that shows a 2×3 f32 tensor [[1, 2, 3], [4, 5, 6]] with `tensor_display`.
const DISPLAY_WAT: &str = r#"%%wat
(module
  (import "neuronlab" "tensor_create" (func $create (param i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "tensor_display" (func $display (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\02\00\00\00\00\00\00\00\03\00\00\00\00\00\00\00")
  (data (i32.const 16) "\00\00\80\3f\00\00\00\40\00\00\40\40\00\00\80\40\00\00\a0\40\00\00\c0\40")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10001))
  (func (export "run")
    (drop (call $display
      (call $create (i32.const 0) (i32.const 0) (i32.const 2) (i32.const 16) (i32.const 24))))))
"#;

#[test]
fn rich_outputs_carry_html_and_svg() {
    let mut s = session();
    let ran = run(&mut s, DISPLAY_WAT);
    assert_eq!(ran.outcome, Outcome::Ok, "{:?}", ran.outputs);
    let shown = ran
        .outputs
        .iter()
        .find_map(|o| match o {
            Output::Display(b) => Some(b.clone()),
            _ => None,
        })
        .expect("a display");
    assert!(
        shown.plain().starts_with("tensor([[1., 2., 3.]"),
        "{shown:?}"
    );
    let html = shown.get("text/html").expect("html");
    assert!(
        html.contains("tensor f32[2, 3] · neuron:0 · 24 B"),
        "{html}"
    );
    assert!(
        html.contains("min 1.0000 · max 6.0000 · mean 3.5000 · std 1.7078"),
        "{html}"
    );
    assert!(
        html.contains("<table") && html.contains(">6.</td>"),
        "{html}"
    );

    // The summary counts the compiles and names the first recompile with its reason.
    let ran = run(&mut s, COMPILE_WAT);
    let summary = ran
        .outputs
        .iter()
        .find_map(|o| match o {
            Output::Summary(b) => Some(b.clone()),
            _ => None,
        })
        .expect("a summary");
    let html = summary.get("text/html").expect("html");
    assert!(
        html.contains(">compiles</span> 2, 1 of them recompiles · first recompile: f: "),
        "{html}"
    );
    assert!(!summary.plain().contains('<'), "{summary:?}");

    ok(&mut s, HELLO_CELL);
    let ran = run(&mut s, "%timeline");
    let Some(Output::Display(timeline)) = ran.outputs.first() else {
        panic!("{:?}", ran.outputs)
    };
    assert!(
        timeline
            .plain()
            .contains("the last that did device work: modeled device time "),
        "{}",
        timeline.plain()
    );
    let svg = timeline.get("image/svg+xml").expect("svg");
    assert!(svg.starts_with("<svg ") && svg.contains("modeled device time (µs)"));
}

#[test]
fn vars_and_mem_show_what_the_session_holds() {
    let mut s = session();
    assert!(ok(&mut s, "%vars").starts_with("no variables yet"));
    ok(&mut s, VARS_WAT);
    let vars = ok(&mut s, "%vars");
    let row = |name: &str| {
        vars.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name}: {vars}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(row("x"), "x Tensor [3] f32 neuron:0 12 B");
    assert_eq!(row("n"), "n i64 42");
    assert!(
        row("v").starts_with("v Vec<i32> (stays in its cell: only tensors"),
        "{vars}"
    );
    assert!(vars.contains("3 variables, 12 B in tensors"), "{vars}");
    fails(&mut s, "%vars x", "MagicError");

    let mem = ok(&mut s, "%mem");
    assert!(mem.lines().next().unwrap().contains("in use"), "{mem}");
    assert!(
        mem.contains("neuron:0") && !mem.contains("neuron:1"),
        "{mem}"
    );
    assert!(
        mem.contains("host: ") && mem.contains("of the 4.00 GiB host memory cap"),
        "{mem}"
    );
    fails(&mut s, "%mem all", "MagicError");
    let fresh = ok(&mut session(), "%mem");
    assert!(
        fresh.starts_with("no core has held a tensor yet"),
        "{fresh}"
    );
}

#[test]
fn trace_saves_the_sessions_events() {
    let mut s = session_with_vars();
    ok(&mut s, HELLO_CELL);
    let file = scratch("trace").join("session.json");
    let text = ok(&mut s, &format!("%trace save {}", file.display()));
    assert!(
        text.starts_with("wrote ") && text.contains(&file.display().to_string()),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "add"));
    for bad in ["%trace", "%trace save", "%trace load x.json"] {
        let e = fails(&mut s, bad, "MagicError");
        assert!(e.contains("usage: %trace save FILE.json"), "{bad}: {e}");
    }
    let e = fails(&mut s, "%trace save /no/such/folder/t.json", "MagicError");
    assert!(e.contains("cannot write /no/such/folder/t.json"), "{e}");
}

#[test]
fn cache_lists_and_clears_the_disk_caches() {
    let mut s = session_with_vars();
    let ls = ok(&mut s, "%cache");
    assert!(
        ls.contains("compiled WebAssembly modules") && ls.contains("compiled programs"),
        "{ls}"
    );
    assert!(
        ls.contains(&scratch("cache").join("modules").display().to_string()),
        "{ls}"
    );
    assert!(ok(&mut s, "%cache ls").contains("compiled programs"));
    let build = scratch("cache").join("sessions").join("cell.rs");
    std::fs::create_dir_all(build.parent().unwrap()).unwrap();
    std::fs::write(&build, "// a cell").unwrap();
    let cleared = ok(&mut s, "%cache clear");
    assert!(
        cleared.starts_with("removed ") && cleared.contains("compiled WebAssembly modules"),
        "{cleared}"
    );
    assert!(
        cleared.contains("the session's cell builds stay"),
        "{cleared}"
    );
    assert!(build.exists());
    let e = fails(&mut s, "%cache purge", "MagicError");
    assert!(
        e.contains("'purge' is not a command: use ls or clear"),
        "{e}"
    );
}

#[test]
fn reset_forgets_everything() {
    let mut s = session_with_vars();
    ok(&mut s, &format!("%load {}", fixture("hello.wat")));
    fails(&mut s, "%reset now", "MagicError");
    let text = ok(&mut s, "%reset");
    assert!(
        text.starts_with("reset: forgot 3 variables, 0 kept items, 3 loaded modules and "),
        "{text}"
    );
    assert!(s.vars().is_empty());
    assert_eq!(s.loaded_modules().count(), 0);
    assert!(s.runtime().bus().events().is_empty());
    assert_eq!(s.runtime().memory().stats(CoreId(0)).unwrap().in_use, 0);
    let e = fails(&mut s, "%run hello.run", "MagicError");
    assert!(e.contains("no module"), "{e}");
    assert!(ok(&mut s, "%vars").starts_with("no variables yet"));
}

#[test]
fn device_shows_and_switches_the_instance() {
    let mut s = session_with_vars();
    let report = ok(&mut s, "%device");
    assert!(
        report.starts_with("trn2.3xlarge: 1 x Trainium2"),
        "{report}"
    );
    assert!(report.contains("per logical core"), "{report}");
    let e = fails(&mut s, "%device trn9.huge", "MagicError");
    assert!(
        e.contains("unknown instance 'trn9.huge': expected one of trn2.48xlarge"),
        "{e}"
    );
    let e = fails(&mut s, "%device trn2.3xlarge --lnc 7", "MagicError");
    assert!(
        e.contains("LNC=7 is not valid for trn2.3xlarge: use 1 or 2"),
        "{e}"
    );
    let e = fails(&mut s, "%device --lnc x", "MagicError");
    assert!(e.contains("--lnc takes a number"), "{e}");
    fails(&mut s, "%device trn1.2xlarge trn2.3xlarge", "MagicError");
    fails(&mut s, "%device --fast", "MagicError");
    assert!(ok(&mut s, "%device trn2.3xlarge").starts_with("already trn2.3xlarge"));
    assert_eq!(s.vars().len(), 3, "nothing changed");

    let text = ok(&mut s, "%device trn1.2xlarge");
    assert!(text.starts_with("switched to trn1.2xlarge"), "{text}");
    assert!(
        text.contains("dropped 3 variables and ") && text.contains(" loaded modules"),
        "{text}"
    );
    assert!(s.vars().is_empty());
    assert_eq!(s.runtime().topology().instance_name(), "trn1.2xlarge");
    assert!(
        ok(&mut s, HELLO_CELL).contains("sum ok"),
        "cells run on the new device"
    );
    let text = ok(&mut s, "%device --lnc 1");
    assert!(text.starts_with("already trn1.2xlarge"), "{text}");
    let text = ok(&mut s, "%device trn2.48xlarge --lnc=1");
    assert!(text.contains("LNC=1: 128 logical cores"), "{text}");
}

#[test]
fn spmd_runs_a_module_as_ranks() {
    let mut s = session_with_vars();
    let text = ok(&mut s, &format!("%spmd 2 {}", fixture("hello.wat")));
    assert!(text.contains("sum ok"), "{text}");
    fails(&mut s, "%spmd", "MagicError");
    fails(&mut s, "%spmd zero x.wasm", "MagicError");
    fails(&mut s, "%spmd 2", "MagicError");
    fails(&mut s, "%spmd 2 /no/such.wasm", "LoadError");
    // What follows `--` reaches every rank's guest as its arguments.
    let text = ok(
        &mut s,
        &format!(
            "%spmd 2 {} --all-ranks -- --steps 7 alpha",
            fixture("print_args.wat")
        ),
    );
    // Both ranks print the same arguments: one line, labelled with both.
    let line = text
        .lines()
        .find(|l| l.starts_with("[ranks 0-1]: "))
        .unwrap_or_default();
    assert!(line.contains("--steps") && line.contains("alpha"), "{text}");
}

/// Prints the first 64 bytes of the granted file `grant/msg.txt` (its name is `$DIR` in the
/// text, replaced with the grant's name).
const READ_GRANTED_WAT: &str = r#"%%wat
(module
  (import "neuronlab" "fs_read" (func $read (param i32 i32 i64 i32 i32) (result i32)))
  (import "neuronlab" "print" (func $print (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "$DIR/msg.txt")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10005))
  (func (export "run")
    (local $n i32)
    (local.set $n (call $read (i32.const 0) (i32.const $LEN) (i64.const 0) (i32.const 256) (i32.const 64)))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then unreachable))
    (drop (call $print (i32.const 1) (i32.const 256) (local.get $n)))))
"#;

#[test]
fn dir_grants_folders_that_guests_then_read() {
    let mut s = session();
    let folder = scratch("granted-notes");
    std::fs::write(folder.join("msg.txt"), "from the grant\n").unwrap();
    let cell = READ_GRANTED_WAT
        .replace("$DIR", "granted-notes")
        .replace("$LEN", &"granted-notes/msg.txt".len().to_string());
    let ran = run(&mut s, &cell);
    assert_eq!(ran.outcome, Outcome::Error, "nothing is granted yet");
    assert!(ok(&mut s, "%dir").contains("no folder is granted"));

    let text = ok(&mut s, &format!("%dir {}", folder.display()));
    assert!(text.contains("as `granted-notes` (read-only)"), "{text}");
    // The module's `loaded` line comes first, then what its `run` printed.
    let shown = ok(&mut s, &cell);
    assert!(
        shown.starts_with("loaded ") && shown.ends_with("\nfrom the grant\n"),
        "{shown}"
    );
    let listing = ok(&mut s, "%dir");
    assert!(
        listing.contains("granted-notes") && listing.contains("read-only"),
        "{listing}"
    );
    let text = ok(&mut s, &format!("%dir {} --rw", folder.display()));
    assert!(text.contains("(read-write)"), "{text}");

    let e = fails(&mut s, "%dir /no/such/folder", "MagicError");
    assert!(e.contains("give an existing folder"), "{e}");
    let e = fails(&mut s, "%dir --bogus", "MagicError");
    assert!(e.contains("unknown option --bogus"), "{e}");
    let e = fails(&mut s, "%dir --rw", "MagicError");
    assert!(e.contains("give the folder"), "{e}");
}

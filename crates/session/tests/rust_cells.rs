//! Rust cells end to end through the session engine: each cell is built for wasm32 with the
//! real toolchain and run sandboxed. Variables persist, items are kept and replaced, the
//! final expression is the result, output streams, and every failure (a compile error, a
//! panic, a runaway loop, a memory bomb, a missing variable) is reported against the user's
//! own lines while the session and its variables survive.
//!
//! Needs the wasm32 toolchain (scripts/setup installs it). The first cell of a machine builds
//! the standard library and the SDK, about a minute; the build is shared by later runs.

use std::time::Duration;

use neuronlab_core::device::topology::Topology;
use neuronlab_core::events::{CacheSource, EventKind};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_sandbox::var_store::Var;
use neuronlab_sandbox::Limits;
use neuronlab_session::{Outcome, Output, Session, SessionOptions};

fn session() -> (Session, tempdir::Dir) {
    session_with_programs(None)
}

/// A session whose compiled programs are also kept on disk, in `programs`.
fn session_with_programs(programs: Option<&std::path::Path>) -> (Session, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let s = Session::new(SessionOptions {
        runtime: RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 4 << 30,
        },
        limits: Limits {
            deadline: Duration::from_secs(120),
            memory_bytes: 256 << 20,
            ..Limits::default()
        },
        work_dir: Some(dir.path().to_path_buf()),
        world: Default::default(),
        program_cache: programs.map(|p| p.to_path_buf()),
        logs: Default::default(),
        sdk_dir: None,
    })
    .unwrap();
    (s, dir)
}

/// A tiny temporary folder, removed on drop (no extra crate for it).
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("neuronlab-cells-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Runs a cell and returns its outcome and outputs.
fn run(s: &mut Session, code: &str) -> (Outcome, Vec<Output>) {
    let mut outputs = Vec::new();
    let outcome = s.execute(code, &mut |o| outputs.push(o));
    (outcome, outputs)
}

fn result(outputs: &[Output]) -> Option<String> {
    outputs.iter().find_map(|o| match o {
        Output::Result(b) => Some(b.plain().to_string()),
        _ => None,
    })
}

fn stream(outputs: &[Output], stderr: bool) -> String {
    outputs
        .iter()
        .filter_map(|o| match (o, stderr) {
            (Output::Stdout(t), false) | (Output::Stderr(t), true) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn error(outputs: &[Output]) -> (String, String, String) {
    outputs
        .iter()
        .find_map(|o| match o {
            Output::Error(e) => Some((e.ename.clone(), e.evalue.clone(), e.traceback.join("\n"))),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no error in {outputs:?}"))
}

/// Runs a cell that must succeed.
fn ok(s: &mut Session, code: &str) -> Vec<Output> {
    let (outcome, outputs) = run(s, code);
    assert_eq!(outcome, Outcome::Ok, "{code}: {outputs:?}");
    outputs
}

#[test]
fn variables_items_results_and_output_across_cells() {
    let (mut s, _dir) = session();
    let out = ok(&mut s, "let x = randn_with(&[2, 3], RandnOptions::new().seed(7))?;\nlet n = 41;\nlet name = \"trn2\";\nlet v = vec![1, 2, 3];");
    assert_eq!(
        result(&out),
        None,
        "a cell ending in a statement shows nothing"
    );
    assert!(matches!(s.vars().get("x"), Some(Var::Tensor(t)) if t.shape() == [2, 3]));
    assert!(
        matches!(s.vars().get("n"), Some(Var::Value { ty, text }) if ty == "i32" && text == "41")
    );
    assert!(
        matches!(s.vars().get("v"), Some(Var::Local { .. })),
        "a Vec stays in its cell"
    );

    // The tensor and the values come back, with their types.
    assert_eq!(result(&ok(&mut s, "n + 1")).as_deref(), Some("42"));
    assert_eq!(
        result(&ok(&mut s, "format!(\"{name}!\")")).as_deref(),
        Some("trn2!")
    );
    let shown = result(&ok(&mut s, "x")).unwrap();
    assert!(
        shown.starts_with("tensor([[") && shown.contains("device=neuron:0"),
        "{shown}"
    );

    // A tensor reassigned in a later cell is the new one from then on.
    ok(&mut s, "let x = x.sum()?;");
    assert!(matches!(s.vars().get("x"), Some(Var::Tensor(t)) if t.shape().is_empty()));

    // Items are kept and replaced by a redefinition.
    let out = ok(&mut s, "/// Twice.\nfn scale(v: i32) -> i32 { v * 2 }");
    assert!(out.iter().all(|o| !matches!(o, Output::Error(_))));
    assert_eq!(result(&ok(&mut s, "scale(n)")).as_deref(), Some("82"));
    ok(&mut s, "fn scale(v: i32) -> i32 { v * 3 }");
    assert_eq!(result(&ok(&mut s, "scale(n)")).as_deref(), Some("123"));
    assert_eq!(s.kept_items().len(), 1);

    // A last statement written without its semicolon still runs.
    assert_eq!(
        stream(&ok(&mut s, "println!(\"no semicolon\")"), false),
        "no semicolon\n"
    );

    // println!, eprintln! and dbg! write to the cell's streams, dbg! with the cell's line.
    let out = ok(
        &mut s,
        "println!(\"hello {}\", n);\neprintln!(\"careful\");\nlet d = dbg!(n * 2);",
    );
    assert_eq!(stream(&out, false), "hello 41\n");
    let err = stream(&out, true);
    assert!(err.contains("careful\n"), "{err}");
    assert!(
        err.contains(&format!("[cell[{}]:3:9] n * 2 = 82", s.execution_count())),
        "{err}"
    );
}

#[test]
fn failures_are_reported_against_the_users_lines_and_the_session_survives() {
    let (mut s, _dir) = session();
    ok(&mut s, "let keep = 5;");

    // A compile error points at the user's line and column and quotes it.
    let (outcome, out) = run(&mut s, "let a = 1;\nlet y: i64 = \"a\";");
    assert_eq!(outcome, Outcome::Error);
    let (ename, _, report) = error(&out);
    assert_eq!(ename, "CompileError");
    assert!(
        report.contains("error[E0308]: mismatched types"),
        "{report}"
    );
    assert!(
        report.contains(&format!("--> cell [{}], line 2:14", s.execution_count())),
        "{report}"
    );
    assert!(report.contains("2 | let y: i64 = \"a\";"), "{report}");

    // A variable that does not exist.
    let (_, out) = run(&mut s, "missing + 1");
    let (ename, evalue, _) = error(&out);
    assert_eq!(ename, "CompileError");
    assert!(evalue.contains("cannot find value `missing`"), "{evalue}");

    // A panic: the message and the cell's line.
    let (outcome, out) = run(&mut s, "let z = 1;\npanic!(\"boom {}\", z);");
    assert_eq!(outcome, Outcome::Error);
    let (ename, evalue, traceback) = error(&out);
    assert_eq!(ename, "Panic");
    assert_eq!(evalue, "boom 1");
    let at = format!("at cell[{}]:2:1", s.execution_count());
    assert!(traceback.contains(&at), "{traceback}");
    assert_eq!(
        out.iter()
            .filter(|o| matches!(o, Output::Stderr(_) | Output::Error(_)))
            .count(),
        1,
        "one output says why: {out:?}"
    );

    // A memory bomb meets the guest's memory limit.
    let (_, out) = run(&mut s, "let v = vec![1u8; 1 << 30];\nv.len()");
    let (ename, _, _) = error(&out);
    assert!(ename == "ResourceLimit" || ename == "GuestTrap", "{ename}");

    // A syntax error says where.
    let (_, out) = run(&mut s, "let = 3;");
    assert_eq!(error(&out).0, "SyntaxError");

    // After all that, the session's variable is intact and the next cell runs.
    assert_eq!(result(&ok(&mut s, "keep * 2")).as_deref(), Some("10"));
}

#[test]
fn a_moved_binding_does_not_stop_the_cell() {
    let (mut s, _dir) = session();
    ok(&mut s, "let t = zeros(&[2])?;");
    // `t` is moved into `u`; the cell still builds and `u` persists.
    ok(&mut s, "let u = t;\nlet k = 1;");
    assert!(matches!(s.vars().get("u"), Some(Var::Tensor(_))));
    assert_eq!(result(&ok(&mut s, "k + 1")).as_deref(), Some("2"));
}

#[test]
fn an_interrupt_stops_a_runaway_cell_and_keeps_the_variables() {
    let (mut s, _dir) = session();
    ok(&mut s, "let w = ones(&[3])?;");
    let interrupter = s.interrupter();
    let (outcome, out) = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(1500));
            interrupter.interrupt();
        });
        run(
            &mut s,
            "let mut i: u64 = 0;\nloop { i = i.wrapping_add(1); }",
        )
    });
    assert_eq!(outcome, Outcome::Interrupted, "{out:?}");
    assert_eq!(error(&out).0, "Interrupted");
    let shown = result(&ok(&mut s, "w")).unwrap();
    assert!(shown.contains("[1., 1., 1.]"), "{shown}");
}

#[test]
fn a_collective_inside_a_compiled_training_step_is_a_clear_error() {
    let (mut s, _dir) = session();
    ok(&mut s, "let w = ones(&[4])?.requires_grad()?;");
    // FSDP's all-gather of the (one-rank) shard inside a compiled step with backward.
    let (outcome, outputs) = run(
        &mut s,
        "let step = compile(\"step\", |x: &[Tensor]| {\n    \
         let whole = dist::region::unshard(&w, 0, &Group::world())?;\n    \
         let l = whole.mul(&x[0])?.sum()?;\n    \
         l.backward()?;\n    \
         Ok(vec![l.detach()?])\n})?;\n\
         step.call1(&[&ones(&[4])?])?",
    );
    assert_ne!(outcome, Outcome::Ok, "{outputs:?}");
    let (ename, evalue, _) = error(&outputs);
    assert_eq!(ename, "GradError", "{evalue}");
    assert!(
        evalue.contains("reached a tensor that a collective made during the call")
            && evalue.contains("run the step without compile"),
        "{evalue}"
    );
    // The same step run eagerly works, and `w` survived.
    let out = ok(
        &mut s,
        "let whole = dist::region::unshard(&w, 0, &Group::world())?;\n\
         whole.mul(&ones(&[4])?)?.sum()?.backward()?;\n\
         w.grad()?.unwrap().to_vec::<f32>()?",
    );
    assert_eq!(
        result(&out).as_deref(),
        Some("[1.0, 1.0, 1.0, 1.0]"),
        "{out:?}"
    );
}

#[test]
fn a_cell_runs_as_ranks_and_rank_0_keeps_its_bindings() {
    let (mut s, _dir) = session();
    let out = ok(
        &mut s,
        "%%spmd 4\nlet r = dist::rank() as i64;\nlet total = dist::all_reduce(&ones(&[2])?, ReduceOp::Sum, &Group::world())?;\nprintln!(\"rank {r}: {:?}\", total.to_vec::<f32>()?);",
    );
    // Only rank 0 prints, prefixed as torchrun does.
    assert_eq!(stream(&out, false), "[rank0]: rank 0: [4.0, 4.0]\n");
    assert!(matches!(s.vars().get("r"), Some(Var::Value { text, .. }) if text == "0"));
    assert!(
        matches!(s.vars().get("total"), Some(Var::Tensor(t)) if t.to_vec::<f32>() == [4.0, 4.0])
    );
}

#[test]
fn plots_display_ids_and_clear_output_reach_the_front_end() {
    let (mut s, _dir) = session();
    let outputs = ok(
        &mut s,
        "plot::line(\"compiles per step\")\n\
             .x_axis(\"step\", \"\")\n\
             .y_axis(\"host time\", \"ms\")\n\
             .series(\"growing\", &[1, 2, 3, 4])\n\
             .show()?;\n\
         plot::bar(\"time\").categories(&[\"a\", \"b\"]).series(\"s\", &[1.5, 2.0]).show()?;\n\
         plot::heatmap(\"h\").tensor(&arange(6.0)?.reshape(&[2, 3])?)?",
    );
    let bundles: Vec<_> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::Display(b) | Output::Result(b) => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(bundles.len(), 3, "{outputs:?}");
    let svg = bundles[0].get("image/svg+xml").expect("an SVG");
    for label in ["compiles per step", "step", "host time (ms)", "growing"] {
        assert!(svg.contains(label), "no {label:?} in the SVG");
    }
    assert!(bundles[0]
        .plain()
        .starts_with("line plot 'compiles per step'"));
    assert!(
        bundles[1].plain().contains("a  ██"),
        "{}",
        bundles[1].plain()
    );
    // A plot as the final expression is the cell's result.
    let result = result(&outputs).expect("a result");
    assert!(result.contains("2 x 3 values from 0 to 5"), "{result}");

    let outputs = ok(
        &mut s,
        "let progress = DisplayHandle::new(\"progress\");\n\
         progress.show(\"step 0\")?;\n\
         for step in 1..3 { progress.update(&format!(\"step {step}\"))?; }\n\
         clear_output(true)?;\n\
         neuronlab::println!(\"done\");",
    );
    let shown: Vec<(String, String, bool)> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::DisplayWithId { id, bundle, update } => {
                Some((id.clone(), bundle.plain().to_string(), *update))
            }
            _ => None,
        })
        .collect();
    let want = |id: &str, text: &str, update| (id.to_string(), text.to_string(), update);
    assert_eq!(
        shown,
        [
            want("progress", "step 0", false),
            want("progress", "step 1", true),
            want("progress", "step 2", true)
        ]
    );
    let clear = outputs
        .iter()
        .position(|o| *o == Output::ClearOutput { wait: true });
    let done = outputs
        .iter()
        .position(|o| *o == Output::Stdout("done\n".into()));
    assert!(clear.is_some() && clear < done, "{outputs:?}");

    // A plot the host cannot draw is the guest's error, which says what to fix.
    let (outcome, outputs) = run(
        &mut s,
        "plot::bar(\"bad\").categories(&[\"a\"]).series(\"s\", &[1.0, 2.0]).show()?;",
    );
    assert_eq!(outcome, Outcome::Error);
    let (_, evalue, _) = error(&outputs);
    assert!(
        evalue.contains("bar plot 'bad': series 's' has 2 values but there are 1 categories"),
        "{evalue}"
    );
    // An empty display id is refused the same way.
    let (outcome, outputs) = run(&mut s, "DisplayHandle::new(\"\").show(\"x\")?;");
    assert_eq!(outcome, Outcome::Error);
    assert!(
        error(&outputs).1.contains("display id must be"),
        "{outputs:?}"
    );
}

/// Where each compile of the cells found its program: fresh, from memory or from disk.
fn compile_sources(s: &Session, since: u64) -> Vec<CacheSource> {
    s.runtime()
        .bus()
        .since(since)
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Compile(c) => Some(c.cache),
            _ => None,
        })
        .collect()
}

#[test]
fn a_second_session_loads_a_compiled_function_from_the_disk_cache() {
    let programs = tempdir::Dir::new();
    let define = "fn mlp(x: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> {\n    \
                  Ok(vec![x[0].matmul(&x[1])?.gelu()?])\n}";
    let call = "let mlp = compile(\"mlp\", mlp)?;\n\
                let y = mlp.call1(&[&ones(&[8, 64])?, &full(&[64, 32], 0.5)?])?;\n\
                y.sum()?.item::<f32>()?";
    let mut values = Vec::new();
    let mut sources = Vec::new();
    for _ in 0..2 {
        let (mut s, _work) = session_with_programs(Some(programs.path()));
        let since = s.runtime().bus().next_seq();
        ok(&mut s, define);
        values.push(result(&ok(&mut s, call)));
        sources.push(compile_sources(&s, since));
    }
    assert_eq!(values[0], values[1], "the loaded program computes the same");
    assert!(values[0].is_some());
    assert_eq!(
        sources[0],
        [CacheSource::Miss],
        "the first session compiles"
    );
    assert_eq!(
        sources[1],
        [CacheSource::Disk],
        "the second session, a new process's worth of state, loads it from disk"
    );
}

/// The live rustc processes working in `dir` (a session's cell crate), from `/proc`.
fn rustc_processes_in(dir: &std::path::Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid| {
            // A zombie has no cwd any more, so it does not count.
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir)
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("rustc"))
        })
        .collect();
    pids.sort();
    pids
}

#[test]
fn a_changed_cell_is_built_by_a_rustc_started_ahead_and_none_outlives_the_session() {
    let (mut s, dir) = session();
    ok(&mut s, "let n = 40;");
    let waiting = rustc_processes_in(dir.path());
    assert_eq!(
        waiting.len(),
        1,
        "after a build, one rustc waits for the next cell"
    );
    assert_eq!(result(&ok(&mut s, "n + 2")).as_deref(), Some("42"));
    let next = rustc_processes_in(dir.path());
    assert_eq!(
        next.len(),
        1,
        "the cell used the waiting rustc and started another"
    );
    assert_ne!(next, waiting);

    // A compile error is reported from the waiting rustc as from any other.
    let (outcome, outputs) = run(&mut s, "n + \"two\"");
    assert_eq!(outcome, Outcome::Error);
    let (ename, _, traceback) = error(&outputs);
    assert_eq!(ename, "CompileError");
    assert!(traceback.contains("n + \"two\""), "{traceback}");

    // A waiting rustc killed from outside is replaced, and the cell still builds.
    for pid in rustc_processes_in(dir.path()) {
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
    }
    assert_eq!(result(&ok(&mut s, "n + 3")).as_deref(), Some("43"));

    drop(s);
    assert_eq!(
        rustc_processes_in(dir.path()),
        Vec::<u32>::new(),
        "the session stops its waiting rustc"
    );
}

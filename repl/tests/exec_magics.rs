//! `neuronlab exec --keep-going` over files of cells that use every magic of
//! [`MAGICS`](neuronlab_session::magics::MAGICS), with good and bad arguments, and over
//! Rust cells that fail in every way a cell can: it does not compile, refers to a variable that
//! does not exist, panics, traps, exhausts its memory, loops until the deadline, or is stopped
//! by SIGINT. Each failure must give a clear message under its own cell's header, and the next
//! cell must run with the session's tensor `x` and number `n` intact.
//!
//! The binary's stdout and stderr go to one file: the renderer flushes stdout before it writes
//! to stderr, so each error lands under the `# %% [n]` header of its cell. The SIGINT test keeps
//! the streams apart and checks that errors go to stderr.
//!
//! Needs the wasm32 toolchain (scripts/setup installs it): the first cell build of a machine
//! takes about a minute, later ones under a second. `NEURONLAB_CACHE_DIR` is left as it is so
//! that the cell builds are shared. `%cache clear` is not run: it would empty the user's caches.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use neuronlab_session::magics::{find, MAGICS};

/// How long one `neuronlab exec` run may take (the first cell build of a machine is slow).
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Variables that would change what the sessions do; the runs start without them.
const CLEARED_ENV: &[&str] = &[
    "NEURONLAB_INSTANCE",
    "NEURON_LOGICAL_NC_CONFIG",
    "NEURON_RT_VISIBLE_CORES",
    "NEURONLAB_HOST_MEM_LIMIT",
    "NEURONLAB_CELL_DEADLINE",
    "NEURONLAB_COLLECTIVE_TIMEOUT",
    "NEURONLAB_LOGS",
    "NEURONLAB_SDK",
];

/// The first cell of every file: the tensor `x` and the number `n` that must survive.
const DEFINE_VARS: &str =
    "let x = arange_with(3.0, ArangeOptions::new().dtype(DType::F32))?;\nlet n = 41;";

/// How `x` shows.
const X_SHOWN: &str = "tensor([0., 1., 2.], dtype=f32, device=neuron:0)";

/// A module for `%spmd`: each rank all-reduces `rank + 1` and prints when the sum is 3.
const RANKS_WAT: &str = r#"(module
  (import "neuronlab" "tensor_create" (func $create (param i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "tensor_read" (func $read (param i32 i32 i32) (result i32)))
  (import "neuronlab" "print" (func $print (param i32 i32 i32) (result i32)))
  (import "neuronlab" "dist_rank" (func $rank (result i32)))
  (import "neuronlab" "dist_collective"
    (func $collective (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 24) "\01\00\00\00\00\00\00\00")
  (data (i32.const 64) "all_reduce")
  (data (i32.const 80) "all_reduce gave 3\n")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10002))
  (func (export "run")
    (local $h i32)
    (f32.store (i32.const 16) (f32.convert_i32_s (i32.add (call $rank) (i32.const 1))))
    (local.set $h (call $collective (i32.const 64) (i32.const 10) (i32.const 0)
      (call $create (i32.const 0) (i32.const 24) (i32.const 1) (i32.const 16) (i32.const 4))
      (i32.const 0) (i32.const 0)))
    (drop (call $read (local.get $h) (i32.const 512) (i32.const 4)))
    (if (f32.eq (f32.load (i32.const 512)) (f32.const 3))
      (then (drop (call $print (i32.const 1) (i32.const 80) (i32.const 18)))))))
"#;

/// A `%%wat` cell whose `run` prints "hello from wat".
const WAT_CELL: &str = r#"%%wat
(module
  (import "neuronlab" "print" (func $print (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "hello from wat\n")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10000))
  (func (export "run") (drop (call $print (i32.const 1) (i32.const 0) (i32.const 15)))))"#;

/// A folder of one test, removed when the test ends.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "neuronlab-exec-magics-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp folder");
        Dir(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The path of `name` in the folder, as text for a cell.
    fn file(&self, name: &str) -> String {
        self.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One cell of a file and what it must show. In `wants`, `{cell}` is the cell's number; lines
/// are compared with their runs of spaces made one, so table columns need no exact padding.
struct Cell {
    code: String,
    /// The error name it must fail with (`None`: it must succeed).
    error: Option<&'static str>,
    wants: Vec<String>,
}

fn strings(wants: &[&str]) -> Vec<String> {
    wants.iter().map(|w| w.to_string()).collect()
}

fn ok(code: impl Into<String>, wants: &[&str]) -> Cell {
    Cell {
        code: code.into(),
        error: None,
        wants: strings(wants),
    }
}

fn fails(code: impl Into<String>, ename: &'static str, wants: &[&str]) -> Cell {
    Cell {
        code: code.into(),
        error: Some(ename),
        wants: strings(wants),
    }
}

/// A magic called with bad arguments: a `MagicError` that says `problem` and shows the
/// magic's usage line.
fn bad(code: impl Into<String>, magic: &str, problem: &str) -> Cell {
    let usage = find(magic)
        .unwrap_or_else(|| panic!("%{magic} is not in MAGICS"))
        .usage;
    let mut cell = fails(code, "MagicError", &[problem]);
    cell.wants.push(format!("usage: {usage}"));
    cell
}

/// A cheap cell that checks, after a failure, that the next cell runs and `x` and `n` are kept.
fn vars_intact() -> Cell {
    ok("%vars", &["x Tensor [3] f32 neuron:0 12 B", "n i32 41"])
}

/// A Rust cell that reads `x` and `n`: they are intact and usable.
fn rust_intact() -> Cell {
    ok(
        "println!(\"n = {n}\");\nx",
        &["n = 41", &format!("Out[{{cell}}]: {X_SHOWN}")],
    )
}

/// `text` with each line's runs of whitespace made one space.
fn squeeze(text: &str) -> String {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `neuronlab exec FILE --keep-going` with a clean environment plus `env`.
fn exec_command(dir: &Dir, file: &Path, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_neuronlab"));
    command
        .arg("exec")
        .arg(file)
        .arg("--keep-going")
        .env("NO_COLOR", "1")
        .env("XDG_DATA_HOME", dir.join("data"))
        .stdin(Stdio::null());
    for var in CLEARED_ENV {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command
}

/// Waits for `child` for at most [`RUN_TIMEOUT`]; on timeout kills it and fails with `log()`.
fn wait(child: &mut Child, log: impl Fn() -> String) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting for neuronlab") {
            return status;
        }
        if started.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "neuronlab exec ran past {RUN_TIMEOUT:?}; its output:\n{}",
                log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The outputs of each cell: the text under each `# %% [n]` header, in order.
fn sections(text: &str) -> Vec<String> {
    let mut sections: Vec<String> = Vec::new();
    for line in text.lines() {
        if line == format!("# %% [{}]", sections.len() + 1) {
            sections.push(String::new());
        } else if let Some(section) = sections.last_mut() {
            section.push_str(line);
            section.push('\n');
        } else {
            panic!("output before the first header: {line:?}\n{text}");
        }
    }
    sections
}

/// Writes `cells` into a file, runs it with `env`, and checks each cell: the cells that must
/// fail are exactly those exec reports as failed, each shows `ename: ...` under its own
/// header, and each cell shows what it `wants`.
fn run_cells(dir: &Dir, cells: &[Cell], env: &[(&str, &str)]) {
    let file = dir.join("cells.py");
    let text: Vec<&str> = cells.iter().map(|c| c.code.as_str()).collect();
    std::fs::write(&file, format!("{}\n", text.join("\n# %%\n"))).expect("the cells file");
    let log = dir.join("output.txt");
    let out = File::create(&log).expect("the output file");
    let err = out.try_clone().expect("the output file");
    let started = Instant::now();
    let mut child = exec_command(dir, &file, env)
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("neuronlab runs");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let status = wait(&mut child, read);
    let output = read();
    eprintln!(
        "neuronlab exec: {} cells in {:.1} s",
        cells.len(),
        started.elapsed().as_secs_f64()
    );

    let shown = sections(&output);
    assert_eq!(
        shown.len(),
        cells.len(),
        "every cell runs, under its own header:\n{output}"
    );
    let failed: Vec<String> = cells
        .iter()
        .enumerate()
        .filter(|(_, c)| c.error.is_some())
        .map(|(i, _)| format!("[{}]", i + 1))
        .collect();
    assert_eq!(
        status.code(),
        Some(if failed.is_empty() { 0 } else { 1 }),
        "{output}"
    );
    if !failed.is_empty() {
        let summary = format!(
            "error: {} cell{} failed: {}\n",
            failed.len(),
            if failed.len() == 1 { "" } else { "s" },
            failed.join(", ")
        );
        assert!(
            output.ends_with(&summary),
            "exactly the failing cells fail; wanted {summary:?} at the end of:\n{output}"
        );
    }
    for (i, (cell, section)) in cells.iter().zip(&shown).enumerate() {
        let n = i + 1;
        let squeezed = squeeze(section);
        let context = || format!("cell [{n}]:\n{}\nshowed:\n{section}", cell.code);
        if let Some(ename) = cell.error {
            assert!(
                section
                    .lines()
                    .any(|l| l.starts_with(&format!("{ename}: "))),
                "{ename} expected; {}",
                context()
            );
        }
        for want in &cell.wants {
            let want = squeeze(&want.replace("{cell}", &n.to_string()));
            assert!(squeezed.contains(&want), "{want:?} expected; {}", context());
        }
    }
}

#[test]
fn every_magic_with_good_and_bad_arguments() {
    let dir = Dir::new("magics");
    std::fs::write(dir.join("ranks.wat"), RANKS_WAT).expect("the ranks module");
    let hello = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/sandbox/tests/fixtures/hello.wat")
        .display()
        .to_string();
    let trace = dir.join("trace.json");
    let granted = dir.join("granted");
    std::fs::create_dir(&granted).expect("a folder to grant");

    let listed: Vec<&str> = MAGICS
        .iter()
        .map(|m| m.usage.split("   or").next().unwrap_or(m.usage))
        .chain(["%help NAME explains one."])
        .collect();
    let explained: Vec<&str> = MAGICS.iter().flat_map(|m| [m.usage, m.help]).collect();
    let help_each: Vec<String> = MAGICS.iter().map(|m| format!("%help {}", m.name)).collect();
    let compiled = "compiled function 'double': 2 version(s), 1 recompile(s) of 8 allowed";

    let cells = vec![
        ok(DEFINE_VARS, &[]),
        // %help
        ok("%help", &listed),
        ok(help_each.join("\n"), &explained),
        fails(
            "%help nope",
            "MagicError",
            &["%nope is not a magic; %help lists them"],
        ),
        vars_intact(),
        // %doc
        ok("%doc matmul", &["matmul(a, b) -> out", "group: "]),
        ok("%doc x", &["x: Tensor", "shape:  [3]", "dtype:  f32"]),
        ok("%doc %time", &["%time CODE"]),
        fails("%doc nope", "MagicError", &["%doc: nothing is named `nope`"]),
        bad("%doc", "doc", "give one name"),
        // %load
        ok(
            format!("%load {hello}"),
            &["loaded hello: %run hello.<export> [args] calls run()"],
        ),
        fails(
            format!("%load {}", dir.file("missing.wat")),
            "LoadError",
            &[&format!("cannot read {}", dir.file("missing.wat"))],
        ),
        vars_intact(),
        bad("%load", "load", "%load: give the module's file"),
        vars_intact(),
        // %run
        ok("%run hello.run", &["sum ok", "Out[{cell}]: 0"]),
        fails(
            "%run hello.nothing",
            "MissingEntry",
            &["hello has no exported function `nothing`; it exports: run"],
        ),
        vars_intact(),
        fails(
            "%run nope.run",
            "MagicError",
            &["no module named 'nope' is loaded; loaded: hello"],
        ),
        vars_intact(),
        bad("%run", "run", "%run: give the export to call"),
        vars_intact(),
        // %%wat
        ok(
            WAT_CELL,
            &[
                "hello from wat",
                "loaded wat{cell}: %run wat{cell}.<export> [args] calls run()",
            ],
        ),
        fails(
            "%%wat\n(module (oops",
            "LoadError",
            &["is not valid WebAssembly text", "(module (oops"],
        ),
        vars_intact(),
        bad("%wat", "wat", "%wat: is a cell magic"),
        vars_intact(),
        // %spmd and %%spmd
        ok(
            format!("%spmd 2 {} --all-ranks", dir.file("ranks.wat")),
            &[
                "[ranks 0-1]: all_reduce gave 3",
                "collectives 2",
            ],
        ),
        bad(
            "%spmd x",
            "spmd",
            "%spmd: give the number of ranks first, a whole number from 1",
        ),
        vars_intact(),
        bad(
            "%spmd 2",
            "spmd",
            "%spmd: give the module to run, or use %%spmd with Rust code",
        ),
        vars_intact(),
        ok(
            "%%spmd 2 --all-ranks\n\
             let sum = dist::all_reduce(&ones(&[2])?, ReduceOp::Sum, &Group::world())?;\n\
             println!(\"rank {} of {}: {:?}\", dist::rank(), dist::world_size(), sum.to_vec::<f32>()?);",
            &["[rank0]: rank 0 of 2: [2.0, 2.0]", "[rank1]: rank 1 of 2: [2.0, 2.0]"],
        ),
        bad(
            "%%spmd two\nlet q = 1;",
            "spmd",
            "%spmd: give the number of ranks first",
        ),
        rust_intact(),
        // %time and %%time
        ok(
            "%time let t = x.exp()?;",
            &["wall time ", " (build and run) · modeled device time "],
        ),
        bad("%time", "time", "%time: give the code to time"),
        vars_intact(),
        ok(
            "%%time\nx.exp()?",
            &[
                "Out[{cell}]: tensor([1.0000, 2.7183, 7.3891], dtype=f32, device=neuron:0)",
                "wall time ",
            ],
        ),
        // %explain and %recompiles, after a compiled function traced twice
        ok(
            "fn double(t: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> { Ok(vec![t[0].exp()?]) }",
            &[],
        ),
        ok(
            "let f = compile(\"double\", double)?;\n\
             let a = f.call1(&[&x])?;\n\
             let b = f.call1(&[&ones(&[4])?])?;",
            &["compiles 2 (recompiles 1)"],
        ),
        ok("%explain", &[compiled, "version 2 (f32[4])"]),
        ok("%explain double", &[compiled]),
        bad(
            "%explain nosuch",
            "explain",
            "%explain: the last cell compiled no function 'nosuch'; it compiled double",
        ),
        vars_intact(),
        ok(
            "%recompiles",
            &[
                "recompile 1/8 of 'double': input 0 shape changed: expected [3], got [4]",
                "2 compiles, 1 of them recompiles",
            ],
        ),
        bad("%recompiles now", "recompiles", "%recompiles: takes no arguments"),
        vars_intact(),
        // %events and %timeline read the cell before them (several line magics in one cell)
        ok("let y = x.exp()?.exp()?;", &[]),
        ok(
            "%events\n%events op --last 1\n%events memory\n%timeline",
            &[
                "seq kind phase core name host modeled details",
                "events in cell [",
                "the last 1 of 2 events of kind op in cell [",
                "f32[3] -> f32[3]",
                "events of kind memory in cell [",
                "modeled device time ",
                "neuron:0 |A",
                "A exp: 2 × ",
            ],
        ),
        bad(
            "%events bogus",
            "events",
            "%events: 'bogus' is not an event kind; the kinds are op, memory, compile",
        ),
        vars_intact(),
        bad(
            "%events --last 0",
            "events",
            "--last takes a number of events, 1 or more",
        ),
        vars_intact(),
        // The magic cells in between did no device work: the timeline is of the exp cell.
        ok(
            "%timeline",
            &["], the last that did device work: modeled device time", "A exp: 2 × "],
        ),
        bad(
            "%timeline svg",
            "timeline",
            "%timeline: 'svg' is neither a cell number nor all",
        ),
        vars_intact(),
        // %cache: ls only (clear would empty the user's caches)
        ok(
            "%cache\n%cache ls",
            &[
                "compiled WebAssembly modules",
                "compiled programs",
                "%cache clear empties them",
            ],
        ),
        bad(
            "%cache bogus",
            "cache",
            "%cache: 'bogus' is not a command: use ls or clear",
        ),
        vars_intact(),
        // %mem and %vars
        ok(
            "%mem",
            &[
                "core in use peak HBM used allocations",
                "neuron:0",
                "host memory cap",
            ],
        ),
        bad("%mem all", "mem", "%mem: takes no arguments"),
        vars_intact(),
        // %dir: lists, grants, refuses what cannot be granted.
        ok("%dir", &["no folder is granted"]),
        ok(
            format!("%dir {} --rw", granted.display()),
            &["as `granted` (read-write)"],
        ),
        ok("%dir", &["granted  read-write"]),
        bad("%dir --ro", "dir", "%dir: unknown option --ro; the option is --rw"),
        fails(
            format!("%dir {}", granted.join("nope").display()),
            "MagicError",
            &["give an existing folder"],
        ),
        vars_intact(),
        bad("%vars x", "vars", "%vars: takes no arguments"),
        vars_intact(),
        // %trace
        ok(
            format!("%trace save {}", trace.display()),
            &[&format!(
                "to {}: open it in Perfetto (ui.perfetto.dev) or chrome://tracing",
                trace.display()
            )],
        ),
        bad("%trace", "trace", "%trace: the only command is `save FILE`"),
        vars_intact(),
        bad("%trace save", "trace", "%trace: give the file to write"),
        vars_intact(),
        // %device: bad arguments change nothing
        ok(
            "%device",
            &["trn2.48xlarge: 16 x Trainium2", "LNC=2: 64 logical cores"],
        ),
        bad(
            "%device trn9.huge",
            "device",
            "%device: unknown instance 'trn9.huge': expected one of trn2.48xlarge",
        ),
        vars_intact(),
        bad(
            "%device --lnc x",
            "device",
            "%device: --lnc takes a number",
        ),
        vars_intact(),
        bad(
            "%device trn2.3xlarge --lnc 7",
            "device",
            "LNC=7 is not valid for trn2.3xlarge: use 1 or 2",
        ),
        vars_intact(),
        ok("%device trn2.48xlarge", &["already trn2.48xlarge"]),
        rust_intact(),
        // Switching drops the variables, by design; cells run on the new device.
        ok(
            "%device trn2.3xlarge",
            &["switched to trn2.3xlarge: 1 x Trainium2", "dropped "],
        ),
        ok("%device", &["trn2.3xlarge: 1 x Trainium2"]),
        ok(
            "let k = ones(&[2])?;\nk",
            &["Out[{cell}]: tensor([1., 1.], dtype=f32, device=neuron:0)"],
        ),
        // %reset: a bad argument changes nothing; then it forgets everything.
        bad("%reset now", "reset", "%reset: takes no arguments"),
        ok("%vars", &["k Tensor [2] f32 neuron:0 8 B"]),
        ok(
            "%reset",
            &["reset: forgot 1 variable, 1 kept item, 0 loaded modules and "],
        ),
        ok("%vars", &["no variables yet"]),
        fails("%run run", "MagicError", &["no module is loaded"]),
        ok(WAT_CELL, &["hello from wat"]),
    ];

    // Every magic is used well and badly in this file.
    for magic in MAGICS {
        let calls = |cell: &&Cell| {
            let first = cell.code.lines().next().unwrap_or("");
            let name = first.trim_start_matches('%').split_whitespace().next();
            first.starts_with('%') && name == Some(magic.name)
        };
        assert!(
            cells.iter().filter(calls).any(|c| c.error.is_none()),
            "no good call of %{}",
            magic.name
        );
        assert!(
            cells.iter().filter(calls).any(|c| c.error.is_some()),
            "no bad call of %{}",
            magic.name
        );
    }

    run_cells(&dir, &cells, &[]);

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).expect("the trace file"))
            .expect("the trace is JSON");
    let events = json["traceEvents"].as_array().expect("traceEvents");
    assert!(
        events.iter().any(|e| e["name"] == "add"),
        "the trace holds the ops of %run hello.run: {json}"
    );
}

#[test]
fn failing_rust_cells_report_clearly_and_the_session_survives() {
    let dir = Dir::new("rust");
    let cells = vec![
        ok(DEFINE_VARS, &[]),
        // Does not compile: the error names the cell and the user's line.
        fails(
            "let a = 1;\nlet y: i64 = \"a\";",
            "CompileError",
            &[
                "CompileError: mismatched types\n --> cell [{cell}], line 2:14",
                "2 | let y: i64 = \"a\";\n  |        ^^^ expected due to this\n  |              ^^^ expected `i64`, found `&str`",
            ],
        ),
        rust_intact(),
        fails(
            "let = 3;",
            "SyntaxError",
            &["--> cell [{cell}], line 1:"],
        ),
        rust_intact(),
        // Refers to a variable that does not exist.
        fails(
            "let ok = n + 1;\nmissing + ok",
            "CompileError",
            &[
                "cannot find value `missing` in this scope",
                "--> cell [{cell}], line 2:1",
            ],
        ),
        rust_intact(),
        // Panics: one error, named Panic, at the user's line, without the panic machinery's
        // frames.
        fails(
            "let z = 1;\npanic!(\"boom {}\", z);",
            "Panic",
            &["Panic: boom 1\n  at cell[{cell}]:2:1"],
        ),
        rust_intact(),
        // `?` on a failed op: named after the op error, at the op's call.
        fails(
            "let a = neuronlab::ones(&[2, 3])?;\nlet b = a.matmul(&a)?;",
            "OpError",
            &["OpError: matmul(", "at cell[{cell}]:2:11", "before it stopped, the cell ran: 1 ops"],
        ),
        rust_intact(),
        // Traps: an index out of bounds, an abort.
        fails(
            "let v = vec![1, 2, 3];\nlet i = v.len() + n as usize;\nlet e = v[i];",
            "Panic",
            // rustc places an index panic at the `[` (column 10), as it does outside a cell.
            &["Panic: index out of bounds: the len is 3 but the index is 44\n  at cell[{cell}]:3:10"],
        ),
        rust_intact(),
        fails(
            "std::process::abort();",
            "GuestTrap",
            // Its backtrace names the cell, not the crate the session generated for it.
            &["GuestTrap: the guest aborted", "wasm backtrace:\n 0: cell [{cell}]\n"],
        ),
        rust_intact(),
        // Exhausts its memory (1 GiB by default): at once, and a piece at a time. The pieces
        // are reserved, not written: filling 1 GiB can outlast the 3 s deadline on a slow
        // machine, and this cell is about the memory limit, not the deadline.
        fails(
            "let v = vec![1u8; 1 << 30];\nv.len()",
            "ResourceLimit",
            &["ResourceLimit: the guest's linear memory would exceed its limit of 1024 MiB"],
        ),
        rust_intact(),
        fails(
            "let mut pieces: Vec<Vec<u8>> = Vec::new();\nloop { pieces.push(Vec::with_capacity(64 << 20)); }",
            "ResourceLimit",
            &["ResourceLimit: the guest's linear memory would exceed its limit of 1024 MiB"],
        ),
        rust_intact(),
        // Loops forever: NEURONLAB_CELL_DEADLINE stops it.
        fails(
            "println!(\"looping\");\nlet mut i: u64 = 0;\nloop { i = i.wrapping_add(1); }",
            "DeadlineExceeded",
            &[
                "looping",
                "DeadlineExceeded: the call ran past its deadline of 3s; it may be looping forever",
            ],
        ),
        rust_intact(),
        ok("%vars", &["x Tensor [3] f32 neuron:0 12 B", "n i32 41"]),
    ];
    run_cells(&dir, &cells, &[("NEURONLAB_CELL_DEADLINE", "3")]);
}

/// SIGINT while a cell loops: the cell is interrupted with a clear message on stderr and the
/// process ends by itself with exit code 1. `exec` does not run the cells after an interrupt,
/// even with `--keep-going`: Ctrl-C stops the whole run (repl/src/exec.rs).
#[test]
fn sigint_interrupts_a_looping_cell_and_ends_the_run() {
    let dir = Dir::new("sigint");
    let file = dir.join("cells.py");
    let cells = [
        DEFINE_VARS,
        "println!(\"looping\");\nlet mut i: u64 = 0;\nloop { i = i.wrapping_add(1); }",
        "println!(\"after the loop: n = {n}\");\nx",
    ];
    std::fs::write(&file, cells.join("\n# %%\n")).expect("the cells file");
    let (out_log, err_log) = (dir.join("stdout.txt"), dir.join("stderr.txt"));
    let mut child = exec_command(&dir, &file, &[])
        .stdout(File::create(&out_log).expect("stdout file"))
        .stderr(File::create(&err_log).expect("stderr file"))
        .spawn()
        .expect("neuronlab runs");
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    let both = || format!("stdout:\n{}\nstderr:\n{}", read(&out_log), read(&err_log));

    // Wait until the loop runs (its build is done), then interrupt it.
    let started = Instant::now();
    while !read(&out_log).contains("looping\n") {
        if let Some(status) = child.try_wait().expect("waiting for neuronlab") {
            panic!("neuronlab ended ({status}) before the loop ran; {}", both());
        }
        if started.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the loop cell never ran; {}", both());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let status = wait(&mut child, both);
    let stopped_in = sent.elapsed();

    let (stdout, stderr) = (read(&out_log), read(&err_log));
    assert_eq!(
        status.code(),
        Some(1),
        "exec handles SIGINT and exits by itself; {}",
        both()
    );
    assert!(
        stopped_in < Duration::from_secs(10),
        "stopped in {stopped_in:?}"
    );
    let shown = sections(&stdout);
    assert_eq!(shown.len(), 2, "cell 3 does not run; {}", both());
    assert!(shown[1].starts_with("looping\n"), "{}", both());
    assert!(
        !stdout.contains("Interrupted"),
        "errors go to stderr; {}",
        both()
    );
    assert!(
        stderr.contains("Interrupted: the guest was interrupted\n"),
        "{}",
        both()
    );
    assert!(
        stderr.ends_with("error: interrupted in cell [2]; 1 cell not run\n"),
        "{}",
        both()
    );
}

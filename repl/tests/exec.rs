//! `neuronlab exec FILE` over files of `%%wat` cells and magics (no wasm32 toolchain needed),
//! and `--help` of the new subcommands. Each test writes its own file in its own folder, so
//! the tests do not depend on each other or on their order.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A `%%wat` cell whose `run` prints `text` (at most 200 bytes) and whose `add` adds two i32.
fn wat_cell(text: &str) -> String {
    format!(
        r#"%%wat
(module
  (import "neuronlab" "print" (func $print (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{text}\n")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10000))
  (func (export "run") (drop (call $print (i32.const 1) (i32.const 0) (i32.const {len}))))
  (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1))))
"#,
        len = text.len() + 1
    )
}

/// A `%%wat` cell whose `run` traps.
const TRAP_CELL: &str = r#"%%wat
(module
  (memory (export "memory") 1)
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10000))
  (func (export "run") unreachable))
"#;

/// A fresh folder for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neuronlab-exec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp folder");
    dir
}

/// Runs `neuronlab exec` on a file holding `text`, with `args` after the file.
fn exec(name: &str, text: &str, args: &[&str]) -> Output {
    let dir = temp_dir(name);
    let file = dir.join("cells.txt");
    std::fs::write(&file, text).expect("the cells file");
    let output = Command::new(env!("CARGO_BIN_EXE_neuronlab"))
        .arg("exec")
        .arg(&file)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("neuronlab runs");
    let _ = std::fs::remove_dir_all(&dir);
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn exec_runs_every_cell_with_a_header() {
    let cells = format!(
        "{}# %%\n%run add 2 3\n\n# %% the rest of a marker line is ignored\n%help load\n",
        wat_cell("hello from wat")
    );
    let out = exec("ok", &cells, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"# %% [1]"), "{stdout}");
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{stdout}"))
    };
    // The cell before the first marker is cell 1; outputs follow their own header.
    assert!(at("# %% [1]") < at("hello from wat"));
    assert!(at("hello from wat") < at("# %% [2]"));
    assert!(at("# %% [2]") < at("Out[2]: 5"));
    assert!(at("Out[2]: 5") < at("# %% [3]"));
    assert!(at("# %% [3]") < at("%load FILE.wasm|FILE.wat"));
    assert!(
        !stdout.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
}

#[test]
fn exec_stops_at_the_first_failed_cell() {
    let cells = format!(
        "%help\n# %%\n{TRAP_CELL}# %%\n{}",
        wat_cell("after the trap")
    );
    let out = exec("stop", &cells, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("# %% [2]"), "{stdout}");
    assert!(
        stderr.contains("unreachable"),
        "the trap is shown: {stderr}"
    );
    assert!(
        !stdout.contains("# %% [3]"),
        "cell 3 must not run:\n{stdout}"
    );
    assert!(!stdout.contains("after the trap"), "{stdout}");
    assert!(
        stderr.contains("cell [2] failed; 1 cell not run (--keep-going runs them)"),
        "{stderr}"
    );
}

#[test]
fn exec_keep_going_runs_the_rest_and_still_fails() {
    let cells = format!(
        "{TRAP_CELL}# %%\n%nosuchmagic\n# %%\n{}",
        wat_cell("after the trap")
    );
    let out = exec("keep-going", &cells, &["--keep-going"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("# %% [3]"), "{stdout}");
    assert!(stdout.contains("after the trap"), "{stdout}");
    assert!(
        stderr.contains("MagicError: %nosuchmagic is not a magic"),
        "{stderr}"
    );
    assert!(stderr.contains("2 cells failed: [1], [2]"), "{stderr}");
}

#[test]
fn exec_reports_a_missing_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_neuronlab"))
        .args(["exec", "/nonexistent/cells.txt"])
        .output()
        .expect("neuronlab runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot read /nonexistent/cells.txt"));
}

#[test]
fn subcommands_have_help() {
    for (sub, needle) in [
        ("exec", "--keep-going"),
        ("tour", "prebuilt experiments"),
        ("run", "--nproc"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_neuronlab"))
            .args([sub, "--help"])
            .output()
            .expect("neuronlab runs");
        assert!(out.status.success());
        assert!(
            text(&out.stdout).contains(needle),
            "{sub} --help:\n{}",
            text(&out.stdout)
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_neuronlab"))
        .arg("--help")
        .output()
        .expect("neuronlab runs");
    let help = text(&out.stdout);
    assert!(
        help.contains("starts the REPL") && help.contains("tour"),
        "{help}"
    );
}

/// A module whose `run` prints the raw string list of its arguments, then the granted file
/// `notes/msg.txt`.
const ARGS_AND_FILE_WAT: &str = r#"(module
  (import "neuronlab" "args" (func $args (param i32 i32) (result i32)))
  (import "neuronlab" "fs_read" (func $read (param i32 i32 i64 i32 i32) (result i32)))
  (import "neuronlab" "print" (func $print (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "notes/msg.txt")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10005))
  (func (export "run")
    (local $n i32)
    (local.set $n (call $args (i32.const 512) (i32.const 256)))
    (drop (call $print (i32.const 1) (i32.const 512) (local.get $n)))
    (local.set $n (call $read (i32.const 0) (i32.const 13) (i64.const 0) (i32.const 1024) (i32.const 64)))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then unreachable))
    (drop (call $print (i32.const 1) (i32.const 1024) (local.get $n)))))
"#;

#[test]
fn run_grants_folders_and_passes_what_follows_the_double_dash() {
    let dir = temp_dir("run-args");
    let notes = dir.join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("msg.txt"), "granted\n").unwrap();
    let module = dir.join("args.wat");
    std::fs::write(&module, ARGS_AND_FILE_WAT).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_neuronlab"))
            .arg("run")
            .arg(&module)
            .args(args)
            .output()
            .expect("neuronlab runs")
    };
    let notes_arg = notes.display().to_string();
    let out = run(&["--dir", &notes_arg, "--", "--steps", "10", "two words"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut list = 3u32.to_le_bytes().to_vec();
    for arg in ["--steps", "10", "two words"] {
        list.extend((arg.len() as u32).to_le_bytes());
        list.extend(arg.as_bytes());
    }
    list.extend(b"granted\n");
    assert_eq!(out.stdout, list, "{}", text(&out.stdout));

    let out = run(&["--", "x"]);
    assert!(!out.status.success(), "no grant: the read fails");
    let out = run(&["--dir", "/no/such/folder"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--dir: cannot grant /no/such/folder"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

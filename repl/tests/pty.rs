//! The REPL on a pseudo-terminal, driven as a person would: keys in, screen text out.
//!
//! Each test starts its own `neuronlab` with `XDG_DATA_HOME` in a fresh temp folder, so its
//! history is its own. The compile caches stay where they are (`NEURONLAB_CACHE_DIR`, or
//! `~/.cache/neuronlab`) so the cell builds are shared between runs: the first Rust cell
//! build of a machine takes about a minute. Keys are sent as a terminal sends them: Enter is
//! `\r`, Tab `\t`, Ctrl-C `\x03`, Ctrl-D `\x04`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use expectrl::process::unix::WaitStatus;
use expectrl::session::OsSession;
use expectrl::{Eof, Expect};

/// How long an ordinary step may take.
const STEP: Duration = Duration::from_secs(60);
/// How long the first Rust cell may take (a cold build of the guest SDK).
const FIRST_BUILD: Duration = Duration::from_secs(240);

/// A REPL on a pty, and the data folder holding its history.
struct Repl {
    session: OsSession,
    data_dir: PathBuf,
}

impl Repl {
    fn start(name: &str) -> Repl {
        let data_dir =
            std::env::temp_dir().join(format!("neuronlab-pty-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        std::fs::create_dir_all(&data_dir).expect("a temp folder");
        let mut command = Command::new(env!("CARGO_BIN_EXE_neuronlab"));
        command
            .env("XDG_DATA_HOME", &data_dir)
            .env("NO_COLOR", "1")
            .env("TERM", "xterm");
        let mut session = OsSession::spawn(command).expect("neuronlab starts on a pty");
        session.set_expect_timeout(Some(STEP));
        let mut repl = Repl { session, data_dir };
        repl.expect("Ctrl-D leaves");
        repl.expect("In [1]: ");
        repl
    }

    /// Waits for `needle` (plain text), failing with what came instead.
    fn expect(&mut self, needle: &str) {
        if let Err(e) = self.session.expect(needle) {
            panic!("waiting for {needle:?}: {e}");
        }
    }

    /// Waits for the prompt of cell `n`.
    fn prompt(&mut self, n: u32) {
        self.expect(&format!("In [{n}]: "));
    }

    /// Types `keys` as they are.
    fn send(&mut self, keys: &str) {
        self.session.send(keys).expect("keys reach the pty");
    }

    /// Types each line followed by Enter.
    fn type_lines(&mut self, lines: &[&str]) {
        for line in lines {
            self.send(line);
            self.send("\r");
            // Let the editor handle one Enter before the next line comes.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ctrl-D at an empty prompt: the REPL must leave with status 0.
    fn leave(&mut self) {
        self.send("\x04");
        if let Err(e) = self.session.expect(Eof) {
            panic!("Ctrl-D did not end the REPL: {e}");
        }
        let status = self.session.get_process().wait().expect("the exit status");
        assert!(
            matches!(status, WaitStatus::Exited(_, 0)),
            "Ctrl-D must exit with status 0, got {status:?}"
        );
    }
}

impl Drop for Repl {
    fn drop(&mut self) {
        if self.session.get_process().is_alive().unwrap_or(false) {
            let _ = self.session.get_process_mut().exit(true);
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

#[test]
fn tab_completes_a_magic_and_history_is_kept() {
    let mut repl = Repl::start("tab");
    repl.send("%he\t");
    repl.expect("%help");
    repl.send("\r");
    // `%he` alone is not a magic: this text only comes if Tab completed it to `%help`.
    repl.expect("Cells are Rust");
    repl.prompt(2);
    repl.leave();
    let history = repl.data_dir.join("neuronlab").join("history");
    let text = std::fs::read_to_string(&history)
        .unwrap_or_else(|e| panic!("no history at {}: {e}", history.display()));
    assert!(text.lines().any(|l| l == "%help"), "history:\n{text}");
}

#[test]
fn an_unfinished_cell_continues_and_ctrl_c_at_the_prompt_drops_it() {
    let mut repl = Repl::start("continue");
    // An open brace: Enter continues the cell instead of running it. (Run, it would be a
    // syntax error, and the prompt would move on to In [2].)
    repl.type_lines(&["fn f() {"]);
    // The new line shows that the cell goes on.
    repl.expect("   ...:     ");
    repl.send("let y = 1;");
    std::thread::sleep(Duration::from_millis(200));
    // Ctrl-C at the prompt drops the whole unfinished cell.
    repl.send("\x03");
    repl.expect("(dropped; Ctrl-D leaves)");
    repl.prompt(1);
    repl.type_lines(&["%help load"]);
    repl.expect("%load FILE.wasm|FILE.wat");
    repl.prompt(2);
    // A cell magic goes on until a blank line.
    repl.type_lines(&[
        "%%wat",
        "(module",
        "  (memory (export \"memory\") 1)",
        "  (func (export \"neuronlab_abi_version\") (result i32) (i32.const 0x10000))",
        "  (func (export \"twice\") (param i32) (result i32) (i32.mul (local.get 0) (i32.const 2))))",
        "",
    ]);
    repl.expect("loaded wat2");
    repl.prompt(3);
    repl.type_lines(&["%run twice 21"]);
    repl.expect("Out[3]: 42");
    repl.prompt(4);
    repl.leave();
}

/// Lines of a `%%wat` cell whose `run` prints "spinning" and then never returns.
const RUNAWAY_WAT: &[&str] = &[
    "%%wat",
    "(module",
    "  (import \"neuronlab\" \"print\" (func $print (param i32 i32 i32) (result i32)))",
    "  (memory (export \"memory\") 1)",
    "  (data (i32.const 0) \"spinning\\n\")",
    "  (func (export \"neuronlab_abi_version\") (result i32) (i32.const 0x10000))",
    "  (func (export \"run\") (drop (call $print (i32.const 1) (i32.const 0) (i32.const 9)))",
    "    (loop $l (br $l))))",
    "",
];

#[test]
fn ctrl_c_interrupts_a_runaway_wat_cell_and_the_session_goes_on() {
    let mut repl = Repl::start("runaway-wat");
    repl.type_lines(&[
        "%%wat",
        "(module",
        "  (memory (export \"memory\") 1)",
        "  (func (export \"neuronlab_abi_version\") (result i32) (i32.const 0x10000))",
        "  (func (export \"add\") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1))))",
        "",
    ]);
    repl.expect("loaded wat1");
    repl.prompt(2);
    repl.type_lines(RUNAWAY_WAT);
    // The output line, not the echo of the typed cell.
    repl.expect("\r\nspinning");
    std::thread::sleep(Duration::from_millis(300));
    repl.send("\x03");
    repl.expect("Interrupt");
    repl.prompt(3);
    // The module of cell 1 is still loaded and callable.
    repl.type_lines(&["%run wat1.add 2 3"]);
    repl.expect("Out[3]: 5");
    repl.prompt(4);
    repl.leave();
}

/// Fails with the way out when this machine cannot build Rust cells.
fn require_toolchain() {
    if let Err(e) = neuronlab_session::toolchain::Toolchain::detect() {
        panic!(
            "Rust cells need the wasm32 toolchain, and {e}\n\
             Install it with scripts/setup (CI does), then run the tests again."
        );
    }
}

#[test]
fn rust_cells_keep_their_tensors_and_survive_ctrl_c() {
    require_toolchain();
    let mut repl = Repl::start("rust");
    repl.type_lines(&["let x = neuronlab::randn(&[2, 2])?;"]);
    repl.session.set_expect_timeout(Some(FIRST_BUILD));
    repl.prompt(2);
    repl.session.set_expect_timeout(Some(FIRST_BUILD));
    repl.type_lines(&["x"]);
    repl.expect("Out[2]:");
    repl.expect("tensor(");
    repl.prompt(3);
    // A multi-line cell: the open brace continues it, the closing line ends it.
    repl.type_lines(&["let total = {", "x.sum()?", "};"]);
    repl.prompt(4);
    repl.type_lines(&["total"]);
    repl.expect("Out[4]:");
    repl.expect("tensor(");
    repl.prompt(5);
    // A string that spans lines holds what was typed, not the continuation prompt's room.
    repl.type_lines(&["let text = \"a", "b\"; text.len()"]);
    repl.expect("Out[5]: 3");
    repl.prompt(6);
    // A runaway cell, stopped with Ctrl-C once it is running.
    repl.type_lines(&["println!(\"spinning\"); loop {}"]);
    // The output line, not the echo of the typed cell.
    repl.expect("\r\nspinning");
    std::thread::sleep(Duration::from_millis(300));
    repl.send("\x03");
    repl.expect("Interrupt");
    repl.prompt(7);
    repl.type_lines(&["x"]);
    repl.expect("Out[7]:");
    repl.expect("tensor(");
    repl.prompt(8);
    repl.leave();
}

/// The processes whose parent is `parent` and whose command line contains `needle`, from
/// `/proc` (a zombie, which has finished, does not count).
fn children_running(parent: i32, needle: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // `pid (comm) state ppid ...`; comm may hold spaces, so split after its `)`.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
            let running = fields.first().is_some_and(|state| *state != "Z");
            let child = fields.get(1).and_then(|p| p.parse::<i32>().ok()) == Some(parent);
            running
                && child
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

#[test]
fn the_rustc_waiting_for_the_next_cell_dies_with_a_killed_repl() {
    require_toolchain();
    let mut repl = Repl::start("standby");
    repl.session.set_expect_timeout(Some(FIRST_BUILD));
    repl.type_lines(&["let n = 1;"]);
    repl.prompt(2);
    let pid = repl.session.get_process().pid().as_raw();
    let waiting = children_running(pid, "lib-pipe.rs");
    assert_eq!(waiting.len(), 1, "a rustc waits for the next cell");
    let cell_crate = std::fs::read_link(format!("/proc/{}/cwd", waiting[0])).unwrap();
    // It is started through setpriv and a shell that check its parent, then becomes rustc.
    let ready = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{}/comm", waiting[0])).unwrap_or_default()
        != "rustc\n"
    {
        assert!(
            std::time::Instant::now() < ready,
            "the waiting process never became rustc"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    repl.session
        .get_process_mut()
        .kill(expectrl::process::unix::Signal::SIGKILL)
        .expect("the REPL is killed");
    let gone = std::time::Instant::now() + Duration::from_secs(10);
    // Readable while it runs; a killed rustc is gone or a zombie, without a cwd.
    while std::fs::read_link(format!("/proc/{}/cwd", waiting[0])).is_ok() {
        assert!(
            std::time::Instant::now() < gone,
            "rustc {} outlived the killed REPL by 10 s",
            waiting[0]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A killed REPL cannot remove its session's cell crate.
    let _ = std::fs::remove_dir_all(cell_crate);
}

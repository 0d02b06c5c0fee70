//! The sandbox against hostile and broken guests, written as WAT fixtures (no toolchain
//! needed). After every failure the host keeps running: a following guest in the same process
//! runs normally and the session's own tensors are intact.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neuronlab_core::device::topology::{CoreId, Topology};
use neuronlab_core::events::EventKind;
use neuronlab_core::ops::Attrs;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::{Runtime, Tensor};
use neuronlab_dist::World;
use neuronlab_sandbox::var_store::Var;
use neuronlab_sandbox::{
    ErrorCode, Guest, GuestError, GuestErrorKind, GuestOutput, Limits, ModuleSource, Sandbox,
    Shared,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A session: a runtime with one tensor of its own, and the output guests print.
struct Session {
    sandbox: Sandbox,
    runtime: Arc<Runtime>,
    own: Tensor,
    output: Arc<Mutex<Vec<GuestOutput>>>,
}

impl Session {
    fn new(host_limit: u64) -> Session {
        let runtime = Arc::new(Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit,
        }));
        let own = runtime
            .call1(
                "arange",
                &[],
                &Attrs::new().with("end", 6.0).with("dtype", "f32"),
            )
            .unwrap();
        Session {
            sandbox: Sandbox::new(None).unwrap(),
            runtime,
            own,
            output: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn guest_with(&self, name: &str, limits: Limits) -> Result<Guest, GuestError> {
        let module = self.sandbox.load_file(&fixture(name))?;
        let output = self.output.clone();
        self.sandbox.instantiate(
            &module,
            self.runtime.clone(),
            CoreId(0),
            limits,
            Box::new(move |o| output.lock().unwrap().push(o)),
        )
    }

    fn guest(&self, name: &str) -> Result<Guest, GuestError> {
        self.guest_with(name, Limits::default())
    }

    fn stdout(&self) -> String {
        self.output
            .lock()
            .unwrap()
            .iter()
            .filter_map(|o| match o {
                GuestOutput::Stdout(s) => Some(s.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The host still works: a good guest runs and prints, and the session tensor is intact.
    fn assert_healthy(&self) {
        self.output.lock().unwrap().clear();
        let mut g = self.guest("hello.wat").expect("hello.wat loads");
        assert_eq!(g.call("run", &[]).expect("hello.wat runs"), vec!["0"]);
        assert_eq!(self.stdout(), "sum ok\n");
        assert_eq!(self.own.to_vec::<f32>(), vec![0., 1., 2., 3., 4., 5.]);
    }
}

fn call_i32(g: &mut Guest, entry: &str, args: &[&str]) -> i32 {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    g.call(entry, &args).unwrap()[0].parse().unwrap()
}

/// The guest's last error message (the `error` export copies it to offset 1024).
fn last_error(g: &mut Guest) -> String {
    let n = call_i32(g, "error", &[]);
    assert!(n > 0, "no error message");
    n.to_string()
}

fn expect_kind<T>(r: Result<T, GuestError>, kind: GuestErrorKind) -> GuestError {
    match r {
        Err(e) if e.kind == kind => e,
        Err(e) => panic!("expected {kind:?}, got {e}"),
        Ok(_) => panic!("expected {kind:?}, got success"),
    }
}

#[test]
fn a_good_guest_runs_and_prints() {
    Session::new(1 << 30).assert_healthy();
}

#[test]
fn an_infinite_loop_meets_the_deadline() {
    let s = Session::new(1 << 30);
    let limits = Limits {
        deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let mut g = s.guest_with("infinite_loop.wat", limits).unwrap();
    let started = Instant::now();
    let e = expect_kind(g.call("run", &[]), GuestErrorKind::Deadline);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        e.message.contains("deadline") && e.message.contains("looping"),
        "{e}"
    );
    assert!(!e.backtrace.is_empty(), "a trap carries the wasm backtrace");
    s.assert_healthy();
}

#[test]
fn an_infinite_loop_stops_on_interrupt() {
    let s = Session::new(1 << 30);
    let mut g = s.guest("infinite_loop.wat").unwrap();
    let handle = g.interrupt_handle();
    let started = Instant::now();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        handle.interrupt();
    });
    expect_kind(g.call("run", &[]), GuestErrorKind::Interrupted);
    stopper.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    // The same instance can be called again after an interrupt.
    let handle = g.interrupt_handle();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        handle.interrupt();
    });
    expect_kind(g.call("run", &[]), GuestErrorKind::Interrupted);
    s.assert_healthy();
}

#[test]
fn memory_bombs_and_huge_memories_are_refused() {
    let s = Session::new(1 << 30);
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let mut g = s.guest_with("memory_bomb.wat", limits.clone()).unwrap();
    let e = expect_kind(g.call("run", &[]), GuestErrorKind::ResourceLimit);
    assert!(e.message.contains("16 MiB"), "{e}");
    let e = expect_kind(
        s.guest_with("huge_memory.wat", limits),
        GuestErrorKind::ResourceLimit,
    );
    assert!(e.message.contains("limit"), "{e}");
    s.assert_healthy();
}

#[test]
fn unbounded_recursion_traps_with_a_stack_overflow() {
    let s = Session::new(1 << 30);
    let mut g = s.guest("recursion.wat").unwrap();
    let e = expect_kind(g.call("run", &[]), GuestErrorKind::Trap);
    assert!(e.message.contains("stack overflow"), "{e}");
    assert!(
        e.backtrace.iter().any(|f| f.contains("deeper")),
        "{:?}",
        &e.backtrace[..3]
    );
    // The trap is an event too, for `%events guest_trap` and NEURONLAB_LOGS=traps.
    let traps: Vec<String> = s
        .runtime
        .bus()
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::GuestTrap { message } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(traps.len(), 1, "{traps:?}");
    assert!(
        traps[0].starts_with("GuestTrap in recursion") && traps[0].contains("stack overflow"),
        "{}",
        traps[0]
    );
    s.assert_healthy();
}

#[test]
fn forged_freed_reused_and_foreign_handles_are_errors() {
    let s = Session::new(1 << 30);
    let mut g = s.guest("handles.wat").unwrap();
    let handle = ErrorCode::Handle as i32;
    assert_eq!(call_i32(&mut g, "forged", &[]), handle);
    last_error(&mut g);
    assert_eq!(call_i32(&mut g, "null", &[]), handle);
    assert_eq!(call_i32(&mut g, "freed", &[]), handle);
    assert_eq!(call_i32(&mut g, "reused", &[]), handle);
    // A live handle works; the same number in another instance does not.
    let h = call_i32(&mut g, "make", &[]);
    assert!(h > 0);
    assert_eq!(
        call_i32(&mut g, "use", &[&h.to_string()]),
        0,
        "dtype code of f32"
    );
    let mut other = s.guest("handles.wat").unwrap();
    assert_eq!(call_i32(&mut other, "use", &[&h.to_string()]), handle);
    s.assert_healthy();
}

#[test]
fn out_of_bounds_and_overflowing_pointers_are_errors() {
    let s = Session::new(1 << 30);
    let mut g = s.guest("bounds.wat").unwrap();
    let bounds = ErrorCode::Bounds as i32;
    assert_eq!(call_i32(&mut g, "past_end", &[]), bounds);
    assert_eq!(call_i32(&mut g, "overflow", &[]), bounds);
    assert_eq!(call_i32(&mut g, "negative_len", &[]), bounds);
    assert_eq!(
        call_i32(&mut g, "negative_dim", &[]),
        ErrorCode::Invalid as i32
    );
    assert_eq!(
        call_i32(&mut g, "bad_dtype", &[]),
        ErrorCode::Invalid as i32
    );
    assert_eq!(
        call_i32(&mut g, "truncated_attrs", &[]),
        ErrorCode::Invalid as i32
    );
    assert_eq!(call_i32(&mut g, "output_out_of_bounds", &[]), bounds);
    assert_eq!(
        g.live_tensors(),
        0,
        "an unwritable output handle is not issued"
    );
    s.assert_healthy();
}

#[test]
fn a_tensor_larger_than_the_quota_is_refused() {
    let s = Session::new(256 << 20);
    let mut g = s.guest("bounds.wat").unwrap();
    let before = s.runtime.memory().stats(CoreId(0)).unwrap().in_use;
    assert_eq!(call_i32(&mut g, "too_large", &[]), ErrorCode::Memory as i32);
    assert_eq!(s.runtime.memory().stats(CoreId(0)).unwrap().in_use, before);
    assert_eq!(g.live_tensors(), 0);
    s.assert_healthy();
}

#[test]
fn a_trap_after_host_calls_releases_the_guests_tensors() {
    let s = Session::new(1 << 30);
    let before = s.runtime.memory().stats(CoreId(0)).unwrap().in_use;
    let mut g = s.guest("trap_after_host_calls.wat").unwrap();
    let e = expect_kind(g.call("run", &[]), GuestErrorKind::Trap);
    assert!(e.message.contains("unreachable"), "{e}");
    assert_eq!(g.live_tensors(), 2);
    drop(g);
    assert_eq!(s.runtime.memory().stats(CoreId(0)).unwrap().in_use, before);
    s.assert_healthy();
}

#[test]
fn abi_versions_entries_and_imports_are_checked() {
    let s = Session::new(1 << 30);
    let e = expect_kind(s.guest("wrong_abi.wat"), GuestErrorKind::AbiVersion);
    assert!(
        e.message.contains("ABI 2.0") && e.message.contains("speaks ABI 1"),
        "{e}"
    );
    let e = expect_kind(s.guest("no_abi.wat"), GuestErrorKind::AbiVersion);
    assert!(e.message.contains("neuronlab_abi_version"), "{e}");
    let e = expect_kind(s.guest("unknown_import.wat"), GuestErrorKind::Link);
    assert!(
        e.message.contains("neuronlab::launch_missiles")
            && e.message.contains("wasi_snapshot_preview1::fd_write"),
        "{e}"
    );
    let mut g = s.guest("hello.wat").unwrap();
    let e = expect_kind(g.call("main", &[]), GuestErrorKind::MissingEntry);
    assert!(e.message.contains("exports: run"), "{e}");
    let mut h = s.guest("handles.wat").unwrap();
    let e = expect_kind(h.call("use", &["x".into()]), GuestErrorKind::BadArguments);
    assert!(e.message.contains("'x' is not a valid i32"), "{e}");
    let e = expect_kind(
        s.sandbox.load("junk", b"(module (func"),
        GuestErrorKind::Load,
    );
    assert!(e.message.contains("not valid WebAssembly text"), "{e}");
    s.assert_healthy();
}

#[test]
fn compiled_modules_are_cached_on_disk() {
    let dir = std::env::temp_dir().join(format!("neuronlab-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = std::fs::read(fixture("hello.wat")).unwrap();
    let first = Sandbox::new(Some(dir.clone()))
        .unwrap()
        .load("hello.wat", &bytes)
        .unwrap();
    assert_eq!(first.source, ModuleSource::Compiled);
    let second = Sandbox::new(Some(dir.clone()))
        .unwrap()
        .load("hello.wat", &bytes)
        .unwrap();
    assert_eq!(second.source, ModuleSource::DiskCache);
    // A corrupt entry is detected, reported and rebuilt.
    for entry in std::fs::read_dir(dir.join("modules")).unwrap() {
        let path = entry.unwrap().path();
        let mut b = std::fs::read(&path).unwrap();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        std::fs::write(&path, b).unwrap();
    }
    let third = Sandbox::new(Some(dir.clone()))
        .unwrap()
        .load("hello.wat", &bytes)
        .unwrap();
    assert!(
        matches!(&third.source, ModuleSource::Recompiled(why) if why.contains("checksum")),
        "{:?}",
        third.source
    );
    let fourth = Sandbox::new(Some(dir.clone()))
        .unwrap()
        .load("hello.wat", &bytes)
        .unwrap();
    assert_eq!(fourth.source, ModuleSource::DiskCache);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_cell_module_is_loaded_without_a_disk_cache_entry() {
    let dir = std::env::temp_dir().join(format!("neuronlab-uncached-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sandbox = Sandbox::new(Some(dir.clone())).unwrap();
    let entries = || std::fs::read_dir(dir.join("modules")).map_or(0, |d| d.count());
    for _ in 0..2 {
        let module = sandbox.load_file_uncached(&fixture("hello.wat")).unwrap();
        assert_eq!(module.source, ModuleSource::Compiled);
        assert_eq!(entries(), 0, "a cell's module left an entry on disk");
    }
    sandbox.load_file(&fixture("hello.wat")).unwrap();
    assert_eq!(entries(), 1, "a module loaded with the cache is stored");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_interrupt_during_a_long_host_op_cancels_it() {
    let s = Session::new(1 << 30);
    let before = s.runtime.memory().stats(CoreId(0)).unwrap().in_use;
    let mut g = s.guest("long_op.wat").unwrap();
    let handle = g.interrupt_handle();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        handle.interrupt();
    });
    // The op in flight returns ERR_CANCELLED and the guest stops at its next epoch check, or
    // the interrupt lands between ops; either way the guest is stopped.
    let r = g.call("run", &[]);
    stopper.join().unwrap();
    match r {
        Ok(v) => assert_eq!(v, vec![(ErrorCode::Cancelled as i32).to_string()]),
        Err(e) => assert_eq!(e.kind, GuestErrorKind::Interrupted, "{e}"),
    }
    drop(g);
    assert_eq!(s.runtime.memory().stats(CoreId(0)).unwrap().in_use, before);
    s.assert_healthy();
}

#[test]
fn the_deadline_stops_a_guest_inside_a_long_host_op_too() {
    let s = Session::new(1 << 30);
    let limits = Limits {
        deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let mut g = s.guest_with("long_op.wat", limits).unwrap();
    let started = Instant::now();
    let e = expect_kind(g.call("run", &[]), GuestErrorKind::Deadline);
    // A kernel on 64M elements runs for longer than the deadline; it is stopped at its next
    // chunk rather than left to finish, and the guest at its next epoch check.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(e.message.contains("deadline"), "{e}");
    s.assert_healthy();
}

#[test]
fn a_trap_while_tracing_leaves_the_compile_cache_consistent() {
    use neuronlab_core::events::EventKind;
    let s = Session::new(1 << 30);
    let mut g = s.guest("compile_trap.wat").unwrap();
    let f = call_i32(&mut g, "make", &["0"]);
    assert_eq!(f, 1, "the first compiled function is handle 1");
    let e = expect_kind(g.call("call", &["1".into()]), GuestErrorKind::Trap);
    assert!(e.backtrace.iter().any(|f| f.contains("trampoline")), "{e}");
    // The next call traces again, compiles once, and then hits the cache.
    assert_eq!(call_i32(&mut g, "call", &["1"]), 1);
    assert_eq!(call_i32(&mut g, "call", &["1"]), 1);
    let events = s.runtime.bus().events();
    let compiles = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Compile(_)))
        .count();
    let hits = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::CacheHit { function, .. } if function == "f"))
        .count();
    assert_eq!((compiles, hits), (1, 1));
    // Something that is not a function traps when it is called, and names the trampoline.
    let bad = call_i32(&mut g, "make", &["7"]);
    let e = expect_kind(g.call("call", &[bad.to_string()]), GuestErrorKind::Trap);
    assert!(e.backtrace.iter().any(|f| f.contains("trampoline")), "{e}");
    // Negative indices and unknown function handles are errors, not traps.
    assert_eq!(call_i32(&mut g, "make", &["-3"]), ErrorCode::Invalid as i32);
    assert_eq!(call_i32(&mut g, "call", &["42"]), ErrorCode::Handle as i32);
    assert_eq!(call_i32(&mut g, "call", &["1"]), 1);
    s.assert_healthy();
}

/// The guest's last error message: the fixture's `error` export prints it to stderr.
fn dist_error(s: &Session, g: &mut Guest) -> String {
    s.output.lock().unwrap().clear();
    assert!(call_i32(g, "error", &[]) > 0, "no error message");
    s.output
        .lock()
        .unwrap()
        .iter()
        .filter_map(|o| match o {
            GuestOutput::Stderr(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn dist_calls_in_a_plain_run_are_a_world_of_one_and_bad_ones_are_errors() {
    let s = Session::new(1 << 30);
    let mut g = s.guest("dist.wat").unwrap();
    assert_eq!(call_i32(&mut g, "world_size", &[]), 1);
    assert_eq!(g.call("sum_of_ranks", &[]).unwrap(), vec!["1"]);
    let cases: [(&str, ErrorCode, &str); 8] = [
        (
            "tensor_as_group",
            ErrorCode::Handle,
            "the handle is a tensor, but a process group is expected",
        ),
        (
            "group_as_tensor",
            ErrorCode::Handle,
            "the handle is a process group, not a tensor",
        ),
        (
            "bad_op",
            ErrorCode::Invalid,
            "'bogus' is not a collective; dist_collective takes all_reduce",
        ),
        (
            "bad_dim",
            ErrorCode::Invalid,
            "all_gather: dim 3 is out of range for a tensor of 1 dim(s) (f32[1])",
        ),
        (
            "repeated_rank",
            ErrorCode::Invalid,
            "a group of 2 ranks cannot exist in a world of 1",
        ),
        (
            "rank_outside_world",
            ErrorCode::Invalid,
            "rank 5 in process group [5] is outside the world of 1",
        ),
        (
            "mesh_of_wrong_size",
            ErrorCode::Invalid,
            "(this launch has 1 rank(s): --nproc sets it)",
        ),
        ("bad_pointer", ErrorCode::Bounds, "outside guest memory"),
    ];
    for (entry, code, message) in cases {
        assert_eq!(call_i32(&mut g, entry, &[]), code as i32, "{entry}");
        let e = dist_error(&s, &mut g);
        assert!(e.contains(message), "{entry}: {e}");
    }
    // After every error the guest and the host still work.
    assert_eq!(g.call("sum_of_ranks", &[]).unwrap(), vec!["1"]);
    s.assert_healthy();
}

#[test]
fn vars_are_shared_by_the_guests_of_a_session_and_bad_ones_are_errors() {
    let s = Session::new(1 << 30);
    let module = s.sandbox.load_file(&fixture("vars.wat")).unwrap();
    let shared = Shared::default();
    let vars = shared.vars.clone();
    let instantiate = || {
        let output = s.output.clone();
        s.sandbox
            .instantiate_rank(
                &module,
                World::single(s.runtime.clone(), CoreId(0)).rank(0),
                shared.clone(),
                Limits::default(),
                Box::new(move |o| output.lock().unwrap().push(o)),
            )
            .unwrap()
    };

    // One guest sets a tensor and a value; the store holds them after it ends.
    let mut first = instantiate();
    assert_eq!(g_f32(&mut first, "get_x"), -1.0, "no x yet");
    assert_eq!(call_i32(&mut first, "set_x", &["3.5"]), 0);
    assert_eq!(call_i32(&mut first, "set_n", &[]), 0);
    assert_eq!(call_i32(&mut first, "set_v", &[]), 0);
    drop(first);
    assert_eq!(vars.names(), ["n", "v", "x"]);
    assert_eq!(vars.get_tensor("x").unwrap().to_vec::<f32>(), vec![3.5]);
    assert!(matches!(vars.get("n"), Some(Var::Value { ty, text }) if ty == "i64" && text == "42"));
    assert!(matches!(vars.get("v"), Some(Var::Local { ty }) if ty == "Vec<i32>"));

    // A second guest of the session reads them.
    let mut second = instantiate();
    assert_eq!(g_f32(&mut second, "get_x"), 3.5);
    s.output.lock().unwrap().clear();
    assert_eq!(call_i32(&mut second, "show_value", &[]), 6);
    assert_eq!(s.stdout(), "i64\n42");
    assert_eq!(call_i32(&mut second, "value_len", &[]), 6);
    // A write replaces the variable for everyone.
    assert_eq!(call_i32(&mut second, "set_x", &["-2"]), 0);
    assert_eq!(vars.get_tensor("x").unwrap().to_vec::<f32>(), vec![-2.0]);

    let cases: [(&str, ErrorCode, &str); 10] = [
        (
            "unknown_name",
            ErrorCode::Invalid,
            "there is no variable `nope`; the variables are: n, v, x",
        ),
        ("bad_name", ErrorCode::Invalid, "cannot start with a digit"),
        (
            "value_as_tensor",
            ErrorCode::Invalid,
            "the variable `n` is a value of type i64, not a tensor",
        ),
        (
            "tensor_as_value",
            ErrorCode::Invalid,
            "the variable `x` is a tensor (f32[1]), not a plain value",
        ),
        (
            "local_as_value",
            ErrorCode::Invalid,
            "the variable `v` (Vec<i32>) stayed local to the cell that made it",
        ),
        ("bad_kind", ErrorCode::Invalid, "7 is not a kind of value"),
        ("no_newline", ErrorCode::Invalid, "`<type>\\n<text>`"),
        ("bad_handle", ErrorCode::Handle, "handle"),
        ("bad_pointer", ErrorCode::Bounds, "outside guest memory"),
        ("bad_out_pointer", ErrorCode::Bounds, "outside guest memory"),
    ];
    for (entry, code, message) in cases {
        assert_eq!(call_i32(&mut second, entry, &[]), code as i32, "{entry}");
        let e = dist_error(&s, &mut second);
        assert!(e.contains(message), "{entry}: {e}");
    }
    // Failed calls changed nothing, and the guest and the host still work.
    assert_eq!(vars.names(), ["n", "v", "x"]);
    assert_eq!(g_f32(&mut second, "get_x"), -2.0);
    drop(second);

    // A plain instantiate has a store of its own.
    let mut alone = s.guest("vars.wat").unwrap();
    assert_eq!(g_f32(&mut alone, "get_x"), -1.0);
    s.assert_healthy();
}

fn g_f32(g: &mut Guest, entry: &str) -> f32 {
    g.call(entry, &[]).unwrap()[0].parse().unwrap()
}

#[test]
fn display_requests_are_checked_and_bad_ones_are_the_guests_error() {
    let s = Session::new(1 << 30);
    let mut g = s.guest("display.wat").unwrap();
    let invalid = ErrorCode::Invalid as i32;
    let statuses: Vec<i32> = (0..7)
        .map(|which| call_i32(&mut g, "show", &[&which.to_string()]))
        .collect();
    assert_eq!(statuses, [0, invalid, 0, invalid, 0, invalid, invalid]);
    let outputs = s.output.lock().unwrap().clone();
    assert_eq!(
        outputs.len(),
        3,
        "only the good requests reach the front end: {outputs:?}"
    );
    assert!(matches!(&outputs[0], GuestOutput::DisplayIdNext { id, update: false } if id == "p"));
    assert!(matches!(
        outputs[1],
        GuestOutput::ClearOutput { wait: true }
    ));
    assert!(
        matches!(&outputs[2], GuestOutput::Plot(p) if p.title == "t" && p.series[0].y.len() == 2)
    );
    // The last failure (the truncated plot spec) left a message for the guest.
    assert!(call_i32(&mut g, "error", &[]) > 0);
    s.assert_healthy();
}

#[test]
fn a_reported_failure_names_the_trap_and_lasts_one_call() {
    let s = Session::new(1 << 30);
    let mut g = s.guest("fail.wat").expect("fail.wat loads");
    let e = expect_kind(g.call("report_and_trap", &[]), GuestErrorKind::Trap);
    assert_eq!(e.name(), "OpError");
    assert_eq!(
        e.summary(),
        "add: shapes [2, 3] and [4] cannot be broadcast"
    );
    assert_eq!(
        e.to_string(),
        "OpError: add: shapes [2, 3] and [4] cannot be broadcast\n  at src/cell.rs:3:11"
    );

    // A call that returns normally drops its report; the next trap is a plain trap.
    assert_eq!(call_i32(&mut g, "report_and_return", &[]), 0);
    let e = expect_kind(g.call("trap", &[]), GuestErrorKind::Trap);
    assert_eq!(e.name(), "GuestTrap");
    assert!(e.reported.is_none());

    assert_eq!(call_i32(&mut g, "bad_name", &[]), ErrorCode::Invalid as i32);
    assert_eq!(
        g.error_in_last_call().map(|(code, _)| code),
        Some(ErrorCode::Invalid)
    );
    assert_eq!(call_i32(&mut g, "huge", &[]), ErrorCode::Bounds as i32);
    s.assert_healthy();
}

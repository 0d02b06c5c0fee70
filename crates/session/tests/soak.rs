//! A soak test: 1,000 cells in one session, `%%wat` cells, Rust cells, a compiled function,
//! errors of every kind, interrupts and magics mixed, as a long notebook session would. The
//! host's memory (its resident set and every core's tensor bytes) and the session's state stay
//! flat: nothing a cell does outlives what it left on purpose. The figures are printed.

use std::time::{Duration, Instant};

use neuronlab_core::device::topology::Topology;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_sandbox::Limits;
use neuronlab_session::{Outcome, Session, SessionOptions};

const HELLO: &str = concat!(
    "%%wat\n",
    include_str!("../../sandbox/tests/fixtures/hello.wat")
);
const LOOP: &str = r#"%%wat
(module
  (memory (export "memory") 1)
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10003))
  (func (export "run") (loop $l (br $l))))"#;

/// The cells, cycled; each says how it must end.
const CELLS: &[(&str, Outcome)] = &[
    (HELLO, Outcome::Ok),
    ("%events --last 3", Outcome::Ok),
    ("%mem", Outcome::Ok),
    ("%run wat1.nothing", Outcome::Error),
    ("%%wat\n(module (oops", Outcome::Error),
    ("%nope", Outcome::Error),
    (LOOP, Outcome::Interrupted),
    ("%vars", Outcome::Ok),
];

/// Rust cells, run every 50th cell (they build with cargo, so they are the slow ones).
const RUST: &[(&str, Outcome)] = &[
    ("let kept = ones(&[256])?;", Outcome::Ok),
    (
        "fn double(x: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> { Ok(vec![x[0].add(&x[0])?]) }",
        Outcome::Ok,
    ),
    (
        "let f = compile(\"double\", double)?;\nlet y = f.call1(&[&kept])?;\ny.sum()?.item::<f32>()?",
        Outcome::Ok,
    ),
    ("let bad = zeros(&[3])?.add(&zeros(&[4])?)?;", Outcome::Error),
    ("panic!(\"on purpose\");", Outcome::Error),
];

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn tensor_bytes(s: &Session) -> u64 {
    let rt = s.runtime();
    rt.topology()
        .cores()
        .map(|c| rt.memory().stats(c).unwrap().in_use)
        .sum()
}

#[test]
#[ignore = "scripts/test runs it on its own and prints its figures"]
fn a_thousand_mixed_cells_leave_the_host_flat() {
    // Cells build in the machine's shared cell target, as every session's do.
    let work = std::env::temp_dir().join(format!("neuronlab-soak-{}", std::process::id()));
    let runtime = RuntimeOptions {
        topology: Topology::preset("trn2.3xlarge", None).unwrap(),
        host_limit: 4 << 30,
    };
    let limits = Limits {
        deadline: Duration::from_secs(120),
        ..Limits::default()
    };
    let mut s = Session::new(SessionOptions {
        work_dir: Some(work.clone()),
        ..SessionOptions::new(runtime, limits)
    })
    .unwrap();
    let interrupter = s.interrupter();
    let total = 1000;
    let started = Instant::now();
    let (mut warm_rss, mut warm_tensors, mut warm_vars) = (0, 0, 0);
    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for n in 0..total {
        let (code, want) = if n % 50 == 25 {
            RUST[(n / 50) % RUST.len()]
        } else {
            CELLS[n % CELLS.len()]
        };
        let stop = (want == Outcome::Interrupted).then(|| {
            let interrupter = interrupter.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                interrupter.interrupt();
            })
        });
        let mut errors = Vec::new();
        let outcome = s.execute(code, &mut |o| {
            if let neuronlab_session::Output::Error(e) = o {
                errors.push(format!("{}: {}", e.ename, e.evalue));
            }
        });
        if let Some(t) = stop {
            t.join().unwrap();
        }
        assert_eq!(outcome, want, "cell {n} ({code:?}): {errors:?}");
        *counts.entry(format!("{outcome:?}")).or_default() += 1;
        if n == 200 {
            // After the first rounds of every kind: what the session holds from now on.
            (warm_rss, warm_tensors, warm_vars) =
                (resident_bytes(), tensor_bytes(&s), s.vars().len());
        }
    }
    let (rss, tensors, vars) = (resident_bytes(), tensor_bytes(&s), s.vars().len());
    println!(
        "soak: {total} cells in {:.1} s ({counts:?}); resident {:.1} MiB at cell 200, {:.1} MiB \
         at the end; tensor bytes {warm_tensors} -> {tensors}; variables {warm_vars} -> {vars}; \
         loaded modules {}",
        started.elapsed().as_secs_f64(),
        warm_rss as f64 / (1 << 20) as f64,
        rss as f64 / (1 << 20) as f64,
        s.loaded_modules().count(),
    );
    assert_eq!(tensors, warm_tensors, "tensor bytes grew");
    assert_eq!(vars, warm_vars, "variables grew");
    assert!(
        s.loaded_modules().count() <= 3,
        "every re-run %%wat cell kept an instance"
    );
    assert!(
        rss < warm_rss + (64 << 20),
        "resident memory grew from {warm_rss} to {rss} bytes"
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&work);
}

//! The SPMD launcher with real guests (the `dist.wat` fixture): N instances of one module,
//! one thread and one core each, meeting in collectives; deadlocks and departed ranks end with
//! errors that name the op, the group and the missing ranks; an interrupt stops every rank;
//! and the process keeps working after each.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neuronlab_core::device::topology::Topology;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::Runtime;
use neuronlab_dist::WorldOptions;
use neuronlab_sandbox::spmd::{launch, RankResult, SpmdInterrupt, SpmdOptions};
use neuronlab_sandbox::Shared;
use neuronlab_sandbox::{GuestErrorKind, GuestModule, Limits, Sandbox};

struct Lab {
    sandbox: Sandbox,
    module: GuestModule,
    runtime: Arc<Runtime>,
}

impl Lab {
    fn new() -> Lab {
        let sandbox = Sandbox::new(None).unwrap();
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dist.wat");
        let module = sandbox.load_file(&path).unwrap();
        let runtime = Arc::new(Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.48xlarge", Some(2)).unwrap(),
            host_limit: 4 << 30,
        }));
        Lab {
            sandbox,
            module,
            runtime,
        }
    }

    fn launch(&self, nproc: u32, entry: &str, timeout: Duration) -> Vec<RankResult> {
        self.launch_with(nproc, entry, timeout, &SpmdInterrupt::new())
    }

    fn launch_with(
        &self,
        nproc: u32,
        entry: &str,
        timeout: Duration,
        interrupt: &SpmdInterrupt,
    ) -> Vec<RankResult> {
        let options = SpmdOptions {
            nproc,
            entry: entry.into(),
            args: vec![],
            limits: Limits::default(),
            world: WorldOptions { timeout },
            processes: None,
        };
        launch(
            &self.sandbox,
            &self.module,
            self.runtime.clone(),
            Shared::default(),
            &options,
            Arc::new(|_, _| {}),
            interrupt,
        )
        .unwrap()
    }

    /// Every rank of a world of `n` gets the sum of rank + 1 over the world.
    fn assert_sums(&self, n: u32) {
        let results = self.launch(n, "sum_of_ranks", Duration::from_secs(60));
        let expected = (n * (n + 1) / 2).to_string();
        assert_eq!(results.len(), n as usize);
        for (rank, r) in results.iter().enumerate() {
            assert_eq!(r.rank, rank as u32);
            let values = r
                .result
                .as_ref()
                .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            assert_eq!(values[0], expected, "rank {rank} of {n}");
        }
    }
}

/// The status each rank's entry returned.
fn statuses(results: &[RankResult]) -> Vec<i32> {
    results
        .iter()
        .map(|r| r.result.as_ref().unwrap()[0].parse().unwrap())
        .collect()
}

#[test]
fn ranks_from_1_to_64_meet_in_an_all_reduce() {
    let lab = Lab::new();
    for n in [1, 2, 3, 8, 64] {
        lab.assert_sums(n);
    }
}

#[test]
fn a_deadlock_times_out_on_every_rank_and_the_process_goes_on() {
    let lab = Lab::new();
    let seq = lab.runtime.bus().next_seq();
    let results = lab.launch(4, "deadlock", Duration::from_millis(300));
    // Each barrier returns ERR_COLLECTIVE (-10) to the guest, which returns it.
    assert_eq!(statuses(&results), [-10; 4]);
    assert_eq!(
        lab.runtime.bus().since(seq).len(),
        0,
        "no collective completed"
    );
    // The process still works: a new launch on the same runtime runs.
    lab.assert_sums(4);
}

#[test]
fn deadlock_messages_name_the_op_group_and_missing_ranks() {
    use neuronlab_dist::{ProcessGroup, World};
    // The same deadlock as the fixture's, driven directly to read the messages.
    let lab = Lab::new();
    let world = World::new(
        lab.runtime.clone(),
        4,
        WorldOptions {
            timeout: Duration::from_millis(300),
        },
    )
    .unwrap();
    let messages: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|r| {
                let world = world.clone();
                s.spawn(move || {
                    let mut comm = world.rank(r);
                    let group = if r == 0 {
                        ProcessGroup::new(vec![0, 1], 4, None).unwrap()
                    } else {
                        world.world_group()
                    };
                    let e = comm.barrier(&group).unwrap_err().to_string();
                    world.depart(r, "finished".into());
                    e
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Both groups time out at about the same moment; a rank that has already given up and
    // returned is reported as such instead.
    for m in &messages[1..] {
        assert!(
            m.contains("barrier #1 on group [0, 1, 2, 3]")
                && (m.contains(
                    "timed out after 0.3 s: rank(s) 0 never arrived while rank(s) 1, 2, 3 waited"
                ) || m
                    .contains("rank 0 finished without reaching it; rank(s) 1, 2, 3 are waiting")),
            "{m}"
        );
    }
    assert!(
        messages[0].contains("barrier #1 on group [0, 1]") && messages[0].contains("rank"),
        "{}",
        messages[0]
    );
}

#[test]
fn a_rank_that_returns_early_fails_the_others_at_once() {
    let lab = Lab::new();
    let started = Instant::now();
    let results = lab.launch(3, "rank0_leaves", Duration::from_secs(60));
    assert_eq!(statuses(&results), [0, -10, -10]);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "reported without waiting for the timeout"
    );
}

#[test]
fn an_interrupt_stops_every_waiting_rank() {
    let lab = Lab::new();
    let interrupt = SpmdInterrupt::new();
    let trigger = interrupt.clone();
    let started = Instant::now();
    let results = std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            trigger.interrupt();
        });
        lab.launch_with(4, "deadlock", Duration::from_secs(60), &interrupt)
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "stopped before the timeout"
    );
    for r in &results {
        // A rank stops either inside the barrier (ERR_CANCELLED, -7, returned by the guest)
        // or at its next epoch check (an interrupted guest).
        match &r.result {
            Ok(values) => assert_eq!(values, &["-7"], "rank {}", r.rank),
            // Interrupted after the barrier gave up: the error says what it waited for.
            Err(e) => {
                assert_eq!(e.kind, GuestErrorKind::Interrupted, "rank {}: {e}", r.rank);
                assert!(
                    e.message
                        .starts_with("the guest was interrupted while waiting in barrier")
                        && e.message.contains("for rank(s) "),
                    "rank {}: {e}",
                    r.rank
                );
            }
        }
    }
    lab.assert_sums(2);
}

#[test]
fn more_ranks_than_cores_is_refused_before_anything_starts() {
    let lab = Lab::new();
    let options = SpmdOptions {
        nproc: 65,
        entry: "sum_of_ranks".into(),
        args: vec![],
        limits: Limits::default(),
        world: WorldOptions::default(),
        processes: None,
    };
    let e = launch(
        &lab.sandbox,
        &lab.module,
        lab.runtime.clone(),
        Shared::default(),
        &options,
        Arc::new(|_, _| {}),
        &SpmdInterrupt::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("cannot start 65 rank(s)"), "{e}");
}

//! Collectives between ranks of one process, as a launcher drives them: one thread per rank,
//! real data, results checked exactly against a single-process reference written here with
//! plain loops (not with the kernels under test), for group sizes 1, 2, 3, 4, 8 and 32; and
//! every failure a user can cause (disagreeing ranks, a rank outside the group, a rank that
//! never arrives) ends with an error that names the op, the group and the ranks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use half::{bf16, f16};
use neuronlab_core::device::topology::Topology;
use neuronlab_core::events::{chrome_trace, EventKind};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::Buffer;
use neuronlab_core::{DType, Error, Runtime, Tensor};
use neuronlab_dist::{ProcessGroup, RankComm, ReduceOp, World, WorldOptions};

const SIZES: [u32; 6] = [1, 2, 3, 4, 8, 32];
const DTYPES: [DType; 8] = [
    DType::F32,
    DType::Bf16,
    DType::F16,
    DType::F64,
    DType::I64,
    DType::I32,
    DType::U8,
    DType::Bool,
];
const OPS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Avg,
    ReduceOp::Product,
    ReduceOp::Min,
    ReduceOp::Max,
];

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(RuntimeOptions {
        // 64 logical cores on 16 chips: groups both on one chip and across NeuronLink.
        topology: Topology::preset("trn2.48xlarge", Some(2)).unwrap(),
        host_limit: 8 << 30,
    }))
}

/// Runs `f` as every rank of a world of `n` ranks, each on its own thread, and returns the
/// ranks' results in rank order. A rank that returns is marked as departed, as the launcher
/// does.
fn spmd<R: Send>(
    rt: &Arc<Runtime>,
    n: u32,
    timeout: Duration,
    f: impl Fn(&mut RankComm) -> R + Sync,
) -> Vec<R> {
    let world = World::new(rt.clone(), n, WorldOptions { timeout }).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (world, f) = (world.clone(), &f);
                s.spawn(move || {
                    let mut comm = world.rank(r);
                    let out = f(&mut comm);
                    world.depart(r, "finished".into());
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

const LONG: Duration = Duration::from_secs(60);

/// Deterministic pseudo-random values in [-3, 3) for (seed, rank).
fn values(seed: u64, rank: u32, len: usize) -> Vec<f64> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(u64::from(rank).wrapping_mul(1442695040888963407) + 1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 6.0 - 3.0
        })
        .collect()
}

/// A buffer of `dtype` from `v`: floats as they are (rounded), integers scaled to spread
/// over their range (u8 wraps), bools by sign.
fn buffer(dtype: DType, v: &[f64]) -> Buffer {
    match dtype {
        DType::F32 => Buffer::F32(v.iter().map(|&x| x as f32).collect()),
        DType::Bf16 => Buffer::Bf16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
        DType::F16 => Buffer::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        DType::F64 => Buffer::F64(v.to_vec()),
        DType::I64 => Buffer::I64(v.iter().map(|&x| (x * 1e6) as i64).collect()),
        DType::I32 => Buffer::I32(v.iter().map(|&x| (x * 1000.0) as i32).collect()),
        DType::U8 => Buffer::U8(v.iter().map(|&x| (x * 40.0) as i64 as u8).collect()),
        DType::Bool => Buffer::Bool(v.iter().map(|&x| x > 0.0).collect()),
    }
}

fn tensor(comm: &RankComm, dtype: DType, seed: u64, shape: &[usize]) -> Tensor {
    let v = values(seed, comm.rank(), shape.iter().product());
    comm.runtime()
        .tensor_on(comm.core(), buffer(dtype, &v), shape)
        .unwrap()
}

/// The single-process reference of a reduction: the ranks' buffers folded in `order`, one
/// step at a time, in each dtype's arithmetic (16-bit floats step in f32 and round).
fn reference_reduce(op: ReduceOp, dtype: DType, seed: u64, order: &[u32], len: usize) -> Buffer {
    let inputs: Vec<Buffer> = order
        .iter()
        .map(|&r| buffer(dtype, &values(seed, r, len)))
        .collect();
    let n = order.len();
    macro_rules! fold {
        ($variant:ident, $step:expr, $finish:expr) => {{
            let parts: Vec<&Vec<_>> = inputs
                .iter()
                .map(|b| match b {
                    Buffer::$variant(v) => v,
                    _ => unreachable!(),
                })
                .collect();
            Buffer::$variant(
                (0..len)
                    .map(|i| {
                        let acc = parts[1..].iter().fold(parts[0][i], |a, p| $step(a, p[i]));
                        $finish(acc)
                    })
                    .collect(),
            )
        }};
    }
    fn float_step(op: ReduceOp) -> impl Fn(f64, f64) -> f64 {
        move |a, b| match op {
            ReduceOp::Sum | ReduceOp::Avg => a + b,
            ReduceOp::Product => a * b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
    let f = float_step(op);
    let avg = |x: f64| if op == ReduceOp::Avg { x / n as f64 } else { x };
    match dtype {
        DType::F32 => fold!(
            F32,
            |a: f32, b: f32| f(f64::from(a), f64::from(b)) as f32,
            |x: f32| if op == ReduceOp::Avg { x / n as f32 } else { x }
        ),
        DType::F64 => fold!(F64, |a: f64, b: f64| f(a, b), avg),
        DType::Bf16 => fold!(
            Bf16,
            |a: bf16, b: bf16| bf16::from_f32(
                f(f64::from(a.to_f32()), f64::from(b.to_f32())) as f32
            ),
            |x: bf16| if op == ReduceOp::Avg {
                bf16::from_f32(x.to_f32() / n as f32)
            } else {
                x
            }
        ),
        DType::F16 => fold!(
            F16,
            |a: f16, b: f16| f16::from_f32(f(f64::from(a.to_f32()), f64::from(b.to_f32())) as f32),
            |x: f16| if op == ReduceOp::Avg {
                f16::from_f32(x.to_f32() / n as f32)
            } else {
                x
            }
        ),
        DType::I64 => fold!(I64, |a: i64, b: i64| int_step(op, a, b), |x| x),
        DType::I32 => fold!(
            I32,
            |a: i32, b: i32| int_step(op, a.into(), b.into()) as i32,
            |x| x
        ),
        DType::U8 => fold!(
            U8,
            |a: u8, b: u8| int_step(op, a.into(), b.into()) as u8,
            |x| x
        ),
        DType::Bool => fold!(
            Bool,
            |a: bool, b: bool| match op {
                ReduceOp::Sum | ReduceOp::Max => a || b,
                _ => a && b,
            },
            |x| x
        ),
    }
}

/// Integer steps; the truncating cast after the i64 result is the wrap of narrower types.
fn int_step(op: ReduceOp, a: i64, b: i64) -> i64 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(b),
        ReduceOp::Product => a.wrapping_mul(b),
        ReduceOp::Min => a.min(b),
        ReduceOp::Max => a.max(b),
    }
}

fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::Bf16 | DType::F16 | DType::F64)
}

#[test]
fn all_reduce_every_op_and_dtype_matches_the_reference_on_every_group_size() {
    let rt = runtime();
    let shape = [3, 5];
    for n in SIZES {
        let results = spmd(&rt, n, LONG, |comm| {
            let group = comm.world().world_group();
            let mut out = Vec::new();
            for (i, dtype) in DTYPES.into_iter().enumerate() {
                let t = tensor(comm, dtype, 100 + i as u64, &shape);
                for op in OPS {
                    if op == ReduceOp::Avg && !is_float(dtype) {
                        continue;
                    }
                    let r = comm.all_reduce(&group, &t, op).unwrap();
                    assert_eq!(r.device(), comm.core(), "results live on the rank's core");
                    out.push((dtype, op, r.to_buffer()));
                }
            }
            out
        });
        let order: Vec<u32> = (0..n).collect();
        for rank_results in &results {
            for (i, dtype) in DTYPES.into_iter().enumerate() {
                for op in OPS {
                    if op == ReduceOp::Avg && !is_float(dtype) {
                        continue;
                    }
                    let expected = reference_reduce(op, dtype, 100 + i as u64, &order, 15);
                    let got = &rank_results
                        .iter()
                        .find(|(d, o, _)| *d == dtype && *o == op)
                        .unwrap()
                        .2;
                    assert_eq!(
                        got.to_le_bytes(),
                        expected.to_le_bytes(),
                        "all_reduce {op} {dtype} on {n} ranks"
                    );
                }
            }
        }
    }
}

#[test]
fn avg_is_refused_for_integers_on_every_rank() {
    let rt = runtime();
    let errors = spmd(&rt, 3, LONG, |comm| {
        let group = comm.world().world_group();
        let t = tensor(comm, DType::I32, 1, &[4]);
        comm.all_reduce(&group, &t, ReduceOp::Avg)
            .unwrap_err()
            .to_string()
    });
    for e in errors {
        assert!(e.contains("avg is defined for float dtypes only"), "{e}");
        assert!(e.contains("all_reduce"), "{e}");
    }
}

#[test]
fn gather_scatter_all_to_all_and_broadcast_match_the_reference() {
    let rt = runtime();
    for n in SIZES {
        for dtype in [DType::F32, DType::Bf16, DType::I64] {
            // Dim 1 of size 7 is uneven over most group sizes (torch.chunk rules).
            let shape = [2, 7, 3];
            let results = spmd(&rt, n, LONG, |comm| {
                let group = comm.world().world_group();
                let t = tensor(comm, dtype, 7, &shape);
                // Shards that differ in size along dim 1: rank r holds r % 3 + 1 rows.
                let rows = comm.rank() as usize % 3 + 1;
                let uneven = tensor(comm, dtype, 8, &[2, rows, 3]);
                let gathered = comm.all_gather(&group, &uneven, 1).unwrap();
                let scattered = comm.reduce_scatter(&group, &t, ReduceOp::Sum, 1).unwrap();
                let exchanged = comm.all_to_all(&group, &t, 1, 0).unwrap();
                let src = n - 1;
                let broadcast = comm.broadcast(&group, &t, src).unwrap();
                [gathered, scattered, exchanged, broadcast]
                    .map(|t| (t.shape().to_vec(), t.to_vec::<f64>()))
            });
            check_gather_scatter(n, dtype, &shape, &results);
        }
    }
}

/// Element `[a, b, c]` of a tensor of `shape` from rank `rank`'s data with `seed`.
fn element(dtype: DType, seed: u64, rank: u32, shape: &[usize], idx: [usize; 3]) -> f64 {
    let v = values(seed, rank, shape.iter().product());
    let flat = (idx[0] * shape[1] + idx[1]) * shape[2] + idx[2];
    let t = buffer(dtype, &v[flat..=flat]);
    match t {
        Buffer::F32(x) => f64::from(x[0]),
        Buffer::Bf16(x) => x[0].to_f64(),
        Buffer::I64(x) => x[0] as f64,
        _ => unreachable!(),
    }
}

/// torch.chunk sizes, written out: chunks of ceil(len/n), the rest empty.
fn chunks(len: usize, n: usize) -> Vec<usize> {
    let c = len.div_ceil(n);
    (0..n).map(|i| len.saturating_sub(i * c).min(c)).collect()
}

type Results = Vec<[(Vec<usize>, Vec<f64>); 4]>;

fn check_gather_scatter(n: u32, dtype: DType, shape: &[usize], results: &Results) {
    let what = format!("{dtype} on {n} ranks");
    let sizes = chunks(shape[1], n as usize);
    let offsets: Vec<usize> = sizes
        .iter()
        .scan(0, |acc, &s| {
            *acc += s;
            Some(*acc - s)
        })
        .collect();
    let full_sum = match reference_reduce(ReduceOp::Sum, dtype, 7, &(0..n).collect::<Vec<_>>(), 42)
    {
        Buffer::F32(v) => v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
        Buffer::Bf16(v) => v.iter().map(|x| x.to_f64()).collect(),
        Buffer::I64(v) => v.iter().map(|&x| x as f64).collect(),
        _ => unreachable!(),
    };
    for (rank, [gathered, scattered, exchanged, broadcast]) in results.iter().enumerate() {
        // all_gather of uneven shards: every rank's rows in rank order.
        let mut expected = Vec::new();
        let total_rows: usize = (0..n).map(|r| r as usize % 3 + 1).sum();
        for a in 0..2 {
            for src in 0..n {
                let rows = src as usize % 3 + 1;
                for b in 0..rows {
                    for c in 0..3 {
                        expected.push(element(dtype, 8, src, &[2, rows, 3], [a, b, c]));
                    }
                }
            }
        }
        assert_eq!(gathered.0, [2, total_rows, 3], "all_gather shape, {what}");
        assert_eq!(gathered.1, expected, "all_gather, {what}");

        // reduce_scatter along dim 1: this rank's torch.chunk rows of the sum.
        let (off, len) = (offsets[rank], sizes[rank]);
        assert_eq!(scattered.0, [2, len, 3], "reduce_scatter shape, {what}");
        let expected: Vec<f64> = (0..2)
            .flat_map(|a| {
                (off..off + len).flat_map(move |b| (0..3).map(move |c| (a * 7 + b) * 3 + c))
            })
            .map(|i| full_sum[i])
            .collect();
        assert_eq!(scattered.1, expected, "reduce_scatter, {what}");

        // all_to_all split along dim 1, concatenated along dim 0: chunk `rank` of every rank.
        assert_eq!(
            exchanged.0,
            [2 * n as usize, len, 3],
            "all_to_all shape, {what}"
        );
        let expected: Vec<f64> = (0..n)
            .flat_map(|src| {
                (0..2).flat_map(move |a| {
                    (off..off + len).flat_map(move |b| {
                        (0..3).map(move |c| element(dtype, 7, src, &[2, 7, 3], [a, b, c]))
                    })
                })
            })
            .collect();
        assert_eq!(exchanged.1, expected, "all_to_all, {what}");

        // broadcast from the last rank.
        let expected: Vec<f64> = (0..2)
            .flat_map(|a| {
                (0..7).flat_map(move |b| {
                    (0..3).map(move |c| element(dtype, 7, n - 1, shape, [a, b, c]))
                })
            })
            .collect();
        assert_eq!(broadcast.1, expected, "broadcast, {what}");
    }
}

#[test]
fn subgroups_fold_in_their_own_ring_order_and_emit_events_per_rank() {
    let rt = runtime();
    let seq0 = rt.bus().next_seq();
    // Two disjoint groups in one world of 8, one in a shuffled order, running at once.
    let results = spmd(&rt, 8, LONG, |comm| {
        let ranks = if comm.rank() % 2 == 1 {
            vec![1, 3, 5, 7]
        } else {
            vec![6, 2, 0, 4]
        };
        let group = ProcessGroup::new(ranks.clone(), 8, Some("pairs".into())).unwrap();
        let t = tensor(comm, DType::F32, 3, &[33]);
        let r = comm.all_reduce(&group, &t, ReduceOp::Sum).unwrap();
        comm.barrier(&comm.world().world_group()).unwrap();
        (ranks, r.to_buffer())
    });
    for (ranks, got) in results {
        let expected = reference_reduce(ReduceOp::Sum, DType::F32, 3, &ranks, 33);
        assert_eq!(got.to_le_bytes(), expected.to_le_bytes(), "group {ranks:?}");
    }
    let events = rt.bus().since(seq0);
    let collectives: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Collective(c) => Some((e.core.0, c.clone())),
            _ => None,
        })
        .collect();
    // One all_reduce and one barrier per rank, each on the rank's own core.
    assert_eq!(collectives.len(), 16);
    for rank in 0..8u32 {
        let mine: Vec<_> = collectives
            .iter()
            .filter(|(core, _)| *core == rank)
            .collect();
        assert_eq!(mine.len(), 2, "rank {rank}");
        let ar = &mine.iter().find(|(_, c)| c.op == "all_reduce").unwrap().1;
        assert_eq!(ar.bytes, 33 * 4);
        assert_eq!(ar.mesh_dim.as_deref(), Some("pairs"));
        assert!(ar.modeled_us > 0.0 && ar.host_us >= 0.0);
    }
    // In the Chrome trace, each rank's collectives are slices on its own track, measured on the
    // host (pid 1), and modeled on the device (pid 2) on the track of the rank's collectives
    // (2^20 + rank), beside its compute.
    let trace = chrome_trace(&events);
    for pid in [1, 2] {
        for rank in 0..8u64 {
            let tid = if pid == 1 { rank } else { (1 << 20) + rank };
            let slices: Vec<&str> = trace["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["cat"] == "collective" && e["pid"] == pid && e["tid"] == tid)
                .map(|e| e["name"].as_str().unwrap())
                .collect();
            assert_eq!(slices, ["all_reduce", "barrier"], "pid {pid}, rank {rank}");
        }
    }
}

fn collective_error(e: Error) -> String {
    match e {
        Error::Collective(m) => m,
        other => panic!("expected a collective error, got {other:?}"),
    }
}

#[test]
fn disagreeing_ranks_fail_together_with_each_ranks_call_named() {
    let rt = runtime();
    let errors = spmd(&rt, 4, LONG, |comm| {
        let group = comm.world().world_group();
        let shape: &[usize] = if comm.rank() == 2 { &[4, 9] } else { &[4, 8] };
        let t = tensor(comm, DType::F32, 1, shape);
        let shape_error = collective_error(comm.all_reduce(&group, &t, ReduceOp::Sum).unwrap_err());
        let dtype = if comm.rank() == 3 {
            DType::Bf16
        } else {
            DType::F32
        };
        let t = tensor(comm, dtype, 1, &[4]);
        let dtype_error = collective_error(comm.all_gather(&group, &t, 0).unwrap_err());
        let t = tensor(comm, DType::F32, 1, &[4]);
        let op_error = if comm.rank() == 0 {
            comm.barrier(&group).unwrap_err()
        } else {
            comm.all_reduce(&group, &t, ReduceOp::Max).unwrap_err()
        };
        // After the failures, the world still works.
        let ok = comm.all_reduce(&group, &tensor(comm, DType::F32, 2, &[2]), ReduceOp::Sum);
        (
            shape_error,
            dtype_error,
            collective_error(op_error),
            ok.is_ok(),
        )
    });
    for (shape_error, dtype_error, op_error, ok) in errors {
        assert!(
            shape_error.contains("all_reduce #1 on group [0, 1, 2, 3]")
                && shape_error.contains("rank(s) 0, 1, 3 passed all_reduce(op=sum) on f32[4, 8]")
                && shape_error.contains("rank(s) 2 passed all_reduce(op=sum) on f32[4, 9]"),
            "{shape_error}"
        );
        assert!(
            dtype_error.contains("all_gather")
                && dtype_error.contains("except along dim 0")
                && dtype_error.contains("rank(s) 3 passed all_gather(dim=0) on bf16[4]"),
            "{dtype_error}"
        );
        assert!(
            op_error.contains("rank(s) 0 passed barrier()")
                && op_error.contains("rank(s) 1, 2, 3 passed all_reduce(op=max)"),
            "{op_error}"
        );
        assert!(ok, "the next collective runs");
    }
}

#[test]
fn a_rank_outside_the_group_is_told_so() {
    let rt = runtime();
    let errors = spmd(&rt, 4, LONG, |comm| {
        let group = ProcessGroup::new(vec![0, 1], 4, Some("tp".into())).unwrap();
        let t = tensor(comm, DType::F32, 1, &[2]);
        comm.all_reduce(&group, &t, ReduceOp::Sum)
            .err()
            .map(|e| e.to_string())
    });
    assert!(errors[0].is_none() && errors[1].is_none());
    let e = errors[2].as_ref().unwrap();
    assert!(
        e.contains("all_reduce") && e.contains("rank 2 is not in process group tp [0, 1]"),
        "{e}"
    );
}

#[test]
fn a_missing_rank_times_out_naming_the_op_group_and_absent_ranks() {
    let rt = runtime();
    let started = Instant::now();
    let errors = spmd(&rt, 4, Duration::from_millis(300), |comm| {
        let group = comm.world().world_group();
        if comm.rank() == 3 {
            // Rank 3 waits on a different group: the others never see it.
            let other = ProcessGroup::new(vec![3, 2], 4, None).unwrap();
            let t = tensor(comm, DType::F32, 1, &[2]);
            return collective_error(comm.all_reduce(&other, &t, ReduceOp::Sum).unwrap_err());
        }
        let t = tensor(comm, DType::F32, 1, &[2]);
        collective_error(comm.all_reduce(&group, &t, ReduceOp::Sum).unwrap_err())
    });
    assert!(started.elapsed() < Duration::from_secs(20));
    // Both groups time out at about the same moment; when rank 3 has already given up and
    // returned, the others are told that instead.
    assert!(
        errors[0].contains("all_reduce #1 on group [0, 1, 2, 3]")
            && (errors[0].contains(
                "timed out after 0.3 s: rank(s) 3 never arrived while rank(s) 0, 1, 2 waited"
            ) || errors[0]
                .contains("rank 3 finished without reaching it; rank(s) 0, 1, 2 are waiting")),
        "{}",
        errors[0]
    );
    assert!(
        errors[3].contains("on group [3, 2]")
            && (errors[3].contains("rank(s) 2 never arrived") || errors[3].contains("rank 2 ")),
        "{}",
        errors[3]
    );
}

#[test]
fn a_rank_that_finished_is_reported_at_once() {
    let rt = runtime();
    let started = Instant::now();
    let errors = spmd(&rt, 3, Duration::from_secs(60), |comm| {
        if comm.rank() == 1 {
            return None;
        }
        let group = comm.world().world_group();
        let t = tensor(comm, DType::F32, 1, &[2]);
        Some(collective_error(
            comm.all_reduce(&group, &t, ReduceOp::Sum).unwrap_err(),
        ))
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "no timeout was needed"
    );
    let e = errors[0].as_ref().unwrap();
    assert!(
        e.contains(
            "all_reduce #1 on group [0, 1, 2] cannot complete: rank 1 finished without reaching it"
        ),
        "{e}"
    );
}

#[test]
fn a_world_larger_than_the_instance_is_refused() {
    let rt = runtime();
    let e = World::new(rt, 65, WorldOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("cannot start 65 rank(s)") && e.contains("has 64 visible core(s)"),
        "{e}"
    );
}

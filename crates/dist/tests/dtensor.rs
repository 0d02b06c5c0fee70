//! Distributed tensors across ranks of one process, as a launcher drives them: one thread per
//! rank, on meshes [4], [3], [2, 2] and [2, 4], with uneven global shapes (so shards are
//! uneven and some are empty). For every pair of placements among Shard(0), Shard(1),
//! Replicate(), Partial(sum) and Partial(max) per mesh dim, distribute -> redistribute ->
//! full_tensor must reproduce the reference bit for bit, and every local shard must be the
//! reference's slice given by `shard_layout`. Partial sources with different data per rank
//! (from_local) are checked against the fold of the ranks' data in group order, computed here
//! with plain loops.

use std::sync::Arc;
use std::time::Duration;

use neuronlab_core::device::topology::Topology;
use neuronlab_core::events::EventKind;
use neuronlab_core::ops::{Attrs, Registry};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::Buffer;
use neuronlab_core::{DType, Error, Runtime, Tensor};
use neuronlab_dist::{
    shard_layout, DTensor, DeviceMesh, Placement, RankComm, ReduceOp, World, WorldOptions,
};

use Placement::{Partial, Replicate, Shard};

const SUM: Placement = Partial(ReduceOp::Sum);
const MAX: Placement = Partial(ReduceOp::Max);
const CHOICES: [Placement; 5] = [Shard(0), Shard(1), Replicate, SUM, MAX];

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.48xlarge", Some(2)).unwrap(),
        host_limit: 8 << 30,
    }))
}

/// Marks a rank as departed when its thread ends (also by a panic), so the others fail at
/// once instead of waiting for the timeout.
struct Depart<'a>(&'a World, u32);

impl Drop for Depart<'_> {
    fn drop(&mut self) {
        let how = if std::thread::panicking() {
            "panicked"
        } else {
            "finished"
        };
        self.0.depart(self.1, how.to_string());
    }
}

/// Runs `f` as every rank of a world of `n` ranks, one thread each; the results in rank order.
fn spmd<R: Send>(rt: &Arc<Runtime>, n: u32, f: impl Fn(&mut RankComm) -> R + Sync) -> Vec<R> {
    let world = World::new(
        rt.clone(),
        n,
        WorldOptions {
            timeout: Duration::from_secs(60),
        },
    )
    .unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (world, f) = (world.clone(), &f);
                s.spawn(move || {
                    let _depart = Depart(&world, r);
                    let mut comm = world.rank(r);
                    f(&mut comm)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn mesh(shape: &[usize], names: &[&str]) -> Arc<DeviceMesh> {
    Arc::new(DeviceMesh::new(shape.iter().product::<usize>() as u32, shape, names).unwrap())
}

/// A creation op on this rank's core.
fn create(comm: &RankComm, op: &str, attrs: &Attrs) -> Tensor {
    let (_, def) = Registry::global().lookup(op).unwrap();
    comm.runtime()
        .call_on(def, &[], attrs, comm.core())
        .unwrap()
        .remove(0)
}

/// The same standard normal values on every rank for the same seed.
fn randn(comm: &RankComm, shape: &[usize], seed: i64) -> Tensor {
    let shape: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
    create(
        comm,
        "randn",
        &Attrs::new().with("shape", shape).with("seed", seed),
    )
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>().iter().map(|v| v.to_bits()).collect()
}

/// The block of `full` at `offsets` with `shape`.
fn block(comm: &RankComm, full: &Tensor, shape: &[usize], offsets: &[usize]) -> Tensor {
    let mut t = full.clone();
    for (d, (&len, &start)) in shape.iter().zip(offsets).enumerate() {
        let attrs = Attrs::new()
            .with("dim", d as i64)
            .with("start", start as i64)
            .with("length", len as i64);
        t = comm.runtime().call1("narrow", &[&t], &attrs).unwrap();
    }
    t
}

/// This rank's shard of `full` under `placements` (partial dims keep the value).
fn shard_of(comm: &RankComm, mesh: &DeviceMesh, full: &Tensor, placements: &[Placement]) -> Tensor {
    let coords = mesh.coordinates(comm.rank()).unwrap();
    let (shape, offsets) = shard_layout(full.shape(), mesh, placements, &coords);
    block(comm, full, &shape, &offsets)
}

fn text(placements: &[Placement]) -> String {
    neuronlab_dist::format_placements(placements)
}

/// Every list of one placement from CHOICES per mesh dim.
fn all_placements(ndim: usize) -> Vec<Vec<Placement>> {
    let count = CHOICES.len().pow(ndim as u32);
    (0..count)
        .map(|mut i| {
            let mut v = vec![Replicate; ndim];
            for p in v.iter_mut().rev() {
                *p = CHOICES[i % CHOICES.len()];
                i /= CHOICES.len();
            }
            v
        })
        .collect()
}

/// Whether some mesh dim goes from one partial op to another (which must fail).
fn partial_clash(src: &[Placement], dst: &[Placement]) -> bool {
    src.iter()
        .zip(dst)
        .any(|(s, d)| matches!((s, d), (Partial(a), Partial(b)) if a != b))
}

/// Redistributes `dt` to `dst` and checks the result against `reference` (the global tensor):
/// the placements, the global and local shapes, the local values when `dst` has no partial
/// dim, and full_tensor bit for bit. A clash of partial ops must fail before communicating.
fn check_redistribute(
    comm: &mut RankComm,
    mesh: &DeviceMesh,
    dt: &DTensor,
    dst: &[Placement],
    reference: &Tensor,
) {
    let what = format!("{} -> {}", text(dt.placements()), text(dst));
    let out = dt.redistribute(comm, dst);
    if partial_clash(dt.placements(), dst) {
        match out {
            Err(Error::Invalid(m)) => assert!(m.contains("cannot redistribute Partial"), "{m}"),
            other => panic!("{what}: expected a partial clash error, got {other:?}"),
        }
        return;
    }
    let out = out.unwrap_or_else(|e| panic!("{what} on rank {}: {e}", comm.rank()));
    assert_eq!(out.placements(), dst, "{what}");
    assert_eq!(out.shape(), reference.shape(), "{what}");
    let coords = mesh.coordinates(comm.rank()).unwrap();
    let (local_shape, _) = shard_layout(reference.shape(), mesh, dst, &coords);
    assert_eq!(
        out.to_local().shape(),
        local_shape,
        "{what} on rank {}",
        comm.rank()
    );
    assert_eq!(out.to_local().device(), comm.core(), "{what}");
    if !dst.iter().any(|p| matches!(p, Partial(_))) {
        let expected = shard_of(comm, mesh, reference, dst);
        assert_eq!(
            bits(out.to_local()),
            bits(&expected),
            "{what}: local shard of rank {}",
            comm.rank()
        );
    }
    let full = out
        .full_tensor(comm)
        .unwrap_or_else(|e| panic!("{what}: full_tensor on rank {}: {e}", comm.rank()));
    assert_eq!(full.shape(), reference.shape(), "{what}");
    assert_eq!(full.device(), comm.core(), "{what}");
    assert_eq!(
        bits(&full),
        bits(reference),
        "{what}: full tensor on rank {}",
        comm.rank()
    );
}

/// distribute -> redistribute -> full_tensor for every pair of placement lists.
fn round_trips(shape: &[usize], names: &[&str], global: &[usize]) {
    let rt = runtime();
    let mesh = mesh(shape, names);
    let all = all_placements(shape.len());
    let n = mesh.world_size();
    spmd(&rt, n, |comm| {
        let full = randn(comm, global, 7);
        let coords = mesh.coordinates(comm.rank()).unwrap();
        for src in &all {
            let dt = DTensor::distribute(comm, mesh.clone(), &full, src)
                .unwrap_or_else(|e| panic!("distribute {}: {e}", text(src)));
            assert_eq!(dt.shape(), global);
            // The local shard: the reference's block, or zeros where a Partial(sum) dim's
            // coordinate is not the first.
            let block = shard_of(comm, &mesh, &full, src);
            let zero = src.iter().zip(&coords).any(|(p, &c)| *p == SUM && c != 0);
            let expected: Vec<u32> = if zero {
                vec![0; block.numel()]
            } else {
                bits(&block)
            };
            assert_eq!(
                bits(dt.to_local()),
                expected,
                "distribute {} on rank {}",
                text(src),
                comm.rank()
            );
            for dst in &all {
                check_redistribute(comm, &mesh, &dt, dst, &full);
            }
        }
    });
}

#[test]
fn round_trips_on_a_mesh_of_4() {
    // 5 rows over 4 ranks: 2, 2, 1, 0; 7 columns: 2, 2, 2, 1.
    round_trips(&[4], &["dp"], &[5, 7]);
}

#[test]
fn round_trips_on_a_mesh_of_3() {
    round_trips(&[3], &["dp"], &[5, 7]);
}

#[test]
fn round_trips_on_a_2x2_mesh() {
    // Shard(0) twice: 5 -> 3, 2 -> 2, 1, 1, 1.
    round_trips(&[2, 2], &["dp", "tp"], &[5, 3]);
}

#[test]
fn round_trips_on_a_2x4_mesh() {
    // Shard(0) twice: 3 -> 2, 1 -> 1, 1, 0, 0 and 1, 0, 0, 0 (empty shards).
    round_trips(&[2, 4], &["fsdp", "tp"], &[3, 6]);
}

/// Partial sources with different data on every rank: `from_local` with exactly one partial
/// mesh dim `p` (the others Shard or Replicate). Rank data depends on its coordinate along
/// `p` only, and the global tensor is the fold, in group order, of those contributions.
fn partial_sources(shape: &[usize], names: &[&str]) {
    let rt = runtime();
    let mesh = mesh(shape, names);
    let ndim = shape.len();
    let all = all_placements(ndim);
    spmd(&rt, mesh.world_size(), |comm| {
        let coords = mesh.coordinates(comm.rank()).unwrap();
        for p in 0..ndim {
            for op in [ReduceOp::Sum, ReduceOp::Max] {
                for src in all.iter().filter(|s| {
                    s.iter().enumerate().all(|(d, pl)| {
                        if d == p {
                            *pl == Partial(op)
                        } else {
                            !matches!(pl, Partial(_))
                        }
                    })
                }) {
                    // Uneven when nothing is sharded (the global shape is the local one);
                    // even otherwise, as from_local's global shape assumes.
                    let sharded = src.iter().any(|pl| matches!(pl, Shard(_)));
                    let global: &[usize] = if sharded { &[8, 12] } else { &[5, 7] };
                    let parts: Vec<Tensor> = (0..shape[p])
                        .map(|c| randn(comm, global, 100 + c as i64))
                        .collect();
                    let mut acc = parts[0].to_vec::<f32>();
                    for part in &parts[1..] {
                        for (a, b) in acc.iter_mut().zip(part.to_vec::<f32>()) {
                            *a = match op {
                                ReduceOp::Sum => *a + b,
                                _ => a.max(b),
                            };
                        }
                    }
                    let reference = comm
                        .runtime()
                        .tensor_on(comm.core(), Buffer::F32(acc), global)
                        .unwrap();
                    let mine = &parts[coords[p]];
                    let local = shard_of(comm, &mesh, mine, src);
                    let dt = DTensor::from_local(comm, mesh.clone(), local.clone(), src).unwrap();
                    assert_eq!(dt.shape(), global, "from_local {}", text(src));
                    assert!(dt.to_local().shares_storage(&local));
                    for dst in &all {
                        check_redistribute(comm, &mesh, &dt, dst, &reference);
                    }
                }
            }
        }
    });
}

#[test]
fn partial_sources_on_a_mesh_of_4() {
    partial_sources(&[4], &["dp"]);
}

#[test]
fn partial_sources_on_a_mesh_of_3() {
    partial_sources(&[3], &["dp"]);
}

#[test]
fn partial_sources_on_a_2x2_mesh() {
    partial_sources(&[2, 2], &["dp", "tp"]);
}

#[test]
fn partial_sources_on_a_2x4_mesh() {
    partial_sources(&[2, 4], &["fsdp", "tp"]);
}

#[test]
fn the_first_ranks_data_wins() {
    let rt = runtime();
    let mesh = mesh(&[2, 2], &["dp", "tp"]);
    let out = spmd(&rt, 4, |comm| {
        let mine = randn(comm, &[4, 3], comm.rank() as i64);
        let dt = DTensor::distribute(comm, mesh.clone(), &mine, &[Shard(0), Replicate]).unwrap();
        bits(&dt.full_tensor(comm).unwrap())
    });
    let rank0 = spmd(&rt, 1, |comm| bits(&randn(comm, &[4, 3], 0))).remove(0);
    for (r, full) in out.iter().enumerate() {
        assert_eq!(full, &rank0, "rank {r}");
    }
}

/// Source and target placements, and the (op, mesh dim) of each collective expected.
type Case = (
    &'static [Placement],
    &'static [Placement],
    &'static [(&'static str, &'static str)],
);

#[test]
fn collectives_follow_the_abi_table() {
    // One rank's collective events (op, mesh dim) for each row of the table, on mesh [2, 2].
    let cases: &[Case] = &[
        (
            &[SUM, Replicate],
            &[Replicate, Replicate],
            &[("all_reduce", "dp")],
        ),
        (
            &[Replicate, SUM],
            &[Replicate, Shard(1)],
            &[("reduce_scatter", "tp")],
        ),
        (
            &[Shard(0), Replicate],
            &[Replicate, Replicate],
            &[("all_gather", "dp")],
        ),
        (
            &[Shard(0), Replicate],
            &[Shard(1), Replicate],
            &[("all_to_all", "dp")],
        ),
        (&[Replicate, Replicate], &[Shard(0), SUM], &[]),
        (
            &[Shard(0), Replicate],
            &[SUM, Replicate],
            &[("all_gather", "dp")],
        ),
        (
            &[Shard(0), Shard(0)],
            &[Replicate, Shard(0)],
            &[("all_gather", "tp"), ("all_gather", "dp")],
        ),
        (
            &[Shard(0), Shard(0)],
            &[Shard(0), Replicate],
            &[("all_gather", "tp")],
        ),
        (
            &[Shard(1), Shard(0)],
            &[Shard(0), Shard(1)],
            &[("all_gather", "tp"), ("all_to_all", "dp")],
        ),
    ];
    let rt = runtime();
    let mesh = mesh(&[2, 2], &["dp", "tp"]);
    spmd(&rt, 4, |comm| {
        let full = randn(comm, &[6, 4], 1);
        for (src, dst, expected) in cases {
            let dt = DTensor::distribute(comm, mesh.clone(), &full, src).unwrap();
            let bus = comm.runtime().bus().clone();
            let seq = bus.next_seq();
            let out = dt.redistribute(comm, dst).unwrap();
            let seen: Vec<(String, String)> = bus
                .since(seq)
                .into_iter()
                .filter(|e| e.core == comm.core())
                .filter_map(|e| match e.kind {
                    EventKind::Collective(c) => Some((c.op, c.mesh_dim.unwrap_or_default())),
                    _ => None,
                })
                .collect();
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|(op, dim)| (op.to_string(), dim.to_string()))
                .collect();
            assert_eq!(seen, expected, "{} -> {}", text(src), text(dst));
            assert_eq!(bits(&out.full_tensor(comm).unwrap()), bits(&full));
        }
    });
}

#[test]
fn identities_and_other_dtypes() {
    // Replicate -> Partial holds the op's identity off the first rank: zeros for sum, ones for
    // product, the value for min; on i64 and bool too.
    let rt = runtime();
    let mesh = mesh(&[3], &["dp"]);
    spmd(&rt, 3, |comm| {
        let r = comm.rank() as i64;
        let ints = create(
            comm,
            "arange",
            &Attrs::new().with("end", 6.0).with("dtype", DType::I64),
        );
        for (op, off_first) in [
            (ReduceOp::Sum, vec![0i64; 6]),
            (ReduceOp::Product, vec![1; 6]),
            (ReduceOp::Min, (0..6).collect()),
        ] {
            let dt = DTensor::distribute(comm, mesh.clone(), &ints, &[Partial(op)]).unwrap();
            let expected: Vec<i64> = if r == 0 { (0..6).collect() } else { off_first };
            assert_eq!(dt.to_local().to_vec::<i64>(), expected, "{op:?}");
            assert_eq!(dt.to_local().dtype(), DType::I64);
            let full = dt.full_tensor(comm).unwrap();
            assert_eq!(full.to_vec::<i64>(), (0..6).collect::<Vec<i64>>());
            let sharded = dt.redistribute(comm, &[Shard(0)]).unwrap();
            assert_eq!(
                sharded.to_local().to_vec::<i64>(),
                (2 * r..2 * r + 2).collect::<Vec<i64>>()
            );
        }
        let flags = comm
            .runtime()
            .tensor_on(
                comm.core(),
                Buffer::Bool(vec![true, false, true, true]),
                &[4],
            )
            .unwrap();
        let dt = DTensor::distribute(comm, mesh.clone(), &flags, &[SUM]).unwrap();
        let expected = if r == 0 {
            vec![true, false, true, true]
        } else {
            vec![false; 4]
        };
        assert_eq!(dt.to_local().to_vec::<bool>(), expected);
        assert_eq!(
            dt.full_tensor(comm).unwrap().to_vec::<bool>(),
            vec![true, false, true, true]
        );
        // A shard owns its bytes rather than pinning the whole tensor.
        let dt = DTensor::distribute(comm, mesh.clone(), &ints, &[Shard(0)]).unwrap();
        assert_eq!(dt.to_local().storage_buffer().len(), 2);
    });
}

#[test]
fn display_and_errors() {
    let rt = runtime();
    let mesh8 = mesh(&[2, 4], &["fsdp", "tp"]);
    let out = spmd(&rt, 8, |comm| {
        let full = randn(comm, &[8, 16], 3);
        let dt = DTensor::distribute(comm, mesh8.clone(), &full, &[Shard(0), Replicate]).unwrap();
        let shown = dt.to_string();
        let local =
            DTensor::from_local(comm, mesh8.clone(), full.clone(), &[Shard(1), SUM]).unwrap();
        assert_eq!(local.shape(), [8, 32]);
        assert_eq!(local.dtype(), DType::F32);
        let err = |r: Result<DTensor, Error>| match r {
            Err(Error::Invalid(m)) => m,
            other => panic!("expected an invalid-argument error, got {other:?}"),
        };
        let few = err(DTensor::distribute(comm, mesh8.clone(), &full, &[Shard(0)]));
        let far = err(DTensor::from_local(
            comm,
            mesh8.clone(),
            full.clone(),
            &[Shard(2), Replicate],
        ));
        let avg = {
            let ints = create(
                comm,
                "zeros",
                &Attrs::new()
                    .with("shape", vec![4i64])
                    .with("dtype", DType::I32),
            );
            err(DTensor::from_local(
                comm,
                mesh8.clone(),
                ints,
                &[Replicate, Partial(ReduceOp::Avg)],
            ))
        };
        let clash = err(local.redistribute(comm, &[Replicate, MAX]));
        let small = mesh(&[4], &["dp"]);
        let world = err(DTensor::from_local(comm, small, full.clone(), &[Replicate]));
        (shown, few, far, avg, clash, world)
    });
    let (shown, few, far, avg, clash, world) = &out[3];
    assert_eq!(
        shown,
        "DTensor(global [8, 16] f32, mesh (fsdp=2, tp=4), placements (Shard(0), Replicate()), \
         local [4, 16] on neuron:3)"
    );
    assert_eq!(
        few,
        "distribute: 1 placement(s) (Shard(0)) for mesh (fsdp=2, tp=4) with 2 dimension(s): \
         give one placement per mesh dimension"
    );
    assert_eq!(
        far,
        "from_local: placement Shard(2) on mesh dim 'fsdp' is out of range for a tensor of 2 \
         dim(s) (f32[8, 16]): shard a dim from 0 to 1"
    );
    assert!(
        avg.starts_with("from_local: placement Partial(avg) on mesh dim 'tp' does not fit a i32 tensor: avg is defined for float dtypes only"),
        "{avg}"
    );
    assert!(
        clash.starts_with(
            "redistribute of a f32[8, 32] distributed as (Shard(1), Partial(sum)): cannot \
             redistribute Partial(sum) to Partial(max) on mesh dim 1"
        ),
        "{clash}"
    );
    assert_eq!(
        world,
        "from_local: mesh (dp=4) holds 4 rank(s) but this rank's world has 8: build the mesh \
         over the world's ranks"
    );
}

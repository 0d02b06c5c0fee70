//! all_reduce bus bandwidth between two processes over MPI, beside the same world in one
//! process and a plain `MPI_Allreduce` on the same buffers (the limit for the transport).
//!
//! ```sh
//! cargo build --release -p neuronlab-dist --features mpi --example mpi_allreduce
//! mpirun -n 2 --oversubscribe target/release/examples/mpi_allreduce
//! ```
//!
//! Arguments, when given, are the sizes to run in KiB (`mpi_allreduce 1 4` for 1 and 4 KiB);
//! by default 1 KiB to 64 MiB.
//!
//! The last column is the time of one call in a world of one rank (its result still made a
//! tensor on the core, counted and published as an event): the part of a call that moves
//! nothing, which no transport takes away.
//!
//! Bus bandwidth as nccl-tests counts it: S / t x 2(n - 1) / n, which for n = 2 is S / t.
//! Each figure is the median of five timings of a batch of calls sized to move about 256 MiB.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mpi::collective::{CommunicatorCollectives, SystemOperation};
use neuronlab_core::device::topology::Topology;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::Buffer;
use neuronlab_core::Runtime;
use neuronlab_dist::mpi::MpiPeers;
use neuronlab_dist::peers::Peers;
use neuronlab_dist::{ReduceOp, World, WorldOptions};

// The allocator and settings of the `neuronlab` binary, so buffers are reused as there.
#[global_allocator]
static ALLOCATOR: neuronlab_core::allocator::MiMalloc = neuronlab_core::allocator::MiMalloc;

const SIZES: [usize; 9] = [
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.48xlarge", None).unwrap(),
        host_limit: 8 << 30,
    }))
}

/// How many calls of `bytes` make a batch.
fn calls(bytes: usize) -> usize {
    ((256 << 20) / bytes).clamp(3, 2000)
}

/// The median of five timings of `batch`, per call.
fn per_call(calls: usize, mut batch: impl FnMut()) -> Duration {
    batch();
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            batch();
            started.elapsed() / calls as u32
        })
        .collect();
    times.sort();
    times[2]
}

fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn main() {
    neuronlab_core::allocator::keep_freed_memory();
    let peers = MpiPeers::from_launcher()
        .expect("MPI starts")
        .expect("run me under mpirun -n 2");
    assert_eq!(peers.processes(), 2, "run me under mpirun -n 2");
    let me = peers.process();
    let world = peers.world();
    let spread = World::across(
        runtime(),
        1,
        peers.clone(),
        WorldOptions {
            timeout: Duration::from_secs(120),
        },
        Arc::new(|_, _| {}),
    )
    .expect("a world across the two processes");
    let mut comm = spread.rank(me);
    let group = spread.world_group();
    if me == 0 {
        println!(
            "{:>9}  {:>14} {:>14} {:>14}  {:>11}  {:>12}",
            "size", "MPI_Allreduce", "neuronlab MPI", "in-process", "ours / MPI", "one rank"
        );
    }
    let sizes: Vec<usize> = match std::env::args().skip(1).collect::<Vec<_>>() {
        args if args.is_empty() => SIZES.to_vec(),
        args => args
            .iter()
            .map(|a| match a.parse::<usize>() {
                Ok(kib) if kib > 0 => kib << 10,
                _ => panic!("sizes are whole KiB, as `mpi_allreduce 1 64`; got {a:?}"),
            })
            .collect(),
    };
    for bytes in sizes {
        let n = bytes / 4;
        let calls = calls(bytes);
        let values: Vec<f32> = (0..n).map(|i| (i % 97) as f32 + me as f32).collect();

        let mut received = vec![0f32; n];
        world.barrier();
        let plain = per_call(calls, || {
            for _ in 0..calls {
                world.all_reduce_into(&values[..], &mut received[..], SystemOperation::sum());
            }
        });

        let rt = comm.runtime().clone();
        let t = rt
            .tensor_on(comm.core(), Buffer::F32(values.clone()), &[n])
            .unwrap();
        world.barrier();
        let ours = per_call(calls, || {
            for _ in 0..calls {
                comm.all_reduce(&group, &t, ReduceOp::Sum).unwrap();
            }
        });

        // The same two ranks as threads of process 0.
        world.barrier();
        let local = if me == 0 {
            let one = World::new(runtime(), 2, WorldOptions::default()).unwrap();
            let times: Vec<Duration> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..2)
                    .map(|r| {
                        let (one, values) = (one.clone(), values.clone());
                        s.spawn(move || {
                            let mut comm = one.rank(r);
                            let group = one.world_group();
                            let t = comm
                                .runtime()
                                .tensor_on(comm.core(), Buffer::F32(values), &[n])
                                .unwrap();
                            per_call(calls, || {
                                for _ in 0..calls {
                                    comm.all_reduce(&group, &t, ReduceOp::Sum).unwrap();
                                }
                            })
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let alone = World::new(runtime(), 1, WorldOptions::default()).unwrap();
            let mut comm = alone.rank(0);
            let t = comm
                .runtime()
                .tensor_on(comm.core(), Buffer::F32(values.clone()), &[n])
                .unwrap();
            let group = alone.world_group();
            let one = per_call(calls, || {
                for _ in 0..calls {
                    comm.all_reduce(&group, &t, ReduceOp::Sum).unwrap();
                }
            });
            Some((times[0], one))
        } else {
            None
        };
        world.barrier();
        if let Some((local, one)) = local {
            let size = match bytes {
                b if b >= 1 << 20 => format!("{} MiB", b >> 20),
                b => format!("{} KiB", b >> 10),
            };
            println!(
                "{size:>9}  {:>9.3} GB/s {:>9.3} GB/s {:>9.3} GB/s  {:>10.2}x  {:>9.2} µs",
                gbps(bytes, plain),
                gbps(bytes, ours),
                gbps(bytes, local),
                ours.as_secs_f64() / plain.as_secs_f64(),
                one.as_secs_f64() * 1e6
            );
        }
    }
    drop(comm);
    if !peers.finish(Duration::from_secs(30)) {
        peers.abort(1);
    }
}

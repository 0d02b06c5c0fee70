//! all_reduce on the host: the time of the shared-memory collective next to the machine's
//! memcpy bandwidth and the modeled Trainium time, in nccl-tests' terms
//! (<https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md>): `S` is the bytes
//! of each rank's buffer, `algbw = S / t` and `busbw = algbw * 2(n-1)/n`.
//!
//! Each rank is a thread driving its own `RankComm`, as an SPMD launch does. Every iteration
//! starts with a barrier; each rank times its `all_reduce` call, and the iteration's time is
//! the slowest rank's (the collective's completion).

use std::sync::Arc;
use std::time::{Duration, Instant};

use neuronlab_core::device::topology::Topology;
use neuronlab_core::events::fmt::{bytes, duration};
use neuronlab_core::events::EventKind;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::Buffer;
use neuronlab_core::Runtime;
use neuronlab_dist::{ReduceOp, World, WorldOptions};

use super::{median, time};

/// The table's name, which `--filter` matches.
pub const NAME: &str = "collectives: all_reduce host vs memcpy vs modeled";

/// The instance and LNC the ranks run on (rank `r` on `neuron:r`).
const INSTANCE: (&str, u32) = ("trn2.48xlarge", 2);

/// Rank counts, and per-rank sizes with their timed iterations (after one warm-up).
const RANKS: [u32; 2] = [8, 32];
const SIZES: [(usize, usize); 3] = [(64 << 10, 20), (4 << 20, 10), (64 << 20, 4)];

/// The reference copy: this many bytes with `copy_from_slice` on one thread.
const MEMCPY_BYTES: usize = 256 << 20;

/// One measured case.
struct Row {
    ranks: u32,
    bytes: usize,
    iters: usize,
    host_s: f64,
    modeled_s: f64,
}

/// nccl-tests' bus bandwidth factor for all_reduce.
fn bus_factor(n: u32) -> f64 {
    2.0 * (n as f64 - 1.0) / n as f64
}

/// Single-threaded `copy_from_slice` bandwidth, bytes copied per second (median of 5).
fn memcpy_bandwidth() -> f64 {
    let src = vec![1u8; MEMCPY_BYTES];
    let mut dst = vec![0u8; MEMCPY_BYTES];
    // The warm-up copy in `time` also faults in `dst`'s pages.
    let secs = time(5, || {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    });
    MEMCPY_BYTES as f64 / secs
}

/// Runs `iters + 1` all_reduces of `bytes` of f32 on each of `n` ranks; returns the median of
/// the per-iteration slowest-rank times and the modeled time from the `Collective` event.
fn all_reduce(rt: &Arc<Runtime>, n: u32, bytes: usize, iters: usize) -> Result<Row, String> {
    let len = bytes / 4;
    let options = WorldOptions {
        timeout: Duration::from_secs(300),
    };
    let world = World::new(rt.clone(), n, options).map_err(|e| e.to_string())?;
    let group = world.world_group();
    let per_rank: Vec<Vec<f64>> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..n)
            .map(|r| {
                let (mut comm, group, world) = (world.rank(r), &group, &world);
                s.spawn(move || {
                    let mut run = || -> Result<Vec<f64>, String> {
                        let input = Buffer::F32(vec![(r + 1) as f32; len]);
                        let t = (comm.runtime())
                            .tensor_on(comm.core(), input, &[len])
                            .map_err(|e| e.to_string())?;
                        let mut times = Vec::with_capacity(iters);
                        for i in 0..=iters {
                            comm.barrier(group).map_err(|e| e.to_string())?;
                            let start = Instant::now();
                            let out = comm
                                .all_reduce(group, &t, ReduceOp::Sum)
                                .map_err(|e| e.to_string())?;
                            let secs = start.elapsed().as_secs_f64();
                            let want = (n * (n + 1) / 2) as f32;
                            if i == 0 && out.data::<f32>()[len - 1] != want {
                                return Err(format!("all_reduce gave the wrong sum on rank {r}"));
                            }
                            if i > 0 {
                                times.push(secs);
                            }
                            drop(out); // frees this rank's output before the next iteration
                        }
                        Ok(times)
                    };
                    let result = run();
                    if let Err(e) = &result {
                        // Let the other ranks fail at once rather than wait for this one.
                        world.depart(r, format!("stopped with an error: {e}"));
                    }
                    result
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|h| h.join().expect("a rank thread does not panic"))
            .collect::<Result<_, String>>()
    })?;
    let slowest = (0..iters)
        .map(|i| per_rank.iter().map(|t| t[i]).fold(0.0, f64::max))
        .collect();
    let modeled_us = rt
        .bus()
        .events()
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Collective(c) if c.op == "all_reduce" => Some(c.modeled_us),
            _ => None,
        })
        .ok_or("no all_reduce event was recorded")?;
    rt.bus().clear();
    Ok(Row {
        ranks: n,
        bytes,
        iters,
        host_s: median(slowest),
        modeled_s: modeled_us * 1e-6,
    })
}

/// Measures every case and prints the table.
pub fn run() -> Result<(), String> {
    let (instance, lnc) = INSTANCE;
    let topology = Topology::preset(instance, Some(lnc)).map_err(|e| e.to_string())?;
    let rt = Arc::new(Runtime::new(RuntimeOptions {
        topology,
        // 32 ranks x 64 MiB of inputs and as many outputs, plus the shared result.
        host_limit: 20 << 30,
    }));
    eprintln!("{NAME}: memcpy of {}...", bytes(MEMCPY_BYTES as u64));
    let memcpy = memcpy_bandwidth();
    let mut rows = Vec::new();
    for n in RANKS {
        for (size, iters) in SIZES {
            eprintln!(
                "{NAME}: {n} ranks x {}, {iters} iterations...",
                bytes(size as u64)
            );
            rows.push(all_reduce(&rt, n, size, iters)?);
        }
    }
    println!("{NAME}");
    println!(
        "  f32 sum on {instance} (LNC={lnc}), rank r on neuron:r; GB/s = 1e9 bytes/s.\n  \
         size: S, each rank's buffer. host time: median over the iterations of the slowest \
         rank's all_reduce call (after a barrier).\n  \
         algbw = S / time; busbw = algbw * 2(n-1)/n (nccl-tests). memcpy: one thread \
         copy_from_slice of {}, bytes copied / time: {:.2} GB/s.\n  \
         model: modeled_us of the rank's Collective event (ring model), and its busbw.",
        bytes(MEMCPY_BYTES as u64),
        memcpy / 1e9
    );
    println!(
        "  {:>5} {:>9} {:>5} {:>10} {:>10} {:>10} {:>13} {:>10} {:>12}",
        "ranks",
        "size",
        "iters",
        "host time",
        "algbw GB/s",
        "busbw GB/s",
        "busbw/memcpy",
        "model time",
        "model busbw"
    );
    for r in &rows {
        let algbw = r.bytes as f64 / r.host_s;
        let busbw = algbw * bus_factor(r.ranks);
        let model_busbw = r.bytes as f64 / r.modeled_s * bus_factor(r.ranks);
        println!(
            "  {:>5} {:>9} {:>5} {:>10} {:>10.2} {:>10.2} {:>13.3} {:>10} {:>12.1}",
            r.ranks,
            bytes(r.bytes as u64),
            r.iters,
            duration(r.host_s),
            algbw / 1e9,
            busbw / 1e9,
            busbw / memcpy,
            duration(r.modeled_s),
            model_busbw / 1e9
        );
    }
    Ok(())
}

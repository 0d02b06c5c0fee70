// Temporary matmul timing harness (not committed).
use neuronlab_runtime::device::topology::Topology;
use neuronlab_runtime::ops::Attrs;
use neuronlab_runtime::runtime::RuntimeOptions;
use neuronlab_runtime::tensor::Buffer;
use neuronlab_runtime::{DType, Runtime};
use std::time::Instant;

/// On-CPU time of every thread of this process, in seconds (from the scheduler's accounting).
fn cpu_seconds() -> f64 {
    let mut ns = 0u64;
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let p = t.unwrap().path().join("schedstat");
        if let Ok(s) = std::fs::read_to_string(p) {
            ns += s.split_whitespace().next().unwrap().parse::<u64>().unwrap();
        }
    }
    ns as f64 * 1e-9
}

fn main() {
    let rt = Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.3xlarge", None).unwrap(),
        host_limit: 1 << 34,
    });
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mode = std::env::var("MODE").unwrap_or_default();
    // case: batch,m,k,n
    let cases: Vec<(usize, usize, usize, usize)> = if args.is_empty() {
        vec![
            (1, 256, 256, 256),
            (1, 1024, 1024, 1024),
            (1, 2048, 2048, 2048),
            (1, 512, 768, 3072),
            (1, 512, 3072, 768),
            (16, 128, 64, 128),
        ]
    } else {
        args.iter()
            .map(|a| {
                let v: Vec<usize> = a.split(',').map(|x| x.parse().unwrap()).collect();
                (v[0], v[1], v[2], v[3])
            })
            .collect()
    };
    let mut seed = 1u64;
    let mut rnd = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    };
    for &(bt, m, k, n) in &cases {
        let ashape: Vec<usize> = if bt > 1 { vec![bt, m, k] } else { vec![m, k] };
        let bshape: Vec<usize> = if bt > 1 { vec![bt, k, n] } else { vec![k, n] };
        let a = rt.tensor(Buffer::F32(rnd(bt * m * k)), &ashape).unwrap();
        let b = rt.tensor(Buffer::F32(rnd(bt * k * n)), &bshape).unwrap();
        let flops = 2.0 * (bt * m * n * k) as f64;
        let dts = std::env::var("DTYPES").unwrap_or("f32,bf16".into());
        for dt in dts.split(',') {
            let (a, b) = if dt == "bf16" {
                let at = Attrs::new().with("dtype", DType::Bf16);
                (
                    rt.call1("cast", &[&a], &at).unwrap(),
                    rt.call1("cast", &[&b], &at).unwrap(),
                )
            } else {
                (a.clone(), b.clone())
            };
            let b = if mode == "bt" {
                rt.call1(
                    "contiguous",
                    &[&rt.call1("transpose", &[&b], &Attrs::new()).unwrap()],
                    &Attrs::new(),
                )
                .unwrap()
            } else {
                b
            };
            let b = if mode == "bt" {
                rt.call1("transpose", &[&b], &Attrs::new()).unwrap()
            } else {
                b
            };
            let mut times = vec![];
            let mut cpu = 0.0;
            for i in 0..reps + 2 {
                let c0 = cpu_seconds();
                let t0 = Instant::now();
                let y = rt.call1("matmul", &[&a, &b], &Attrs::new()).unwrap();
                let dt = t0.elapsed().as_secs_f64();
                drop(y);
                if i >= 2 {
                    times.push(dt);
                    cpu += cpu_seconds() - c0;
                }
            }
            times.sort_by(|x, y| x.partial_cmp(y).unwrap());
            let med = times[times.len() / 2];
            println!(
                "ours  {dt:5}     b{bt} {m}x{k} @ {k}x{n}: median {:8.3} ms  {:7.1} GFLOP/s  (min {:7.1})  per cpu-s {:7.1}",
                med * 1e3,
                flops / med / 1e9,
                flops / times[0] / 1e9,
                flops * reps as f64 / cpu / 1e9
            );
        }
    }
}

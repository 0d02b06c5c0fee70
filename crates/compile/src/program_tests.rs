//! Compiled programs against eager execution: random graphs, the fusion payoff on a long
//! elementwise chain, and the run-time checks.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::*;
use neuronlab_core::device::topology::Topology;
use neuronlab_core::events::EventKind;
use neuronlab_core::ops::{Attrs, Registry};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::{Buffer, DType, TensorMeta};

pub(crate) fn runtime() -> Runtime {
    Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.3xlarge", None).expect("a preset"),
        host_limit: 1 << 32,
    })
}

pub(crate) use neuronlab_core::testing::SplitMix64 as Rng;

/// A tensor of uniform values in [-2, 2).
pub(crate) fn random_tensor(rt: &Runtime, rng: &mut Rng, meta: &TensorMeta) -> Tensor {
    let values: Vec<f64> = (0..meta.numel()).map(|_| rng.uniform()).collect();
    let f64s = rt
        .tensor(Buffer::F64(values), &meta.shape)
        .expect("fits in HBM");
    rt.call1("cast", &[&f64s], &Attrs::new().with("dtype", meta.dtype))
        .expect("a float cast")
}

pub(crate) fn id(name: &str) -> neuronlab_core::ops::OpId {
    Registry::global().id(name).expect("a registry op")
}

/// A random graph over `dtype`: elementwise ops with broadcasting, row ops and (when `matmul`)
/// matmuls with bias and activation. Returns the graph and its input tensors.
pub(crate) fn random_graph(
    rt: &Runtime,
    rng: &mut Rng,
    dtype: DType,
    (r, c): (usize, usize),
    matmul: bool,
) -> (Graph, Vec<Tensor>) {
    let mut g = Graph::new();
    let mut inputs = Vec::new();
    let shapes: [&[usize]; 5] = [&[r, c], &[c], &[r, 1], &[1, c], &[]];
    let mut pool: Vec<ValueId> = Vec::new();
    let mut add_input = |g: &mut Graph, rng: &mut Rng, shape: &[usize], pool: &mut Vec<ValueId>| {
        let meta = TensorMeta::new(shape.to_vec(), dtype);
        let t = random_tensor(rt, rng, &meta);
        // Some operands are constants, which folding and CSE see; some inputs are views.
        let v = if rng.below(6) == 0 {
            g.constant(t)
        } else if shape.len() == 2 && rng.below(3) == 0 {
            let back = rt
                .call1(
                    "contiguous",
                    &[&rt.call1("transpose", &[&t], &Attrs::new()).expect("2-d")],
                    &Attrs::new(),
                )
                .expect("a copy");
            inputs.push(rt.call1("transpose", &[&back], &Attrs::new()).expect("2-d"));
            g.input(meta)
        } else {
            inputs.push(t);
            g.input(meta)
        };
        pool.push(v);
        v
    };
    let x = add_input(&mut g, rng, &[r, c], &mut pool);
    for _ in 0..3 {
        let shape = rng.pick(&shapes);
        add_input(&mut g, rng, shape, &mut pool);
    }
    let weight = add_input(&mut g, rng, &[c], &mut pool);
    let square = matmul.then(|| add_input(&mut g, rng, &[c, c], &mut pool));
    let unary = [
        "tanh", "sigmoid", "exp", "neg", "abs", "relu", "silu", "gelu", "sin", "square", "clamp",
        "erf",
    ];
    let binary = ["add", "sub", "mul", "maximum", "minimum", "div"];
    let mut last = x;
    for _ in 0..rng.below(12) + 6 {
        let a = if rng.below(4) != 0 {
            last
        } else {
            rng.pick(&pool)
        };
        let full = g.meta(a).shape == [r, c];
        let choice = rng.below(if matmul { 10 } else { 9 });
        let v = match choice {
            0 if rng.below(3) == 0 => {
                // Mixed dtypes: later ops promote, and fused steps convert their operands.
                let to = rng.pick(&[DType::F32, DType::Bf16, DType::F64]);
                g.op(id("cast"), &[a], &Attrs::new().with("dtype", to))
                    .expect("cast")[0]
            }
            0..=3 => {
                let op = rng.pick(&unary);
                let attrs = match op {
                    "clamp" => Attrs::new().with("min", -0.5).with("max", 1.5),
                    "gelu" if rng.below(2) == 0 => Attrs::new().with("approximate", "tanh"),
                    _ => Attrs::new(),
                };
                g.op(id(op), &[a], &attrs).expect("unary")[0]
            }
            4..=6 => {
                let op = rng.pick(&binary);
                let b = rng.pick(&pool);
                let b = if op == "div" {
                    // Keep denominators away from zero: 1 + |b|.
                    let abs = g.op(id("abs"), &[b], &Attrs::new()).expect("abs")[0];
                    let one = g.constant(
                        rt.tensor(Buffer::F64(vec![1.0]), &[])
                            .and_then(|t| {
                                rt.call1("cast", &[&t], &Attrs::new().with("dtype", dtype))
                            })
                            .expect("a scalar"),
                    );
                    g.op(id("add"), &[abs, one], &Attrs::new()).expect("add")[0]
                } else {
                    b
                };
                match g.op(id(op), &[a, b], &Attrs::new()) {
                    Ok(v) => v[0],
                    Err(_) => continue, // shapes that do not broadcast
                }
            }
            7 if full => {
                let b = rng.pick(&pool);
                let Ok(gt) = g.op(id("gt"), &[a, b], &Attrs::new()) else {
                    continue;
                };
                match g.op(id("where"), &[gt[0], a, b], &Attrs::new()) {
                    Ok(v) => v[0],
                    Err(_) => continue,
                }
            }
            8 if full => match rng.below(6) {
                0 => g.op(id("softmax"), &[a], &Attrs::new()).expect("softmax")[0],
                1 => g
                    .op(id("log_softmax"), &[a], &Attrs::new())
                    .expect("log_softmax")[0],
                2 => g
                    .op(id("layer_norm"), &[a, weight, weight], &Attrs::new())
                    .expect("ln")[0],
                3 => g
                    .op(id("rms_norm"), &[a, weight], &Attrs::new())
                    .expect("rms")[0],
                k => {
                    let op = ["sum", "mean"][k - 4];
                    let attrs = Attrs::new().with("dims", vec![-1i64]).with("keepdim", 1);
                    let red = g.op(id(op), &[a], &attrs).expect("reduce")[0];
                    let red = g.op(id("rsqrt"), &[red], &Attrs::new()).expect("rsqrt")[0];
                    g.op(id("mul"), &[a, red], &Attrs::new()).expect("mul")[0]
                }
            },
            9 if full => {
                let w = square.expect("matmul graphs have a square weight");
                let y = g.op(id("matmul"), &[a, w], &Attrs::new()).expect("matmul")[0];
                let y = g.op(id("add"), &[y, weight], &Attrs::new()).expect("bias")[0];
                let act = rng.pick(&["gelu", "relu", "silu", "tanh"]);
                g.op(id(act), &[y], &Attrs::new()).expect("activation")[0]
            }
            _ => continue,
        };
        pool.push(v);
        last = v;
    }
    // The last value, and sometimes intermediates too (kernels with several outputs).
    let mut outputs = vec![last];
    for _ in 0..rng.below(3) {
        outputs.push(rng.pick(&pool));
    }
    g.set_outputs(outputs);
    (g, inputs)
}

/// Runs `g` node by node through the runtime, as eager code would.
fn eager(rt: &Runtime, g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut values: Vec<Option<Tensor>> = vec![None; g.values.len()];
    for (v, t) in g.inputs.iter().zip(inputs) {
        values[v.0 as usize] = Some(t.clone());
    }
    for (i, p) in g.producers.iter().enumerate() {
        if let Producer::Constant(t) = p {
            values[i] = Some(t.clone());
        }
    }
    for node in &g.nodes {
        let ins: Vec<&Tensor> = node
            .inputs
            .iter()
            .map(|v| values[v.0 as usize].as_ref().expect("computed"))
            .collect();
        let outs = rt.call_id(node.op, &ins, &node.attrs).expect("eager op");
        for (v, t) in node.outputs.iter().zip(outs) {
            values[v.0 as usize] = Some(t);
        }
    }
    g.outputs
        .iter()
        .map(|v| values[v.0 as usize].clone().expect("computed"))
        .collect()
}

/// Asserts equal elements: bitwise (any NaN matches any NaN), or within `tol` relative and
/// absolute when given.
fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: Option<f64>) {
    assert_eq!(got.meta(), want.meta(), "{what}");
    let (a, b) = (got.to_vec::<f64>(), want.to_vec::<f64>());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
        let near = tol.is_some_and(|t| (x - y).abs() <= t * (1.0 + y.abs()) || same);
        assert!(
            same || near,
            "{what}: element {i} is {x:e}, eager gives {y:e} (tolerance {tol:?})"
        );
    }
}

fn check_random(seed: u64, dtype: DType, size: (usize, usize), matmul: bool) {
    let rt = runtime();
    let mut rng = Rng(seed);
    let (g, inputs) = random_graph(&rt, &mut rng, dtype, size, matmul);
    let want = eager(&rt, &g, &inputs);
    let (program, report) = optimize(&rt, &g).unwrap_or_else(|e| panic!("{e}\n{g}"));
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let got = program
        .run(&rt, CoreId(0), &refs)
        .unwrap_or_else(|e| panic!("{e}\n{}", program.explain()));
    // The gemm in a matmul band may associate its sums differently from the whole-matrix
    // gemm; everything else runs the same element and row functions in the same order.
    let has_matmul = report.kernels.iter().any(|k| k.contains("matmul"));
    let loosest = g
        .values
        .iter()
        .map(|m| m.dtype)
        .filter(|d| d.is_float())
        .min_by_key(|d| d.size());
    let tol = has_matmul.then_some(match loosest {
        Some(DType::F64) => 1e-9,
        Some(DType::F32) => 1e-4,
        _ => 5e-2,
    });
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        let what = format!("seed {seed} {dtype} output {k}\n{}", program.explain());
        assert_close(&what, a, b, tol);
    }
}

#[test]
fn random_graphs_match_eager() {
    for seed in 0..48 {
        for dtype in [DType::F32, DType::Bf16, DType::F64] {
            let mut rng = Rng(seed * 7919 + 1);
            let size = (rng.below(12) + 1, rng.below(40) + 1);
            check_random(seed, dtype, size, seed % 3 == 0);
        }
    }
}

#[test]
fn large_random_graphs_match_eager_across_parallel_blocks() {
    // 300 x 131 = 39300 elements: several blocks, run in parallel, that split rows.
    for seed in 100..106 {
        let dtype = [DType::F32, DType::Bf16][seed as usize % 2];
        check_random(seed, dtype, (300, 131), seed % 2 == 1);
    }
}

/// Total modeled time and count of the op events since `seq`.
fn modeled_since(rt: &Runtime, seq: u64) -> (f64, usize, Vec<String>) {
    let ops: Vec<_> = rt
        .bus()
        .since(seq)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Op(op) => Some(op),
            _ => None,
        })
        .collect();
    (
        ops.iter().map(|o| o.modeled.total_s).sum(),
        ops.len(),
        ops.iter().map(|o| o.name.to_string()).collect(),
    )
}

#[test]
fn fusing_an_eight_op_chain_saves_kernels_and_modeled_time() {
    let rt = runtime();
    let mut rng = Rng(8);
    let meta = |shape: &[usize]| TensorMeta::new(shape.to_vec(), DType::F32);
    let (rows, cols) = (256, 1024);
    let mut g = Graph::new();
    let x = g.input(meta(&[rows, cols]));
    let y = g.input(meta(&[rows, cols]));
    let scale = g.input(meta(&[cols]));
    let bias = g.input(meta(&[cols]));
    let mut v = x;
    for (op, other) in [
        ("mul", Some(scale)),
        ("add", Some(bias)),
        ("gelu", None),
        ("sub", Some(y)),
        ("exp", None),
        ("mul", Some(y)),
        ("tanh", None),
        ("add", Some(x)),
    ] {
        let operands: Vec<ValueId> = std::iter::once(v).chain(other).collect();
        v = g.op(id(op), &operands, &Attrs::new()).expect("an op")[0];
    }
    g.set_outputs(vec![v]);
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .map(|&i| random_tensor(&rt, &mut rng, g.meta(i)))
        .collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();

    let seq = rt.bus().next_seq();
    let eager_started = std::time::Instant::now();
    let want = eager(&rt, &g, &inputs);
    let eager_host = eager_started.elapsed();
    let (eager_modeled, eager_kernels, _) = modeled_since(&rt, seq);

    let (program, report) = optimize(&rt, &g).expect("optimizes");
    let seq = rt.bus().next_seq();
    let compiled_started = std::time::Instant::now();
    let got = program.run(&rt, CoreId(0), &refs).expect("runs");
    let compiled_host = compiled_started.elapsed();
    let (compiled_modeled, compiled_kernels, names) = modeled_since(&rt, seq);

    assert_close("chain", &got[0], &want[0], None);
    assert_eq!((eager_kernels, compiled_kernels), (8, 1));
    assert_eq!(names, ["fused[mul,add,gelu,sub,exp,mul,tanh,add]"]);
    assert_eq!(report.kernels, names);
    // Eager reads and writes 7 full-size intermediates and launches 8 times.
    assert!(
        compiled_modeled * 4.0 < eager_modeled,
        "modeled {compiled_modeled} s fused vs {eager_modeled} s eager"
    );
    eprintln!(
        "8-op chain over f32[{rows}, {cols}]: eager {eager_kernels} kernels, modeled {:.1} µs, \
         host {:?}; compiled {compiled_kernels} kernel, modeled {:.1} µs, host {:?} \
         (host times from this build's profile); peak intermediates {} -> {} bytes",
        eager_modeled * 1e6,
        eager_host,
        compiled_modeled * 1e6,
        compiled_host,
        report.peak_intermediate_bytes_before,
        report.peak_intermediate_bytes_after,
    );
}

#[test]
fn a_residual_add_norm_and_epilogue_run_as_one_kernel_bitwise() {
    let rt = runtime();
    let mut rng = Rng(5);
    for dtype in [DType::F32, DType::Bf16] {
        let meta = |shape: &[usize]| TensorMeta::new(shape.to_vec(), dtype);
        let mut g = Graph::new();
        let x = g.input(meta(&[70, 96]));
        let attn = g.input(meta(&[70, 96]));
        let w = g.input(meta(&[96]));
        let h = g.op(id("add"), &[x, attn], &Attrs::new()).expect("add")[0];
        let n = g
            .op(id("layer_norm"), &[h, w, w], &Attrs::new())
            .expect("ln")[0];
        let s = g.op(id("mul"), &[n, w], &Attrs::new()).expect("mul")[0];
        let a = g.op(id("gelu"), &[s], &Attrs::new()).expect("gelu")[0];
        g.set_outputs(vec![a, h]);
        let inputs: Vec<Tensor> = g
            .inputs
            .iter()
            .map(|&i| random_tensor(&rt, &mut rng, g.meta(i)))
            .collect();
        let want = eager(&rt, &g, &inputs);
        let (program, report) = optimize(&rt, &g).expect("optimizes");
        assert_eq!(report.kernels, ["fused[add,layer_norm,mul,gelu]"]);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let got = program.run(&rt, CoreId(0), &refs).expect("runs");
        assert_close("normalized", &got[0], &want[0], None);
        assert_close("residual", &got[1], &want[1], None);
    }
}

/// `x * w + b -> gelu` on [4, 8] with a `[8, 8]` weight, and a softmax head.
fn mlp_graph() -> Graph {
    let meta = |shape: &[usize]| TensorMeta::new(shape.to_vec(), DType::F32);
    let mut g = Graph::new();
    let x = g.input(meta(&[4, 8]));
    let w = g.input(meta(&[8, 8]));
    let b = g.input(meta(&[8]));
    let y = g.op(id("matmul"), &[x, w], &Attrs::new()).expect("matmul")[0];
    let z = g.op(id("add"), &[y, b], &Attrs::new()).expect("add")[0];
    let a = g.op(id("gelu"), &[z], &Attrs::new()).expect("gelu")[0];
    let dead = g.op(id("exp"), &[a], &Attrs::new()).expect("exp")[0];
    g.op(id("neg"), &[dead], &Attrs::new()).expect("neg");
    let s = g.op(id("softmax"), &[a], &Attrs::new()).expect("softmax")[0];
    g.set_outputs(vec![s]);
    g
}

#[test]
fn explain_shows_both_graphs_the_passes_and_the_kernels() {
    let (program, report) = optimize(&runtime(), &mlp_graph()).expect("optimizes");
    assert_eq!(report.nodes_before, 6);
    assert_eq!(report.kernels, ["fused[matmul,add,gelu]", "softmax"]);
    assert_eq!(report.fused_kernels(), 1);
    let ran: Vec<&str> = report.passes.iter().map(|p| p.name).collect();
    let table: Vec<&str> = crate::passes::Pass::ALL.iter().map(|p| p.name()).collect();
    assert_eq!(
        ran, table,
        "optimize runs the passes of the table, in its order"
    );
    let text = program.explain();
    for needle in [
        "graph before passes (6 nodes):",
        "  %7 = neg(%6)  # f32[4, 8]",
        "  dead code                       4 nodes",
        "  elementwise fusion              3 nodes",
        "  matmul epilogues                2 nodes",
        "graph after passes (2 kernels, 1 fused):",
        "  %5 = fused[matmul,add,gelu](%0, %1, %2)  # f32[4, 8]",
        "      %4 = add(%3, %2)  # f32[4, 8]",
        "  %6 = softmax(%5; dim=-1)  # f32[4, 8]",
        "host compile time:",
    ] {
        assert!(text.contains(needle), "{needle:?} not in\n{text}");
    }
}

#[test]
fn runs_check_their_inputs_and_publish_accounted_outputs() {
    let rt = runtime();
    let (program, _) = optimize(&runtime(), &mlp_graph()).expect("optimizes");
    let mut rng = Rng(3);
    let metas: Vec<TensorMeta> = program
        .graph()
        .inputs
        .iter()
        .map(|&v| program.graph().meta(v).clone())
        .collect();
    let inputs: Vec<Tensor> = metas
        .iter()
        .map(|m| random_tensor(&rt, &mut rng, m))
        .collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();

    let e = program
        .run(&rt, CoreId(0), &refs[..2])
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "the program takes 3 input(s) (f32[4, 8], f32[8, 8], f32[8]), got 2"
    );
    let swapped = [refs[1], refs[0], refs[2]];
    let e = program
        .run(&rt, CoreId(0), &swapped)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "input 0 is f32[8, 8] but the program was compiled for f32[4, 8]"
    );
    let e = program.run(&rt, CoreId(1), &refs).unwrap_err().to_string();
    assert!(
        e.starts_with("input 0 is on neuron:0 but the program runs on neuron:1"),
        "{e}"
    );

    let before = rt.memory().stats(CoreId(0)).expect("a core").in_use;
    let out = program.run(&rt, CoreId(0), &refs).expect("runs");
    let after = rt.memory().stats(CoreId(0)).expect("a core").in_use;
    // Only the output stays charged; the fused kernel's result was dropped after softmax.
    assert_eq!(after - before, out[0].nbytes() as u64);
    drop(out);
    assert_eq!(rt.memory().stats(CoreId(0)).expect("a core").in_use, before);
}

#[test]
fn fused_kernels_report_eager_errors_and_honour_interrupts() {
    let rt = runtime();
    let meta = TensorMeta::new(vec![4], DType::I64);
    let mut g = Graph::new();
    let a = g.input(meta.clone());
    let b = g.input(meta);
    let s = g.op(id("add"), &[a, b], &Attrs::new()).expect("add")[0];
    let p = g.op(id("pow"), &[s, b], &Attrs::new()).expect("pow")[0];
    g.set_outputs(vec![p]);
    let (program, report) = optimize(&rt, &g).expect("optimizes");
    assert_eq!(report.kernels, ["fused[add,pow]"]);
    let a = rt
        .tensor(Buffer::I64(vec![1, 2, 3, 4]), &[4])
        .expect("fits");
    let b = rt
        .tensor(Buffer::I64(vec![1, -1, 0, 2]), &[4])
        .expect("fits");
    let e = program
        .run(&rt, CoreId(0), &[&a, &b])
        .unwrap_err()
        .to_string();
    let eager = rt
        .call("pow", &[&a, &b], &Attrs::new())
        .unwrap_err()
        .to_string();
    assert_eq!(e, eager);

    let flag = Arc::new(AtomicBool::new(true));
    let b = rt
        .tensor(Buffer::I64(vec![1, 1, 0, 2]), &[4])
        .expect("fits");
    let r = neuronlab_core::cancel::with_token(flag, || program.run(&rt, CoreId(0), &[&a, &b]));
    assert!(matches!(r, Err(Error::Cancelled(_))), "{:?}", r.err());
}

//! Compile benchmarks: eager vs compiled for an 8-op elementwise chain on 4M f32, and for
//! softmax and layer_norm written out as primitive ops on 4096 x 1024; the host compile time of
//! each graph; and the overhead of a compiled-function cache hit for a 10-op graph.

use std::sync::Arc;

use neuronlab_compile::captures::Access;
use neuronlab_compile::function::{CompileOptions, CompiledFunction, Entry, Plan};
use neuronlab_compile::guards::Signature;
use neuronlab_compile::program::optimize;
use neuronlab_compile::recorder::CachedProgram;
use neuronlab_compile::{Graph, ValueId};
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::ops::{Attrs, Registry};
use neuronlab_core::tensor::TensorMeta;
use neuronlab_core::{DType, Runtime, Tensor};

use super::{measure, Case, Sample, Work, DISPATCH_CALLS};

/// One step of a written-out computation: op, operands (indices into the values so far), attrs.
type Step = (&'static str, Vec<usize>, Attrs);

/// A computation written out as primitive ops over its inputs, which can run eagerly (one op
/// call per step) or become a graph to compile.
pub(super) struct WrittenOut {
    pub(super) inputs: Vec<Tensor>,
    steps: Vec<Step>,
}

impl WrittenOut {
    pub(super) fn graph(&self) -> Result<Graph, String> {
        let mut g = Graph::new();
        let mut values: Vec<ValueId> = self.inputs.iter().map(|t| g.input(t.meta())).collect();
        for (op, args, attrs) in &self.steps {
            let id = Registry::global().id(op).ok_or(format!("no op {op}"))?;
            let ins: Vec<ValueId> = args.iter().map(|&i| values[i]).collect();
            values.push(g.op(id, &ins, attrs).map_err(|e| e.to_string())?[0]);
        }
        g.set_outputs(vec![*values.last().ok_or("no steps")?]);
        Ok(g)
    }

    fn eager(&self, rt: &Runtime) -> Tensor {
        let mut values: Vec<Tensor> = self.inputs.clone();
        for (op, args, attrs) in &self.steps {
            let ins: Vec<&Tensor> = args.iter().map(|&i| &values[i]).collect();
            let out = rt.call1(op, &ins, attrs).expect("benchmark ops run");
            values.push(out);
        }
        values.pop().expect("at least one step")
    }
}

fn scalar(rt: &Runtime, v: f64) -> Result<Tensor, String> {
    rt.call1(
        "full",
        &[],
        &Attrs::new()
            .with("shape", Vec::<i64>::new())
            .with("value", v),
    )
    .map_err(|e| e.to_string())
}

fn randn(rt: &Runtime, shape: &[i64], seed: i64) -> Result<Tensor, String> {
    rt.call1(
        "randn",
        &[],
        &Attrs::new()
            .with("shape", shape.to_vec())
            .with("seed", seed),
    )
    .map_err(|e| e.to_string())
}

fn last_dim() -> Attrs {
    Attrs::new().with("dims", vec![-1i64]).with("keepdim", 1)
}

/// x*0.5 + y -> gelu -> -x -> exp -> *y -> tanh -> +x on 4M f32 (bench/compare.py writes the
/// same chain in numpy).
pub(super) fn chain8(rt: &Runtime) -> Result<WrittenOut, String> {
    chain8_of(rt, 4 << 20)
}

/// The same chain on 256K f32, whose operands (1 MiB each) stay in the cores' L2 from run to
/// run: its time, times 16, is what the 4M chain costs without memory traffic.
fn chain8_in_cache(rt: &Runtime) -> Result<WrittenOut, String> {
    chain8_of(rt, CHAIN8_IN_CACHE)
}

/// Elements of the in-cache chain.
const CHAIN8_IN_CACHE: i64 = 256 << 10;

pub(super) fn chain8_of(rt: &Runtime, len: i64) -> Result<WrittenOut, String> {
    let none = Attrs::new;
    Ok(WrittenOut {
        inputs: vec![
            randn(rt, &[len], 1)?,
            randn(rt, &[len], 2)?,
            scalar(rt, 0.5)?,
        ],
        steps: vec![
            ("mul", vec![0, 2], none()),
            ("add", vec![3, 1], none()),
            ("gelu", vec![4], Attrs::new().with("approximate", "tanh")),
            ("sub", vec![5, 0], none()),
            ("exp", vec![6], none()),
            ("mul", vec![7, 1], none()),
            ("tanh", vec![8], none()),
            ("add", vec![9, 0], none()),
        ],
    })
}

/// exp(x - max) / sum(exp(x - max)) over the last dim of 4096 x 1024.
fn softmax_prims(rt: &Runtime) -> Result<WrittenOut, String> {
    let none = Attrs::new;
    Ok(WrittenOut {
        inputs: vec![randn(rt, &[4096, 1024], 3)?],
        steps: vec![
            ("max", vec![0], last_dim()),
            ("sub", vec![0, 1], none()),
            ("exp", vec![2], none()),
            ("sum", vec![3], last_dim()),
            ("div", vec![3, 4], none()),
        ],
    })
}

/// (x - mean) * rsqrt(mean((x - mean)^2) + eps) over the last dim of 4096 x 1024.
fn layer_norm_prims(rt: &Runtime) -> Result<WrittenOut, String> {
    let none = Attrs::new;
    Ok(WrittenOut {
        inputs: vec![randn(rt, &[4096, 1024], 4)?, scalar(rt, 1e-5)?],
        steps: vec![
            ("mean", vec![0], last_dim()),
            ("sub", vec![0, 2], none()),
            ("square", vec![3], none()),
            ("mean", vec![4], last_dim()),
            ("add", vec![5, 1], none()),
            ("rsqrt", vec![6], none()),
            ("mul", vec![3, 7], none()),
        ],
    })
}

/// One written-out computation as the cases see it.
struct Computation {
    /// The cases' id stem: `<id>_eager`, `<id>_compiled`, `<id>_host_compile`.
    id: &'static str,
    what: &'static str,
    /// Bytes an ideal kernel moves: each input read once, the result written once.
    bytes: f64,
    group: &'static str,
    build: fn(&Runtime) -> Result<WrittenOut, String>,
}

/// 4M f32, in bytes.
const MIB16: f64 = 4.0 * (4 << 20) as f64;

const COMPUTATIONS: [Computation; 4] = [
    Computation {
        id: "chain8_f32_4m",
        what: "8-op elementwise chain on 4M f32 (x*0.5 + y -> gelu(tanh) -> -x -> exp -> *y -> \
               tanh -> +x)",
        bytes: 3.0 * MIB16,
        group: "compile",
        build: chain8,
    },
    Computation {
        id: "chain8_f32_256k",
        what: "the 8-op chain on 256K f32, operands in L2 (x 16: the 4M chain without memory \
               traffic)",
        bytes: 3.0 * 4.0 * CHAIN8_IN_CACHE as f64,
        group: "extra",
        build: chain8_in_cache,
    },
    Computation {
        id: "softmax_prims_f32_4096x1024",
        what: "softmax over the last dim of [4096, 1024] f32 written as 5 primitive ops",
        bytes: 2.0 * MIB16,
        group: "extra",
        build: softmax_prims,
    },
    Computation {
        id: "layer_norm_prims_f32_4096x1024",
        what: "layer_norm (no weight) over the last dim of [4096, 1024] f32 written as 7 \
               primitive ops",
        bytes: 2.0 * MIB16,
        group: "extra",
        build: layer_norm_prims,
    },
];

/// Eager, compiled, and host compile time of each computation, as separate cases.
pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for c in COMPUTATIONS {
        let (build, bytes) = (c.build, c.bytes);
        out.push(Case::new(
            format!("{}_eager", c.id),
            format!("{}: eager, one op call per step", c.what),
            c.group,
            move |rt: &Arc<Runtime>| {
                let written = build(rt)?;
                let timing = measure(
                    || {
                        written.eager(rt);
                    },
                    || rt.bus().clear(),
                );
                Ok(Sample::new(timing, Work::Bytes(bytes))
                    .with_note(format!("{} ops", written.steps.len())))
            },
        ));
        out.push(Case::new(
            format!("{}_compiled", c.id),
            format!("{}: compiled (the optimized, fused program)", c.what),
            c.group,
            move |rt: &Arc<Runtime>| {
                let written = build(rt)?;
                let (program, report) =
                    optimize(rt, &written.graph()?).map_err(|e| e.to_string())?;
                let refs: Vec<&Tensor> = written.inputs.iter().collect();
                let timing = measure(
                    || {
                        program.run(rt, CoreId(0), &refs).expect("the program runs");
                    },
                    || rt.bus().clear(),
                );
                Ok(Sample::new(timing, Work::Bytes(bytes))
                    .with_note(format!("{} kernel(s)", report.kernels.len())))
            },
        ));
        out.push(Case::new(
            format!("{}_host_compile", c.id),
            format!("{}: host compile time of the graph (optimize)", c.what),
            "extra",
            move |rt: &Arc<Runtime>| {
                let graph = build(rt)?.graph()?;
                let timing = measure(
                    || {
                        optimize(rt, &graph).expect("the graph optimizes");
                    },
                    || {},
                );
                Ok(Sample::new(timing, Work::None))
            },
        ));
    }
    out
}

/// The unary ops of the cache-hit graph, each applied to the previous result.
const CACHE_HIT_OPS: [&str; 10] = [
    "exp", "tanh", "sigmoid", "neg", "abs", "sqrt", "relu", "sin", "cos", "silu",
];

/// The host cost of a compiled-function call that hits its cache: signature, lookup, and
/// running a 10-op program on one-element tensors (so the kernels themselves cost little).
fn cache_hit(rt: &Arc<Runtime>) -> Result<Sample, String> {
    let x = randn(rt, &[1], 5)?;
    let written = WrittenOut {
        inputs: vec![x.clone()],
        steps: CACHE_HIT_OPS
            .iter()
            .enumerate()
            .map(|(i, op)| (*op, vec![i], Attrs::new()))
            .collect(),
    };
    let (program, report) = optimize(rt, &written.graph()?).map_err(|e| e.to_string())?;
    let signature = Signature {
        inputs: vec![TensorMeta::new(vec![1], DType::F32)],
        requires_grad: vec![false],
    };
    let mut f = CompiledFunction::new("10-op graph", 0, CompileOptions::default());
    let compiled = Arc::new(CachedProgram { program, report });
    f.add(Entry::plain(signature, compiled), false);
    // Nothing captured: no guard reads guest state.
    let observe = |_: &Access| None;
    if !matches!(
        f.plan(&Signature::of(std::slice::from_ref(&x)), &observe),
        Plan::Hit(_)
    ) {
        return Err("the signature just added is not a cache hit".into());
    }
    let timing = measure(
        || {
            for _ in 0..DISPATCH_CALLS {
                let sig = Signature::of(std::slice::from_ref(&x));
                let Plan::Hit(entry) = f.plan(&sig, &observe) else {
                    unreachable!("the signature was a hit before timing")
                };
                entry
                    .compiled
                    .program
                    .run(rt, CoreId(0), &[&x])
                    .expect("the program runs");
            }
        },
        || rt.bus().clear(),
    );
    Ok(Sample::per_call(timing, DISPATCH_CALLS))
}

/// The cache-hit case.
pub fn cache_hit_case() -> Case {
    Case::new(
        "cache_hit_10op",
        format!(
            "compiled-function cache hit: signature, lookup and run of a {}-op graph on a \
             1-element f32 input, per call ({DISPATCH_CALLS} calls per run)",
            CACHE_HIT_OPS.len()
        ),
        "dispatch",
        cache_hit,
    )
}

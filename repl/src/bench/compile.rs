//! Compile benchmarks: eager vs compiled for an 8-op elementwise chain on 4M f32, and for
//! softmax and layer_norm written out as primitive ops on 4096 x 1024; the host compile time of
//! each graph; and the overhead of a compiled-function cache hit for a 10-op graph.

use neuronlab_runtime::compile::function::{CompileOptions, CompiledFunction, Entry, Plan};
use neuronlab_runtime::compile::guards::Signature;
use neuronlab_runtime::compile::program::optimize;
use neuronlab_runtime::compile::recorder::CachedProgram;
use neuronlab_runtime::compile::{Graph, ValueId};
use neuronlab_runtime::device::topology::CoreId;
use neuronlab_runtime::ops::{Attrs, Registry};
use neuronlab_runtime::tensor::TensorMeta;
use neuronlab_runtime::{DType, Runtime, Tensor};

use super::{time, Figure};

/// One step of a written-out computation: op, operands (indices into the values so far), attrs.
type Step = (&'static str, Vec<usize>, Attrs);

/// Builds the graph of `steps` over `inputs` and runs the same steps eagerly; returns both.
struct Case {
    name: &'static str,
    inputs: Vec<Tensor>,
    steps: Vec<Step>,
}

impl Case {
    fn graph(&self) -> Result<Graph, String> {
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

fn cases(rt: &Runtime) -> Result<Vec<Case>, String> {
    let none = Attrs::new;
    let last = || Attrs::new().with("dims", vec![-1i64]).with("keepdim", 1);
    Ok(vec![
        Case {
            name: "8-op elementwise chain, 4M f32",
            inputs: vec![
                randn(rt, &[4 << 20], 1)?,
                randn(rt, &[4 << 20], 2)?,
                scalar(rt, 0.5)?,
            ],
            // x*0.5 + y -> gelu -> -x -> exp -> *y -> tanh -> +x
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
        },
        Case {
            name: "softmax as primitive ops, 4096x1024 f32",
            inputs: vec![randn(rt, &[4096, 1024], 3)?],
            // exp(x - max) / sum(exp(x - max))
            steps: vec![
                ("max", vec![0], last()),
                ("sub", vec![0, 1], none()),
                ("exp", vec![2], none()),
                ("sum", vec![3], last()),
                ("div", vec![3, 4], none()),
            ],
        },
        Case {
            name: "layer_norm as primitive ops, 4096x1024 f32",
            inputs: vec![randn(rt, &[4096, 1024], 4)?, scalar(rt, 1e-5)?],
            // (x - mean) * rsqrt(mean((x - mean)^2) + eps)
            steps: vec![
                ("mean", vec![0], last()),
                ("sub", vec![0, 2], none()),
                ("square", vec![3], none()),
                ("mean", vec![4], last()),
                ("add", vec![5, 1], none()),
                ("rsqrt", vec![6], none()),
                ("mul", vec![3, 7], none()),
            ],
        },
    ])
}

/// Eager and compiled times, their ratio, and each graph's host compile time.
pub fn eager_vs_compiled(rt: &Runtime) -> Result<Vec<Figure>, String> {
    let mut out = Vec::new();
    for case in cases(rt)? {
        let graph = case.graph()?;
        let (program, report) = optimize(&graph).map_err(|e| e.to_string())?;
        let compile_ms = time(5, || {
            optimize(&graph).expect("the graph optimizes");
        }) * 1e3;
        let refs: Vec<&Tensor> = case.inputs.iter().collect();
        let eager = time(5, || {
            case.eager(rt);
            rt.bus().clear();
        });
        let compiled = time(5, || {
            program.run(rt, CoreId(0), &refs).expect("the program runs");
            rt.bus().clear();
        });
        let kernels = report.kernels.len();
        out.push(Figure::new(
            format!("{}: eager ({} ops)", case.name, case.steps.len()),
            eager * 1e3,
            "ms",
        ));
        out.push(Figure::new(
            format!("{}: compiled ({kernels} kernel(s))", case.name),
            compiled * 1e3,
            "ms",
        ));
        out.push(Figure::new(
            format!("{}: eager / compiled", case.name),
            eager / compiled,
            "x",
        ));
        out.push(Figure::new(
            format!("{}: host compile time", case.name),
            compile_ms,
            "ms",
        ));
    }
    Ok(out)
}

/// The host cost of a compiled-function call that hits its cache: signature, lookup, and
/// running a 10-op program on one-element tensors (so the kernels themselves cost little).
pub fn cache_hit(rt: &Runtime) -> Result<Figure, String> {
    let x = randn(rt, &[1], 5)?;
    let steps: Vec<Step> = [
        "exp", "tanh", "sigmoid", "neg", "abs", "sqrt", "relu", "sin", "cos", "silu",
    ]
    .iter()
    .enumerate()
    .map(|(i, op)| (*op, vec![i], Attrs::new()))
    .collect();
    let case = Case {
        name: "10-op graph",
        inputs: vec![x.clone()],
        steps,
    };
    let graph = case.graph()?;
    let (program, report) = optimize(&graph).map_err(|e| e.to_string())?;
    let signature = Signature {
        inputs: vec![TensorMeta::new(vec![1], DType::F32)],
    };
    let mut f = CompiledFunction::new(case.name, 0, CompileOptions::default());
    f.add(
        Entry {
            signature: signature.clone(),
            compiled: std::sync::Arc::new(CachedProgram { program, report }),
            captured: Vec::new(),
        },
        false,
    );
    const N: usize = 20_000;
    let secs = time(5, || {
        for _ in 0..N {
            let sig = Signature {
                inputs: vec![x.meta()],
            };
            let Plan::Hit(entry) = f.plan(&sig) else {
                panic!("the signature is cached")
            };
            entry
                .compiled
                .program
                .run(rt, CoreId(0), &[&x])
                .expect("the program runs");
        }
        rt.bus().clear();
    });
    Ok(Figure::new(
        format!(
            "compiled-function cache hit, {}-op graph, 1-element input",
            case.steps.len()
        ),
        secs / N as f64 * 1e9,
        "ns/call",
    ))
}

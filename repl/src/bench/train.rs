//! One training step of a two-layer MLP: x f32[4096, 1024] -> matmul + bias -> gelu (tanh) ->
//! matmul + bias -> [4096, 1024], the mean squared error against a target, backward, and
//! torch's AdamW. Eager: `autograd::backward`, and AdamW written as registry ops under
//! `no_grad`, its moments kept from step to step and the gradients cleared after each update.
//! Compiled: the same step as one joint graph (forward, the backward `compile::autodiff`
//! appends, the update), optimized once and run per step on the current parameters and moments,
//! as a compiled training step of a guest runs. bench/compare.py times `jax.jit` of the same
//! step beside both.
//!
//! The case also reports, from its last step, the bytes autograd saved for backward (at their
//! peak, when forward ends) and the most bytes backward allocated beyond what was held when it
//! began (its temporaries and the parameters' gradients): backward's memory is judged by the
//! second over the first.

use std::sync::Arc;

use neuronlab_compile::autodiff::{saved_for_backward, Tape};
use neuronlab_compile::program::optimize;
use neuronlab_compile::{Graph, Part, ValueId};
use neuronlab_core::autograd::{backward, no_grad, replace_data, requires_grad, set_grad};
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::ops::{Attrs, Registry};
use neuronlab_core::{Runtime, Tensor};

use super::{measure, Case, Sample, Work};

/// Rows of the batch, the model's width and its hidden width.
#[derive(Clone, Copy)]
struct Dims {
    batch: i64,
    d_model: i64,
    d_hidden: i64,
}

/// The case's MLP: [4096, 1024] -> 4096 -> 1024.
const DIMS: Dims = Dims {
    batch: 4096,
    d_model: 1024,
    d_hidden: 4096,
};

/// torch's AdamW defaults.
const LR: f64 = 1e-3;
const BETAS: (f64, f64) = (0.9, 0.999);
const EPS: f64 = 1e-8;
const WEIGHT_DECAY: f64 = 0.01;

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn call(rt: &Runtime, op: &str, inputs: &[&Tensor], attrs: &Attrs) -> Result<Tensor, String> {
    rt.call1(op, inputs, attrs).map_err(text)
}

fn binary(rt: &Runtime, op: &str, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    call(rt, op, &[a, b], &Attrs::new())
}

/// A 0-d f32 tensor (0-d operands broadcast without changing a tensor's dtype).
fn scalar(rt: &Runtime, value: f64) -> Result<Tensor, String> {
    call(
        rt,
        "full",
        &[],
        &Attrs::new()
            .with("shape", Vec::<i64>::new())
            .with("value", value),
    )
}

/// Normal draws scaled by `std`, or zeros when `std` is 0.
fn init(rt: &Runtime, shape: &[i64], std: f64, seed: i64) -> Result<Tensor, String> {
    let shape = Attrs::new().with("shape", shape.to_vec());
    if std == 0.0 {
        return call(rt, "zeros", &[], &shape);
    }
    let draws = call(rt, "randn", &[], &shape.with("seed", seed))?;
    binary(rt, "mul", &draws, &scalar(rt, std)?)
}

/// The data and the parameters (w1, b1, w2, b2), which are leaves that require gradients.
struct Mlp {
    x: Tensor,
    y: Tensor,
    params: Vec<Tensor>,
}

impl Mlp {
    fn new(rt: &Runtime, dims: Dims) -> Result<Mlp, String> {
        let Dims {
            batch,
            d_model,
            d_hidden,
        } = dims;
        // Weights scaled by 1/sqrt(fan_in), so activations keep unit size; biases start at 0.
        let params = [
            init(rt, &[d_model, d_hidden], (d_model as f64).powf(-0.5), 3)?,
            init(rt, &[d_hidden], 0.0, 0)?,
            init(rt, &[d_hidden, d_model], (d_hidden as f64).powf(-0.5), 4)?,
            init(rt, &[d_model], 0.0, 0)?,
        ]
        .iter()
        .map(|p| requires_grad(rt, p).map_err(text))
        .collect::<Result<_, _>>()?;
        Ok(Mlp {
            x: init(rt, &[batch, d_model], 1.0, 1)?,
            y: init(rt, &[batch, d_model], 1.0, 2)?,
            params,
        })
    }

    /// mean((gelu(x @ w1 + b1) @ w2 + b2 - y)^2), recorded for backward.
    fn loss(&self, rt: &Runtime) -> Result<Tensor, String> {
        let [w1, b1, w2, b2] = &self.params[..] else {
            unreachable!("the MLP has four parameters")
        };
        let h = binary(rt, "add", &binary(rt, "matmul", &self.x, w1)?, b1)?;
        let h = call(rt, "gelu", &[&h], &Attrs::new().with("approximate", "tanh"))?;
        let pred = binary(rt, "add", &binary(rt, "matmul", &h, w2)?, b2)?;
        let err = binary(rt, "sub", &pred, &self.y)?;
        let squared = call(rt, "square", &[&err], &Attrs::new())?;
        call(rt, "mean", &[&squared], &Attrs::new())
    }
}

/// torch's AdamW (`torch.optim.AdamW`, not fused): decoupled weight decay, bias-corrected
/// moments, `eps` added after the square root.
struct AdamW {
    steps: i32,
    /// Per parameter, the first and second moments.
    moments: Vec<(Tensor, Tensor)>,
}

impl AdamW {
    fn new(rt: &Runtime, params: &[Tensor]) -> Result<AdamW, String> {
        let zeros = |p: &Tensor| {
            let shape: Vec<i64> = p.shape().iter().map(|&d| d as i64).collect();
            call(rt, "zeros", &[], &Attrs::new().with("shape", shape))
        };
        Ok(AdamW {
            steps: 0,
            moments: params
                .iter()
                .map(|p| Ok((zeros(p)?, zeros(p)?)))
                .collect::<Result<_, String>>()?,
        })
    }

    /// Updates each parameter from its gradient, then clears the gradient.
    fn step(&mut self, rt: &Runtime, params: &mut [Tensor]) -> Result<(), String> {
        self.steps += 1;
        let (b1, b2) = BETAS;
        let bias1 = 1.0 - b1.powi(self.steps);
        let bias2_sqrt = (1.0 - b2.powi(self.steps)).sqrt();
        no_grad(|| {
            let decay = scalar(rt, 1.0 - LR * WEIGHT_DECAY)?;
            let (one_minus_b1, b2_t, one_minus_b2) = (
                scalar(rt, 1.0 - b1)?,
                scalar(rt, b2)?,
                scalar(rt, 1.0 - b2)?,
            );
            let (inv_bias2_sqrt, eps) = (scalar(rt, 1.0 / bias2_sqrt)?, scalar(rt, EPS)?);
            let step_size = scalar(rt, LR / bias1)?;
            for (p, (m, v)) in params.iter_mut().zip(&mut self.moments) {
                let g = p
                    .leaf()
                    .and_then(|leaf| leaf.grad())
                    .ok_or("a parameter has no gradient after backward")?;
                let decayed = binary(rt, "mul", p, &decay)?;
                // m += (1 - b1)(g - m); v = b2 v + (1 - b2) g^2
                *m = binary(
                    rt,
                    "add",
                    m,
                    &binary(rt, "mul", &binary(rt, "sub", &g, m)?, &one_minus_b1)?,
                )?;
                let g2 = binary(rt, "mul", &g, &g)?;
                *v = binary(
                    rt,
                    "add",
                    &binary(rt, "mul", v, &b2_t)?,
                    &binary(rt, "mul", &g2, &one_minus_b2)?,
                )?;
                // p -= (lr / bias1) m / (sqrt(v) / sqrt(bias2) + eps)
                let root = call(rt, "sqrt", &[v], &Attrs::new())?;
                let denom = binary(rt, "add", &binary(rt, "mul", &root, &inv_bias2_sqrt)?, &eps)?;
                let update = binary(rt, "div", &binary(rt, "mul", m, &step_size)?, &denom)?;
                *p = replace_data(p, &binary(rt, "sub", &decayed, &update)?).map_err(text)?;
                set_grad(p, None).map_err(text)?;
            }
            Ok(())
        })
    }
}

/// What one step's backward held, in bytes.
#[derive(Clone, Copy, Default)]
struct BackwardMemory {
    /// Saved for backward at the end of forward (autograd's count: the storages the recorded
    /// nodes hold, inputs and weights among them).
    saved: u64,
    /// The most backward allocated on top of what was held when it began.
    extra: u64,
    /// The parameters' gradients when backward ended (part of `extra`).
    grads: u64,
}

/// Forward, backward and the update; what backward held.
fn step(rt: &Runtime, mlp: &mut Mlp, opt: &mut AdamW) -> Result<BackwardMemory, String> {
    let core = rt.default_device();
    rt.autograd_bytes(core).map_err(text)?.reset_peak();
    let loss = mlp.loss(rt)?;
    let saved = rt.autograd_use(core).map_err(text)?.saved_peak;
    let held = rt.memory().stats(core).map_err(text)?.in_use;
    rt.memory().reset_peak(core).map_err(text)?;
    backward(rt, &[loss], &[None], false).map_err(text)?;
    let peak = rt.memory().stats(core).map_err(text)?.peak;
    let grads = rt.autograd_use(core).map_err(text)?.grads;
    opt.step(rt, &mut mlp.params)?;
    Ok(BackwardMemory {
        saved,
        extra: peak.saturating_sub(held),
        grads,
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1 << 20) as f64)
}

fn train_step_eager(rt: &Arc<Runtime>) -> Result<Sample, String> {
    let mut mlp = Mlp::new(rt, DIMS)?;
    let mut opt = AdamW::new(rt, &mlp.params)?;
    let mut last = Ok(BackwardMemory::default());
    let timing = measure(
        || {
            // A failed step stops the case with its error; the steps after it are not run.
            if last.is_ok() {
                last = step(rt, &mut mlp, &mut opt);
            }
        },
        || rt.bus().clear(),
    );
    let memory = last?;
    // Only the matmuls: two forward, and backward's three (x needs no gradient).
    let flop = 5.0 * 2.0 * (DIMS.batch * DIMS.d_model * DIMS.d_hidden) as f64;
    Ok(Sample::new(timing, Work::Flops(flop))
        .with_note(format!(
            "saved {}; backward +{} ({} of it gradients), {:.2}x the saved",
            mib(memory.saved),
            mib(memory.extra),
            mib(memory.grads),
            memory.extra as f64 / memory.saved as f64
        ))
        .with_figure("saved_peak_bytes", memory.saved)
        .with_figure("backward_extra_bytes", memory.extra)
        .with_figure("grad_bytes", memory.grads))
}

/// A graph being traced with its tape, as a compiled function's trace keeps them.
struct Joint {
    g: Graph,
    tape: Tape,
}

impl Joint {
    fn input(&mut self, t: &Tensor, requires_grad: bool) -> ValueId {
        let v = self.g.input(t.meta());
        if requires_grad {
            self.tape.require(v);
        }
        v
    }

    fn op(&mut self, name: &str, inputs: &[ValueId], attrs: Attrs) -> Result<ValueId, String> {
        let id = Registry::global().id(name).ok_or(format!("no op {name}"))?;
        let out = self.g.op(id, inputs, &attrs).map_err(text)?[0];
        let n = self.g.nodes.len() - 1;
        self.tape.record(&self.g, n, true).map_err(text)?;
        Ok(out)
    }

    fn binary(&mut self, name: &str, a: ValueId, b: ValueId) -> Result<ValueId, String> {
        self.op(name, &[a, b], Attrs::new())
    }

    fn scalar(&mut self, value: f64) -> Result<ValueId, String> {
        let attrs = Attrs::new()
            .with("shape", Vec::<i64>::new())
            .with("value", value);
        self.op("full", &[], attrs)
    }
}

/// The step as one graph. Inputs: x, y, the four parameters, their first and second moments,
/// then the step size and 1/sqrt(bias2) (the step-dependent numbers, f32 0-d). Outputs: the
/// loss, the new parameters, the new first moments, the new second moments.
fn joint_step(
    mlp: &Mlp,
    moments: &[(Tensor, Tensor)],
    scalars: &[Tensor],
) -> Result<Graph, String> {
    let mut j = Joint {
        g: Graph::new(),
        tape: Tape::new(),
    };
    let x = j.input(&mlp.x, false);
    let y = j.input(&mlp.y, false);
    let params: Vec<ValueId> = mlp.params.iter().map(|p| j.input(p, true)).collect();
    let ms: Vec<ValueId> = moments.iter().map(|(m, _)| j.input(m, false)).collect();
    let vs: Vec<ValueId> = moments.iter().map(|(_, v)| j.input(v, false)).collect();
    let step_size = j.input(&scalars[0], false);
    let inv_bias2_sqrt = j.input(&scalars[1], false);
    let (w1, b1, w2, b2) = (params[0], params[1], params[2], params[3]);
    let h = j.binary("matmul", x, w1)?;
    let h = j.binary("add", h, b1)?;
    let h = j.op("gelu", &[h], Attrs::new().with("approximate", "tanh"))?;
    let pred = j.binary("matmul", h, w2)?;
    let pred = j.binary("add", pred, b2)?;
    let err = j.binary("sub", pred, y)?;
    let squared = j.op("square", &[err], Attrs::new())?;
    let loss = j.op("mean", &[squared], Attrs::new())?;
    let grads = j
        .tape
        .backward(&mut j.g, &[loss], &[None], &params, false)
        .map_err(text)?;
    j.g.set_part(Part::Update);
    let (b1_, b2_) = BETAS;
    let decay = j.scalar(1.0 - LR * WEIGHT_DECAY)?;
    let one_minus_b1 = j.scalar(1.0 - b1_)?;
    let b2_t = j.scalar(b2_)?;
    let one_minus_b2 = j.scalar(1.0 - b2_)?;
    let eps = j.scalar(EPS)?;
    let mut outputs = vec![loss];
    let (mut new_m, mut new_v) = (Vec::new(), Vec::new());
    for (k, g) in grads.into_iter().enumerate() {
        let g = g.ok_or("a parameter has no gradient")?;
        let decayed = j.binary("mul", params[k], decay)?;
        let diff = j.binary("sub", g, ms[k])?;
        let scaled = j.binary("mul", diff, one_minus_b1)?;
        let m = j.binary("add", ms[k], scaled)?;
        let g2 = j.binary("mul", g, g)?;
        let v_old = j.binary("mul", vs[k], b2_t)?;
        let g2 = j.binary("mul", g2, one_minus_b2)?;
        let v = j.binary("add", v_old, g2)?;
        let root = j.op("sqrt", &[v], Attrs::new())?;
        let root = j.binary("mul", root, inv_bias2_sqrt)?;
        let denom = j.binary("add", root, eps)?;
        let num = j.binary("mul", m, step_size)?;
        let update = j.binary("div", num, denom)?;
        outputs.push(j.binary("sub", decayed, update)?);
        new_m.push(m);
        new_v.push(v);
    }
    outputs.extend(new_m);
    outputs.extend(new_v);
    j.g.set_outputs(outputs);
    Ok(j.g)
}

fn train_step_compiled(rt: &Arc<Runtime>) -> Result<Sample, String> {
    let mut mlp = Mlp::new(rt, DIMS)?;
    let opt = AdamW::new(rt, &mlp.params)?;
    let mut moments = opt.moments;
    let mut steps = 0;
    let step_scalars = |steps: i32| -> Result<Vec<Tensor>, String> {
        let (b1, b2) = BETAS;
        let bias1 = 1.0 - b1.powi(steps);
        let bias2_sqrt = (1.0 - b2.powi(steps)).sqrt();
        Ok(vec![scalar(rt, LR / bias1)?, scalar(rt, 1.0 / bias2_sqrt)?])
    };
    let graph = joint_step(&mlp, &moments, &step_scalars(1)?)?;
    let saved: u64 = saved_for_backward(&graph)
        .iter()
        .map(|&v| graph.meta(v).nbytes() as u64)
        .sum();
    let (program, report) = optimize(rt, &graph).map_err(text)?;
    let mut last: Result<(), String> = Ok(());
    let timing = measure(
        || {
            if last.is_err() {
                return;
            }
            steps += 1;
            last = (|| -> Result<(), String> {
                let scalars = step_scalars(steps)?;
                let mut inputs: Vec<&Tensor> = vec![&mlp.x, &mlp.y];
                inputs.extend(&mlp.params);
                inputs.extend(moments.iter().map(|(m, _)| m));
                inputs.extend(moments.iter().map(|(_, v)| v));
                inputs.extend(&scalars);
                let out = program.run(rt, CoreId(0), &inputs).map_err(text)?;
                let mut out = out.into_iter().skip(1);
                let n = mlp.params.len();
                let new_params: Vec<Tensor> = out.by_ref().take(n).collect();
                let new_m: Vec<Tensor> = out.by_ref().take(n).collect();
                for (p, new) in mlp.params.iter_mut().zip(new_params) {
                    *p = replace_data(p, &new).map_err(text)?;
                }
                for ((m, v), (new_m, new_v)) in moments.iter_mut().zip(new_m.into_iter().zip(out)) {
                    *m = new_m;
                    *v = new_v;
                }
                Ok(())
            })();
        },
        || rt.bus().clear(),
    );
    last?;
    let flop = 5.0 * 2.0 * (DIMS.batch * DIMS.d_model * DIMS.d_hidden) as f64;
    Ok(Sample::new(timing, Work::Flops(flop))
        .with_note(format!(
            "{} ops -> {} kernels ({} fused); saved for backward {}, program peak intermediates \
             {} (modeled)",
            report.nodes_before,
            report.nodes_after,
            report.fused_kernels(),
            mib(saved),
            mib(report.peak_intermediate_bytes_after)
        ))
        .with_figure("saved_bytes", saved)
        .with_figure(
            "peak_intermediate_bytes",
            report.peak_intermediate_bytes_after,
        ))
}

/// The training-step cases.
pub fn cases() -> Vec<Case> {
    let Dims {
        batch,
        d_model,
        d_hidden,
    } = DIMS;
    vec![
        Case::new(
            "mlp_train_step_eager",
            format!(
                "MLP training step, eager: f32[{batch}, {d_model}] -> {d_hidden} (gelu tanh) -> \
             {d_model}, mean squared error, backward, AdamW (torch's formula as registry ops)"
            ),
            "train",
            train_step_eager,
        ),
        Case::new(
            "mlp_train_step_compiled",
            "MLP training step, compiled: the same step as one joint graph of forward, \
             backward and the AdamW update, optimized once"
                .to_string(),
            "train",
            train_step_compiled,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_updates_as_adamw_and_reports_what_backward_held() {
        let rt = Runtime::from_env().expect("a runtime");
        let dims = Dims {
            batch: 8,
            d_model: 4,
            d_hidden: 16,
        };
        let mut mlp = Mlp::new(&rt, dims).unwrap();
        let mut opt = AdamW::new(&rt, &mlp.params).unwrap();
        let before: Vec<Vec<f32>> = mlp.params.iter().map(|p| p.to_vec::<f32>()).collect();
        // The first step's gradients, from a forward and backward of the same parameters.
        let loss = mlp.loss(&rt).unwrap();
        backward(&rt, &[loss], &[None], false).unwrap();
        let grads: Vec<Vec<f32>> = mlp
            .params
            .iter()
            .map(|p| p.leaf().unwrap().grad().unwrap().to_vec::<f32>())
            .collect();
        mlp.params.iter().for_each(|p| set_grad(p, None).unwrap());

        let memory = step(&rt, &mut mlp, &mut opt).unwrap();
        // AdamW's first step moves each weight by lr against its gradient's sign (m / bias1
        // is g and sqrt(v / bias2) is |g|), after the decay.
        for ((p, old), g) in mlp.params.iter().zip(&before).zip(&grads) {
            for ((new, old), g) in p.to_vec::<f32>().iter().zip(old).zip(g) {
                let want = *old as f64 * (1.0 - LR * WEIGHT_DECAY)
                    - LR * *g as f64 / (g.abs() as f64 + EPS);
                assert!((*new as f64 - want).abs() < 1e-6, "{new} vs {want}");
            }
            assert!(
                p.leaf().unwrap().grad().is_none(),
                "the step clears gradients"
            );
        }
        let param_bytes: u64 = mlp.params.iter().map(|p| p.nbytes() as u64).sum();
        assert_eq!(memory.grads, param_bytes);
        assert!(memory.extra >= memory.grads, "backward made the gradients");
        // At least the hidden activation, before and after gelu.
        assert!(memory.saved >= 2 * 4 * (dims.batch * dims.d_hidden) as u64);
        assert_eq!(rt.autograd_use(rt.default_device()).unwrap().saved, 0);
    }

    #[test]
    fn the_joint_graph_steps_as_the_eager_step() {
        let rt = Runtime::from_env().expect("a runtime");
        let dims = Dims {
            batch: 8,
            d_model: 4,
            d_hidden: 16,
        };
        let mut eager = Mlp::new(&rt, dims).unwrap();
        let mut opt = AdamW::new(&rt, &eager.params).unwrap();
        step(&rt, &mut eager, &mut opt).unwrap();

        let compiled = Mlp::new(&rt, dims).unwrap();
        let moments = AdamW::new(&rt, &compiled.params).unwrap().moments;
        let (b1, b2) = BETAS;
        let scalars = [
            scalar(&rt, LR / (1.0 - b1)).unwrap(),
            scalar(&rt, 1.0 / (1.0 - b2).sqrt()).unwrap(),
        ];
        let graph = joint_step(&compiled, &moments, &scalars).unwrap();
        let (program, _) = optimize(&rt, &graph).unwrap();
        let mut inputs: Vec<&Tensor> = vec![&compiled.x, &compiled.y];
        inputs.extend(&compiled.params);
        inputs.extend(moments.iter().map(|(m, _)| m));
        inputs.extend(moments.iter().map(|(_, v)| v));
        inputs.extend(&scalars);
        let out = program.run(&rt, CoreId(0), &inputs).unwrap();
        for (k, p) in eager.params.iter().enumerate() {
            let (want, got) = (p.to_vec::<f32>(), out[1 + k].to_vec::<f32>());
            let worst = want
                .iter()
                .zip(&got)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            // Fusion may reorder a reduction's sums; the update itself is the same ops.
            assert!(worst <= 1e-6, "parameter {k}: {worst}");
        }
    }
}

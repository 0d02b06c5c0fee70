//! One training step of a two-layer MLP, eager: x f32[4096, 1024] -> matmul + bias -> gelu
//! (tanh) -> matmul + bias -> [4096, 1024], the mean squared error against a target,
//! `autograd::backward`, and torch's AdamW written as registry ops under `no_grad`, its moments
//! kept from step to step and the gradients cleared after each update. bench/compare.py times
//! `jax.jit` of the same step beside it.
//!
//! The case also reports, from its last step, the bytes autograd saved for backward (at their
//! peak, when forward ends) and the most bytes backward allocated beyond what was held when it
//! began (its temporaries and the parameters' gradients): backward's memory is judged by the
//! second over the first.

use std::sync::Arc;

use neuronlab_core::autograd::{backward, no_grad, replace_data, requires_grad, set_grad};
use neuronlab_core::ops::Attrs;
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

/// The training-step cases.
pub fn cases() -> Vec<Case> {
    let Dims {
        batch,
        d_model,
        d_hidden,
    } = DIMS;
    vec![Case::new(
        "mlp_train_step_eager",
        format!(
            "MLP training step, eager: f32[{batch}, {d_model}] -> {d_hidden} (gelu tanh) -> \
             {d_model}, mean squared error, backward, AdamW (torch's formula as registry ops)"
        ),
        "train",
        train_step_eager,
    )]
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
}

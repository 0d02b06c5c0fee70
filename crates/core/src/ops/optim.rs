//! Optimizer ops: one Adam or AdamW update of a parameter and its two moments, as torch's
//! fused `_fused_adam_` and `_fused_adamw_` kernels.
//!
//! An optimizer step written as elementwise ops costs about thirty ops per parameter, most of
//! them on 0-d tensors (the bias corrections); on a sharded run every rank pays them for every
//! parameter, so they dominate a step's op count. One op per parameter does the same math.
//!
//! The kernel rounds exactly where torch's single-tensor (`foreach=False`) implementation
//! rounds, one in-place op at a time: each op computes in the parameter's compute type (f32
//! for the half types) and stores to the parameter's dtype. The step-dependent scalars (bias
//! corrections, step size) are f64, as torch's Python floats, converted to the compute type
//! where they meet a tensor. So its results are bitwise those of the same update written as
//! this registry's elementwise ops.

use num_traits::Float;
use rayon::prelude::*;
use smallvec::smallvec;

use super::attrs::{AttrDefault, AttrKind, AttrSpec, ResolvedAttrs};
use super::common::{dense, expect_float, streaming_cost, with_float, FloatElem, MathExt};
use super::registry::{Exec, InputSpec, KernelArgs, KernelResult, MetaArgs, OpDef, OpGroup};
use crate::device::cost::{Engine, OpCost};
use crate::tensor::{Element, Tensor, TensorMeta};

/// Elements per parallel task: large enough that scheduling costs little.
const TASK: usize = 1 << 14;

static ADAM_INPUTS: &[InputSpec] = &[
    InputSpec::tensor("param"),
    InputSpec::tensor("grad"),
    InputSpec::tensor("exp_avg"),
    InputSpec::tensor("exp_avg_sq"),
    InputSpec::tensor("lr"),
    InputSpec::tensor("step"),
];

static ADAM_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("beta1", AttrKind::Float, AttrDefault::Required),
    AttrSpec::new("beta2", AttrKind::Float, AttrDefault::Required),
    AttrSpec::new("eps", AttrKind::Float, AttrDefault::Required),
    AttrSpec::new("weight_decay", AttrKind::Float, AttrDefault::Required),
];

static ADAM_OUTPUTS: &[&str] = &["param", "exp_avg", "exp_avg_sq"];

/// The parameter, its gradient and moments agree in shape and dtype; `lr` and `step` are
/// one-element float tensors (the step count after this step).
fn infer_adam(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let param = &a.inputs[0];
    expect_float("param", param)?;
    for (name, m) in ["grad", "exp_avg", "exp_avg_sq"]
        .iter()
        .zip(&a.inputs[1..4])
    {
        if m != param {
            return Err(format!(
                "{name} must match param {param}, got {m}; each parameter steps with its own \
                 gradient and moments"
            ));
        }
    }
    for (name, m) in ["lr", "step"].iter().zip(&a.inputs[4..6]) {
        expect_float(name, m)?;
        if m.numel() != 1 {
            return Err(format!("{name} must hold one number, got {m}"));
        }
    }
    Ok(vec![param.clone(); 3])
}

/// The scalars of one step, in f64 as torch computes them from Python floats.
struct Hyper {
    /// `1 - lr * weight_decay`, AdamW's decoupled decay factor.
    decay: f64,
    /// The L2 penalty Adam adds to the gradient (0 for AdamW).
    l2: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    /// `-lr / (1 - beta1^step)`.
    neg_step_size: f64,
    /// `sqrt(1 - beta2^step)`.
    bias2_sqrt: f64,
}

impl Hyper {
    fn new(a: &KernelArgs, decoupled: bool) -> Hyper {
        let attrs: &ResolvedAttrs = a.attrs;
        let one = |t: &Tensor| t.to_vec::<f64>()[0];
        let (lr, step) = (one(a.inputs[4]), one(a.inputs[5]));
        let (beta1, beta2) = (attrs.float("beta1"), attrs.float("beta2"));
        let weight_decay = attrs.float("weight_decay");
        let bias1 = 1.0 - beta1.powf(step);
        let bias2 = 1.0 - beta2.powf(step);
        Hyper {
            decay: if decoupled {
                1.0 - lr * weight_decay
            } else {
                1.0
            },
            l2: if decoupled { 0.0 } else { weight_decay },
            beta1,
            beta2,
            eps: attrs.float("eps"),
            neg_step_size: -(lr / bias1),
            bias2_sqrt: bias2.sqrt(),
        }
    }
}

/// One element of the update: `(param, exp_avg, exp_avg_sq)` after the step. Each line is one
/// of torch's in-place ops, rounded to `T` where that op stores.
#[inline(always)]
fn update<T: FloatElem>(h: &Hyper, decoupled: bool, p: T, g: T, m: T, v: T) -> (T, T, T) {
    let c = <T::C as MathExt>::c;
    let mut param = p;
    let mut grad = g;
    if decoupled {
        // param.mul_(1 - lr * weight_decay)
        param = T::down(p.up() * c(h.decay));
    } else if h.l2 != 0.0 {
        // grad = grad.add(param, alpha=weight_decay)
        grad = T::down(g.up() + p.up() * c(h.l2));
    }
    let (wg, wm) = (grad.up(), m.up());
    // exp_avg.lerp_(grad, 1 - beta1)
    let m_new = T::down(wm + (wg - wm) * c(1.0 - h.beta1));
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    let v_scaled = T::down(v.up() * c(h.beta2)).up();
    let v_new = T::down(v_scaled + wg * c(1.0 - h.beta2) * wg);
    // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    let root = T::down(v_new.up().sqrt());
    let corrected = T::down(root.up() / c(h.bias2_sqrt));
    let denom = T::down(corrected.up() + c(h.eps));
    // param.addcdiv_(exp_avg, denom, value=-step_size)
    let ratio = m_new.up() / denom.up();
    let p_new = T::down(param.up() + c(h.neg_step_size) * ratio);
    (p_new, m_new, v_new)
}

/// The update over whole tensors, in parallel tasks of [`TASK`] elements.
fn update_all<T: FloatElem>(
    h: &Hyper,
    decoupled: bool,
    [p, g, m, v]: [&[T]; 4],
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let n = p.len();
    let zero = T::from_f64(0.0);
    let (mut po, mut mo, mut vo) = (vec![zero; n], vec![zero; n], vec![zero; n]);
    po.par_chunks_mut(TASK)
        .zip(mo.par_chunks_mut(TASK))
        .zip(vo.par_chunks_mut(TASK))
        .enumerate()
        .for_each(|(t, ((po, mo), vo))| {
            let at = t * TASK;
            for i in 0..po.len() {
                let j = at + i;
                (po[i], mo[i], vo[i]) = update(h, decoupled, p[j], g[j], m[j], v[j]);
            }
        });
    (po, mo, vo)
}

fn adam_kernel(a: &KernelArgs, decoupled: bool) -> KernelResult {
    let h = Hyper::new(a, decoupled);
    let dense: Vec<Tensor> = a.inputs[..4].iter().map(|t| dense(t)).collect();
    let n = dense[0].numel();
    with_float!(dense[0].dtype(), T => {
        let slices = [0, 1, 2, 3].map(|i| &dense[i].data::<T>()[..n]);
        let (p, m, v) = update_all::<T>(&h, decoupled, slices);
        Ok(smallvec![T::into_buffer(p), T::into_buffer(m), T::into_buffer(v)])
    })
}

/// About sixteen vector operations per element; reads four tensors and writes three.
fn adam_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    streaming_cost(a, o, 16.0, Engine::Vector)
}

/// The optimizer ops.
// A table of OpDefs, one per op, not logic.
pub fn defs() -> Vec<OpDef> {
    vec![
        OpDef {
            name: "adam_step",
            doc: "one torch.optim.Adam update (L2 weight decay): new param, exp_avg, exp_avg_sq",
            group: OpGroup::Optimizer,
            inputs: ADAM_INPUTS,
            attrs: ADAM_ATTRS,
            outputs: ADAM_OUTPUTS,
            infer: infer_adam,
            exec: Exec::Compute(|a| adam_kernel(a, false)),
            cost: adam_cost,
            pointwise: None,
            rowwise: None,
        },
        OpDef {
            name: "adamw_step",
            doc: "one torch.optim.AdamW update (decoupled weight decay): new param and moments",
            group: OpGroup::Optimizer,
            inputs: ADAM_INPUTS,
            attrs: ADAM_ATTRS,
            outputs: ADAM_OUTPUTS,
            infer: infer_adam,
            exec: Exec::Compute(|a| adam_kernel(a, true)),
            cost: adam_cost,
            pointwise: None,
            rowwise: None,
        },
    ]
}

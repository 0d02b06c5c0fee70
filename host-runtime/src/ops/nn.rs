//! Row-wise neural-network ops: softmax, log_softmax, layer_norm, rms_norm and cross_entropy.
//!
//! Each works on rows (the softmax dim, or the normalized trailing dims) made contiguous; rows
//! run in parallel. Sums accumulate in f64; the per-element math runs in the dtype's compute
//! type (f32 for f32, bf16 and f16; f64 for f64), then rounds once. softmax, log_softmax and
//! the norms also expose their row function ([`Rowwise`]) for fused kernels.

use rayon::prelude::*;

use crate::cancel::Token;

use super::attrs::ResolvedAttrs;
use super::attrs::{AttrDefault, AttrKind, AttrSpec};
use super::common::{
    as_dtype, dense, dim_of, expect_float, expect_index, rows_block, streaming_cost, with_float,
    FloatElem, MathExt, IN_X,
};
use super::registry::{
    Exec, InputSpec, KernelArgs, MetaArgs, OpDef, OpGroup, RowArgs, RowFn, Rowwise,
};
use crate::device::cost::{Engine, OpCost};
use crate::tensor::{Buffer, DType, Element, Layout, Storage, Tensor, TensorMeta};

type KResult = Result<Vec<Buffer>, String>;

/// Applies `f(in_row, out_row)` to each row of a dense tensor whose rows have `n` elements.
fn rows<T: FloatElem>(x: &Tensor, n: usize, f: impl Fn(&[T], &mut [T]) + Sync) -> Vec<T> {
    let data = x
        .contiguous_data::<T>()
        .expect("rows() takes a dense tensor");
    let mut out = data.to_vec();
    if n == 0 {
        return out;
    }
    let min_rows = ((1 << 14) / n).max(1);
    let token = Token::current();
    out.par_chunks_mut(n)
        .zip(data.par_chunks(n))
        .with_min_len(min_rows)
        .for_each(|(o, i)| {
            token.check();
            f(i, o)
        });
    out
}

/// A dense temporary tensor from a vector (used to move a dim back into place).
fn temp(buffer: Buffer, layout: Layout, like: &Tensor) -> Tensor {
    Tensor::from_storage(
        std::sync::Arc::new(Storage::new(buffer, None)),
        layout,
        like.device(),
    )
}

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax

static DIM_ATTRS: &[AttrSpec] = &[AttrSpec::new("dim", AttrKind::Int, AttrDefault::Int(-1))];

fn infer_softmax(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let x = &a.inputs[0];
    expect_float("x", x)?;
    if !x.shape.is_empty() {
        dim_of(a.attrs.int("dim"), &x.shape)?;
    }
    Ok(vec![x.clone()])
}

fn softmax_row<C: MathExt>(row: &[C], out: &mut [C], log: bool) {
    // As torch, a row holding NaN or +inf, or only -inf, is NaN throughout: `v - max` is NaN
    // somewhere in it, and so is the sum.
    let max = row.iter().fold(
        C::neg_infinity(),
        |m, &v| if v > m || v.is_nan() { v } else { m },
    );
    let sum: f64 = row
        .iter()
        .map(|&v| (v - max).exp().to_f64().unwrap_or(f64::NAN))
        .sum();
    let sum = C::c(sum);
    if log {
        let lse = sum.ln();
        for (o, &v) in out.iter_mut().zip(row) {
            *o = v - max - lse;
        }
    } else {
        for (o, &v) in out.iter_mut().zip(row) {
            *o = (v - max).exp() / sum;
        }
    }
}

/// One softmax row in the storage type: widened, computed, rounded once per element.
fn softmax_row_of<T: FloatElem>(i: &[T], o: &mut [T], log: bool) {
    let wide: Vec<T::C> = i.iter().map(|v| v.up()).collect();
    let mut res = wide.clone();
    softmax_row(&wide, &mut res, log);
    for (dst, r) in o.iter_mut().zip(res) {
        *dst = T::down(r);
    }
}

fn softmax_kernel(a: &KernelArgs, log: bool) -> KResult {
    let x = a.inputs[0];
    if x.rank() == 0 {
        let v = if log { 0.0 } else { 1.0 };
        return Ok(vec![
            crate::with_dtype!(x.dtype(), T => T::into_buffer(vec![T::from_f64(v); 1])),
        ]);
    }
    let dim = dim_of(a.attrs.int("dim"), x.shape())?;
    let last = x.rank() - 1;
    // Move the softmax dim last so rows are contiguous.
    let moved = x.view(
        x.layout()
            .transpose(dim as i64, last as i64)
            .map_err(|e| e.0)?,
    );
    let d = dense(&moved);
    let n = x.shape()[dim];
    let buffer = with_float!(x.dtype(), T => T::into_buffer(rows::<T>(&d, n, |i, o| {
        softmax_row_of(i, o, log)
    })));
    if dim == last {
        return Ok(vec![buffer]);
    }
    // Swap the dims back (a transpose is its own inverse) and densify.
    let t = temp(buffer, Layout::contiguous(d.shape()), x);
    let back = t.view(
        t.layout()
            .transpose(dim as i64, last as i64)
            .map_err(|e| e.0)?,
    );
    Ok(vec![back.to_buffer()])
}

/// Softmax works on whole rows when its dim is the last one.
fn softmax_rows(a: &MetaArgs) -> Option<(usize, usize)> {
    let x = &a.inputs[0];
    let last = x.shape.len().checked_sub(1)?;
    let dim = dim_of(a.attrs.int("dim"), &x.shape).ok()?;
    let n = x.shape[last];
    (dim == last && n > 0).then_some((n, n))
}

fn prepare_softmax(a: &RowArgs, log: bool) -> Result<RowFn, String> {
    let n = a.row;
    with_float!(a.input, T => Ok(Box::new(move |b: &Buffer| {
        rows_block::<T, T>(b, n, n, |i, o| softmax_row_of(i, o, log))
    })))
}

fn softmax_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    // max, subtract, exp, sum, divide: about five operations per element.
    streaming_cost(a, o, 5.0, Engine::Scalar)
}

// ---------------------------------------------------------------------------------------------
// layer_norm / rms_norm

static LN_INPUTS: &[InputSpec] = &[
    InputSpec::tensor("x"),
    InputSpec::optional("weight"),
    InputSpec::optional("bias"),
];
static RMS_INPUTS: &[InputSpec] = &[InputSpec::tensor("x"), InputSpec::optional("weight")];
static LN_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("normalized_shape", AttrKind::Ints, AttrDefault::Ints(&[])),
    AttrSpec::new("eps", AttrKind::Float, AttrDefault::Float(1e-5)),
];
static RMS_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("normalized_shape", AttrKind::Ints, AttrDefault::Ints(&[])),
    AttrSpec::new("eps", AttrKind::Float, AttrDefault::Float(1e-6)),
];

/// The normalized trailing shape: the attribute, or the last dim when it is empty.
fn normalized_shape(a: &MetaArgs) -> Result<Vec<usize>, String> {
    let x = &a.inputs[0];
    expect_float("x", x)?;
    if x.shape.is_empty() {
        return Err("x must have at least 1 dim".into());
    }
    let given = a.attrs.ints("normalized_shape");
    let ns: Vec<usize> = if given.is_empty() {
        vec![*x.shape.last().expect("rank checked")]
    } else {
        given.iter().map(|&d| d.max(0) as usize).collect()
    };
    if ns.len() > x.shape.len() || x.shape[x.shape.len() - ns.len()..] != ns[..] {
        return Err(format!(
            "normalized_shape {ns:?} must match the trailing dims of x {:?}",
            x.shape
        ));
    }
    let names = ["weight", "bias"];
    for (i, m) in a.inputs.iter().enumerate().skip(1) {
        expect_float(names[i - 1], m)?;
        if m.shape != ns {
            return Err(format!(
                "{} has shape {:?}, expected normalized_shape {ns:?}",
                names[i - 1],
                m.shape
            ));
        }
    }
    Ok(ns)
}

fn infer_norm(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    normalized_shape(a)?;
    Ok(vec![a.inputs[0].clone()])
}

/// A norm's settings and affine parameters, converted once per call.
struct Norm {
    /// Subtract the mean (layer_norm) or not (rms_norm).
    center: bool,
    eps: f64,
    weight: Option<Vec<f64>>,
    bias: Option<Vec<f64>>,
}

impl Norm {
    fn new(params: &[&Tensor], attrs: &ResolvedAttrs, center: bool) -> Norm {
        let mut affine = params
            .iter()
            .map(|t| as_dtype(t, DType::F64).to_vec::<f64>());
        Norm {
            center,
            eps: attrs.float("eps"),
            weight: affine.next(),
            bias: affine.next(),
        }
    }

    /// Normalizes one row.
    fn row<T: FloatElem>(&self, i: &[T], o: &mut [T]) {
        let len = i.len() as f64;
        let mean = if self.center {
            i.iter().map(|v| v.to_f64()).sum::<f64>() / len
        } else {
            0.0
        };
        let ms = i.iter().map(|v| (v.to_f64() - mean).powi(2)).sum::<f64>() / len;
        let scale = T::C::c(1.0 / (ms + self.eps).sqrt());
        let shift = T::C::c(mean);
        for (j, (dst, v)) in o.iter_mut().zip(i).enumerate() {
            let y = (v.up() - shift) * scale;
            let y = self.weight.as_ref().map_or(y, |w| y * T::C::c(w[j]));
            let y = self.bias.as_ref().map_or(y, |b| y + T::C::c(b[j]));
            *dst = T::down(y);
        }
    }
}

/// Normalizes rows: `center` subtracts the mean (layer_norm) or not (rms_norm).
fn norm_kernel(a: &KernelArgs, center: bool) -> KResult {
    let x = dense(a.inputs[0]);
    let dtype = x.dtype();
    let n: usize = {
        let metas: Vec<TensorMeta> = a.inputs.iter().map(|t| t.meta()).collect();
        normalized_shape(&MetaArgs {
            inputs: &metas,
            attrs: a.attrs,
        })?
        .iter()
        .product()
    };
    let norm = Norm::new(&a.inputs[1..], a.attrs, center);
    Ok(vec![
        with_float!(dtype, T => T::into_buffer(rows::<T>(&x, n, |i, o| norm.row(i, o)))),
    ])
}

/// The norms work on whole rows of their normalized trailing dims.
fn norm_rows(a: &MetaArgs) -> Option<(usize, usize)> {
    let n: usize = normalized_shape(a).ok()?.iter().product();
    (n > 0).then_some((n, n))
}

fn prepare_norm(a: &RowArgs, center: bool) -> Result<RowFn, String> {
    let (n, norm) = (a.row, Norm::new(a.params, a.attrs, center));
    with_float!(a.input, T => Ok(Box::new(move |b: &Buffer| {
        rows_block::<T, T>(b, n, n, |i, o| norm.row(i, o))
    })))
}

fn norm_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    streaming_cost(a, o, 7.0, Engine::Vector)
}

// ---------------------------------------------------------------------------------------------
// cross_entropy

static CE_INPUTS: &[InputSpec] = &[InputSpec::tensor("logits"), InputSpec::tensor("target")];
static CE_ATTRS: &[AttrSpec] = &[
    AttrSpec::choice("reduction", "mean", &["mean", "sum", "none"]),
    AttrSpec::new("ignore_index", AttrKind::Int, AttrDefault::Int(-100)),
];

fn infer_ce(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (logits, target) = (&a.inputs[0], &a.inputs[1]);
    expect_float("logits", logits)?;
    expect_index("target", target)?;
    let batch: Vec<usize> = match logits.shape.len() {
        1 => vec![],
        2 => vec![logits.shape[0]],
        r => {
            return Err(format!(
                "logits must be [C] or [N, C], got rank {r} {:?}",
                logits.shape
            ))
        }
    };
    if target.shape != batch {
        return Err(format!(
            "target must have shape {batch:?} (one class index per row of logits {:?}), got {:?}",
            logits.shape, target.shape
        ));
    }
    let shape = if a.attrs.str("reduction") == "none" {
        batch
    } else {
        vec![]
    };
    Ok(vec![TensorMeta::new(shape, logits.dtype)])
}

fn ce_kernel(a: &KernelArgs) -> KResult {
    let logits = dense(a.inputs[0]);
    let classes = *logits.shape().last().unwrap_or(&0);
    let targets = a.inputs[1].to_vec::<i64>();
    let ignore = a.attrs.int("ignore_index");
    if let Some(bad) = targets
        .iter()
        .find(|&&t| t != ignore && (t < 0 || t as usize >= classes))
    {
        return Err(format!(
            "target index {bad} is out of range for {classes} classes (expected 0 to {})",
            classes.saturating_sub(1)
        ));
    }
    let wide = as_dtype(&logits, DType::F64).to_vec::<f64>();
    let losses: Vec<f64> = targets
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            if t == ignore {
                return 0.0;
            }
            let row = &wide[i * classes..(i + 1) * classes];
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            lse - row[t as usize]
        })
        .collect();
    let counted = targets.iter().filter(|&&t| t != ignore).count();
    let result: Vec<f64> = match a.attrs.str("reduction") {
        "none" => losses,
        "sum" => vec![losses.iter().sum()],
        // As torch: the mean over non-ignored targets (NaN when all are ignored).
        _ => vec![losses.iter().sum::<f64>() / counted as f64],
    };
    Ok(vec![
        with_float!(logits.dtype(), T => T::into_buffer(result.into_iter().map(T::from_f64).collect())),
    ])
}

fn ce_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    let mut c = streaming_cost(a, o, 0.0, Engine::Scalar);
    c.flops = 5.0 * a.inputs[0].numel() as f64;
    c
}

/// The nn ops.
pub fn defs() -> Vec<OpDef> {
    vec![
        OpDef {
            name: "softmax",
            doc: "exp(x) / sum(exp(x)) along dim, computed stably",
            group: OpGroup::Nn,
            inputs: IN_X,
            attrs: DIM_ATTRS,
            outputs: &["out"],
            infer: infer_softmax,
            exec: Exec::Compute(|a| softmax_kernel(a, false)),
            cost: softmax_cost,
            pointwise: None,
            rowwise: Some(Rowwise {
                rows: softmax_rows,
                prepare: |a| prepare_softmax(a, false),
            }),
        },
        OpDef {
            name: "log_softmax",
            doc: "x - logsumexp(x) along dim, computed stably",
            group: OpGroup::Nn,
            inputs: IN_X,
            attrs: DIM_ATTRS,
            outputs: &["out"],
            infer: infer_softmax,
            exec: Exec::Compute(|a| softmax_kernel(a, true)),
            cost: softmax_cost,
            pointwise: None,
            rowwise: Some(Rowwise {
                rows: softmax_rows,
                prepare: |a| prepare_softmax(a, true),
            }),
        },
        OpDef {
            name: "layer_norm",
            doc: "(x - mean) / sqrt(var + eps) over the trailing dims, then * weight + bias",
            group: OpGroup::Nn,
            inputs: LN_INPUTS,
            attrs: LN_ATTRS,
            outputs: &["out"],
            infer: infer_norm,
            exec: Exec::Compute(|a| norm_kernel(a, true)),
            cost: norm_cost,
            pointwise: None,
            rowwise: Some(Rowwise {
                rows: norm_rows,
                prepare: |a| prepare_norm(a, true),
            }),
        },
        OpDef {
            name: "rms_norm",
            doc: "x / sqrt(mean(x^2) + eps) over the trailing dims, then * weight",
            group: OpGroup::Nn,
            inputs: RMS_INPUTS,
            attrs: RMS_ATTRS,
            outputs: &["out"],
            infer: infer_norm,
            exec: Exec::Compute(|a| norm_kernel(a, false)),
            cost: norm_cost,
            pointwise: None,
            rowwise: Some(Rowwise {
                rows: norm_rows,
                prepare: |a| prepare_norm(a, false),
            }),
        },
        OpDef {
            name: "cross_entropy",
            doc: "softmax cross-entropy of logits [N, C] against class indices [N]",
            group: OpGroup::Loss,
            inputs: CE_INPUTS,
            attrs: CE_ATTRS,
            outputs: &["loss"],
            infer: infer_ce,
            exec: Exec::Compute(ce_kernel),
            cost: ce_cost,
            pointwise: None,
            rowwise: None,
        },
    ]
}

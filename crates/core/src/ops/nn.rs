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
use smallvec::smallvec;

use super::registry::{
    Exec, InputSpec, KernelArgs, KernelResult, MetaArgs, OpDef, OpGroup, RowArgs, RowFn, Rowwise,
};
use super::vmath::{max_nan, sum_f64, vectorized};
use crate::device::cost::{Engine, OpCost};
use crate::tensor::{Buffer, DType, Element, Elements, Layout, Storage, Tensor, TensorMeta};

/// Rows per parallel task: about 16K elements, so scheduling costs little.
fn rows_per_task(n: usize) -> usize {
    ((1 << 14) / n.max(1)).max(1)
}

/// Applies `f(in_row, out_row)` to each row of a dense tensor whose rows have `n` elements.
/// Rows run in parallel; `f` writes a scratch row that stays in L1, which is then stored, so the
/// output is written once and never initialized first. (`f` vectorizes itself, see
/// [`vectorized!`].)
fn rows<T: FloatElem>(x: &Tensor, n: usize, f: impl Fn(&[T], &mut [T]) + Sync) -> Vec<T> {
    let data = x
        .contiguous_data::<T>()
        .expect("rows() takes a dense tensor");
    if n == 0 {
        return Vec::new();
    }
    let token = Token::current();
    let task = n * rows_per_task(n);
    let mut out: Vec<T> = Vec::with_capacity(data.len());
    out.spare_capacity_mut()[..data.len()]
        .par_chunks_mut(task)
        .zip(data.par_chunks(task))
        .for_each(|(o, i)| {
            token.check();
            let mut scratch = vec![T::from_f64(0.0); n];
            for (o, i) in o.chunks_exact_mut(n).zip(i.chunks_exact(n)) {
                f(i, &mut scratch);
                for (dst, &v) in o.iter_mut().zip(&scratch) {
                    dst.write(v);
                }
            }
        });
    // SAFETY: the chunks cover the spare capacity's first `data.len()` slots (a whole number
    // of rows, as `data.len()` is), and every row of every chunk was written above; a
    // cancelled or panicking task unwinds past this line and the vector drops with length 0.
    unsafe { out.set_len(data.len()) };
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

#[inline(always)]
fn softmax_row<C: MathExt>(row: &[C], out: &mut [C], log: bool) {
    // As torch, a row holding NaN or +inf, or only -inf, is NaN throughout: `v - max` is NaN
    // somewhere in it, and so is the sum.
    let max = max_nan(row, C::neg_infinity());
    let wide = |v: C| v.to_f64().unwrap_or(f64::NAN);
    if log {
        let sum = sum_f64(row, |v| wide((v - max).vexp()));
        let lse = C::c(sum).ln();
        for (o, &v) in out.iter_mut().zip(row) {
            *o = v - max - lse;
        }
    } else {
        // One exp per element: the exponentials go to `out`, are summed there, then divided.
        for (o, &v) in out.iter_mut().zip(row) {
            *o = (v - max).vexp();
        }
        let sum = C::c(sum_f64(out, wide));
        for o in out.iter_mut() {
            *o = *o / sum;
        }
    }
}

/// One softmax row in the storage type: computed in the compute type, rounded once per element.
#[inline(always)]
fn softmax_row_of<T: FloatElem>(i: &[T], o: &mut [T], log: bool) {
    T::compute_row(i, o, |wide, res| softmax_row(wide, res, log));
}

fn softmax_kernel(a: &KernelArgs, log: bool) -> KernelResult {
    let x = a.inputs[0];
    if x.rank() == 0 {
        let v = if log { 0.0 } else { 1.0 };
        return Ok(smallvec![
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
        vectorized!(softmax_row_of(i, o, log))
    })));
    if dim == last {
        return Ok(smallvec![buffer]);
    }
    // Swap the dims back (a transpose is its own inverse) and densify.
    let t = temp(buffer, Layout::contiguous(d.shape()), x);
    let back = t.view(
        t.layout()
            .transpose(dim as i64, last as i64)
            .map_err(|e| e.0)?,
    );
    Ok(smallvec![back.to_buffer()])
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
    with_float!(a.input, T => Ok(Box::new(move |b: Elements| {
        rows_block::<T, T>(b, n, n, |i, o| vectorized!(softmax_row_of(i, o, log)))
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

/// A norm's settings and affine parameters, converted once per call to the compute type `C`.
struct Norm<C> {
    /// Subtract the mean (layer_norm) or not (rms_norm).
    center: bool,
    eps: f64,
    weight: Option<Vec<C>>,
    bias: Option<Vec<C>>,
}

impl<C: MathExt> Norm<C> {
    fn new(params: &[&Tensor], attrs: &ResolvedAttrs, center: bool) -> Norm<C> {
        let mut affine = params.iter().map(|t| {
            as_dtype(t, DType::F64)
                .to_vec::<f64>()
                .into_iter()
                .map(C::c)
                .collect()
        });
        Norm {
            center,
            eps: attrs.float("eps"),
            weight: affine.next(),
            bias: affine.next(),
        }
    }

    /// Normalizes one row. The mean and the mean square accumulate in f64; the scaling runs in
    /// the compute type and rounds once.
    #[inline(always)]
    fn row<T: FloatElem<C = C>>(&self, i: &[T], o: &mut [T]) {
        let len = i.len() as f64;
        let mean = if self.center {
            sum_f64(i, |v| v.to_f64()) / len
        } else {
            0.0
        };
        let ms = sum_f64(i, |v| {
            let d = v.to_f64() - mean;
            d * d
        }) / len;
        let scale = C::c(1.0 / (ms + self.eps).sqrt());
        let shift = C::c(mean);
        let normalized = |v: T| (v.up() - shift) * scale;
        // One loop per affine combination, so none tests an option per element.
        match (&self.weight, &self.bias) {
            (Some(w), Some(b)) => {
                for (((dst, &v), &w), &b) in o.iter_mut().zip(i).zip(w).zip(b) {
                    *dst = T::down(normalized(v) * w + b);
                }
            }
            (Some(w), None) => {
                for ((dst, &v), &w) in o.iter_mut().zip(i).zip(w) {
                    *dst = T::down(normalized(v) * w);
                }
            }
            (None, Some(b)) => {
                for ((dst, &v), &b) in o.iter_mut().zip(i).zip(b) {
                    *dst = T::down(normalized(v) + b);
                }
            }
            (None, None) => {
                for (dst, &v) in o.iter_mut().zip(i) {
                    *dst = T::down(normalized(v));
                }
            }
        }
    }
}

/// Normalizes rows: `center` subtracts the mean (layer_norm) or not (rms_norm).
fn norm_kernel(a: &KernelArgs, center: bool) -> KernelResult {
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
    Ok(smallvec![with_float!(dtype, T => {
        let norm = Norm::<<T as FloatElem>::C>::new(&a.inputs[1..], a.attrs, center);
        T::into_buffer(rows::<T>(&x, n, |i, o| vectorized!(norm.row(i, o))))
    })])
}

/// The norms work on whole rows of their normalized trailing dims.
fn norm_rows(a: &MetaArgs) -> Option<(usize, usize)> {
    let n: usize = normalized_shape(a).ok()?.iter().product();
    (n > 0).then_some((n, n))
}

fn prepare_norm(a: &RowArgs, center: bool) -> Result<RowFn, String> {
    let n = a.row;
    with_float!(a.input, T => {
        let norm = Norm::<<T as FloatElem>::C>::new(a.params, a.attrs, center);
        Ok(Box::new(move |b: Elements| {
            rows_block::<T, T>(b, n, n, |i, o| vectorized!(norm.row(i, o)))
        }))
    })
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

fn ce_kernel(a: &KernelArgs) -> KernelResult {
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
    Ok(smallvec![
        with_float!(logits.dtype(), T => T::into_buffer(result.into_iter().map(T::from_f64).collect())),
    ])
}

fn ce_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    let mut c = streaming_cost(a, o, 0.0, Engine::Scalar);
    c.flops = 5.0 * a.inputs[0].numel() as f64;
    c
}

/// The nn ops.
// A table of OpDefs, one per op, not logic.
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

#[cfg(test)]
mod tests {
    use super::super::vmath::Isa;
    use super::*;

    /// One row's softmax, log_softmax, layer_norm (with weight and bias) and rms_norm, as bits,
    /// computed with the vector instructions of `isa`.
    fn row_results(isa: Isa, row: &[f32]) -> Vec<u32> {
        let n = row.len();
        let ramp = |k: f32| -> Vec<f32> { (0..n).map(|j| 0.5 + k * j as f32 / n as f32).collect() };
        let layer = Norm::<f32> {
            center: true,
            eps: 1e-5,
            weight: Some(ramp(1.0)),
            bias: Some(ramp(-0.25)),
        };
        let rms = Norm::<f32> {
            center: false,
            eps: 1e-6,
            weight: Some(ramp(2.0)),
            bias: None,
        };
        let mut out = vec![vec![0.0f32; n]; 4];
        vectorized!(@on isa, {
            softmax_row_of(row, &mut out[0], false);
            softmax_row_of(row, &mut out[1], true);
            layer.row(row, &mut out[2]);
            rms.row(row, &mut out[3]);
        });
        out.concat().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn row_functions_give_the_same_bits_on_every_instruction_set() {
        for n in [1usize, 3, 15, 16, 17, 100, 1023, 1024, 1025] {
            let row: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 113) as f32 * 0.37 - 20.0)
                .collect();
            let baseline = row_results(Isa::Baseline, &row);
            for isa in Isa::available() {
                assert_eq!(row_results(isa, &row), baseline, "{isa:?}, n = {n}");
            }
        }
    }
}

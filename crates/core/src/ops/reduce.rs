//! Reductions over dims: sum, mean, prod, max, min, argmax, argmin, var, std.
//!
//! Float sums accumulate in f64 so results stay within f32 rounding of numpy's pairwise sums
//! whatever the row length. Integer and bool sums give i64, as PyTorch. Float reductions over
//! trailing dims expose their row function ([`Rowwise`]) for fused kernels.

use super::attrs::{AttrDefault, AttrKind, AttrSpec, ResolvedAttrs};
use super::common::{dim_of, rows_block, streaming_cost, with_float, IN_X};
use smallvec::smallvec;

use super::registry::{
    Exec, KernelArgs, KernelResult, MetaArgs, OpDef, OpGroup, RowArgs, RowFn, Rowwise,
};
use super::vmath::{column_sums_f64, sum_f64, vectorized};
use crate::device::cost::{Engine, OpCost};
use crate::tensor::{strided, Buffer, DType, Element, Elements, Tensor, TensorMeta};
use crate::with_dtype;

/// The reduced dims (sorted, deduplicated) from the `dims` attribute; empty means all.
fn reduced_dims(dims: &[i64], shape: &[usize]) -> Result<Vec<usize>, String> {
    if dims.is_empty() {
        return Ok((0..shape.len()).collect());
    }
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let d = dim_of(d, shape)?;
        if out.contains(&d) {
            return Err(format!("dim {d} appears more than once in dims {dims:?}"));
        }
        out.push(d);
    }
    out.sort_unstable();
    Ok(out)
}

fn out_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|d| match (dims.contains(&d), keepdim) {
            (false, _) => Some(shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// A reduction's layout: the kept dims (one output element each) and the reduced dims (the
/// elements of one output's row), each coalesced.
struct Reduced {
    outer_shape: Vec<usize>,
    outer_strides: [Vec<usize>; 1],
    row_shape: Vec<usize>,
    row_strides: [Vec<usize>; 1],
    /// Elements per row.
    n: usize,
    /// Output elements.
    outputs: usize,
    offset: usize,
}

impl Reduced {
    fn of(x: &Tensor, dims: &[usize]) -> Reduced {
        let l = x.layout();
        let (kept, reduced): (Vec<usize>, Vec<usize>) =
            (0..l.rank()).partition(|d| !dims.contains(d));
        let pick = |ds: &[usize], of: &[usize]| ds.iter().map(|&d| of[d]).collect::<Vec<_>>();
        let outputs = kept.iter().map(|&d| l.shape[d]).product();
        let n = reduced.iter().map(|&d| l.shape[d]).product();
        let (outer_shape, outer_strides) =
            strided::coalesce(&pick(&kept, &l.shape), [&pick(&kept, &l.strides)]);
        let (row_shape, row_strides) =
            strided::coalesce(&pick(&reduced, &l.shape), [&pick(&reduced, &l.strides)]);
        Reduced {
            outer_shape,
            outer_strides,
            row_shape,
            row_strides,
            n,
            outputs,
            offset: l.offset,
        }
    }

    /// Whether each row's elements are contiguous.
    fn rows_contiguous(&self) -> bool {
        self.row_shape.is_empty() || (self.row_shape.len() == 1 && self.row_strides[0][0] == 1)
    }
}

/// Calls `f` on the elements of each reduced row, one call per output element in row-major
/// order. Contiguous rows are passed in place; others are gathered first.
fn reduce_rows<T: Element, U: Send>(
    x: &Tensor,
    r: &Reduced,
    f: impl Fn(&[T]) -> U + Sync,
) -> Vec<U> {
    let n = r.n;
    let run = r.rows_contiguous();
    let data = x.data::<T>();
    // Each output costs a row of work: parallel when the rows add up, not the outputs. A row
    // that is not contiguous is gathered into a buffer kept for the whole chunk.
    strided::fill_weighted(r.outputs, n, |start, chunk| {
        let mut row = Vec::with_capacity(if run { 0 } else { n });
        let end = start + chunk.len();
        strided::visit_range(
            &r.outer_shape,
            &r.outer_strides,
            [r.offset],
            start,
            end,
            |i, [o]| {
                let value = if n == 0 {
                    // An empty row: its offset may lie past an empty storage.
                    f(&[])
                } else if run {
                    f(&data[o..o + n])
                } else {
                    row.clear();
                    strided::visit_range(&r.row_shape, &r.row_strides, [o], 0, n, |_, [p]| {
                        row.push(data[p])
                    });
                    f(&row)
                };
                chunk[i].write(value);
            },
        );
    })
}

static REDUCE_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("dims", AttrKind::Ints, AttrDefault::Ints(&[])),
    AttrSpec::new("keepdim", AttrKind::Int, AttrDefault::Int(0)),
];
static VAR_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("dims", AttrKind::Ints, AttrDefault::Ints(&[])),
    AttrSpec::new("keepdim", AttrKind::Int, AttrDefault::Int(0)),
    AttrSpec::new("correction", AttrKind::Int, AttrDefault::Int(1)),
];
static ARG_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("dim", AttrKind::Int, AttrDefault::Optional),
    AttrSpec::new("keepdim", AttrKind::Int, AttrDefault::Int(0)),
];

/// How a reduction's output dtype follows its input.
#[derive(Clone, Copy, PartialEq)]
enum OutDType {
    /// Floats keep their dtype; ints and bools give i64 (sum, prod).
    Accumulate,
    /// Floats only (mean, var, std).
    FloatOnly,
    /// Same dtype; the reduced dims must not be empty (max, min).
    Same,
    /// i64 indices (argmax, argmin).
    Index,
}

/// The reduced dims of sum, prod, mean, var, std, max and min (their `dims` attribute).
fn dims_of(a: &ResolvedAttrs, shape: &[usize]) -> Result<Vec<usize>, String> {
    reduced_dims(a.ints("dims"), shape)
}

/// The reduced dims of argmax and argmin: their optional `dim`, else every dim.
fn arg_dims(a: &ResolvedAttrs, shape: &[usize]) -> Result<Vec<usize>, String> {
    match a.opt_int("dim") {
        Some(d) => Ok(vec![dim_of(d, shape)?]),
        None => Ok((0..shape.len()).collect()),
    }
}

fn infer(a: &MetaArgs, rule: OutDType) -> Result<Vec<TensorMeta>, String> {
    let x = &a.inputs[0];
    let dims = if rule == OutDType::Index {
        arg_dims(a.attrs, &x.shape)?
    } else {
        dims_of(a.attrs, &x.shape)?
    };
    let dtype = match rule {
        OutDType::Accumulate if !x.dtype.is_float() => DType::I64,
        OutDType::FloatOnly if !x.dtype.is_float() => {
            return Err(format!(
                "expected a floating dtype, got {}; cast to f32 first",
                x.dtype
            ))
        }
        OutDType::Index => DType::I64,
        _ => x.dtype,
    };
    if matches!(rule, OutDType::Same | OutDType::Index) && dims.iter().any(|&d| x.shape[d] == 0) {
        return Err(format!(
            "cannot reduce over an empty dim of shape {:?}: max, min, argmax and argmin have no identity",
            x.shape
        ));
    }
    let keepdim = a.attrs.int("keepdim") != 0;
    Ok(vec![TensorMeta::new(
        out_shape(&x.shape, &dims, keepdim),
        dtype,
    )])
}

#[inline(always)]
fn mean_of<T: Element>(r: &[T]) -> f64 {
    sum_f64(r, |v| v.to_f64()) / r.len() as f64
}

#[inline(always)]
fn var_of<T: Element>(r: &[T], correction: i64) -> f64 {
    let m = mean_of(r);
    let ss = sum_f64(r, |v| {
        let d = v.to_f64() - m;
        d * d
    });
    ss / (r.len() as f64 - correction as f64).max(0.0)
}

/// The reductions whose value keeps the row's dtype (for sum and prod: float rows), by their
/// row function, which the eager kernels and the fused form share.
#[derive(Clone, Copy)]
enum RowReduce {
    Sum,
    Prod,
    Mean,
    Var { correction: i64 },
    Std { correction: i64 },
    Max,
    Min,
}

impl RowReduce {
    /// The reduction an op applies, with its attributes.
    fn of(name: &str, attrs: &ResolvedAttrs) -> Option<RowReduce> {
        Some(match name {
            "sum" => RowReduce::Sum,
            "prod" => RowReduce::Prod,
            "mean" => RowReduce::Mean,
            "var" => RowReduce::Var {
                correction: attrs.int("correction"),
            },
            "std" => RowReduce::Std {
                correction: attrs.int("correction"),
            },
            "max" => RowReduce::Max,
            "min" => RowReduce::Min,
            _ => return None,
        })
    }

    /// The value of one row. Sums and products accumulate in f64.
    #[inline(always)]
    fn apply<T: Element>(self, r: &[T]) -> T {
        match self {
            RowReduce::Sum => T::from_f64(sum_f64(r, |v| v.to_f64())),
            RowReduce::Prod => T::from_f64(r.iter().map(|v| v.to_f64()).product()),
            RowReduce::Mean => T::from_f64(mean_of(r)),
            RowReduce::Var { correction } => T::from_f64(var_of(r, correction)),
            RowReduce::Std { correction } => T::from_f64(var_of(r, correction).sqrt()),
            RowReduce::Max => r[extreme_index(r, true)],
            RowReduce::Min => r[extreme_index(r, false)],
        }
    }
}

/// Reduces `x` with `kind`, keeping its dtype.
fn same_dtype_reduce(x: &Tensor, dims: &[usize], kind: RowReduce) -> Buffer {
    let r = Reduced::of(x, dims);
    if let Some(sums) = column_reduce(x, &r, kind) {
        return sums;
    }
    with_dtype!(x.dtype(), T => T::into_buffer(reduce_rows(x, &r, |row: &[T]| vectorized!(kind.apply(row)))))
}

/// The most elements [`column_reduce`] takes on; larger reductions keep the parallel row
/// path.
const COLUMN_REDUCE_MOST: usize = 1 << 20;

/// A sum or mean over leading dims whose kept dims are one contiguous run (the batch sums
/// of bias and broadcast gradients), by [`column_sums_f64`] over the rows in place: the same
/// bits as [`reduce_rows`] gives, which would gather every output's elements with a stride.
/// `None` when the reduction is not of that form.
fn column_reduce(x: &Tensor, r: &Reduced, kind: RowReduce) -> Option<Buffer> {
    let kept_run = r.outer_shape.len() == 1 && r.outer_strides[0][0] == 1;
    let (n, width) = (r.n, r.outputs);
    if !matches!(kind, RowReduce::Sum | RowReduce::Mean)
        || !kept_run
        || r.rows_contiguous()
        || n == 0
        || n.saturating_mul(width) > COLUMN_REDUCE_MOST
    {
        return None;
    }
    let mut starts = Vec::with_capacity(n);
    strided::visit_range(&r.row_shape, &r.row_strides, [r.offset], 0, n, |_, [p]| {
        starts.push(p)
    });
    let finish = |sum: f64| match kind {
        RowReduce::Mean => sum / n as f64,
        _ => sum,
    };
    Some(with_dtype!(x.dtype(), T => {
        let data = x.data::<T>();
        let sums = vectorized!(column_sums_f64(data, &starts, width, |v: T| v.to_f64()));
        T::into_buffer(sums.into_iter().map(|s| T::from_f64(finish(s))).collect())
    }))
}

fn sum_kernel(a: &KernelArgs) -> KernelResult {
    let x = a.inputs[0];
    let dims = dims_of(a.attrs, x.shape())?;
    if a.outputs[0].dtype.is_float() {
        return Ok(smallvec![same_dtype_reduce(x, &dims, RowReduce::Sum)]);
    }
    Ok(smallvec![
        with_dtype!(x.dtype(), T => Buffer::I64(reduce_rows(x, &Reduced::of(x, &dims), |r: &[T]| {
            r.iter().fold(0i64, |s, v| s.wrapping_add(v.to_i64()))
        }))),
    ])
}

fn prod_kernel(a: &KernelArgs) -> KernelResult {
    let x = a.inputs[0];
    let dims = dims_of(a.attrs, x.shape())?;
    if a.outputs[0].dtype.is_float() {
        return Ok(smallvec![same_dtype_reduce(x, &dims, RowReduce::Prod)]);
    }
    Ok(smallvec![
        with_dtype!(x.dtype(), T => Buffer::I64(reduce_rows(x, &Reduced::of(x, &dims), |r: &[T]| {
            r.iter().fold(1i64, |s, v| s.wrapping_mul(v.to_i64()))
        }))),
    ])
}

/// mean, var, std, max and min: reductions that keep the dtype.
fn row_reduce_kernel(a: &KernelArgs, name: &str) -> KernelResult {
    let x = a.inputs[0];
    let dims = dims_of(a.attrs, x.shape())?;
    let kind = RowReduce::of(name, a.attrs).expect("a reduction that keeps the dtype");
    Ok(smallvec![same_dtype_reduce(x, &dims, kind)])
}

/// A float reduction works on whole rows when its dims are the trailing ones.
fn reduce_rows_plan(a: &MetaArgs) -> Option<(usize, usize)> {
    let x = &a.inputs[0];
    let dims = dims_of(a.attrs, &x.shape).ok()?;
    let rank = x.shape.len();
    let trailing = dims
        .iter()
        .enumerate()
        .all(|(i, &d)| d == rank - dims.len() + i);
    let n: usize = dims.iter().map(|&d| x.shape[d]).product();
    (x.dtype.is_float() && trailing && n > 0).then_some((n, 1))
}

fn prepare_reduce(a: &RowArgs, name: &str) -> Result<RowFn, String> {
    let kind = RowReduce::of(name, a.attrs).ok_or_else(|| format!("{name} has no row form"))?;
    let n = a.row;
    with_float!(a.input, T => Ok(Box::new(move |b: Elements| {
        rows_block::<T, T>(b, n, 1, |r, o| o[0] = vectorized!(kind.apply(r)))
    })))
}

/// Index of the first max (or min); a NaN wins, as in numpy and PyTorch.
#[allow(clippy::eq_op)] // `v != v` is the generic NaN test.
fn extreme_index<T: PartialOrd>(r: &[T], want_max: bool) -> usize {
    let mut best = 0;
    for (i, v) in r.iter().enumerate() {
        if v != v {
            return i;
        }
        let better = if want_max { *v > r[best] } else { *v < r[best] };
        if better {
            best = i;
        }
    }
    best
}

fn arg_kernel(a: &KernelArgs, want_max: bool) -> KernelResult {
    let x = a.inputs[0];
    let dims = arg_dims(a.attrs, x.shape())?;
    // Without a dim, the index is into the flattened (row-major) tensor.
    let x = if a.attrs.opt_int("dim").is_none() {
        super::common::dense(x)
    } else {
        x.clone()
    };
    Ok(smallvec![
        with_dtype!(x.dtype(), T => Buffer::I64(reduce_rows(&x, &Reduced::of(&x, &dims), |r: &[T]| {
            extreme_index(r, want_max) as i64
        }))),
    ])
}

fn reduce_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    let mut c = streaming_cost(a, o, 1.0, Engine::Vector);
    // A reduction does one op per input element, not per output element.
    c.flops = a.inputs[0].numel() as f64;
    c
}

fn var_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    let mut c = reduce_cost(a, o);
    c.flops *= 3.0;
    c
}

/// The reductions.
// A table of OpDefs, one per op, not logic.
pub fn defs() -> Vec<OpDef> {
    let def = |name, doc, attrs, infer, exec, cost, rowwise| OpDef {
        name,
        doc,
        group: OpGroup::Reduction,
        inputs: IN_X,
        attrs,
        outputs: &["out"],
        infer,
        exec: Exec::Compute(exec),
        cost,
        pointwise: None,
        rowwise,
    };
    let rows = |prepare| {
        Some(Rowwise {
            rows: reduce_rows_plan,
            prepare,
        })
    };
    vec![
        def(
            "sum",
            "sum over dims (all when empty); ints give i64",
            REDUCE_ATTRS,
            |a| infer(a, OutDType::Accumulate),
            sum_kernel,
            reduce_cost,
            rows(|a| prepare_reduce(a, "sum")),
        ),
        def(
            "prod",
            "product over dims (all when empty); ints give i64",
            REDUCE_ATTRS,
            |a| infer(a, OutDType::Accumulate),
            prod_kernel,
            reduce_cost,
            rows(|a| prepare_reduce(a, "prod")),
        ),
        def(
            "mean",
            "arithmetic mean over dims (floats only)",
            REDUCE_ATTRS,
            |a| infer(a, OutDType::FloatOnly),
            |a| row_reduce_kernel(a, "mean"),
            reduce_cost,
            rows(|a| prepare_reduce(a, "mean")),
        ),
        def(
            "var",
            "variance over dims with Bessel's correction by default",
            VAR_ATTRS,
            |a| infer(a, OutDType::FloatOnly),
            |a| row_reduce_kernel(a, "var"),
            var_cost,
            rows(|a| prepare_reduce(a, "var")),
        ),
        def(
            "std",
            "standard deviation over dims (correction as var)",
            VAR_ATTRS,
            |a| infer(a, OutDType::FloatOnly),
            |a| row_reduce_kernel(a, "std"),
            var_cost,
            rows(|a| prepare_reduce(a, "std")),
        ),
        def(
            "max",
            "largest value over dims; NaN propagates",
            REDUCE_ATTRS,
            |a| infer(a, OutDType::Same),
            |a| row_reduce_kernel(a, "max"),
            reduce_cost,
            rows(|a| prepare_reduce(a, "max")),
        ),
        def(
            "min",
            "smallest value over dims; NaN propagates",
            REDUCE_ATTRS,
            |a| infer(a, OutDType::Same),
            |a| row_reduce_kernel(a, "min"),
            reduce_cost,
            rows(|a| prepare_reduce(a, "min")),
        ),
        def(
            "argmax",
            "index of the first largest value along dim (flattened when no dim)",
            ARG_ATTRS,
            |a| infer(a, OutDType::Index),
            |a| arg_kernel(a, true),
            reduce_cost,
            None,
        ),
        def(
            "argmin",
            "index of the first smallest value along dim (flattened when no dim)",
            ARG_ATTRS,
            |a| infer(a, OutDType::Index),
            |a| arg_kernel(a, false),
            reduce_cost,
            None,
        ),
    ]
}

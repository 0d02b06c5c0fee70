//! Indexing and assembly: embedding, index_select, gather, scatter_add, cat, stack, pad, triu
//! and tril.
//!
//! Gathers walk the output with [`strided::map`], reading the index operand and a base offset
//! into the source with the gathered dim's stride zeroed, then add `index * stride`. Every
//! index is range-checked before any data moves.

use crate::device::cost::OpCost;
use std::borrow::Cow;

use super::attrs::{AttrDefault, AttrKind, AttrSpec};
use super::common::{
    as_dtype, broadcast_strides, copy_cost, dense, dim_of, expect_float, expect_index, with_float,
    IN_X,
};
use smallvec::smallvec;

use super::registry::{Exec, InputSpec, KernelArgs, KernelResult, MetaArgs, OpDef, OpGroup};
use crate::tensor::{contiguous_strides, strided, Buffer, DType, Element, Tensor, TensorMeta};
use crate::with_dtype;

/// The indices of `index` as i64, checked to lie in `0..size`.
fn checked_indices(index: &Tensor, size: usize, what: &str) -> Result<Vec<i64>, String> {
    let idx = index.to_vec::<i64>();
    if let Some(bad) = idx.iter().find(|&&i| i < 0 || i as usize >= size) {
        return Err(format!(
            "index {bad} is out of range for {what} of size {size} (expected 0 to {})",
            size as i64 - 1
        ));
    }
    Ok(idx)
}

/// Gathers `src` elements: for each output element, `base` offset (from `base_strides`) plus
/// `index value * gather_stride`, the index read through `index_strides`.
fn gather_map(
    src: &Tensor,
    out_shape: &[usize],
    base_strides: &[usize],
    gather_stride: usize,
    index: &Tensor,
    index_strides: &[usize],
) -> Buffer {
    let idx = index_data(index);
    with_dtype!(src.dtype(), T => {
        let data = src.data::<T>();
        T::into_buffer(strided::map(
            out_shape,
            [base_strides, index_strides],
            [src.layout().offset, idx.1],
            |[b, i]| data[b + idx.0[i] as usize * gather_stride],
        ))
    })
}

/// Index data as i64 storage plus the offset to read it at: the storage itself for i64
/// tensors, a dense converted copy (offset 0) otherwise.
fn index_data(t: &Tensor) -> (Cow<'_, [i64]>, usize) {
    if t.dtype() == DType::I64 {
        (Cow::Borrowed(t.data::<i64>()), t.layout().offset)
    } else {
        (Cow::Owned(t.to_vec::<i64>()), 0)
    }
}

// embedding(indices, weight)
fn infer_embedding(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (idx, w) = (&a.inputs[0], &a.inputs[1]);
    expect_index("indices", idx)?;
    if w.shape.len() != 2 {
        return Err(format!(
            "weight must be [num_embeddings, dim], got {:?}",
            w.shape
        ));
    }
    let mut shape = idx.shape.clone();
    shape.push(w.shape[1]);
    Ok(vec![TensorMeta::new(shape, w.dtype)])
}

fn embedding_kernel(a: &KernelArgs) -> KernelResult {
    let (idx, w) = (a.inputs[0], a.inputs[1]);
    checked_indices(idx, w.shape()[0], "the embedding table's dim 0")?;
    let idx = dense(idx);
    let out_shape = &a.outputs[0].shape;
    let r = idx.rank();
    let mut base = vec![0; r];
    base.push(w.strides()[1]);
    let mut istr = idx.strides().to_vec();
    istr.push(0);
    Ok(smallvec![gather_map(
        w,
        out_shape,
        &base,
        w.strides()[0],
        &idx,
        &istr,
    )])
}

// index_select(x, index; dim)
fn infer_index_select(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (x, idx) = (&a.inputs[0], &a.inputs[1]);
    expect_index("index", idx)?;
    if idx.shape.len() != 1 {
        return Err(format!("index must be 1-D, got shape {:?}", idx.shape));
    }
    let d = dim_of(a.attrs.int("dim"), &x.shape)?;
    let mut shape = x.shape.clone();
    shape[d] = idx.shape[0];
    Ok(vec![TensorMeta::new(shape, x.dtype)])
}

fn index_select_kernel(a: &KernelArgs) -> KernelResult {
    let (x, idx) = (a.inputs[0], a.inputs[1]);
    let d = dim_of(a.attrs.int("dim"), x.shape())?;
    checked_indices(idx, x.shape()[d], &format!("dim {d}"))?;
    let idx = dense(idx);
    let mut base = x.strides().to_vec();
    base[d] = 0;
    let mut istr = vec![0; x.rank()];
    istr[d] = 1;
    Ok(smallvec![gather_map(
        x,
        &a.outputs[0].shape,
        &base,
        x.strides()[d],
        &idx,
        &istr,
    )])
}

/// Checks a gather or scatter index against `x` along the `dim` attribute: the same rank, and
/// no larger than `x` outside `dim`.
fn along_dim_index(a: &MetaArgs, x: &TensorMeta, idx: &TensorMeta) -> Result<(), String> {
    let d = dim_of(a.attrs.int("dim"), &x.shape)?;
    if idx.shape.len() != x.shape.len() {
        return Err(format!(
            "index must have the same rank as x: x is {:?}, index is {:?}",
            x.shape, idx.shape
        ));
    }
    if let Some(k) = (0..x.shape.len()).find(|&k| k != d && idx.shape[k] > x.shape[k]) {
        return Err(format!(
            "index dim {k} has size {} but x's is {}; outside dim {d}, index may not be larger than x",
            idx.shape[k], x.shape[k]
        ));
    }
    Ok(())
}

// gather(x, index; dim)
fn infer_gather(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (x, idx) = (&a.inputs[0], &a.inputs[1]);
    expect_index("index", idx)?;
    along_dim_index(a, x, idx)?;
    Ok(vec![TensorMeta::new(idx.shape.clone(), x.dtype)])
}

fn gather_kernel(a: &KernelArgs) -> KernelResult {
    let (x, idx) = (a.inputs[0], a.inputs[1]);
    let d = dim_of(a.attrs.int("dim"), x.shape())?;
    checked_indices(idx, x.shape()[d], &format!("dim {d}"))?;
    let idx = dense(idx);
    let mut base = x.strides().to_vec();
    base[d] = 0;
    Ok(smallvec![gather_map(
        x,
        idx.shape(),
        &base,
        x.strides()[d],
        &idx,
        idx.strides(),
    )])
}

// scatter_add(x, index, src; dim): the adjoint of gather, what its backward and those of
// index_select and embedding are made of.
fn infer_scatter_add(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (x, idx, src) = (&a.inputs[0], &a.inputs[1], &a.inputs[2]);
    expect_float("x", x)?;
    expect_index("index", idx)?;
    if src.dtype != x.dtype {
        return Err(format!(
            "src must have x's dtype {}, got {}",
            x.dtype, src.dtype
        ));
    }
    if idx.shape != src.shape {
        return Err(format!(
            "index and src must have one shape, got {:?} and {:?}",
            idx.shape, src.shape
        ));
    }
    along_dim_index(a, x, idx)?;
    Ok(vec![x.clone()])
}

fn scatter_add_kernel(a: &KernelArgs) -> KernelResult {
    let (x, idx, src) = (a.inputs[0], a.inputs[1], a.inputs[2]);
    let d = dim_of(a.attrs.int("dim"), x.shape())?;
    let indices = checked_indices(idx, x.shape()[d], &format!("dim {d}"))?;
    // Sums in f64 and rounds once, so the result does not depend on the order of the adds.
    let mut out = x.to_vec::<f64>();
    let values = src.to_vec::<f64>();
    let strides = contiguous_strides(x.shape());
    let shape = idx.shape();
    let mut pos = vec![0usize; shape.len()];
    for (&i, &v) in indices.iter().zip(&values) {
        let offset: usize = pos
            .iter()
            .zip(&strides)
            .enumerate()
            .map(|(k, (&p, &s))| if k == d { i as usize * s } else { p * s })
            .sum();
        out[offset] += v;
        for k in (0..pos.len()).rev() {
            pos[k] += 1;
            if pos[k] < shape[k] {
                break;
            }
            pos[k] = 0;
        }
    }
    Ok(smallvec![with_float!(x.dtype(), T => T::into_buffer(
        out.into_iter().map(T::from_f64).collect()
    ))])
}

// cat(tensors; dim) and stack(tensors; dim)
fn promoted_all(inputs: &[TensorMeta]) -> DType {
    inputs
        .iter()
        .map(|m| m.dtype)
        .reduce(DType::promote)
        .unwrap_or(DType::F32)
}

fn infer_cat(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let first = &a.inputs[0];
    let d = dim_of(a.attrs.int("dim"), &first.shape)?;
    let mut shape = first.shape.clone();
    for (i, m) in a.inputs.iter().enumerate().skip(1) {
        let same_rank = m.shape.len() == first.shape.len();
        let mismatch =
            same_rank && (0..shape.len()).any(|k| k != d && m.shape[k] != first.shape[k]);
        if !same_rank || mismatch {
            return Err(format!(
                "tensors[{i}] has shape {:?} but tensors[0] has {:?}; all dims but dim {d} must match",
                m.shape, first.shape
            ));
        }
        shape[d] = shape[d].checked_add(m.shape[d]).ok_or_else(|| {
            format!(
                "dim {d} of the result overflows: {} + {}",
                shape[d], m.shape[d]
            )
        })?;
    }
    Ok(vec![TensorMeta::new(shape, promoted_all(a.inputs))])
}

fn concat(inputs: &[&Tensor], dim: usize, out: &TensorMeta) -> Buffer {
    let parts: Vec<Tensor> = inputs
        .iter()
        .map(|t| dense(&as_dtype(t, out.dtype)))
        .collect();
    let outer: usize = out.shape[..dim].iter().product();
    with_dtype!(out.dtype, T => {
        let mut v: Vec<T> = Vec::with_capacity(out.numel());
        for o in 0..outer {
            for p in &parts {
                let inner: usize = p.shape()[dim..].iter().product();
                v.extend_from_slice(&p.data::<T>()[o * inner..(o + 1) * inner]);
            }
        }
        T::into_buffer(v)
    })
}

fn cat_kernel(a: &KernelArgs) -> KernelResult {
    let d = dim_of(a.attrs.int("dim"), a.inputs[0].shape())?;
    Ok(smallvec![concat(a.inputs, d, &a.outputs[0])])
}

fn infer_stack(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let first = &a.inputs[0];
    let d = dim_of(a.attrs.int("dim"), &[first.shape.clone(), vec![1]].concat())?;
    if let Some((i, m)) = a
        .inputs
        .iter()
        .enumerate()
        .find(|(_, m)| m.shape != first.shape)
    {
        return Err(format!(
            "tensors[{i}] has shape {:?} but tensors[0] has {:?}; stack needs equal shapes",
            m.shape, first.shape
        ));
    }
    let mut shape = first.shape.clone();
    shape.insert(d, a.inputs.len());
    Ok(vec![TensorMeta::new(shape, promoted_all(a.inputs))])
}

fn stack_kernel(a: &KernelArgs) -> KernelResult {
    let out = &a.outputs[0];
    let d = dim_of(a.attrs.int("dim"), &out.shape)?;
    let lifted: Vec<Tensor> = a
        .inputs
        .iter()
        .map(|t| {
            t.view(
                t.layout()
                    .unsqueeze(d as i64)
                    .expect("dim checked by inference"),
            )
        })
        .collect();
    let refs: Vec<&Tensor> = lifted.iter().collect();
    Ok(smallvec![concat(&refs, d, out)])
}

// pad(x; pad, value)
fn pads(a: &MetaArgs) -> Result<Vec<(usize, usize)>, String> {
    let x = &a.inputs[0];
    let p = a.attrs.ints("pad");
    if !p.len().is_multiple_of(2) || p.len() / 2 > x.shape.len() {
        return Err(format!(
            "pad {p:?} must hold (before, after) pairs for at most {} dims, last dim first",
            x.shape.len()
        ));
    }
    if let Some(n) = p.iter().find(|&&v| v < 0) {
        return Err(format!(
            "pad {p:?} has a negative amount {n}; use slice to crop"
        ));
    }
    // Pairs are given from the last dim backwards, as torch.nn.functional.pad.
    let mut per_dim = vec![(0, 0); x.shape.len()];
    for (k, pair) in p.chunks(2).enumerate() {
        per_dim[x.shape.len() - 1 - k] = (pair[0] as usize, pair[1] as usize);
    }
    Ok(per_dim)
}

fn infer_pad(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let x = &a.inputs[0];
    let shape = x
        .shape
        .iter()
        .zip(pads(a)?)
        .enumerate()
        .map(|(k, (&d, (b, e)))| {
            d.checked_add(b)
                .and_then(|n| n.checked_add(e))
                .ok_or_else(|| format!("dim {k} padded by ({b}, {e}) overflows"))
        })
        .collect::<Result<_, String>>()?;
    Ok(vec![TensorMeta::new(shape, x.dtype)])
}

fn pad_kernel(a: &KernelArgs) -> KernelResult {
    let x = a.inputs[0];
    let out = &a.outputs[0];
    let metas = [x.meta()];
    let per_dim = pads(&MetaArgs {
        inputs: &metas,
        attrs: a.attrs,
    })?;
    let ostr = contiguous_strides(&out.shape);
    let start: usize = per_dim.iter().zip(&ostr).map(|((b, _), s)| b * s).sum();
    let value = a.attrs.float("value");
    Ok(smallvec![with_dtype!(x.dtype(), T => {
        let mut v = vec![T::from_f64(value); out.numel()];
        let data = x.data::<T>();
        strided::for_each(x.shape(), [x.strides(), &ostr], [x.layout().offset, start], |[i, o]| {
            v[o] = data[i];
        });
        T::into_buffer(v)
    })])
}

// triu / tril
fn infer_tri(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let x = &a.inputs[0];
    if x.shape.len() < 2 {
        return Err(format!("x must have at least 2 dims, got {:?}", x.shape));
    }
    Ok(vec![x.clone()])
}

fn tri_kernel(a: &KernelArgs, upper: bool) -> KernelResult {
    let x = a.inputs[0];
    let r = x.rank();
    let diagonal = a.attrs.int("diagonal");
    // Offsets of two synthetic operands give each element's row and column.
    let mut rows = vec![0; r];
    rows[r - 2] = 1;
    let mut cols = vec![0; r];
    cols[r - 1] = 1;
    let shape = x.shape();
    let xs = broadcast_strides(x.layout(), shape);
    Ok(smallvec![with_dtype!(x.dtype(), T => {
        let data = x.data::<T>();
        let zero = T::from_f64(0.0);
        T::into_buffer(strided::map(shape, [&xs, &rows, &cols], [x.layout().offset, 0, 0], |[o, i, j]| {
            let above = j as i64 - i as i64 >= diagonal;
            let below = j as i64 - i as i64 <= diagonal;
            if (upper && above) || (!upper && below) { data[o] } else { zero }
        }))
    })])
}

static IN_EMBEDDING: &[InputSpec] = &[InputSpec::tensor("indices"), InputSpec::tensor("weight")];
static IN_X_INDEX: &[InputSpec] = &[InputSpec::tensor("x"), InputSpec::tensor("index")];
static IN_X_INDEX_SRC: &[InputSpec] = &[
    InputSpec::tensor("x"),
    InputSpec::tensor("index"),
    InputSpec::tensor("src"),
];
static IN_TENSORS: &[InputSpec] = &[InputSpec::list("tensors")];
static DIM0: &[AttrSpec] = &[AttrSpec::new("dim", AttrKind::Int, AttrDefault::Int(0))];
static PAD_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("pad", AttrKind::Ints, AttrDefault::Required),
    AttrSpec::new("value", AttrKind::Float, AttrDefault::Float(0.0)),
];
static TRI_ATTRS: &[AttrSpec] = &[AttrSpec::new(
    "diagonal",
    AttrKind::Int,
    AttrDefault::Int(0),
)];

/// The cost of a gather (embedding, index_select, gather): it reads the indices at input
/// `index` and only the entries it picks, as many bytes as it writes, not the whole source:
/// decoding one token reads one row of the embedding table.
fn picked_cost(args: &MetaArgs, outputs: &[TensorMeta], index: usize) -> OpCost {
    let mut cost = copy_cost(args, outputs);
    cost.bytes_read = args.inputs[index].nbytes() as f64 + cost.bytes_written;
    cost
}

fn embedding_cost(args: &MetaArgs, outputs: &[TensorMeta]) -> OpCost {
    picked_cost(args, outputs, 0)
}

fn select_cost(args: &MetaArgs, outputs: &[TensorMeta]) -> OpCost {
    picked_cost(args, outputs, 1)
}

/// The indexing ops.
// A table of OpDefs, one per op, not logic.
pub fn defs() -> Vec<OpDef> {
    let def = |name, doc, inputs, attrs, infer, exec| OpDef {
        name,
        doc,
        group: OpGroup::Indexing,
        inputs,
        attrs,
        outputs: &["out"],
        infer,
        exec: Exec::Compute(exec),
        cost: copy_cost,
        pointwise: None,
        rowwise: None,
    };
    vec![
        OpDef {
            cost: embedding_cost,
            ..def(
                "embedding",
                "rows of weight picked by integer indices: out[..., :] = weight[indices[...], :]",
                IN_EMBEDDING,
                &[],
                infer_embedding,
                embedding_kernel,
            )
        },
        OpDef {
            cost: select_cost,
            ..def(
                "index_select",
                "the entries of x at the 1-D index along dim",
                IN_X_INDEX,
                DIM0,
                infer_index_select,
                index_select_kernel,
            )
        },
        OpDef {
            cost: select_cost,
            ..def(
                "gather",
                "out[i][j] = x[i][index[i][j]] along dim (torch.gather)",
                IN_X_INDEX,
                DIM0,
                infer_gather,
                gather_kernel,
            )
        },
        def(
            "scatter_add",
            "x with src added at index along dim: out[i][index[i][j]] += src[i][j] (torch.scatter_add)",
            IN_X_INDEX_SRC,
            DIM0,
            infer_scatter_add,
            scatter_add_kernel,
        ),
        def(
            "cat",
            "concatenates tensors along an existing dim",
            IN_TENSORS,
            DIM0,
            infer_cat,
            cat_kernel,
        ),
        def(
            "stack",
            "joins equal-shaped tensors along a new dim",
            IN_TENSORS,
            DIM0,
            infer_stack,
            stack_kernel,
        ),
        def(
            "pad",
            "constant padding; pad lists (before, after) pairs from the last dim back",
            IN_X,
            PAD_ATTRS,
            infer_pad,
            pad_kernel,
        ),
        def(
            "triu",
            "keeps elements on and above the diagonal of the last two dims, zeroes the rest",
            IN_X,
            TRI_ATTRS,
            infer_tri,
            |a| tri_kernel(a, true),
        ),
        def(
            "tril",
            "keeps elements on and below the diagonal of the last two dims, zeroes the rest",
            IN_X,
            TRI_ATTRS,
            infer_tri,
            |a| tri_kernel(a, false),
        ),
    ]
}

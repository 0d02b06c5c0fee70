//! View ops: new layouts over the same storage (reshape, transpose, permute, slice, narrow,
//! expand, squeeze, unsqueeze, flatten) and `contiguous`. Each op is one layout function; shape
//! inference applies it to a dense layout, the kernel to the tensor's real one.

use super::attrs::{AttrDefault, AttrKind, AttrSpec, ResolvedAttrs};
use super::common::{free_cost, IN_X};
use super::registry::{Exec, MetaArgs, OpDef, OpGroup, ViewResult};
use crate::tensor::{normalize_dim, shape_str, Layout, Tensor, TensorMeta};

/// A view op: the layout it makes from an input layout.
trait ViewOp {
    const NAME: &'static str;
    const DOC: &'static str;
    const ATTRS: &'static [AttrSpec];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String>;
}

fn infer_view<O: ViewOp>(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let x = &a.inputs[0];
    let shape = match O::layout(&Layout::contiguous(&x.shape), a.attrs)? {
        ViewResult::View(l) => l.shape,
        ViewResult::Copy(shape) => shape,
    };
    Ok(vec![TensorMeta::new(shape, x.dtype)])
}

fn view_kernel<O: ViewOp>(t: &Tensor, a: &ResolvedAttrs) -> Result<ViewResult, String> {
    O::layout(t.layout(), a)
}

fn def<O: ViewOp>() -> OpDef {
    OpDef {
        name: O::NAME,
        doc: O::DOC,
        group: OpGroup::Shape,
        inputs: IN_X,
        attrs: O::ATTRS,
        outputs: &["out"],
        infer: infer_view::<O>,
        exec: Exec::View(view_kernel::<O>),
        cost: free_cost,
        pointwise: None,
        rowwise: None,
    }
}

fn view(r: Result<Layout, crate::tensor::LayoutError>) -> Result<ViewResult, String> {
    r.map(ViewResult::View).map_err(|e| e.0)
}

struct Reshape;
impl ViewOp for Reshape {
    const NAME: &'static str = "reshape";
    const DOC: &'static str =
        "same elements in a new shape (one -1 is inferred); copies only when it must";
    const ATTRS: &'static [AttrSpec] = &[AttrSpec::new(
        "shape",
        AttrKind::Ints,
        AttrDefault::Required,
    )];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        let shape = l.infer_shape(a.ints("shape")).map_err(|e| e.0)?;
        Ok(match l.view_as(&shape) {
            Some(v) => ViewResult::View(v),
            None => ViewResult::Copy(shape),
        })
    }
}

struct View;
impl ViewOp for View {
    const NAME: &'static str = "view";
    const DOC: &'static str =
        "same storage in a new shape; an error when the strides do not allow it";
    const ATTRS: &'static [AttrSpec] = &[AttrSpec::new(
        "shape",
        AttrKind::Ints,
        AttrDefault::Required,
    )];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        let shape = l.infer_shape(a.ints("shape")).map_err(|e| e.0)?;
        l.view_as(&shape).map(ViewResult::View).ok_or_else(|| {
            format!(
                "a tensor with shape {:?} and strides {:?} cannot be viewed as {shape:?}; use reshape (which copies) or contiguous first",
                l.shape, l.strides
            )
        })
    }
}

struct Flatten;
impl ViewOp for Flatten {
    const NAME: &'static str = "flatten";
    const DOC: &'static str = "merges dims start_dim..=end_dim into one";
    const ATTRS: &'static [AttrSpec] = &[
        AttrSpec::new("start_dim", AttrKind::Int, AttrDefault::Int(0)),
        AttrSpec::new("end_dim", AttrKind::Int, AttrDefault::Int(-1)),
    ];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        if l.rank() == 0 {
            return Reshape::layout(l, &reshape_attrs(&[1]));
        }
        let s = normalize_dim(a.int("start_dim"), l.rank()).map_err(|e| e.0)?;
        let e = normalize_dim(a.int("end_dim"), l.rank()).map_err(|e| e.0)?;
        if s > e {
            return Err(format!("start_dim {s} is after end_dim {e}"));
        }
        let mut shape: Vec<i64> = l.shape[..s].iter().map(|&d| d as i64).collect();
        let merged = l.shape[s..=e]
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| {
                format!(
                    "dims {s}..={e} of {} hold more elements than fit in 64 bits",
                    shape_str(&l.shape)
                )
            })?;
        shape.push(merged);
        shape.extend(l.shape[e + 1..].iter().map(|&d| d as i64));
        Reshape::layout(l, &reshape_attrs(&shape))
    }
}

fn reshape_attrs(shape: &[i64]) -> ResolvedAttrs {
    ResolvedAttrs::resolve(
        Reshape::ATTRS,
        &super::attrs::Attrs::new().with("shape", shape.to_vec()),
    )
    .expect("a well-formed shape attribute")
}

struct Transpose;
impl ViewOp for Transpose {
    const NAME: &'static str = "transpose";
    const DOC: &'static str = "swaps two dims";
    const ATTRS: &'static [AttrSpec] = &[
        AttrSpec::new("dim0", AttrKind::Int, AttrDefault::Int(-2)),
        AttrSpec::new("dim1", AttrKind::Int, AttrDefault::Int(-1)),
    ];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        view(l.transpose(a.int("dim0"), a.int("dim1")))
    }
}

struct Permute;
impl ViewOp for Permute {
    const NAME: &'static str = "permute";
    const DOC: &'static str = "reorders dims: output dim i is input dim dims[i]";
    const ATTRS: &'static [AttrSpec] =
        &[AttrSpec::new("dims", AttrKind::Ints, AttrDefault::Required)];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        view(l.permute(a.ints("dims")))
    }
}

struct Slice;
impl ViewOp for Slice {
    const NAME: &'static str = "slice";
    const DOC: &'static str = "x[start:end:step] along dim, clamped as in Python";
    const ATTRS: &'static [AttrSpec] = &[
        AttrSpec::new("dim", AttrKind::Int, AttrDefault::Int(0)),
        AttrSpec::new("start", AttrKind::Int, AttrDefault::Int(0)),
        AttrSpec::new("end", AttrKind::Int, AttrDefault::Int(i64::MAX)),
        AttrSpec::new("step", AttrKind::Int, AttrDefault::Int(1)),
    ];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        view(l.slice(a.int("dim"), a.int("start"), a.int("end"), a.int("step")))
    }
}

struct Narrow;
impl ViewOp for Narrow {
    const NAME: &'static str = "narrow";
    const DOC: &'static str = "length elements from start along dim (must fit)";
    const ATTRS: &'static [AttrSpec] = &[
        AttrSpec::new("dim", AttrKind::Int, AttrDefault::Required),
        AttrSpec::new("start", AttrKind::Int, AttrDefault::Required),
        AttrSpec::new("length", AttrKind::Int, AttrDefault::Required),
    ];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        let d = normalize_dim(a.int("dim"), l.rank()).map_err(|e| e.0)?;
        let size = l.shape[d] as i64;
        let start = if a.int("start") < 0 {
            a.int("start") + size
        } else {
            a.int("start")
        };
        let length = a.int("length");
        let end = start.checked_add(length);
        if start < 0 || length < 0 || end.is_none_or(|end| end > size) {
            return Err(format!(
                "narrow of dim {d} (size {size}) from {} with length {length} is out of range",
                a.int("start")
            ));
        }
        view(l.slice(d as i64, start, start + length, 1))
    }
}

struct Expand;
impl ViewOp for Expand {
    const NAME: &'static str = "expand";
    const DOC: &'static str = "broadcasts size-1 dims to shape without copying (-1 keeps a dim)";
    const ATTRS: &'static [AttrSpec] = &[AttrSpec::new(
        "shape",
        AttrKind::Ints,
        AttrDefault::Required,
    )];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        view(l.expand(a.ints("shape")))
    }
}

struct Squeeze;
impl ViewOp for Squeeze {
    const NAME: &'static str = "squeeze";
    const DOC: &'static str = "removes size-1 dims (all, or those listed in dims)";
    const ATTRS: &'static [AttrSpec] = &[AttrSpec::new(
        "dims",
        AttrKind::Ints,
        AttrDefault::Ints(&[]),
    )];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        view(l.squeeze(a.ints("dims")))
    }
}

struct Unsqueeze;
impl ViewOp for Unsqueeze {
    const NAME: &'static str = "unsqueeze";
    const DOC: &'static str = "inserts a size-1 dim at dim";
    const ATTRS: &'static [AttrSpec] =
        &[AttrSpec::new("dim", AttrKind::Int, AttrDefault::Required)];
    fn layout(l: &Layout, a: &ResolvedAttrs) -> Result<ViewResult, String> {
        view(l.unsqueeze(a.int("dim")))
    }
}

struct Contiguous;
impl ViewOp for Contiguous {
    const NAME: &'static str = "contiguous";
    const DOC: &'static str = "a dense row-major copy, or the tensor itself when already dense";
    const ATTRS: &'static [AttrSpec] = &[];
    fn layout(l: &Layout, _: &ResolvedAttrs) -> Result<ViewResult, String> {
        Ok(if l.is_contiguous() {
            ViewResult::View(l.clone())
        } else {
            ViewResult::Copy(l.shape.clone())
        })
    }
}

/// The view ops.
pub fn defs() -> Vec<OpDef> {
    vec![
        def::<Reshape>(),
        def::<View>(),
        def::<Flatten>(),
        def::<Transpose>(),
        def::<Permute>(),
        def::<Slice>(),
        def::<Narrow>(),
        def::<Expand>(),
        def::<Squeeze>(),
        def::<Unsqueeze>(),
        def::<Contiguous>(),
    ]
}

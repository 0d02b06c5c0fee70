//! Building blocks shared by the kernels: typed maps over (broadcast, strided) operands, dtype
//! casts of temporaries, float compute types, and cost helpers.

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::sync::Arc;

use half::{bf16, f16};
use num_traits::Float;

use super::registry::{InputSpec, MetaArgs, PointwiseArgs};
use super::vmath::{self, vectorized};
use crate::device::cost::{Engine, OpCost};
use crate::tensor::strided;
use crate::tensor::{
    normalize_dim, same_shape, shape_str, Buffer, DType, Element, Elements, Layout, Storage,
    Tensor, TensorMeta,
};
use crate::with_dtype;

/// The input list of single-tensor ops.
pub static IN_X: &[InputSpec] = &[InputSpec::tensor("x")];
/// The input list of binary ops.
pub static IN_AB: &[InputSpec] = &[InputSpec::tensor("a"), InputSpec::tensor("b")];

/// Strides that read `layout` as if broadcast to `out_shape` (0 on broadcast dims).
/// The shapes must already be known to broadcast.
pub fn broadcast_strides(layout: &Layout, out_shape: &[usize]) -> Vec<usize> {
    let lead = out_shape.len() - layout.rank();
    (0..out_shape.len())
        .map(|d| {
            if d < lead || layout.shape[d - lead] == 1 {
                0
            } else {
                layout.strides[d - lead]
            }
        })
        .collect()
}

/// `t`'s strides read as if broadcast to `out_shape`: its own when it already has that shape.
fn operand_strides<'a>(t: &'a Tensor, out_shape: &[usize]) -> Cow<'a, [usize]> {
    if same_shape(t.shape(), out_shape) {
        Cow::Borrowed(t.strides())
    } else {
        Cow::Owned(broadcast_strides(t.layout(), out_shape))
    }
}

/// `t`'s elements converted to `to` as PyTorch casts them, in row-major order.
pub fn cast_buffer(t: &Tensor, to: DType) -> Buffer {
    match (t.dtype(), to) {
        // The casts between f32 and bf16 that mixed-precision code does all the time get loops
        // that vectorize; the element functions are the ones `cast_block` uses.
        (DType::F32, DType::Bf16) => Buffer::Bf16(map1(t, vmath::bf16_from_f32)),
        (DType::Bf16, DType::F32) => Buffer::F32(map1(t, bf16::to_f32)),
        _ => with_dtype!(to, D => D::into_buffer(t.to_vec::<D>())),
    }
}

/// `t` as `dtype`: itself when it already is, else a dense converted temporary.
///
/// Temporaries are not charged to the core's HBM: they model a conversion the device would
/// fuse into the op.
/// Borrows `t` when it already has `dtype` (the common case costs nothing).
pub fn as_dtype(t: &Tensor, dtype: DType) -> Cow<'_, Tensor> {
    if t.dtype() == dtype {
        return Cow::Borrowed(t);
    }
    let buffer = cast_buffer(t, dtype);
    Cow::Owned(Tensor::from_storage(
        Arc::new(Storage::new(buffer, None)),
        Layout::contiguous(t.shape()),
        t.device(),
    ))
}

/// `t` as a dense row-major temporary (itself when already contiguous at offset 0).
pub fn dense(t: &Tensor) -> Tensor {
    if t.is_contiguous() && t.layout().offset == 0 {
        return t.clone();
    }
    Tensor::from_storage(
        Arc::new(Storage::new(t.to_buffer(), None)),
        Layout::contiguous(t.shape()),
        t.device(),
    )
}

/// Whether `shape` holds exactly one element (a scalar, or all dims 1). The maps give such
/// results straight from the operands' one element each: the scalar math of a guest's loop
/// then skips the chunking, cancellation checks and vector dispatch that pay off from a few
/// elements on.
fn is_one_element(shape: &[usize]) -> bool {
    shape.iter().all(|&d| d == 1)
}

/// Applies `f` to every element of `x`, in row-major order.
pub fn map1<S: Element, U: Send>(x: &Tensor, f: impl Fn(S) -> U + Sync + Send) -> Vec<U> {
    let data = x.data::<S>();
    if is_one_element(x.shape()) {
        return vec![f(data[x.layout().offset])];
    }
    strided::map_runs(
        x.shape(),
        [x.strides()],
        [x.layout().offset],
        |out, [p], [step]| {
            vectorized!({
                if step == 1 {
                    for (o, &v) in out.iter_mut().zip(&data[p..]) {
                        o.write(f(v));
                    }
                } else {
                    for (i, o) in out.iter_mut().enumerate() {
                        o.write(f(data[p + i * step]));
                    }
                }
            })
        },
    )
}

/// Applies `f` to pairs of elements of `a` and `b` broadcast to `out_shape`.
pub fn map2<A: Element, B: Element, U: Send>(
    a: &Tensor,
    b: &Tensor,
    out_shape: &[usize],
    f: impl Fn(A, B) -> U + Sync + Send,
) -> Vec<U> {
    let (da, db) = (a.data::<A>(), b.data::<B>());
    if is_one_element(out_shape) {
        return vec![f(da[a.layout().offset], db[b.layout().offset])];
    }
    let (sa, sb) = (operand_strides(a, out_shape), operand_strides(b, out_shape));
    strided::map_runs(
        out_shape,
        [&sa, &sb],
        [a.layout().offset, b.layout().offset],
        |out, [p, q], steps| {
            // Contiguous and broadcast (scalar, row vector) operands get their own loops.
            vectorized!(match steps {
                [1, 1] => {
                    for ((o, &x), &y) in out.iter_mut().zip(&da[p..]).zip(&db[q..]) {
                        o.write(f(x, y));
                    }
                }
                [1, 0] => {
                    let y = db[q];
                    for (o, &x) in out.iter_mut().zip(&da[p..]) {
                        o.write(f(x, y));
                    }
                }
                [0, 1] => {
                    let x = da[p];
                    for (o, &y) in out.iter_mut().zip(&db[q..]) {
                        o.write(f(x, y));
                    }
                }
                [s, t] => {
                    for (i, o) in out.iter_mut().enumerate() {
                        o.write(f(da[p + i * s], db[q + i * t]));
                    }
                }
            })
        },
    )
}

/// Applies `f` to triples of elements broadcast to `out_shape`.
pub fn map3<A: Element, B: Element, C: Element, U: Send>(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    out_shape: &[usize],
    f: impl Fn(A, B, C) -> U + Sync + Send,
) -> Vec<U> {
    let (da, db, dc) = (a.data::<A>(), b.data::<B>(), c.data::<C>());
    if is_one_element(out_shape) {
        let [p, q, r] = [a, b, c].map(|t| t.layout().offset);
        return vec![f(da[p], db[q], dc[r])];
    }
    let s: [Cow<[usize]>; 3] = [a, b, c].map(|t| operand_strides(t, out_shape));
    strided::map_runs(
        out_shape,
        [&s[0], &s[1], &s[2]],
        [a.layout().offset, b.layout().offset, c.layout().offset],
        |out, [p, q, r], steps| {
            // Contiguous operands beside one broadcast scalar (`where(mask, x, -inf)` and its
            // gradient) get loops of their own, as in `map2`; the indexed loop bounds-checks
            // every element and does not vectorize.
            vectorized!(match steps {
                [1, 1, 1] => {
                    let operands = da[p..].iter().zip(&db[q..]).zip(&dc[r..]);
                    for (o, ((&x, &y), &z)) in out.iter_mut().zip(operands) {
                        o.write(f(x, y, z));
                    }
                }
                [1, 1, 0] => {
                    let z = dc[r];
                    for (o, (&x, &y)) in out.iter_mut().zip(da[p..].iter().zip(&db[q..])) {
                        o.write(f(x, y, z));
                    }
                }
                [1, 0, 1] => {
                    let y = db[q];
                    for (o, (&x, &z)) in out.iter_mut().zip(da[p..].iter().zip(&dc[r..])) {
                        o.write(f(x, y, z));
                    }
                }
                [0, 1, 1] => {
                    let x = da[p];
                    for (o, (&y, &z)) in out.iter_mut().zip(db[q..].iter().zip(&dc[r..])) {
                        o.write(f(x, y, z));
                    }
                }
                [1, 0, 0] => {
                    let (y, z) = (db[q], dc[r]);
                    for (o, &x) in out.iter_mut().zip(&da[p..]) {
                        o.write(f(x, y, z));
                    }
                }
                [s, t, u] => {
                    for (i, o) in out.iter_mut().enumerate() {
                        o.write(f(da[p + i * s], db[q + i * t], dc[r + i * u]));
                    }
                }
            })
        },
    )
}

/// `b`'s elements converted to `to` as PyTorch casts them: the block form of [`cast_buffer`],
/// with the same element functions.
pub fn cast_block(b: Elements, to: DType) -> Buffer {
    if b.dtype() == to {
        return b.to_buffer();
    }
    match (b, to) {
        (Elements::F32(v), DType::Bf16) => Buffer::Bf16(written(v.len(), |out| {
            vectorized!(for (o, &x) in out.iter_mut().zip(v) {
                o.write(vmath::bf16_from_f32(x));
            })
        })),
        (Elements::Bf16(v), DType::F32) => Buffer::F32(written(v.len(), |out| {
            vectorized!(for (o, x) in out.iter_mut().zip(v) {
                o.write(x.to_f32());
            })
        })),
        _ => with_dtype!(b.dtype(), S => {
            let src = S::of(b).expect("dispatched on the elements' own dtype");
            with_dtype!(to, D => D::into_buffer(src.iter().map(|&v| D::cast_from(v)).collect()))
        }),
    }
}

/// Operand `i` of a block kernel as `T`. The fused executor converts operands to the dtypes
/// the op's `Pointwise::operands` asked for, so a mismatch is a bug.
pub fn operand<'a, T: Element>(args: &'a PointwiseArgs, i: usize) -> &'a [T] {
    T::of(args.inputs[i]).expect("fused kernels convert operands to the op's dtypes first")
}

/// A vector of `n` values that `write` stores, sequentially: `write` must write every slot
/// of the slice it is handed. Block kernels use it instead of `collect`, whose loop would not
/// inline into [`vectorized!`]'s copies.
fn written<U>(n: usize, write: impl FnOnce(&mut [MaybeUninit<U>])) -> Vec<U> {
    let mut out = Vec::with_capacity(n);
    write(&mut out.spare_capacity_mut()[..n]);
    // SAFETY: `write` wrote all `n` slots (its contract); a panic in it unwinds past this
    // line and the vector drops with length 0.
    unsafe { out.set_len(n) };
    out
}

/// Writes `f` of every element of `a` to `out`: an [`F32Tile::Unary`](super::registry::F32Tile)
/// loop.
#[inline(always)]
pub fn tile1(a: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    assert_eq!(a.len(), out.len(), "tile operands have one length");
    vectorized!(for (o, &x) in out.iter_mut().zip(a) {
        *o = f(x);
    })
}

/// Writes `f` of pairs of elements of `a` and `b` to `out`: an
/// [`F32Tile::Binary`](super::registry::F32Tile) loop.
#[inline(always)]
pub fn tile2(a: &[f32], b: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    assert!(
        a.len() == out.len() && b.len() == out.len(),
        "tile operands have one length"
    );
    vectorized!(for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    })
}

/// Applies `f` to every element of the block operand 0.
pub fn block1<S: Element, U: Element>(args: &PointwiseArgs, f: impl Fn(S) -> U) -> Buffer {
    let a = operand::<S>(args, 0);
    U::into_buffer(written(a.len(), |out| {
        vectorized!(for (o, &x) in out.iter_mut().zip(a) {
            o.write(f(x));
        })
    }))
}

/// Applies `f` to pairs of elements of the block operands 0 and 1.
pub fn block2<A: Element, B: Element, U: Element>(
    args: &PointwiseArgs,
    f: impl Fn(A, B) -> U,
) -> Buffer {
    let (a, b) = (operand::<A>(args, 0), operand::<B>(args, 1));
    assert_eq!(a.len(), b.len(), "block operands have one length");
    U::into_buffer(written(a.len(), |out| {
        vectorized!(for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            o.write(f(x, y));
        })
    }))
}

/// Applies `f` to triples of elements of the block operands 0, 1 and 2.
pub fn block3<A: Element, B: Element, C: Element, U: Element>(
    args: &PointwiseArgs,
    f: impl Fn(A, B, C) -> U,
) -> Buffer {
    let (a, b, c) = (
        operand::<A>(args, 0),
        operand::<B>(args, 1),
        operand::<C>(args, 2),
    );
    assert!(
        a.len() == b.len() && a.len() == c.len(),
        "block operands have one length"
    );
    U::into_buffer(written(a.len(), |out| {
        vectorized!(
            for (((o, &x), &y), &z) in out.iter_mut().zip(a).zip(b).zip(c) {
                o.write(f(x, y, z));
            }
        )
    }))
}

/// Applies a row function to each row of a dense block of whole rows: `n` input elements
/// per row of `block`, `n_out` output elements per row of the result. The fused form of the
/// row ops ([`super::registry::Rowwise`]) runs their eager row functions through it.
pub fn rows_block<T: Element, U: Element>(
    block: Elements,
    n: usize,
    n_out: usize,
    f: impl Fn(&[T], &mut [U]),
) -> Buffer {
    let x = T::of(block).expect("row blocks have the row op's input dtype");
    let rows = x.len() / n.max(1);
    let mut out = vec![U::from_f64(0.0); rows * n_out];
    for (i, o) in x.chunks_exact(n).zip(out.chunks_exact_mut(n_out)) {
        f(i, o);
    }
    U::into_buffer(out)
}

/// Float math that `num_traits::Float` lacks, for f32 and f64.
pub trait MathExt: Float + Send + Sync {
    /// The error function.
    fn erf(self) -> Self;
    /// A constant.
    fn c(v: f64) -> Self;
    /// e^x, written so that loops over it vectorize for f32 ([`vmath::exp_f32`]); libm's for
    /// f64. Every kernel that exponentiates uses it, so eager and fused results agree.
    fn vexp(self) -> Self;
    /// tanh, written so that loops over it vectorize for f32 ([`vmath::tanh_f32`]); libm's for
    /// f64.
    fn vtanh(self) -> Self;
}

impl MathExt for f32 {
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    fn c(v: f64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn vexp(self) -> f32 {
        vmath::exp_f32(self)
    }
    #[inline(always)]
    fn vtanh(self) -> f32 {
        vmath::tanh_f32(self)
    }
}

impl MathExt for f64 {
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    fn c(v: f64) -> f64 {
        v
    }
    fn vexp(self) -> f64 {
        self.exp()
    }
    fn vtanh(self) -> f64 {
        self.tanh()
    }
}

/// A float storage type and the type it computes in: f32 for f32, bf16 and f16 (then rounded,
/// as PyTorch does on CPU), f64 for f64.
pub trait FloatElem: Element {
    /// The compute type.
    type C: MathExt;
    /// Widens to the compute type.
    fn up(self) -> Self::C;
    /// Rounds back from the compute type.
    fn down(c: Self::C) -> Self;
    /// Runs `f` on `input` widened to the compute type, and stores what it writes to its
    /// second argument into `output`, rounded back: in place for f32 and f64, whose compute
    /// type is their own, and through temporaries for bf16 and f16.
    fn compute_row(input: &[Self], output: &mut [Self], f: impl FnOnce(&[Self::C], &mut [Self::C]));
}

/// [`FloatElem::compute_row`] for the half types, through f32 temporaries.
fn compute_row_widened<T: FloatElem<C = f32>>(
    input: &[T],
    output: &mut [T],
    f: impl FnOnce(&[f32], &mut [f32]),
) {
    let wide: Vec<f32> = input.iter().map(|v| v.up()).collect();
    let mut result = vec![0.0f32; output.len()];
    f(&wide, &mut result);
    for (o, r) in output.iter_mut().zip(result) {
        *o = T::down(r);
    }
}

impl FloatElem for f32 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self
    }
    #[inline(always)]
    fn down(c: f32) -> f32 {
        c
    }
    #[inline(always)]
    fn compute_row(input: &[f32], output: &mut [f32], f: impl FnOnce(&[f32], &mut [f32])) {
        f(input, output)
    }
}

impl FloatElem for f64 {
    type C = f64;
    #[inline(always)]
    fn up(self) -> f64 {
        self
    }
    #[inline(always)]
    fn down(c: f64) -> f64 {
        c
    }
    #[inline(always)]
    fn compute_row(input: &[f64], output: &mut [f64], f: impl FnOnce(&[f64], &mut [f64])) {
        f(input, output)
    }
}

impl FloatElem for bf16 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn down(c: f32) -> bf16 {
        vmath::bf16_from_f32(c)
    }
    fn compute_row(input: &[bf16], output: &mut [bf16], f: impl FnOnce(&[f32], &mut [f32])) {
        compute_row_widened(input, output, f)
    }
}

impl FloatElem for f16 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn down(c: f32) -> f16 {
        f16::from_f32(c)
    }
    fn compute_row(input: &[f16], output: &mut [f16], f: impl FnOnce(&[f32], &mut [f32])) {
        compute_row_widened(input, output, f)
    }
}

/// `f` on a float storage type: widened to the compute type, rounded back once. Eager kernels
/// and block kernels both wrap their math with it, so they round identically.
#[inline(always)]
pub fn up_down<T: FloatElem>(f: impl Fn(T::C) -> T::C) -> impl Fn(T) -> T {
    move |v| T::down(f(v.up()))
}

/// Runs `$body` with `$T` bound to the float storage type of `$dtype` (a float dtype).
macro_rules! with_float {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::Bf16 => {
                type $T = half::bf16;
                $body
            }
            $crate::tensor::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            other => return Err(format!("expected a floating dtype, got {other}")),
        }
    };
}
pub(crate) use with_float;

/// Requires a floating dtype.
pub fn expect_float(what: &str, m: &TensorMeta) -> Result<(), String> {
    if m.dtype.is_float() {
        Ok(())
    } else {
        Err(format!(
            "{what} must have a floating dtype (f32, bf16, f16, f64), got {}; cast it first",
            m.dtype
        ))
    }
}

/// Requires an integer dtype for indices.
pub fn expect_index(what: &str, m: &TensorMeta) -> Result<(), String> {
    if matches!(m.dtype, DType::I64 | DType::I32 | DType::U8) {
        Ok(())
    } else {
        Err(format!(
            "{what} must hold integer indices (i64, i32 or u8), got {}",
            m.dtype
        ))
    }
}

/// Resolves a dim attribute against a rank, with the error naming the shape.
pub fn dim_of(dim: i64, shape: &[usize]) -> Result<usize, String> {
    normalize_dim(dim, shape.len()).map_err(|e| format!("{e} (shape {})", shape_str(shape)))
}

/// Bytes read (all inputs) and written (all outputs) for dense tensors.
pub fn io_bytes(inputs: &[TensorMeta], outputs: &[TensorMeta]) -> (f64, f64) {
    let sum = |ms: &[TensorMeta]| ms.iter().map(|m| m.nbytes() as f64).sum::<f64>();
    (sum(inputs), sum(outputs))
}

/// The cost of an op that reads its inputs once, writes its outputs once and does
/// `flops_per_element` operations per output element on `engine`.
pub fn streaming_cost(
    args: &MetaArgs,
    outputs: &[TensorMeta],
    flops_per_element: f64,
    engine: Engine,
) -> OpCost {
    let (read, written) = io_bytes(args.inputs, outputs);
    let numel = outputs.first().map_or(0, |m| m.numel()) as f64;
    let dtype = outputs
        .first()
        .or(args.inputs.first())
        .map_or(DType::F32, |m| m.dtype);
    OpCost {
        flops: numel * flops_per_element,
        bytes_read: read,
        bytes_written: written,
        engine,
        dtype,
        matmul: None,
    }
}

/// The cost of an op that only re-describes memory (views).
pub fn free_cost(_: &MetaArgs, _: &[TensorMeta]) -> OpCost {
    OpCost::free()
}

/// The cost of a pure data movement (copies, gathers, concatenation): bytes, no flops.
pub fn copy_cost(args: &MetaArgs, outputs: &[TensorMeta]) -> OpCost {
    streaming_cost(args, outputs, 0.0, Engine::Vector)
}

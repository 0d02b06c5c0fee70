//! The data layer of the collectives: pure functions on dense row-major [`Buffer`]s.
//!
//! The communicator moves buffers between the ranks of one process; these functions compute
//! what the ranks receive:
//!
//! - `all_reduce` and `reduce_scatter` combine the ranks' buffers element-wise with
//!   [`reduce`], folding them in rank order, so every rank gets bitwise the same result
//!   whatever the thread count.
//! - `all_gather` glues the ranks' pieces together with [`concat`].
//! - `reduce_scatter` and `all_to_all` cut a buffer into the ranks' pieces with [`split`],
//!   using [`chunk_sizes`] (the sizes of `torch.chunk`) when the pieces are even.
//!
//! Errors are plain `String`s; the communicator wraps them with the collective's context.

use std::borrow::Cow;
use std::fmt;

use half::{bf16, f16};
use rayon::prelude::*;

use neuronlab_core::tensor::{Buffer, DType, Element};
use neuronlab_core::with_dtype;

/// Elements per parallel chunk of [`reduce`].
const CHUNK: usize = 1 << 15;

/// Reduction of a collective. Codes and order as torch.distributed.ReduceOp: SUM, AVG, PRODUCT,
/// MIN, MAX (`op as u32` is torch's code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum (wrapping for integers, logical or for bool).
    Sum = 0,
    /// Element-wise mean: the sum divided by the number of inputs. Float dtypes only.
    Avg = 1,
    /// Element-wise product (wrapping for integers, logical and for bool).
    Product = 2,
    /// Element-wise minimum (NaN propagates; logical and for bool).
    Min = 3,
    /// Element-wise maximum (NaN propagates; logical or for bool).
    Max = 4,
}

impl ReduceOp {
    /// Every op, in torch's order.
    pub(crate) const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Avg,
        ReduceOp::Product,
        ReduceOp::Min,
        ReduceOp::Max,
    ];

    /// Parses `sum`, `avg`, `product`, `min` or `max`, in any case.
    pub fn parse(name: &str) -> Result<ReduceOp, String> {
        ReduceOp::ALL
            .into_iter()
            .find(|op| op.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                format!("unknown reduce op '{name}': expected one of sum, avg, product, min, max")
            })
    }

    /// The lowercase name (`sum`, `avg`, `product`, `min`, `max`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Product => "product",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }

    /// Whether the op is defined on `dtype`: everything is, except `avg` on integer and bool
    /// dtypes (as in torch, which has no integer mean).
    pub fn supports(self, dtype: DType) -> Result<(), String> {
        if self == ReduceOp::Avg && !dtype.is_float() {
            return Err(format!(
                "avg is defined for float dtypes only; use sum and divide the result instead \
                 (the dtype is {dtype})"
            ));
        }
        Ok(())
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The per-dtype arithmetic of [`reduce`]: one step of each op on two elements.
trait Reducible: Element {
    fn sum(a: Self, b: Self) -> Self;
    fn product(a: Self, b: Self) -> Self;
    fn minimum(a: Self, b: Self) -> Self;
    fn maximum(a: Self, b: Self) -> Self;
    /// `self / n`, for avg (float types only; [`ReduceOp::supports`] rejects the others).
    fn div_count(self, n: usize) -> Self;
}

/// f32 and f64: native arithmetic; min/max propagate NaN.
macro_rules! reducible_native_float {
    ($t:ty) => {
        impl Reducible for $t {
            fn sum(a: Self, b: Self) -> Self {
                a + b
            }
            fn product(a: Self, b: Self) -> Self {
                a * b
            }
            fn minimum(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() {
                    a + b
                } else if b < a {
                    b
                } else {
                    a
                }
            }
            fn maximum(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() {
                    a + b
                } else if b > a {
                    b
                } else {
                    a
                }
            }
            fn div_count(self, n: usize) -> Self {
                self / n as $t
            }
        }
    };
}

reducible_native_float!(f32);
reducible_native_float!(f64);

/// bf16 and f16: each step in f32, rounded back to nearest even.
macro_rules! reducible_half {
    ($t:ty) => {
        impl Reducible for $t {
            fn sum(a: Self, b: Self) -> Self {
                <$t>::from_f32(a.to_f32() + b.to_f32())
            }
            fn product(a: Self, b: Self) -> Self {
                <$t>::from_f32(a.to_f32() * b.to_f32())
            }
            fn minimum(a: Self, b: Self) -> Self {
                <$t>::from_f32(<f32 as Reducible>::minimum(a.to_f32(), b.to_f32()))
            }
            fn maximum(a: Self, b: Self) -> Self {
                <$t>::from_f32(<f32 as Reducible>::maximum(a.to_f32(), b.to_f32()))
            }
            fn div_count(self, n: usize) -> Self {
                <$t>::from_f32(self.to_f32() / n as f32)
            }
        }
    };
}

reducible_half!(bf16);
reducible_half!(f16);

/// Integers: sum and product wrap.
macro_rules! reducible_int {
    ($t:ty) => {
        impl Reducible for $t {
            fn sum(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            fn product(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            fn minimum(a: Self, b: Self) -> Self {
                Ord::min(a, b)
            }
            fn maximum(a: Self, b: Self) -> Self {
                Ord::max(a, b)
            }
            fn div_count(self, _n: usize) -> Self {
                unreachable!("avg is rejected for integer dtypes by ReduceOp::supports")
            }
        }
    };
}

reducible_int!(i64);
reducible_int!(i32);
reducible_int!(u8);

/// bool: sum and max are or, product and min are and.
impl Reducible for bool {
    fn sum(a: Self, b: Self) -> Self {
        a | b
    }
    fn product(a: Self, b: Self) -> Self {
        a & b
    }
    fn minimum(a: Self, b: Self) -> Self {
        a & b
    }
    fn maximum(a: Self, b: Self) -> Self {
        a | b
    }
    fn div_count(self, _n: usize) -> Self {
        unreachable!("avg is rejected for bool by ReduceOp::supports")
    }
}

/// The inputs' common dtype, once their dtypes and lengths agree and `op` supports it.
fn agreeing_dtype(op: ReduceOp, inputs: &[&Buffer]) -> Result<DType, String> {
    let first = inputs.first().ok_or("reduce needs at least one input")?;
    let (dtype, len) = (first.dtype(), first.len());
    for (i, b) in inputs.iter().enumerate().skip(1) {
        if b.dtype() != dtype {
            return Err(format!(
                "reduce: input {i} has dtype {}, but input 0 has dtype {dtype}",
                b.dtype()
            ));
        }
        if b.len() != len {
            return Err(format!(
                "reduce: input {i} has {} elements, but input 0 has {len}",
                b.len()
            ));
        }
    }
    op.supports(dtype)?;
    Ok(dtype)
}

/// Element-wise reduction of `inputs` (all same dtype and length, at least one), folded in the
/// given order: `out = op(op(op(in0, in1), in2), ...)`.
///
/// - Sum and product of integers wrap (`u8` too).
/// - f32/f64 use native arithmetic in that type. bf16/f16 compute each step in f32 and round
///   back to the 16-bit type (round-to-nearest-even), i.e. they round after every step.
/// - Avg is the same sum fold, then a division by `inputs.len()` (in f32 for bf16/f16, then
///   rounded; in the type otherwise). Float dtypes only.
/// - Min/Max on floats propagate NaN (if either operand is NaN the result is NaN), like torch.
/// - bool: Sum and Max are logical or, Product and Min logical and.
///
/// Runs in parallel over chunks of the output; every element is folded over the inputs in
/// order, so the result does not depend on the thread count.
///
/// Errors when the list is empty, the dtypes or lengths differ, or `op` does not support the
/// dtype.
pub fn reduce(op: ReduceOp, inputs: &[&Buffer]) -> Result<Buffer, String> {
    let dtype = agreeing_dtype(op, inputs)?;
    Ok(with_dtype!(dtype, T => {
        let slices: Vec<&[T]> = inputs
            .iter()
            .map(|b| T::slice(b).expect("dtypes checked above"))
            .collect();
        T::into_buffer(reduce_typed(op, &slices))
    }))
}

/// [`reduce`], written over an input the caller hands over (`Cow::Owned`: one received from
/// another process, say) when one of the first two is: no fresh output to allocate and
/// write, and the received elements are still in cache. The same bits as [`reduce`]: each
/// element is still folded over the inputs in order.
pub fn reduce_owning(op: ReduceOp, mut inputs: Vec<Cow<'_, Buffer>>) -> Result<Buffer, String> {
    let at = inputs
        .iter()
        .take(2)
        .position(|input| matches!(input, Cow::Owned(_)));
    let Some(at) = at else {
        let borrowed: Vec<&Buffer> = inputs.iter().map(|b| b.as_ref()).collect();
        return reduce(op, &borrowed);
    };
    {
        let borrowed: Vec<&Buffer> = inputs.iter().map(|b| b.as_ref()).collect();
        agreeing_dtype(op, &borrowed)?;
    }
    let mut own =
        std::mem::replace(&mut inputs[at], Cow::Owned(Buffer::U8(Vec::new()))).into_owned();
    let others: Vec<&Buffer> = inputs.iter().map(|b| b.as_ref()).collect();
    with_dtype!(own.dtype(), T => {
        let slices: Vec<&[T]> = others
            .iter()
            .map(|b| T::slice(b).unwrap_or_default())
            .collect();
        let dest = T::slice_mut(&mut own).expect("dtypes checked above");
        reduce_typed_into(op, &slices, at, dest);
    });
    Ok(own)
}

/// [`reduce`] on validated slices: picks the step function once, outside the loops.
fn reduce_typed<T: Reducible>(op: ReduceOp, inputs: &[&[T]]) -> Vec<T> {
    match op {
        ReduceOp::Sum => fold(inputs, T::sum, None),
        ReduceOp::Avg => fold(inputs, T::sum, Some(inputs.len())),
        ReduceOp::Product => fold(inputs, T::product, None),
        ReduceOp::Min => fold(inputs, T::minimum, None),
        ReduceOp::Max => fold(inputs, T::maximum, None),
    }
}

/// Folds `inputs` (at least one, equal lengths) element-wise with `step`, then divides by
/// `divide_by` if given. The first step is fused into the (parallel) allocation of the output;
/// the remaining inputs are folded chunk by chunk, each chunk staying in cache across inputs.
fn fold<T: Reducible>(
    inputs: &[&[T]],
    step: impl Fn(T, T) -> T + Sync,
    divide_by: Option<usize>,
) -> Vec<T> {
    let mut out: Vec<T> = match inputs {
        [a, b, ..] => a
            .par_iter()
            .zip(b.par_iter())
            .with_min_len(CHUNK)
            .map(|(&x, &y)| step(x, y))
            .collect(),
        [a] => a.par_iter().with_min_len(CHUNK).copied().collect(),
        [] => Vec::new(),
    };
    let rest = inputs.get(2..).unwrap_or_default();
    if rest.is_empty() && divide_by.is_none() {
        return out;
    }
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(ci, chunk)| {
            let range = ci * CHUNK..ci * CHUNK + chunk.len();
            for input in rest {
                for (o, &x) in chunk.iter_mut().zip(&input[range.clone()]) {
                    *o = step(*o, x);
                }
            }
            if let Some(n) = divide_by {
                for o in chunk.iter_mut() {
                    *o = o.div_count(n);
                }
            }
        });
    out
}

/// [`reduce_typed`] written over `dest`, which holds input `at` (0 or 1; `inputs[at]` is not
/// read).
fn reduce_typed_into<T: Reducible>(op: ReduceOp, inputs: &[&[T]], at: usize, dest: &mut [T]) {
    let divide_by = (op == ReduceOp::Avg).then_some(inputs.len());
    match op {
        ReduceOp::Sum | ReduceOp::Avg => fold_into(inputs, at, dest, T::sum, divide_by),
        ReduceOp::Product => fold_into(inputs, at, dest, T::product, None),
        ReduceOp::Min => fold_into(inputs, at, dest, T::minimum, None),
        ReduceOp::Max => fold_into(inputs, at, dest, T::maximum, None),
    }
}

/// [`fold`] into `dest`, which holds input `at` (0 or 1): each element is folded over the
/// inputs in order, reading `dest`'s element as input `at` before it is overwritten.
fn fold_into<T: Reducible>(
    inputs: &[&[T]],
    at: usize,
    dest: &mut [T],
    step: impl Fn(T, T) -> T + Sync,
    divide_by: Option<usize>,
) {
    debug_assert!(at < 2 && at < inputs.len());
    dest.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(ci, chunk)| {
            let range = ci * CHUNK..ci * CHUNK + chunk.len();
            if at == 1 {
                for (o, &x) in chunk.iter_mut().zip(&inputs[0][range.clone()]) {
                    *o = step(x, *o);
                }
            }
            for input in &inputs[at + 1..] {
                for (o, &x) in chunk.iter_mut().zip(&input[range.clone()]) {
                    *o = step(*o, x);
                }
            }
            if let Some(n) = divide_by {
                for o in chunk.iter_mut() {
                    *o = o.div_count(n);
                }
            }
        });
}

/// torch.chunk sizes of a dim of length `len` cut into `n` parts (n >= 1), padded with zeros to
/// exactly `n` entries: each chunk `ceil(len/n)`, the last nonempty one smaller, then empties.
/// E.g. (5,4) -> [2,2,1,0], (10,4) -> [3,3,3,1], (0,3) -> [0,0,0], (7,1) -> [7],
/// (3,8) -> [1,1,1,0,0,0,0,0]. `n == 0` gives an empty list.
pub fn chunk_sizes(len: usize, n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let size = len.div_ceil(n);
    let mut left = len;
    (0..n)
        .map(|_| {
            let s = size.min(left);
            left -= s;
            s
        })
        .collect()
}

/// Number of elements of `shape`, `None` on overflow (a zero dim makes it 0 regardless).
fn numel(shape: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// `numel` of a shape whose element count is known to fit (a sub-shape of a valid shape).
fn numel_of(shape: &[usize]) -> usize {
    numel(shape).expect("a factor of a valid shape's element count")
}

/// Concatenates dense buffers along `dim`. `parts[i] = (buffer, shape)`: all same dtype, same
/// rank, equal shapes except along `dim` (sizes may differ, including 0); each buffer's length
/// is the product of its shape. Returns the buffer and the output shape.
///
/// Errors name the offending part and the shapes.
pub fn concat(parts: &[(&Buffer, &[usize])], dim: usize) -> Result<(Buffer, Vec<usize>), String> {
    let &(first, shape0) = parts.first().ok_or("concat needs at least one part")?;
    let dtype = first.dtype();
    let rank = shape0.len();
    if dim >= rank {
        return Err(format!(
            "concat: dim {dim} is out of range for part 0 of shape {shape0:?} (rank {rank})"
        ));
    }
    let mut dim_size = 0usize;
    for (i, &(b, shape)) in parts.iter().enumerate() {
        if b.dtype() != dtype {
            return Err(format!(
                "concat: part {i} has dtype {}, but part 0 has dtype {dtype}",
                b.dtype()
            ));
        }
        if shape.len() != rank {
            return Err(format!(
                "concat: part {i} has shape {shape:?} of rank {}, but part 0 has shape {shape0:?} \
                 of rank {rank}",
                shape.len()
            ));
        }
        if (0..rank).any(|d| d != dim && shape[d] != shape0[d]) {
            return Err(format!(
                "concat: part {i} has shape {shape:?}, which differs from part 0's shape \
                 {shape0:?} outside dim {dim}"
            ));
        }
        match numel(shape) {
            Some(n) if n == b.len() => {}
            _ => {
                return Err(format!(
                    "concat: part {i} has {} elements, which does not match its shape {shape:?}",
                    b.len()
                ))
            }
        }
        dim_size = dim_size
            .checked_add(shape[dim])
            .ok_or_else(|| format!("concat: the sizes along dim {dim} overflow"))?;
    }
    let mut out_shape = shape0.to_vec();
    out_shape[dim] = dim_size;
    let total = numel(&out_shape)
        .ok_or_else(|| format!("concat: the output shape {out_shape:?} is too large"))?;
    if total == 0 {
        return Ok((
            with_dtype!(dtype, T => T::into_buffer(Vec::new())),
            out_shape,
        ));
    }
    // The output is nonempty, so no dim outside `dim` is zero and these fit.
    let outer = numel_of(&shape0[..dim]);
    let inner = numel_of(&shape0[dim + 1..]);
    let buffer = with_dtype!(dtype, T => {
        // Each part is `outer` runs of `shape[dim] * inner` contiguous elements.
        let runs: Vec<(&[T], usize)> = parts
            .iter()
            .map(|&(b, shape)| (T::slice(b).expect("dtypes checked above"), shape[dim] * inner))
            .collect();
        let mut out = Vec::with_capacity(total);
        for o in 0..outer {
            for &(src, run) in &runs {
                out.extend_from_slice(&src[o * run..(o + 1) * run]);
            }
        }
        T::into_buffer(out)
    });
    Ok((buffer, out_shape))
}

/// Splits a dense buffer of `shape` along `dim` into consecutive pieces of `sizes` (their sum
/// must equal `shape[dim]`); returns each piece's buffer and shape.
///
/// Errors when `dim` is out of range, the buffer does not match `shape`, or the sizes do not
/// add up.
pub fn split(
    buffer: &Buffer,
    shape: &[usize],
    dim: usize,
    sizes: &[usize],
) -> Result<Vec<(Buffer, Vec<usize>)>, String> {
    if dim >= shape.len() {
        return Err(format!(
            "split: dim {dim} is out of range for shape {shape:?} (rank {})",
            shape.len()
        ));
    }
    let total = match numel(shape) {
        Some(n) if n == buffer.len() => n,
        _ => {
            return Err(format!(
                "split: the buffer has {} elements, which does not match shape {shape:?}",
                buffer.len()
            ))
        }
    };
    let sum = sizes.iter().try_fold(0usize, |acc, &s| acc.checked_add(s));
    if sum != Some(shape[dim]) {
        return Err(format!(
            "split: sizes {sizes:?} do not add up to {}, the size of dim {dim} of shape {shape:?}",
            shape[dim]
        ));
    }
    let piece_shape = |size: usize| {
        let mut s = shape.to_vec();
        s[dim] = size;
        s
    };
    let dtype = buffer.dtype();
    if total == 0 {
        return Ok(sizes
            .iter()
            .map(|&size| {
                (
                    with_dtype!(dtype, T => T::into_buffer(Vec::new())),
                    piece_shape(size),
                )
            })
            .collect());
    }
    // The input is nonempty, so these fit.
    let outer = numel_of(&shape[..dim]);
    let inner = numel_of(&shape[dim + 1..]);
    let row = shape[dim] * inner;
    Ok(with_dtype!(dtype, T => {
        let src = T::slice(buffer).expect("the buffer's own dtype");
        let mut offset = 0;
        sizes
            .iter()
            .map(|&size| {
                // The piece is `outer` runs of `size * inner` elements, one per outer row.
                let (start, run) = (offset * inner, size * inner);
                offset += size;
                let mut out = Vec::with_capacity(outer * run);
                if run > 0 {
                    for o in 0..outer {
                        let at = o * row + start;
                        out.extend_from_slice(&src[at..at + run]);
                    }
                }
                (T::into_buffer(out), piece_shape(size))
            })
            .collect()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_traits::{Float, WrappingAdd, WrappingMul};

    /// A deterministic 64-bit LCG (Knuth's MMIX constants).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 11
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        /// A float of varied magnitude and sign; NaN about one time in 64.
        fn float(&mut self) -> f64 {
            if self.below(64) == 0 {
                return f64::NAN;
            }
            let mantissa = 1.0 + (self.next() >> 11) as f64 / (1u64 << 42) as f64;
            let sign = if self.below(2) == 0 { -1.0 } else { 1.0 };
            sign * mantissa * 2f64.powi(self.below(13) as i32 - 6)
        }
    }

    // Plain reference steps, written independently of the kernels.
    fn float_step<F: Float>(op: ReduceOp, a: F, b: F) -> F {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => a + b,
            ReduceOp::Product => a * b,
            _ if a.is_nan() || b.is_nan() => F::nan(),
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }

    fn int_step<I: WrappingAdd + WrappingMul + Ord + Copy>(op: ReduceOp, a: I, b: I) -> I {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(&b),
            ReduceOp::Product => a.wrapping_mul(&b),
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }

    fn bool_step(op: ReduceOp, a: bool, b: bool) -> bool {
        match op {
            ReduceOp::Sum | ReduceOp::Max | ReduceOp::Avg => a || b,
            ReduceOp::Product | ReduceOp::Min => a && b,
        }
    }

    /// Checks [`reduce`] for every op on random inputs of `T` against a straightforward loop,
    /// and [`reduce_owning`] with each input handed over in turn: `step` is the reference
    /// step, `avg` the final division, `same` the comparison.
    fn check_all_ops<T: Element>(
        gen: impl Fn(&mut Lcg) -> T,
        step: impl Fn(ReduceOp, T, T) -> T,
        avg: impl Fn(T, usize) -> T,
        same: impl Fn(T, T) -> bool,
    ) {
        let mut rng = Lcg(T::DTYPE.code() as u64 + 17);
        // The last case spans several parallel chunks.
        for (n_inputs, len) in [(1, 5), (2, 100), (4, 1000), (3, 2 * CHUNK + 123)] {
            let data: Vec<Vec<T>> = (0..n_inputs)
                .map(|_| (0..len).map(|_| gen(&mut rng)).collect())
                .collect();
            let buffers: Vec<Buffer> = data.iter().map(|v| T::into_buffer(v.clone())).collect();
            let refs: Vec<&Buffer> = buffers.iter().collect();
            let ways = std::iter::once(None).chain((0..n_inputs).map(Some));
            for (op, owned) in ReduceOp::ALL
                .into_iter()
                .flat_map(|op| ways.clone().map(move |w| (op, w)))
            {
                let result = match owned {
                    None => reduce(op, &refs),
                    Some(at) => {
                        let inputs = buffers
                            .iter()
                            .enumerate()
                            .map(|(i, b)| match i == at {
                                true => Cow::Owned(b.clone()),
                                false => Cow::Borrowed(b),
                            })
                            .collect();
                        reduce_owning(op, inputs)
                    }
                };
                if op == ReduceOp::Avg && !T::DTYPE.is_float() {
                    let err = result.unwrap_err();
                    assert!(err.contains("float dtypes only"), "{err}");
                    continue;
                }
                let result = result.unwrap();
                let got = T::slice(&result).expect("output has the input dtype");
                assert_eq!(got.len(), len);
                for i in 0..len {
                    let mut want = data[0][i];
                    for input in &data[1..] {
                        want = step(op, want, input[i]);
                    }
                    if op == ReduceOp::Avg {
                        want = avg(want, n_inputs);
                    }
                    assert!(
                        same(got[i], want),
                        "{op} on {} ({n_inputs} inputs, input {owned:?} handed over), element \
                         {i}: got {:?}, want {:?}",
                        T::DTYPE,
                        got[i],
                        want
                    );
                }
            }
        }
    }

    fn no_avg<T>(_: T, _: usize) -> T {
        unreachable!("avg is rejected for this dtype")
    }

    fn same_float<F: Float>(a: F, b: F) -> bool {
        a == b || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn reduce_matches_reference_for_every_op_and_dtype() {
        check_all_ops(
            |r| r.float() as f32,
            float_step::<f32>,
            |x, n| x / n as f32,
            same_float::<f32>,
        );
        check_all_ops(
            |r| r.float(),
            float_step::<f64>,
            |x, n| x / n as f64,
            same_float::<f64>,
        );
        check_all_ops(
            |r| bf16::from_f64(r.float()),
            |op, a: bf16, b: bf16| bf16::from_f32(float_step(op, a.to_f32(), b.to_f32())),
            |x, n| bf16::from_f32(x.to_f32() / n as f32),
            |a, b| same_float(a.to_f32(), b.to_f32()),
        );
        check_all_ops(
            |r| f16::from_f64(r.float()),
            |op, a: f16, b: f16| f16::from_f32(float_step(op, a.to_f32(), b.to_f32())),
            |x, n| f16::from_f32(x.to_f32() / n as f32),
            |a, b| same_float(a.to_f32(), b.to_f32()),
        );
        check_all_ops(|r| r.next() as i64, int_step::<i64>, no_avg, |a, b| a == b);
        check_all_ops(|r| r.next() as i32, int_step::<i32>, no_avg, |a, b| a == b);
        check_all_ops(|r| r.next() as u8, int_step::<u8>, no_avg, |a, b| a == b);
        check_all_ops(|r| r.below(2) == 1, bool_step, no_avg, |a, b| a == b);
    }

    fn reduce_vec<T: Element>(op: ReduceOp, inputs: &[Vec<T>]) -> Vec<T> {
        let buffers: Vec<Buffer> = inputs.iter().map(|v| T::into_buffer(v.clone())).collect();
        let refs: Vec<&Buffer> = buffers.iter().collect();
        T::slice(&reduce(op, &refs).unwrap()).unwrap().to_vec()
    }

    #[test]
    fn integer_sums_and_products_wrap() {
        let sum = reduce_vec(ReduceOp::Sum, &[vec![i32::MAX, -5], vec![1, 2], vec![1, 3]]);
        assert_eq!(sum, vec![i32::MIN + 1, 0]);
        assert_eq!(
            reduce_vec(ReduceOp::Sum, &[vec![200u8, 255], vec![100, 1]]),
            vec![44, 0]
        );
        assert_eq!(
            reduce_vec(ReduceOp::Product, &[vec![16u8, 3], vec![16, 5]]),
            vec![0, 15]
        );
        assert_eq!(
            reduce_vec(ReduceOp::Product, &[vec![i64::MAX], vec![2]]),
            vec![-2]
        );
        assert_eq!(
            reduce_vec(ReduceOp::Min, &[vec![3i32, -7], vec![-2, 9]]),
            vec![-2, -7]
        );
    }

    #[test]
    fn float_min_max_propagate_nan() {
        let (nan, one) = (f32::NAN, 1.0f32);
        for op in [ReduceOp::Min, ReduceOp::Max] {
            let got = reduce_vec(op, &[vec![one, nan, nan, 2.0], vec![nan, one, nan, 3.0]]);
            assert!(got[..3].iter().all(|x| x.is_nan()), "{op}: {got:?}");
            assert_eq!(got[3], if op == ReduceOp::Min { 2.0 } else { 3.0 });
            // A NaN in the middle of the fold survives later operands.
            let got = reduce_vec(op, &[vec![1.0f64], vec![f64::NAN], vec![5.0]]);
            assert!(got[0].is_nan(), "{op}: {got:?}");
            let got = reduce_vec(
                op,
                &[vec![bf16::from_f32(1.0)], vec![bf16::NAN], vec![bf16::ONE]],
            );
            assert!(got[0].is_nan(), "{op}: {got:?}");
        }
    }

    #[test]
    fn bool_ops_are_logical() {
        let a = vec![false, false, true, true];
        let b = vec![false, true, false, true];
        let or = vec![false, true, true, true];
        let and = vec![false, false, false, true];
        assert_eq!(reduce_vec(ReduceOp::Sum, &[a.clone(), b.clone()]), or);
        assert_eq!(reduce_vec(ReduceOp::Max, &[a.clone(), b.clone()]), or);
        assert_eq!(reduce_vec(ReduceOp::Product, &[a.clone(), b.clone()]), and);
        assert_eq!(reduce_vec(ReduceOp::Min, &[a, b]), and);
    }

    #[test]
    fn half_types_round_after_every_step() {
        // bf16 has 8 significant bits: 1 + 2^-8 is a tie that rounds to even (1.0) at every
        // step, while the exact sum 1 + 2^-7 is representable.
        let tiny = bf16::from_f32(2f32.powi(-8));
        let got = reduce_vec(ReduceOp::Sum, &[vec![bf16::ONE], vec![tiny], vec![tiny]]);
        assert_eq!(got[0].to_f32(), 1.0);
        assert_ne!(got[0], bf16::from_f32(1.0 + 2.0 * tiny.to_f32()));
        // The same with f16 (11 significant bits).
        let tiny = f16::from_f32(2f32.powi(-11));
        let got = reduce_vec(ReduceOp::Sum, &[vec![f16::ONE], vec![tiny], vec![tiny]]);
        assert_eq!(got[0].to_f32(), 1.0);
        // The order matters: the small terms first add up exactly.
        let got = reduce_vec(ReduceOp::Sum, &[vec![tiny], vec![tiny], vec![f16::ONE]]);
        assert_eq!(got[0].to_f32(), 1.0 + 2f32.powi(-10));
    }

    #[test]
    fn avg_divides_the_sum() {
        let got = reduce_vec(
            ReduceOp::Avg,
            &[vec![1.0f32, -3.0], vec![2.0, 0.0], vec![4.0, 0.0]],
        );
        assert_eq!(got, vec![7.0 / 3.0, -1.0]);
        let got = reduce_vec(ReduceOp::Avg, &[vec![bf16::from_f32(1.0)], vec![bf16::ONE]]);
        assert_eq!(got[0].to_f32(), 1.0);
        // The sum is rounded to bf16 at every step before the division: 1 + 2^-8 + 2^-8 is
        // 1.0 in bf16, not 1 + 2^-7, and the two averages differ by one ulp.
        let tiny = bf16::from_f32(2f32.powi(-8));
        let got = reduce_vec(ReduceOp::Avg, &[vec![bf16::ONE], vec![tiny], vec![tiny]]);
        assert_eq!(got[0], bf16::from_f32(1.0 / 3.0));
        assert_ne!(got[0], bf16::from_f32((1.0 + 2f32.powi(-7)) / 3.0));
        assert_eq!(reduce_vec(ReduceOp::Avg, &[vec![5.0f64]]), vec![5.0]);
    }

    #[test]
    fn avg_is_rejected_for_integers_and_bool() {
        for dtype in DType::ALL {
            let supported = ReduceOp::Avg.supports(dtype);
            assert_eq!(supported.is_ok(), dtype.is_float(), "{dtype}");
            if let Err(e) = supported {
                assert!(
                    e.contains("avg is defined for float dtypes only; use sum and divide"),
                    "{e}"
                );
                assert!(e.contains(dtype.name()), "{e}");
            }
            for op in [
                ReduceOp::Sum,
                ReduceOp::Product,
                ReduceOp::Min,
                ReduceOp::Max,
            ] {
                assert!(op.supports(dtype).is_ok());
            }
        }
        let b = Buffer::I32(vec![1, 2]);
        let err = reduce(ReduceOp::Avg, &[&b, &b]).unwrap_err();
        assert!(
            err.starts_with("avg is defined for float dtypes only"),
            "{err}"
        );
    }

    #[test]
    fn reduce_does_not_depend_on_thread_count() {
        let mut rng = Lcg(5);
        let buffers: Vec<Buffer> = (0..5)
            .map(|_| {
                Buffer::Bf16(
                    (0..3 * CHUNK + 7)
                        .map(|_| bf16::from_f64(rng.float()))
                        .collect(),
                )
            })
            .collect();
        let refs: Vec<&Buffer> = buffers.iter().collect();
        let single = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| reduce(ReduceOp::Avg, &refs).unwrap());
        let many = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap()
            .install(|| reduce(ReduceOp::Avg, &refs).unwrap());
        assert_eq!(single.to_le_bytes(), many.to_le_bytes());
    }

    #[test]
    fn reduce_errors() {
        assert_eq!(
            reduce(ReduceOp::Sum, &[]).unwrap_err(),
            "reduce needs at least one input"
        );
        let (a, b, c) = (
            Buffer::F32(vec![1.0; 4]),
            Buffer::F64(vec![1.0; 4]),
            Buffer::F32(vec![1.0; 5]),
        );
        assert_eq!(
            reduce(ReduceOp::Max, &[&a, &a, &b]).unwrap_err(),
            "reduce: input 2 has dtype f64, but input 0 has dtype f32"
        );
        assert_eq!(
            reduce(ReduceOp::Min, &[&a, &c]).unwrap_err(),
            "reduce: input 1 has 5 elements, but input 0 has 4"
        );
        // Empty buffers are fine.
        let e = Buffer::U8(vec![]);
        assert!(reduce(ReduceOp::Sum, &[&e, &e]).unwrap().is_empty());
    }

    #[test]
    fn reduce_op_names() {
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::parse(op.name()), Ok(op));
            assert_eq!(ReduceOp::parse(&op.name().to_uppercase()), Ok(op));
            assert_eq!(op.to_string(), op.name());
        }
        assert_eq!(ReduceOp::parse("Product"), Ok(ReduceOp::Product));
        assert_eq!(
            ReduceOp::ALL.map(|op| op as u32),
            [0, 1, 2, 3, 4],
            "torch.distributed.ReduceOp codes"
        );
        assert_eq!(
            ReduceOp::parse("mean").unwrap_err(),
            "unknown reduce op 'mean': expected one of sum, avg, product, min, max"
        );
    }

    #[test]
    fn chunk_sizes_follow_torch_chunk() {
        assert_eq!(chunk_sizes(5, 4), [2, 2, 1, 0]);
        assert_eq!(chunk_sizes(10, 4), [3, 3, 3, 1]);
        assert_eq!(chunk_sizes(0, 3), [0, 0, 0]);
        assert_eq!(chunk_sizes(7, 1), [7]);
        assert_eq!(chunk_sizes(3, 8), [1, 1, 1, 0, 0, 0, 0, 0]);
        assert_eq!(chunk_sizes(6, 4), [2, 2, 2, 0]);
        assert_eq!(chunk_sizes(8, 4), [2, 2, 2, 2]);
        assert!(chunk_sizes(3, 0).is_empty());
        for len in 0..40 {
            for n in 1..10 {
                let s = chunk_sizes(len, n);
                assert_eq!(s.len(), n);
                assert_eq!(s.iter().sum::<usize>(), len);
                assert!(s.windows(2).all(|w| w[0] >= w[1]), "{len} {n}: {s:?}");
            }
        }
    }

    /// The row-major multi-index of flat position `flat` in `shape`.
    fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
        idx
    }

    /// The flat position of multi-index `idx` in `shape`.
    fn ravel(idx: &[usize], shape: &[usize]) -> usize {
        idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
    }

    #[test]
    fn split_and_concat_round_trip_on_random_shapes() {
        let mut rng = Lcg(42);
        for case in 0..300 {
            let rank = 1 + rng.below(4);
            let mut shape: Vec<usize> = (0..rank).map(|_| rng.below(5)).collect();
            // Mostly nonempty shapes, with a dim of 0 now and then.
            if case % 7 != 0 {
                shape.iter_mut().for_each(|d| *d = (*d).max(1));
            }
            let dim = rng.below(rank);
            let n_parts = 1 + rng.below(4);
            let sizes: Vec<usize> = if case % 2 == 0 {
                chunk_sizes(shape[dim], n_parts)
            } else {
                // Random cut points, allowing empty pieces.
                let mut cuts: Vec<usize> = (0..n_parts - 1)
                    .map(|_| rng.below(shape[dim] + 1))
                    .collect();
                cuts.push(0);
                cuts.push(shape[dim]);
                cuts.sort_unstable();
                cuts.windows(2).map(|w| w[1] - w[0]).collect()
            };
            let n: usize = shape.iter().product();
            let full = Buffer::I64((0..n as i64).collect());

            let pieces = split(&full, &shape, dim, &sizes).unwrap();
            assert_eq!(pieces.len(), sizes.len());
            let mut offset = 0;
            for ((piece, piece_shape), &size) in pieces.iter().zip(&sizes) {
                let mut want_shape = shape.clone();
                want_shape[dim] = size;
                assert_eq!(piece_shape, &want_shape);
                let values = i64::slice(piece).unwrap();
                assert_eq!(values.len(), want_shape.iter().product::<usize>());
                for (flat, &v) in values.iter().enumerate() {
                    let mut idx = unravel(flat, piece_shape);
                    idx[dim] += offset;
                    assert_eq!(v as usize, ravel(&idx, &shape), "{shape:?} dim {dim}");
                }
                offset += size;
            }

            let parts: Vec<(&Buffer, &[usize])> =
                pieces.iter().map(|(b, s)| (b, s.as_slice())).collect();
            let (back, back_shape) = concat(&parts, dim).unwrap();
            assert_eq!(back_shape, shape);
            assert_eq!(i64::slice(&back).unwrap(), i64::slice(&full).unwrap());

            // The same round trip in another dtype.
            let dtype = DType::ALL[case % DType::ALL.len()];
            let full = with_dtype!(dtype, T => T::into_buffer(
                (0..n).map(|i| T::from_i64((i % 251) as i64)).collect()
            ));
            let pieces = split(&full, &shape, dim, &sizes).unwrap();
            let parts: Vec<(&Buffer, &[usize])> =
                pieces.iter().map(|(b, s)| (b, s.as_slice())).collect();
            let (back, _) = concat(&parts, dim).unwrap();
            assert_eq!(back.dtype(), dtype);
            assert_eq!(back.to_le_bytes(), full.to_le_bytes());
        }
    }

    #[test]
    fn concat_of_uneven_parts() {
        // [[0, 1], [2, 3]] ++ [[4], [5]] along dim 1, and ++ an empty [2, 0].
        let (a, b, e) = (
            Buffer::I32(vec![0, 1, 2, 3]),
            Buffer::I32(vec![4, 5]),
            Buffer::I32(vec![]),
        );
        let (out, shape) = concat(
            &[(&a, &[2, 2][..]), (&e, &[2, 0][..]), (&b, &[2, 1][..])],
            1,
        )
        .unwrap();
        assert_eq!(shape, [2, 3]);
        assert_eq!(i32::slice(&out).unwrap(), &[0, 1, 4, 2, 3, 5]);
        let (out, shape) = concat(&[(&a, &[2, 2][..]), (&b, &[1, 2][..])], 0).unwrap();
        assert_eq!(shape, [3, 2]);
        assert_eq!(i32::slice(&out).unwrap(), &[0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn concat_errors() {
        let a = Buffer::F32(vec![0.0; 6]);
        let b = Buffer::Bf16(vec![bf16::ZERO; 6]);
        let s23: &[usize] = &[2, 3];
        assert_eq!(
            concat(&[], 0).unwrap_err(),
            "concat needs at least one part"
        );
        assert_eq!(
            concat(&[(&a, s23)], 2).unwrap_err(),
            "concat: dim 2 is out of range for part 0 of shape [2, 3] (rank 2)"
        );
        assert_eq!(
            concat(&[(&a, s23), (&b, s23)], 0).unwrap_err(),
            "concat: part 1 has dtype bf16, but part 0 has dtype f32"
        );
        assert_eq!(
            concat(&[(&a, s23), (&a, &[6])], 0).unwrap_err(),
            "concat: part 1 has shape [6] of rank 1, but part 0 has shape [2, 3] of rank 2"
        );
        assert_eq!(
            concat(&[(&a, s23), (&a, &[3, 2])], 0).unwrap_err(),
            "concat: part 1 has shape [3, 2], which differs from part 0's shape [2, 3] outside \
             dim 0"
        );
        assert_eq!(
            concat(&[(&a, s23), (&a, &[2, 4])], 1).unwrap_err(),
            "concat: part 1 has 6 elements, which does not match its shape [2, 4]"
        );
    }

    #[test]
    fn split_errors() {
        let a = Buffer::U8(vec![0; 6]);
        assert_eq!(
            split(&a, &[2, 3], 2, &[1]).unwrap_err(),
            "split: dim 2 is out of range for shape [2, 3] (rank 2)"
        );
        assert_eq!(
            split(&a, &[2, 4], 0, &[1, 1]).unwrap_err(),
            "split: the buffer has 6 elements, which does not match shape [2, 4]"
        );
        assert_eq!(
            split(&a, &[2, 3], 1, &[1, 1]).unwrap_err(),
            "split: sizes [1, 1] do not add up to 3, the size of dim 1 of shape [2, 3]"
        );
        // Sizes may include zeros, and a zero-size dim splits into empty pieces.
        let pieces = split(&a, &[2, 3], 1, &[0, 3, 0]).unwrap();
        assert_eq!(pieces[1].1, [2, 3]);
        assert!(pieces[0].0.is_empty() && pieces[2].0.is_empty());
        let e = Buffer::U8(vec![]);
        let pieces = split(&e, &[0, 3], 1, &[2, 1]).unwrap();
        assert_eq!(pieces[0].1, [0, 2]);
        assert_eq!(pieces[1].1, [0, 1]);
    }
}

//! Matrix products with numpy's `matmul` semantics: 1-D operands are promoted and the added dim
//! removed, batch dims broadcast. f32 and f64 go through `gemm`; bf16 and f16 are computed in
//! f32 and rounded once, as PyTorch does on CPU; integers accumulate exactly in i64.

use gemm::{gemm, Parallelism};

use crate::cancel::Token;
use rayon::prelude::*;

use super::common::{as_dtype, broadcast_strides, dense, io_bytes, IN_AB};
use super::registry::{Exec, KernelArgs, MetaArgs, OpDef, OpGroup};
use crate::device::cost::{Engine, MatmulDims, OpCost};
use crate::tensor::{
    broadcast_shapes, strided, Buffer, DType, Element, Layout, Tensor, TensorMeta,
};
use crate::with_dtype;

/// The shapes of one matmul call after numpy's 1-D promotion.
struct Plan {
    batch_shape: Vec<usize>,
    m: usize,
    n: usize,
    k: usize,
    out_shape: Vec<usize>,
}

fn plan(a: &[usize], b: &[usize]) -> Result<Plan, String> {
    if a.is_empty() || b.is_empty() {
        return Err("matmul needs operands with at least 1 dim; use mul for scalars".into());
    }
    let (m, ka) = if a.len() == 1 {
        (1, a[0])
    } else {
        (a[a.len() - 2], a[a.len() - 1])
    };
    let (kb, n) = if b.len() == 1 {
        (b[0], 1)
    } else {
        (b[b.len() - 2], b[b.len() - 1])
    };
    if ka != kb {
        return Err(format!(
            "inner dims differ: a is {a:?} (k = {ka}) but b is {b:?} (k = {kb}); a's last dim must equal b's {}",
            if b.len() == 1 { "only dim" } else { "second-to-last dim" }
        ));
    }
    let batch_a = &a[..a.len().saturating_sub(2)];
    let batch_b = &b[..b.len().saturating_sub(2)];
    let batch_shape = broadcast_shapes(batch_a, batch_b)
        .map_err(|e| format!("batch dims do not broadcast: {}", e.0))?;
    let mut out_shape = batch_shape.clone();
    if a.len() > 1 {
        out_shape.push(m);
    }
    if b.len() > 1 {
        out_shape.push(n);
    }
    Ok(Plan {
        batch_shape,
        m,
        n,
        k: ka,
        out_shape,
    })
}

fn infer(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let (x, y) = (&a.inputs[0], &a.inputs[1]);
    let p = plan(&x.shape, &y.shape)?;
    let dtype = DType::promote(x.dtype, y.dtype);
    if dtype == DType::Bool {
        return Err("matmul is not defined for bool; cast to an integer or float dtype".into());
    }
    Ok(vec![TensorMeta::new(p.out_shape, dtype)])
}

/// A matrix operand as (data offsets per batch, row stride, column stride).
struct Operand {
    offsets: Vec<usize>,
    rs: usize,
    cs: usize,
}

/// `dst = a · b` for `rows` rows of the product whose `a` rows start at `oa` and whose `b`
/// starts at `ob`; `dst` is dense with row stride `n`.
///
/// # Safety
///
/// `dst` must hold `rows * n` elements, and every element `oa + i*a.rs + j*a.cs`
/// (`i < rows`, `j < k`) must lie in `da`, and `ob + j*b.rs + c*b.cs` (`j < k`, `c < n`) in
/// `db`. Offsets and strides taken from validated layouts satisfy this.
unsafe fn gemm_rows<T: Element>(
    (rows, n, k): (usize, usize, usize),
    dst: &mut [T],
    (da, oa, a): (&[T], usize, &Operand),
    (db, ob, b): (&[T], usize, &Operand),
    parallelism: Parallelism,
) {
    debug_assert!(dst.len() == rows * n);
    gemm(
        rows,
        n,
        k,
        dst.as_mut_ptr(),
        1,
        n as isize,
        false,
        da.as_ptr().add(oa),
        a.cs as isize,
        a.rs as isize,
        db.as_ptr().add(ob),
        b.cs as isize,
        b.rs as isize,
        T::from_f64(0.0),
        T::from_f64(1.0),
        false,
        false,
        false,
        parallelism,
    )
}

/// Views `t` as a batch of matrices; 1-D vectors become a row (lhs) or a column (rhs).
fn operand(t: &Tensor, batch_shape: &[usize], is_lhs: bool) -> Operand {
    let l = t.layout();
    let (mat, batch) = if l.rank() == 1 {
        let s = l.strides[0];
        (
            if is_lhs { (0, s) } else { (s, 0) },
            Layout {
                shape: vec![],
                strides: vec![],
                offset: l.offset,
            },
        )
    } else {
        let r = l.rank();
        let batch = Layout {
            shape: l.shape[..r - 2].to_vec(),
            strides: l.strides[..r - 2].to_vec(),
            offset: l.offset,
        };
        ((l.strides[r - 2], l.strides[r - 1]), batch)
    };
    let bstrides = broadcast_strides(&batch, batch_shape);
    let offsets = strided::map(batch_shape, [&bstrides], [batch.offset], |[o]| o);
    Operand {
        offsets,
        rs: mat.0,
        cs: mat.1,
    }
}

/// A dense copy when a matrix dim is broadcast (stride 0), which `gemm` does not expect.
fn gemm_ready(t: &Tensor) -> Tensor {
    let r = t.rank();
    let s = t.strides();
    let broadcast = (r >= 1 && s[r - 1] == 0 && t.shape()[r - 1] > 1)
        || (r >= 2 && s[r - 2] == 0 && t.shape()[r - 2] > 1);
    if broadcast {
        dense(t)
    } else {
        t.clone()
    }
}

fn gemm_batched<T: Element + Default + 'static>(x: &Tensor, y: &Tensor, p: &Plan) -> Vec<T> {
    let (a, b) = (
        operand(x, &p.batch_shape, true),
        operand(y, &p.batch_shape, false),
    );
    let (da, db) = (x.data::<T>(), y.data::<T>());
    let size = p.m * p.n;
    let mut out = vec![T::default(); a.offsets.len() * size];
    if size == 0 {
        return out;
    }
    let flops = p.m * p.n * p.k;
    // Many small products: one task per product. Few large ones: let gemm split each product.
    let per_batch = a.offsets.len() > 1 && flops < (1 << 21);
    let parallelism = if per_batch {
        Parallelism::None
    } else {
        Parallelism::Rayon(0)
    };
    let token = Token::current();
    let run = |i: usize, dst: &mut [T]| {
        token.check();
        let (oa, ob) = (a.offsets[i], b.offsets[i]);
        // SAFETY: `dst` holds m*n elements; the operands' offsets and strides come from their
        // validated layouts, so every read stays in `da` and `db`.
        unsafe {
            gemm_rows(
                (p.m, p.n, p.k),
                dst,
                (da, oa, &a),
                (db, ob, &b),
                parallelism,
            )
        }
    };
    if per_batch {
        out.par_chunks_mut(size)
            .enumerate()
            .for_each(|(i, dst)| run(i, dst));
    } else {
        out.chunks_mut(size)
            .enumerate()
            .for_each(|(i, dst)| run(i, dst));
    }
    out
}

fn int_batched<T: Element>(x: &Tensor, y: &Tensor, p: &Plan) -> Vec<T> {
    let (a, b) = (
        operand(x, &p.batch_shape, true),
        operand(y, &p.batch_shape, false),
    );
    let (da, db) = (x.data::<T>(), y.data::<T>());
    let size = p.m * p.n;
    let token = Token::current();
    (0..a.offsets.len() * size)
        .into_par_iter()
        .with_min_len(256)
        .map(|idx| {
            token.check();
            let (bi, r, c) = (idx / size.max(1), (idx % size.max(1)) / p.n, idx % p.n);
            let (oa, ob) = (a.offsets[bi] + r * a.rs, b.offsets[bi] + c * b.cs);
            let acc = (0..p.k).fold(0i64, |s, t| {
                s.wrapping_add(
                    da[oa + t * a.cs]
                        .to_i64()
                        .wrapping_mul(db[ob + t * b.rs].to_i64()),
                )
            });
            T::from_i64(acc)
        })
        .collect()
}

fn kernel(args: &KernelArgs) -> Result<Vec<Buffer>, String> {
    let out = args.outputs[0].dtype;
    let p = plan(args.inputs[0].shape(), args.inputs[1].shape())?;
    let compute = match out {
        DType::Bf16 | DType::F16 => DType::F32,
        d => d,
    };
    let x = gemm_ready(&as_dtype(args.inputs[0], compute));
    let y = gemm_ready(&as_dtype(args.inputs[1], compute));
    let buffer = match out {
        DType::F32 => Buffer::F32(gemm_batched::<f32>(&x, &y, &p)),
        DType::F64 => Buffer::F64(gemm_batched::<f64>(&x, &y, &p)),
        DType::Bf16 => Buffer::Bf16(round_from_f32(gemm_batched::<f32>(&x, &y, &p))),
        DType::F16 => Buffer::F16(round_from_f32(gemm_batched::<f32>(&x, &y, &p))),
        d => with_dtype!(d, T => T::into_buffer(int_batched::<T>(&x, &y, &p))),
    };
    Ok(vec![buffer])
}

/// Rounds f32 results once to a half type.
fn round_from_f32<T: Element>(v: Vec<f32>) -> Vec<T> {
    v.par_iter()
        .with_min_len(1 << 14)
        .map(|&x| T::from_f64(x as f64))
        .collect()
}

/// A float matmul prepared to compute its output a band of rows at a time, so that a fused
/// kernel can apply its epilogue to each band while the band is in cache.
///
/// Each band is one `gemm` call per product it spans, in the compute type the eager kernel
/// uses, rounded once to the output dtype. `gemm` picks its blocking from the band's shape, so
/// sums may associate differently from the eager kernel's: results agree within rounding, not
/// bitwise.
pub(crate) struct RowBands {
    x: Tensor,
    y: Tensor,
    a: Operand,
    b: Operand,
    m: usize,
    n: usize,
    k: usize,
    out: DType,
}

impl RowBands {
    /// Prepares `a @ b` for the inferred output dtype `out`, which must be a float.
    pub(crate) fn new(a: &Tensor, b: &Tensor, out: DType) -> Result<RowBands, String> {
        let p = plan(a.shape(), b.shape())?;
        let compute = match out {
            DType::Bf16 | DType::F16 | DType::F32 => DType::F32,
            DType::F64 => DType::F64,
            other => return Err(format!("row bands need a float output, got {other}")),
        };
        let x = gemm_ready(&as_dtype(a, compute));
        let y = gemm_ready(&as_dtype(b, compute));
        Ok(RowBands {
            a: operand(&x, &p.batch_shape, true),
            b: operand(&y, &p.batch_shape, false),
            x,
            y,
            m: p.m,
            n: p.n,
            k: p.k,
            out,
        })
    }

    /// Output rows: every row of every product in the batch, in row-major output order.
    pub(crate) fn rows(&self) -> usize {
        self.a.offsets.len() * self.m
    }

    /// Elements per output row.
    pub(crate) fn row_len(&self) -> usize {
        self.n
    }

    /// Output rows `r0..r1`, in the output dtype. `parallel` lets `gemm` split the band
    /// across threads, for when the band is the whole output.
    pub(crate) fn compute(&self, r0: usize, r1: usize, parallel: bool) -> Buffer {
        let parallelism = if parallel {
            Parallelism::Rayon(0)
        } else {
            Parallelism::None
        };
        match self.out {
            DType::F64 => Buffer::F64(self.band::<f64>(r0, r1, parallelism)),
            // bf16 and f16 round once from f32, as the eager kernel does.
            DType::Bf16 => Buffer::Bf16(round_from_f32(self.band(r0, r1, parallelism))),
            DType::F16 => Buffer::F16(round_from_f32(self.band(r0, r1, parallelism))),
            _ => Buffer::F32(self.band::<f32>(r0, r1, parallelism)),
        }
    }

    fn band<T: Element + Default>(&self, r0: usize, r1: usize, parallelism: Parallelism) -> Vec<T> {
        let (da, db) = (self.x.data::<T>(), self.y.data::<T>());
        let (m, n) = (self.m, self.n);
        let mut out = vec![T::default(); (r1 - r0) * n];
        let mut r = r0;
        while r < r1 {
            let (product, row) = (r / m, r % m);
            let rows = (m - row).min(r1 - r);
            let dst = &mut out[(r - r0) * n..(r - r0 + rows) * n];
            let (oa, ob) = (
                self.a.offsets[product] + row * self.a.rs,
                self.b.offsets[product],
            );
            // SAFETY: `dst` holds rows*n elements; `oa` starts row `row` of a product whose
            // offsets and strides come from validated layouts, and row + rows <= m, so every
            // read stays in `da` and `db`.
            unsafe {
                gemm_rows(
                    (rows, n, self.k),
                    dst,
                    (da, oa, &self.a),
                    (db, ob, &self.b),
                    parallelism,
                )
            }
            r += rows;
        }
        out
    }
}

fn cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    let (read, written) = io_bytes(a.inputs, o);
    let Ok(p) = plan(&a.inputs[0].shape, &a.inputs[1].shape) else {
        return OpCost::free();
    };
    let batch: usize = p.batch_shape.iter().product();
    OpCost {
        flops: 2.0 * (batch * p.m * p.n * p.k) as f64,
        bytes_read: read,
        bytes_written: written,
        engine: Engine::Tensor,
        dtype: o[0].dtype,
        matmul: Some(MatmulDims {
            batch: batch as u64,
            m: p.m as u64,
            n: p.n as u64,
            k: p.k as u64,
        }),
    }
}

/// The matmul ops.
pub fn defs() -> Vec<OpDef> {
    vec![OpDef {
        name: "matmul",
        doc: "matrix product with numpy semantics (1-D promotion, broadcast batch dims)",
        group: OpGroup::Matmul,
        inputs: IN_AB,
        attrs: &[],
        outputs: &["out"],
        infer,
        exec: Exec::Compute(kernel),
        cost,
        pointwise: None,
        rowwise: None,
    }]
}

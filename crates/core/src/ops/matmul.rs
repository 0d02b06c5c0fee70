//! Matrix products with numpy's `matmul` semantics: 1-D operands are promoted and the added dim
//! removed, batch dims broadcast. f32, bf16 and f16 run on our own AVX-512 GEMM (`super::gemm`)
//! where the CPU has it, else on the `gemm` crate, as f64 does; bf16 and f16 are computed in
//! f32 and rounded once, as PyTorch does on CPU; integers accumulate exactly in i64.

use std::mem::MaybeUninit;

use gemm::{gemm, Parallelism};

use crate::cancel::Token;
use rayon::prelude::*;

use super::gemm as gemm_avx512;
use super::gemm::Job;

use super::common::{as_dtype, broadcast_strides, dense, io_bytes, IN_AB};
use smallvec::smallvec;

use super::registry::{Exec, KernelArgs, KernelResult, MetaArgs, OpDef, OpGroup};
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
/// starts at `ob`; `dst` is dense with row stride `n`. `gemm` only writes `dst` (it is told
/// not to read it, and writes zeros when `k` is 0), so `dst` may start uninitialised.
///
/// # Safety
///
/// `dst` must hold `rows * n` elements, and every element `oa + i*a.rs + j*a.cs`
/// (`i < rows`, `j < k`) must lie in `da`, and `ob + j*b.rs + c*b.cs` (`j < k`, `c < n`) in
/// `db`. Offsets and strides taken from validated layouts satisfy this.
unsafe fn gemm_rows<T: Element>(
    (rows, n, k): (usize, usize, usize),
    dst: &mut [MaybeUninit<T>],
    (da, oa, a): (&[T], usize, &Operand),
    (db, ob, b): (&[T], usize, &Operand),
    parallelism: Parallelism,
) {
    debug_assert!(dst.len() == rows * n);
    gemm(
        rows,
        n,
        k,
        dst.as_mut_ptr().cast::<T>(),
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

/// The operands of a float matmul, converted (only where needed) for the kernel that runs it.
///
/// With AVX-512, our own GEMM reads f32, bf16 and f16 operands as they are and widens them
/// while packing; operands of two different dtypes are converted to f32 first. Otherwise
/// `gemm` runs in the compute type (f32 for bf16 and f16) on dense-enough copies. Either way
/// sums are f32 (f64 for f64) and bf16 and f16 outputs are rounded once, as PyTorch does on CPU.
struct FloatOperands {
    x: Tensor,
    y: Tensor,
    a: Operand,
    b: Operand,
    n: usize,
    k: usize,
    out: DType,
    avx512: bool,
}

impl FloatOperands {
    fn new(x: &Tensor, y: &Tensor, p: &Plan, out: DType) -> Result<FloatOperands, String> {
        let avx512 =
            matches!(out, DType::F32 | DType::Bf16 | DType::F16) && gemm_avx512::available();
        let (x, y) = if avx512 {
            let read = if x.dtype() == y.dtype() {
                x.dtype()
            } else {
                DType::F32
            };
            let read = match read {
                DType::F32 | DType::Bf16 | DType::F16 => read,
                _ => DType::F32,
            };
            (
                as_dtype(x, read).into_owned(),
                as_dtype(y, read).into_owned(),
            )
        } else {
            let compute = match out {
                DType::Bf16 | DType::F16 | DType::F32 => DType::F32,
                DType::F64 => DType::F64,
                other => return Err(format!("float matmul needs a float output, got {other}")),
            };
            (
                gemm_ready(&as_dtype(x, compute)),
                gemm_ready(&as_dtype(y, compute)),
            )
        };
        Ok(FloatOperands {
            a: operand(&x, &p.batch_shape, true),
            b: operand(&y, &p.batch_shape, false),
            x,
            y,
            n: p.n,
            k: p.k,
            out,
            avx512,
        })
    }

    /// The jobs' rows of the product, one job after the other, in the output dtype. `parallel`
    /// spreads the work over rayon's threads.
    fn compute(&self, jobs: &[Job], parallel: bool) -> Result<Buffer, String> {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            return self.avx512(jobs, parallel);
        }
        Ok(match self.out {
            DType::F64 => Buffer::F64(self.with_gemm::<f64>(jobs, parallel)),
            DType::Bf16 => Buffer::Bf16(round_from_f32(self.with_gemm(jobs, parallel))),
            DType::F16 => Buffer::F16(round_from_f32(self.with_gemm(jobs, parallel))),
            _ => Buffer::F32(self.with_gemm::<f32>(jobs, parallel)),
        })
    }

    #[cfg(target_arch = "x86_64")]
    fn avx512(&self, jobs: &[Job], parallel: bool) -> Result<Buffer, String> {
        use half::{bf16, f16};
        Ok(match (self.x.dtype(), self.out) {
            (DType::F32, DType::F32) => Buffer::F32(self.with_avx512::<f32, f32>(jobs, parallel)?),
            (DType::F32, DType::Bf16) => {
                Buffer::Bf16(self.with_avx512::<f32, bf16>(jobs, parallel)?)
            }
            (DType::F32, DType::F16) => Buffer::F16(self.with_avx512::<f32, f16>(jobs, parallel)?),
            (DType::Bf16, DType::Bf16) => {
                Buffer::Bf16(self.with_avx512::<bf16, bf16>(jobs, parallel)?)
            }
            (DType::F16, DType::F16) => Buffer::F16(self.with_avx512::<f16, f16>(jobs, parallel)?),
            (read, out) => return Err(format!("no AVX-512 matmul reads {read} into {out}")),
        })
    }

    #[cfg(target_arch = "x86_64")]
    fn with_avx512<S, D>(&self, jobs: &[Job], parallel: bool) -> Result<Vec<D>, String>
    where
        S: Element + gemm_avx512::Elem,
        D: Element + gemm_avx512::Elem,
    {
        fn matrix<'t, S: Element>(t: &'t Tensor, o: &Operand) -> gemm_avx512::MatRef<'t, S> {
            gemm_avx512::MatRef {
                data: t.data::<S>(),
                offset: 0,
                row: o.rs,
                col: o.cs,
            }
        }
        gemm_avx512::gemm_vec(
            matrix::<S>(&self.x, &self.a),
            matrix::<S>(&self.y, &self.b),
            (self.n, self.k),
            jobs,
            parallel,
        )
    }

    /// The jobs through `gemm`: many small products in parallel, one task each; otherwise one
    /// after the other, each split by `gemm` itself.
    fn with_gemm<T: Element>(&self, jobs: &[Job], parallel: bool) -> Vec<T> {
        let (da, db) = (self.x.data::<T>(), self.y.data::<T>());
        let n = self.n;
        let rows: usize = jobs.iter().map(|j| j.rows).sum();
        // Not zeroed first: every job writes all of its band (see `gemm_rows`).
        let mut out = Vec::<T>::with_capacity(rows * n);
        if rows * n == 0 {
            return out;
        }
        let largest = jobs.iter().map(|j| j.rows * n * self.k).max().unwrap_or(0);
        let per_job = parallel && jobs.len() > 1 && largest < (1 << 21);
        let parallelism = if parallel && !per_job {
            Parallelism::Rayon(0)
        } else {
            Parallelism::None
        };
        let token = Token::current();
        let run = |job: &Job, dst: &mut [MaybeUninit<T>]| {
            token.check();
            // SAFETY: `dst` holds the job's rows * n elements; the job's offsets start rows of
            // products whose offsets and strides come from validated layouts, so every read
            // stays in `da` and `db`.
            unsafe {
                gemm_rows(
                    (job.rows, n, self.k),
                    dst,
                    (da, job.a_offset, &self.a),
                    (db, job.b_offset, &self.b),
                    parallelism,
                )
            }
        };
        let mut bands = Vec::with_capacity(jobs.len());
        let mut rest = &mut out.spare_capacity_mut()[..rows * n];
        for job in jobs {
            let (band, tail) = rest.split_at_mut(job.rows * n);
            bands.push((job, band));
            rest = tail;
        }
        if per_job {
            bands.into_par_iter().for_each(|(job, dst)| run(job, dst));
        } else {
            bands.into_iter().for_each(|(job, dst)| run(job, dst));
        }
        // SAFETY: the bands cover all `rows * n` elements and every job wrote its own; a
        // cancelled job unwinds past this line and the vector drops empty.
        unsafe { out.set_len(rows * n) };
        out
    }

    /// One job per product of the batch.
    fn products(&self, m: usize) -> Vec<Job> {
        (self.a.offsets.iter().zip(&self.b.offsets))
            .map(|(&a_offset, &b_offset)| Job {
                a_offset,
                b_offset,
                rows: m,
            })
            .collect()
    }
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

fn kernel(args: &KernelArgs) -> KernelResult {
    let out = args.outputs[0].dtype;
    let p = plan(args.inputs[0].shape(), args.inputs[1].shape())?;
    if out.is_float() {
        let operands = FloatOperands::new(args.inputs[0], args.inputs[1], &p, out)?;
        return Ok(smallvec![operands.compute(&operands.products(p.m), true)?]);
    }
    let x = as_dtype(args.inputs[0], out);
    let y = as_dtype(args.inputs[1], out);
    Ok(smallvec![
        with_dtype!(out, T => T::into_buffer(int_batched::<T>(&x, &y, &p))),
    ])
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
/// Each band runs the kernel the eager op uses, in the same compute type, rounded once to the
/// output dtype. Blocking depends on the band's shape, so sums may associate differently from
/// the eager kernel's: results agree within rounding, not bitwise.
pub struct RowBands {
    operands: FloatOperands,
    m: usize,
}

impl RowBands {
    /// Prepares `a @ b` for the inferred output dtype `out`, which must be a float.
    pub fn new(a: &Tensor, b: &Tensor, out: DType) -> Result<RowBands, String> {
        if !out.is_float() {
            return Err(format!("row bands need a float output, got {out}"));
        }
        let p = plan(a.shape(), b.shape())?;
        Ok(RowBands {
            operands: FloatOperands::new(a, b, &p, out)?,
            m: p.m,
        })
    }

    /// Output rows: every row of every product in the batch, in row-major output order.
    pub fn rows(&self) -> usize {
        self.operands.a.offsets.len() * self.m
    }

    /// Elements per output row.
    pub fn row_len(&self) -> usize {
        self.operands.n
    }

    /// The contracted dimension: rows of the right operand.
    pub fn depth(&self) -> usize {
        self.operands.k
    }

    /// Output rows `r0..r1`, in the output dtype. `parallel` lets the kernel split the band
    /// across threads, for when the band is the whole output.
    pub fn compute(&self, r0: usize, r1: usize, parallel: bool) -> Result<Buffer, String> {
        let (a, b, m) = (&self.operands.a, &self.operands.b, self.m);
        let mut jobs = Vec::new();
        let mut r = r0;
        while r < r1 {
            let (product, row) = (r / m, r % m);
            let rows = (m - row).min(r1 - r);
            jobs.push(Job {
                a_offset: a.offsets[product] + row * a.rs,
                b_offset: b.offsets[product],
                rows,
            });
            r += rows;
        }
        self.operands.compute(&jobs, parallel)
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

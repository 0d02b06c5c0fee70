//! Our own f32 GEMM for x86-64 CPUs with AVX-512 (the `gemm` crate uses AVX2 at most on stable
//! Rust). `matmul` selects it at run time with [`available`] and keeps `gemm` as the fallback.
//!
//! The structure is the classic one (Goto and van de Geijn; BLIS): a register-blocked
//! micro-kernel (`kernel`), operands packed block by block into the order it reads them
//! (`pack`), and loops around it sized so that a packed sliver of `a` stays in L1 while a packed
//! block of `b` stays in L2. Elements are read as f32, bf16 or f16 and widened while packing;
//! sums are f32 and are rounded once, when stored, to the output type (`elem`).
//!
//! Products whose `b` is small (at most 32 Ki elements) skip packing: the kernel reads `a` where
//! it lies and `b` as rows (a dense copy first when its rows are strided), with the same
//! multiply-adds in the same order, so either path gives the same bits. Consecutive jobs that
//! are bands of one product against one `b` are merged first, so `b` is packed once.
//!
//! Work is split over rayon's threads by whole products when a batch has enough of them, else
//! by bands of rows or columns of each product. Each task packs its own blocks into buffers kept
//! per thread, so no task waits for another. Tasks check the caller's cancel token before every
//! sliver of rows.

#[cfg(target_arch = "x86_64")]
mod driver;
#[cfg(target_arch = "x86_64")]
mod elem;
#[cfg(target_arch = "x86_64")]
mod kernel;
#[cfg(target_arch = "x86_64")]
mod pack;
#[cfg(all(test, target_arch = "x86_64"))]
mod tests;

#[cfg(target_arch = "x86_64")]
pub(crate) use driver::gemm_vec;
#[cfg(target_arch = "x86_64")]
pub(crate) use elem::Elem;

/// Whether this CPU can run the AVX-512 GEMM.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// One product of a batch, or a band of a product's rows: `rows` rows of `a` starting at
/// `a_offset`, times the `b` starting at `b_offset`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Job {
    /// Where the job's first row of `a` starts.
    pub a_offset: usize,
    /// Where the job's `b` starts.
    pub b_offset: usize,
    /// Rows of the product this job computes.
    pub rows: usize,
}

/// A strided matrix: element `(i, j)` is `data[offset + i * row + j * col]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatRef<'a, S> {
    /// The storage the matrix lives in.
    pub data: &'a [S],
    /// Where element `(0, 0)` is.
    pub offset: usize,
    /// The distance between rows.
    pub row: usize,
    /// The distance between columns.
    pub col: usize,
}

impl<'a, S> MatRef<'a, S> {
    /// The same matrix starting at `offset` instead.
    pub(crate) fn at(&self, offset: usize) -> MatRef<'a, S> {
        MatRef { offset, ..*self }
    }

    /// Whether every element of a `rows x cols` matrix lies in `data`.
    pub(crate) fn covers(&self, rows: usize, cols: usize) -> bool {
        if rows == 0 || cols == 0 {
            return true;
        }
        let last = (rows - 1)
            .checked_mul(self.row)
            .and_then(|r| {
                (cols - 1)
                    .checked_mul(self.col)
                    .and_then(|c| r.checked_add(c))
            })
            .and_then(|rc| rc.checked_add(self.offset));
        last.is_some_and(|last| last < self.data.len())
    }
}

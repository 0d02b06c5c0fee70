//! Packing: copies of operand blocks in the order the micro-kernel reads them, widened to f32.
//!
//! `a` is packed in slivers of [`MR`] rows: for each k, the sliver's MR values are adjacent, so
//! the kernel broadcasts them one after another. `b` is packed in slivers of [`NR`] columns: for
//! each k, the sliver's NR values are adjacent, two cache-line-aligned vectors. Rows or columns
//! past the matrix edge are zero, so the kernel always runs full tiles and only its stores are
//! masked. Packing reads the source in whichever order is contiguous for its strides, so
//! transposed and strided views need no copy beforehand.

use std::ops::Range;

use super::elem::Elem;
use super::kernel::{MR, NR};
use super::MatRef;

/// One cache line of f32s; packed buffers are made of them so every packed vector is aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// A growable, cache-line-aligned f32 buffer, kept per thread and reused between calls.
#[derive(Default)]
pub(crate) struct PackBuf(Vec<Line>);

impl PackBuf {
    /// The first `len` values of the buffer, grown if needed (contents unspecified).
    pub(crate) fn get(&mut self, len: usize) -> &mut [f32] {
        let lines = len.div_ceil(16);
        if self.0.len() < lines {
            self.0.resize(lines, Line([0.0; 16]));
        }
        // SAFETY: `Line` is `repr(C)` over `[f32; 16]` with no padding (64 bytes), so the first
        // `lines * 16 >= len` f32s are contiguous, initialized and borrowed mutably with `self`.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<f32>(), len) }
    }
}

/// Packs rows `rows` and columns `ks` of `a` into `dst` as slivers of [`MR`] rows, each
/// `ks.len() * MR` values long.
///
/// # Safety
///
/// Every element `(i, j)`, `i` in `rows`, `j` in `ks`, must lie in `a.data`, and `dst` must
/// hold `rows.len().div_ceil(MR) * MR * ks.len()` values.
pub(crate) unsafe fn pack_a<S: Elem>(
    dst: &mut [f32],
    a: MatRef<S>,
    rows: Range<usize>,
    ks: Range<usize>,
) {
    let kc = ks.len();
    let src = a.data.as_ptr();
    for (s, sliver) in dst
        .chunks_exact_mut(MR * kc)
        .take(rows.len().div_ceil(MR))
        .enumerate()
    {
        let r0 = rows.start + s * MR;
        let valid = MR.min(rows.end - r0);
        if valid < MR {
            sliver.fill(0.0);
        }
        let out = sliver.as_mut_ptr();
        let corner = a.offset + r0 * a.row + ks.start * a.col;
        if a.col == 1 {
            // Rows are contiguous: read each along k.
            for r in 0..valid {
                let row = corner + r * a.row;
                for p in 0..kc {
                    // SAFETY: (r0 + r, ks.start + p) is in the block the caller vouched for,
                    // and p * MR + r < MR * kc, the sliver's length.
                    unsafe { *out.add(p * MR + r) = (*src.add(row + p)).to_f32() };
                }
            }
        } else {
            // Columns are contiguous (a transposed view) or neither is: read across rows.
            for p in 0..kc {
                let column = corner + p * a.col;
                for r in 0..valid {
                    // SAFETY: as above.
                    unsafe { *out.add(p * MR + r) = (*src.add(column + r * a.row)).to_f32() };
                }
            }
        }
    }
}

/// Packs rows `ks` and columns `cols` of `b` into `dst` as slivers of [`NR`] columns, each
/// `ks.len() * NR` values long.
///
/// # Safety
///
/// The CPU must support AVX-512F. Every element `(i, j)`, `i` in `ks`, `j` in `cols`, must lie
/// in `b.data`, and `dst` must be 64-byte aligned (the start of a [`PackBuf`]) and hold
/// `cols.len().div_ceil(NR) * NR * ks.len()` values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack_b<S: Elem>(
    dst: &mut [f32],
    b: MatRef<S>,
    ks: Range<usize>,
    cols: Range<usize>,
) {
    use std::arch::x86_64::_mm512_store_ps;

    let kc = ks.len();
    let src = b.data.as_ptr();
    for (t, sliver) in dst
        .chunks_exact_mut(NR * kc)
        .take(cols.len().div_ceil(NR))
        .enumerate()
    {
        let c0 = cols.start + t * NR;
        let valid = NR.min(cols.end - c0);
        let out = sliver.as_mut_ptr();
        let corner = b.offset + ks.start * b.row + c0 * b.col;
        if b.col == 1 && valid == NR {
            // Rows are contiguous: two widened vectors per k.
            for p in 0..kc {
                let row = corner + p * b.row;
                // SAFETY: columns c0..c0 + NR of row ks.start + p are in the caller's block.
                // `dst` is 64-byte aligned and every sliver, `p * NR` and `p * NR + 16` is a
                // multiple of 16 values from it, so both stores are aligned.
                unsafe {
                    _mm512_store_ps(out.add(p * NR), S::load16(src.add(row)));
                    _mm512_store_ps(out.add(p * NR + 16), S::load16(src.add(row + 16)));
                }
            }
            continue;
        }
        if valid < NR {
            sliver.fill(0.0);
        }
        if b.row == 1 && b.col != 1 {
            // Columns are contiguous (a transposed view): read each along k.
            for c in 0..valid {
                let column = corner + c * b.col;
                for p in 0..kc {
                    // SAFETY: (ks.start + p, c0 + c) is in the caller's block, and
                    // p * NR + c < NR * kc, the sliver's length.
                    unsafe { *out.add(p * NR + c) = (*src.add(column + p)).to_f32() };
                }
            }
        } else {
            for p in 0..kc {
                let row = corner + p * b.row;
                for c in 0..valid {
                    // SAFETY: as above.
                    unsafe { *out.add(p * NR + c) = (*src.add(row + c * b.col)).to_f32() };
                }
            }
        }
    }
}

//! Packing: copies of operand blocks in the order the micro-kernel reads them, widened to f32.
//!
//! `a` is packed in slivers of [`MR`] rows: for each k, the sliver's MR values are adjacent, so
//! the kernel broadcasts them one after another. `b` is packed in slivers of [`NR`] columns: for
//! each k, the sliver's NR values are adjacent, two cache-line-aligned vectors. Rows or columns
//! past the matrix edge are zero, so the kernel always runs full tiles and only its stores are
//! masked. Packing reads the source in whichever order is contiguous for its strides, so
//! transposed and strided views need no copy beforehand.

use std::arch::x86_64::{
    __m512i, _mm512_loadu_si512, _mm512_mask_i32gather_ps, _mm512_mask_storeu_ps,
    _mm512_setzero_ps, _mm512_setzero_si512, _mm512_storeu_ps,
};
use std::mem::MaybeUninit;
use std::ops::Range;

use super::elem::Elem;
use super::kernel::{MR, NR};
use super::MatRef;

/// Steps of k per packed block: a packed sliver of `a` (`KC * MR` f32s, 18 KiB) fits in L1
/// beside the stream of `b`.
pub(super) const KC: usize = 384;

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
/// The CPU must support AVX-512F. Every element `(i, j)`, `i` in `rows`, `j` in `ks`, must lie
/// in `a.data`, and `dst` must hold `rows.len().div_ceil(MR) * MR * ks.len()` values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack_a<S: Elem>(
    dst: &mut [f32],
    a: MatRef<S>,
    rows: Range<usize>,
    ks: Range<usize>,
) {
    let kc = ks.len();
    // Contiguous rows of a narrower type are widened 16 at a time into `widened` (the sliver's
    // rows, kc apart) and gathered from there as f32 rows are from `a`: packing them element
    // by element took 1.6 times as long.
    let widen = !S::IS_F32 && a.col == 1 && kc <= KC;
    let gather = if S::IS_F32 {
        GatherA::new(a.row, a.col)
    } else if widen {
        GatherA::new(kc, 1)
    } else {
        None
    };
    // Uninitialized: only rows just widened are read.
    let mut widened = [const { MaybeUninit::<Line>::uninit() }; (MR * KC).div_ceil(16)];
    let widened = widened.as_mut_ptr().cast::<f32>();
    for (s, sliver) in dst
        .chunks_exact_mut(MR * kc)
        .take(rows.len().div_ceil(MR))
        .enumerate()
    {
        let r0 = rows.start + s * MR;
        let valid = MR.min(rows.end - r0);
        let corner = a.offset + r0 * a.row + ks.start * a.col;
        match &gather {
            // SAFETY: S is f32 (`IS_F32`), so the data is f32s; the sliver's valid rows and
            // its kc columns from `corner` are inside the caller's block.
            Some(gather) if S::IS_F32 => unsafe {
                gather.sliver(sliver, a.data.as_ptr().cast::<f32>().add(corner), valid, kc)
            },
            // Narrower contiguous rows (`widen`).
            // SAFETY: the sliver's valid rows, each kc contiguous elements from `corner`, are
            // inside the caller's block; `widened` holds MR rows of kc <= KC values, and the
            // gather reads only the valid rows of it, which were just written.
            Some(gather) => unsafe {
                for r in 0..valid {
                    widen_row(
                        widened.add(r * kc),
                        a.data.as_ptr().add(corner + r * a.row),
                        kc,
                    );
                }
                gather.sliver(sliver, widened, valid, kc)
            },
            // SAFETY: as above, for any element type.
            None => unsafe { pack_a_scalar(sliver, a, corner, valid, kc) },
        }
    }
}

/// Widens `len` contiguous elements from `src` to f32s at `dst`.
///
/// # Safety
///
/// The CPU must support AVX-512F; `src..src + len` must be readable and `dst..dst + len`
/// writable.
#[target_feature(enable = "avx512f")]
unsafe fn widen_row<S: Elem>(dst: *mut f32, src: *const S, len: usize) {
    let full = len / 16 * 16;
    for p in (0..full).step_by(16) {
        // SAFETY: p + 16 <= len, so both ends are inside the caller's ranges.
        unsafe { _mm512_storeu_ps(dst.add(p), S::load16(src.add(p))) };
    }
    for p in full..len {
        // SAFETY: p < len.
        unsafe { *dst.add(p) = (*src.add(p)).to_f32() };
    }
}

/// Packs one sliver of `a` element by element, reading along whichever stride is contiguous.
///
/// # Safety
///
/// `sliver` must hold `MR * kc` values and elements `corner + r * a.row + p * a.col` (`r <
/// valid`, `p < kc`) must lie in `a.data`.
unsafe fn pack_a_scalar<S: Elem>(
    sliver: &mut [f32],
    a: MatRef<S>,
    corner: usize,
    valid: usize,
    kc: usize,
) {
    if valid < MR {
        sliver.fill(0.0);
    }
    let (src, out) = (a.data.as_ptr(), sliver.as_mut_ptr());
    if a.col == 1 {
        // Rows are contiguous: read each along k.
        for r in 0..valid {
            let row = corner + r * a.row;
            for p in 0..kc {
                // SAFETY: (r, p) is in the sliver's block the caller vouched for, and
                // p * MR + r < MR * kc, the sliver's length.
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

/// Packs f32 slivers of `a` (or of narrower rows widened beforehand) with vector gathers: 16
/// steps of k of a sliver are `MR * 16` packed values, which are [`MR`] vectors, each gathered
/// with a fixed set of offsets from the group's first element. Much faster than element by
/// element for the common row-major `a`, whose sliver rows are far apart.
struct GatherA {
    /// For packed vector `j` of a group, lane `l` is the source offset of packed value
    /// `t = 16 j + l`: row `t % MR`, step `t / MR`.
    offsets: [__m512i; MR],
    /// The row `t % MR` of each packed value of a group, to mask rows past the edge.
    row_of: [[u8; 16]; MR],
    /// Source distance between consecutive groups (16 steps of k).
    group_stride: usize,
}

impl GatherA {
    /// The gathers for strides `row` and `col`, if every offset of a group fits the i32 lanes
    /// of a gather.
    #[target_feature(enable = "avx512f")]
    fn new(row: usize, col: usize) -> Option<GatherA> {
        let span = (MR - 1)
            .checked_mul(row)?
            .checked_add(15usize.checked_mul(col)?)?;
        if span > i32::MAX as usize {
            return None;
        }
        let mut offsets = [_mm512_setzero_si512(); MR];
        let mut row_of = [[0u8; 16]; MR];
        for (j, (vector, rows)) in offsets.iter_mut().zip(&mut row_of).enumerate() {
            let mut lanes = [0i32; 16];
            for (l, lane) in lanes.iter_mut().enumerate() {
                let t = 16 * j + l;
                *lane = ((t % MR) * row + (t / MR) * col) as i32;
                rows[l] = (t % MR) as u8;
            }
            // SAFETY: `lanes` is 16 i32s, one unaligned 512-bit load.
            *vector = unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) };
        }
        Some(GatherA {
            offsets,
            row_of,
            group_stride: 16 * col,
        })
    }

    /// Packs one sliver whose element (0, 0) is at `corner`.
    ///
    /// # Safety
    ///
    /// `sliver` must hold `MR * kc` values and `corner + r * row + p * col` (`r < valid`, `p <
    /// kc`) must be readable.
    #[target_feature(enable = "avx512f")]
    unsafe fn sliver(&self, sliver: &mut [f32], corner: *const f32, valid: usize, kc: usize) {
        let out = sliver.as_mut_ptr();
        // Lanes of rows past the edge are not read and pack as zero.
        let mut masks = [0u16; MR];
        for (mask, rows) in masks.iter_mut().zip(&self.row_of) {
            for (l, &r) in rows.iter().enumerate() {
                if (r as usize) < valid {
                    *mask |= 1 << l;
                }
            }
        }
        let groups = kc / 16;
        for q in 0..groups {
            // SAFETY: step 16 q < kc is in the sliver's block, and each unmasked lane adds an
            // offset to a row < valid and a step < 16 q + 16 <= kc of it; the 16 MR values of
            // group q end at 16 MR (q + 1) <= MR kc.
            unsafe {
                let base = corner.add(q * self.group_stride);
                for (j, (&offsets, &mask)) in self.offsets.iter().zip(&masks).enumerate() {
                    let v = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, offsets, base);
                    _mm512_storeu_ps(out.add(MR * 16 * q + 16 * j), v);
                }
            }
        }
        let tail = kc - 16 * groups;
        if tail == 0 {
            return;
        }
        for (j, (&offsets, &mask)) in self.offsets.iter().zip(&masks).enumerate() {
            // Only the tail's MR * tail packed values exist.
            let lanes = (MR * tail).saturating_sub(16 * j).min(16);
            if lanes == 0 {
                break;
            }
            let store = ((1u32 << lanes) - 1) as u16;
            // SAFETY: as for the full groups, with the steps of the tail (< kc) and only the
            // lanes of its MR * tail values read and written.
            unsafe {
                let base = corner.add(groups * self.group_stride);
                let v =
                    _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask & store, offsets, base);
                _mm512_mask_storeu_ps(out.add(MR * 16 * groups + 16 * j), store, v);
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

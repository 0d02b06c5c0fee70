//! The AVX-512 micro-kernel: an [`MR`] x [`NR`] tile of the product held in 24 zmm registers.
//!
//! For each k the kernel loads one packed row of `b` (two vectors of 16 columns) and broadcasts
//! each of the tile's rows of `a` against it with fused multiply-adds. Twenty-four independent
//! accumulators hide the FMA latency on the two FMA ports, and the 12 broadcasts and 2 loads per
//! 24 FMAs stay within the load ports.

use std::arch::x86_64::{
    __mmask16, _mm512_add_ps, _mm512_fmadd_ps, _mm512_load_ps, _mm512_mask_storeu_ps,
    _mm512_maskz_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
};

use super::elem::Elem;

/// Rows of a micro-tile (broadcast from packed `a`).
pub(crate) const MR: usize = 12;
/// Columns of a micro-tile (two 16-lane vectors of packed `b`).
pub(crate) const NR: usize = 32;

/// Where one micro-tile's sums go.
#[derive(Clone, Copy)]
pub(crate) struct TileOut<D> {
    /// The tile's first output element; rows are `ld` apart.
    pub out: *mut D,
    /// The tile's first f32 partial sum (the same element as `out` when `D` is f32); only
    /// touched when the sum spans more than one k block.
    pub partial: *mut f32,
    /// The row stride of `out` and `partial`.
    pub ld: usize,
    /// Valid columns, at most [`NR`]; the rest of the tile is padding and is not stored.
    pub cols: usize,
    /// This is the first k block: there is no partial sum to add yet.
    pub first: bool,
    /// This is the last k block: round and store to `out` rather than to `partial`.
    pub last: bool,
}

/// Computes a `ROWS x NR` tile over `kc` steps of k and adds it to (or stores it as) the sums.
///
/// # Safety
///
/// The CPU must support AVX-512F. `a` must hold `kc * MR` values (a packed sliver), `b` must be
/// 64-byte aligned and hold `kc * NR` values (a packed sliver), and for every row `r < ROWS` and
/// column `c < tile.cols`, `tile.out + r * ld + c` (and `tile.partial + r * ld + c` unless the
/// tile is both first and last) must be valid for reads and writes.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile<const ROWS: usize, D: Elem>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    tile: TileOut<D>,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; ROWS];
    for p in 0..kc {
        // SAFETY: p < kc, so both vectors are inside the sliver, aligned as the caller promised.
        let (b0, b1) = unsafe {
            (
                _mm512_load_ps(b.add(p * NR)),
                _mm512_load_ps(b.add(p * NR + 16)),
            )
        };
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: p * MR + r < kc * MR because r < ROWS <= MR.
            let a_value = _mm512_set1_ps(unsafe { *a.add(p * MR + r) });
            row[0] = _mm512_fmadd_ps(a_value, b0, row[0]);
            row[1] = _mm512_fmadd_ps(a_value, b1, row[1]);
        }
    }
    let lanes = |from: usize| -> __mmask16 {
        let n = tile.cols.saturating_sub(from).min(16);
        ((1u32 << n) - 1) as __mmask16
    };
    let masks = [lanes(0), lanes(16)];
    for (r, row) in acc.iter().enumerate() {
        for (half, (&sum, &mask)) in row.iter().zip(&masks).enumerate() {
            let at = r * tile.ld + half * 16;
            let mut sum = sum;
            // SAFETY: masked lanes are the tile's valid columns, which the caller guarantees are
            // valid at `partial` and `out`; unselected lanes are not accessed.
            unsafe {
                if !tile.first {
                    sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask, tile.partial.add(at)));
                }
                if tile.last {
                    D::store16(tile.out.add(at), sum, mask);
                } else {
                    _mm512_mask_storeu_ps(tile.partial.add(at), mask, sum);
                }
            }
        }
    }
}

/// [`tile`] for a tile of `rows` valid rows (1 to [`MR`]); rows past them are not computed.
///
/// # Safety
///
/// As for [`tile`] with `ROWS = rows`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile_rows<D: Elem>(
    rows: usize,
    kc: usize,
    a: *const f32,
    b: *const f32,
    out: TileOut<D>,
) {
    // SAFETY: the caller upholds `tile`'s contract for `rows` rows; each arm passes it on.
    unsafe {
        match rows {
            12 => tile::<12, D>(kc, a, b, out),
            11 => tile::<11, D>(kc, a, b, out),
            10 => tile::<10, D>(kc, a, b, out),
            9 => tile::<9, D>(kc, a, b, out),
            8 => tile::<8, D>(kc, a, b, out),
            7 => tile::<7, D>(kc, a, b, out),
            6 => tile::<6, D>(kc, a, b, out),
            5 => tile::<5, D>(kc, a, b, out),
            4 => tile::<4, D>(kc, a, b, out),
            3 => tile::<3, D>(kc, a, b, out),
            2 => tile::<2, D>(kc, a, b, out),
            1 => tile::<1, D>(kc, a, b, out),
            _ => unreachable!("a micro-tile has 1 to {MR} rows, not {rows}"),
        }
    }
}

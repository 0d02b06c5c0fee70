//! The AVX-512 micro-kernel: an [`MR`] x [`NR`] tile of the product held in 24 zmm registers.
//!
//! For each k the kernel loads one packed row of `b` (two vectors of 16 columns) and broadcasts
//! each of the tile's rows of `a` against it with fused multiply-adds. Twenty-four independent
//! accumulators hide the FMA latency on the two FMA ports, and the 12 broadcasts and 2 loads per
//! 24 FMAs stay within the load ports.
//!
//! `tile_unpacked` is the same kernel reading the operands where they lie (rows of `b` as
//! vectors, one vector when the tile is at most 16 columns wide), for products too small to
//! repay packing; both store through `store`.

use std::arch::x86_64::{
    __m512, __mmask16, _mm512_add_ps, _mm512_fmadd_ps, _mm512_load_ps, _mm512_mask_storeu_ps,
    _mm512_maskz_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
};

use super::elem::Elem;
use super::pack::KC;

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
    // SAFETY: passed on from the caller.
    unsafe { store(&acc, tile) };
}

/// Adds each row's sums to the partial sums (unless `tile.first`) and stores them, rounded to
/// the output type when `tile.last`, else as f32 partial sums. Row `r`'s vector `h` holds
/// columns `16 h..16 h + 16`; lanes past `tile.cols` are not stored.
///
/// # Safety
///
/// The CPU must support AVX-512F, and for every row `r < ROWS` and column `c < tile.cols`,
/// `tile.out + r * ld + c` (and `tile.partial + r * ld + c` unless the tile is both first and
/// last) must be valid for reads and writes. `tile.cols` is at most `16 * HALVES`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn store<const ROWS: usize, const HALVES: usize, D: Elem>(
    acc: &[[__m512; HALVES]; ROWS],
    tile: TileOut<D>,
) {
    let masks: [__mmask16; HALVES] = std::array::from_fn(|h| lanes(tile.cols, 16 * h));
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

/// The lanes of the 16 columns from `from` that lie within the first `cols` columns.
fn lanes(cols: usize, from: usize) -> __mmask16 {
    let n = cols.saturating_sub(from).min(16);
    ((1u32 << n) - 1) as __mmask16
}

/// Calls `$tile!(R)` with the literal `R` equal to `$rows`, 1 to [`MR`], so that each tile
/// height gets its own fully unrolled kernel.
macro_rules! by_rows {
    ($rows:expr, $tile:ident) => {
        match $rows {
            12 => $tile!(12),
            11 => $tile!(11),
            10 => $tile!(10),
            9 => $tile!(9),
            8 => $tile!(8),
            7 => $tile!(7),
            6 => $tile!(6),
            5 => $tile!(5),
            4 => $tile!(4),
            3 => $tile!(3),
            2 => $tile!(2),
            1 => $tile!(1),
            rows => unreachable!("a micro-tile has 1 to {MR} rows, not {rows}"),
        }
    };
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
    macro_rules! packed {
        ($r:literal) => {
            unsafe { tile::<$r, D>(kc, a, b, out) }
        };
    }
    by_rows!(rows, packed)
}

/// Where a tile computed straight from the operands reads them: `a`'s element `(r, p)` of the
/// tile is at `a + r * a_row + p * a_col`, `b`'s element `(p, c)` at `b + p * b_row + c`.
#[derive(Clone, Copy)]
pub(crate) struct Unpacked<S> {
    /// The tile's first row of `a`, at step 0 of k.
    pub a: *const S,
    /// The distance between rows of `a`.
    pub a_row: usize,
    /// The distance between steps of k along a row of `a`.
    pub a_col: usize,
    /// The tile's first column of `b`, at step 0 of k; columns are contiguous.
    pub b: *const S,
    /// The distance between rows (steps of k) of `b`.
    pub b_row: usize,
}

/// Computes a `ROWS x 16 HALVES` tile over all `k` steps straight from the operands, with no
/// packing, and stores it. The fused multiply-adds run in [`tile`]'s order, block of [`KC`]
/// steps by block, and each block's sum is added to the previous ones as the packed path adds
/// it to its partial sums, so the results are the same bits. Small products pay more to pack
/// than to multiply.
///
/// # Safety
///
/// The CPU must support AVX-512F. For `r < ROWS`, `p < k` and `c < tile.cols` (at most
/// `16 * HALVES`), `a`'s element `(r, p)` and `b`'s element `(p, c)` must be readable, and the
/// tile must be valid at `tile.out` as for [`store`] with `tile.first` and `tile.last` set.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn tile_unpacked<const ROWS: usize, const HALVES: usize, S: Elem, D: Elem>(
    k: usize,
    src: Unpacked<S>,
    tile: TileOut<D>,
) {
    let masks: [__mmask16; HALVES] = std::array::from_fn(|h| lanes(tile.cols, 16 * h));
    let mut total = [[_mm512_setzero_ps(); HALVES]; ROWS];
    for p0 in (0..k).step_by(KC) {
        let mut acc = [[_mm512_setzero_ps(); HALVES]; ROWS];
        for p in p0..(p0 + KC).min(k) {
            let b_row = src.b.wrapping_add(p * src.b_row);
            // SAFETY: lanes of the mask are columns < tile.cols of row p < k, readable per the
            // caller; the others are not read.
            let b: [__m512; HALVES] =
                std::array::from_fn(|h| unsafe { S::load16_masked(b_row.add(16 * h), masks[h]) });
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: r < ROWS and p < k, readable per the caller.
                let a_value = unsafe { *src.a.add(r * src.a_row + p * src.a_col) }.to_f32();
                let a_value = _mm512_set1_ps(a_value);
                for (sum, &b) in row.iter_mut().zip(&b) {
                    *sum = _mm512_fmadd_ps(a_value, b, *sum);
                }
            }
        }
        for (total, acc) in total.iter_mut().zip(&acc) {
            for (total, &acc) in total.iter_mut().zip(acc) {
                *total = if p0 == 0 {
                    acc
                } else {
                    _mm512_add_ps(acc, *total)
                };
            }
        }
    }
    // SAFETY: passed on from the caller.
    unsafe { store(&total, tile) };
}

/// [`tile_unpacked`] for a tile of `rows` valid rows (1 to [`MR`]) and `tile.cols` columns (1
/// to [`NR`]): one vector of `b` per step when the columns fit in 16.
///
/// # Safety
///
/// As for [`tile_unpacked`] with `ROWS = rows`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile_rows_unpacked<S: Elem, D: Elem>(
    rows: usize,
    k: usize,
    src: Unpacked<S>,
    out: TileOut<D>,
) {
    // SAFETY: the caller upholds `tile_unpacked`'s contract for `rows` rows and `out.cols`
    // columns; each arm passes it on with enough vectors for the columns.
    macro_rules! narrow {
        ($r:literal) => {
            unsafe { tile_unpacked::<$r, 1, S, D>(k, src, out) }
        };
    }
    macro_rules! wide {
        ($r:literal) => {
            unsafe { tile_unpacked::<$r, 2, S, D>(k, src, out) }
        };
    }
    if out.cols <= 16 {
        by_rows!(rows, narrow)
    } else {
        by_rows!(rows, wide)
    }
}

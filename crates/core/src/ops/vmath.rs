//! Float math written so that loops over it vectorize, and the dispatch that compiles those
//! loops for the widest vector instructions the CPU has.
//!
//! Everything here uses only operations that IEEE 754 rounds exactly once (add, subtract,
//! multiply, divide, conversions, and fused multiply-adds written out as `mul_add`, which are the
//! FMA instruction where the level has it and libm's exact `fma` otherwise) plus bit
//! manipulation; Rust never contracts a multiply and an add on its own. So a value is bitwise the
//! same whether it is computed alone, in SSE2 lanes, or in AVX2 or AVX-512 lanes. The eager
//! kernels and the fused executor rely on that: they may reach the same element through
//! different loops and must agree to the bit.

use std::sync::OnceLock;

use half::bf16;

/// An instruction-set level that [`vectorized`] can compile a loop for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// The target's baseline (SSE2 on x86-64).
    Baseline,
    /// AVX2 with FMA (x86-64-v3).
    Avx2,
    /// AVX-512 F, BW, DQ and VL (x86-64-v4).
    Avx512,
}

impl Isa {
    /// The best level this CPU supports, detected once.
    pub fn detected() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(detect)
    }

    /// Every level this CPU supports, from the baseline up.
    #[cfg(test)]
    pub fn available() -> Vec<Isa> {
        [Isa::Baseline, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&isa| isa <= Isa::detected())
            .collect()
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Isa {
    use std::arch::is_x86_feature_detected as has;
    if has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") {
        Isa::Avx512
    } else if has!("avx2") && has!("fma") {
        Isa::Avx2
    } else {
        Isa::Baseline
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Isa {
    Isa::Baseline
}

/// Evaluates `$body` compiled for the best instruction set this CPU has (`@on $isa, $body`:
/// for `$isa`, or the best one below it that the CPU has). The body is expanded once per level,
/// each time inside a closure that only that level's `#[target_feature]` function calls, so
/// LLVM inlines it there and vectorizes its loops with that level's registers. The math the
/// body calls must inline too: `#[inline(always)]` functions and function items, not closures
/// shared between the expansions. Results do not depend on the level (see the module doc).
macro_rules! vectorized {
    ($body:expr) => {
        $crate::ops::vmath::vectorized!(@on $crate::ops::vmath::Isa::Avx512, $body)
    };
    (@on $isa:expr, $body:expr) => {
        match $crate::ops::vmath::Isa::detected().min($isa) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::detected` found the level's features on this CPU.
            $crate::ops::vmath::Isa::Avx512 => unsafe { $crate::ops::vmath::avx512(|| $body) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            $crate::ops::vmath::Isa::Avx2 => unsafe { $crate::ops::vmath::avx2(|| $body) },
            _ => $body,
        }
    };
}
pub(crate) use vectorized;

/// Calls `f` in a function built for x86-64-v4 (AVX-512), for [`vectorized!`].
///
/// # Safety
/// The CPU must have the features ([`Isa::detected`] is [`Isa::Avx512`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2")]
#[inline]
pub(crate) unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Calls `f` in a function built for x86-64-v3 (AVX2), for [`vectorized!`].
///
/// # Safety
/// The CPU must have the features ([`Isa::detected`] is at least [`Isa::Avx2`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,bmi1,bmi2")]
#[inline]
pub(crate) unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// 1.5 * 2^23: adding it to an f32 below 2^22 in magnitude rounds that value to an integer
/// (to nearest, ties to even), and leaves the integer in the low mantissa bits of the sum.
const ROUND_MAGIC: f32 = 12_582_912.0;
/// ln(2) split for Cody-Waite reduction: `LN2_HI` is ln(2) rounded to f32, so `k * LN2_HI` is
/// exact inside an FMA and `x - k * LN2_HI` is exact too; `LN2_LO` is the rest.
const LN2_HI: f32 = f32::from_bits(0x3F31_7218);
const LN2_LO: f32 = (std::f64::consts::LN_2 - LN2_HI as f64) as f32;

/// `(e^r - 1 - r) / r^2` on |r| <= ln(2)/2, lowest degree first: the Chebyshev fit
/// `mpmath.chebyfit(f, [-0.35, 0.35], 5)` rounded to f32. `1 + r + r^2 P(r)` is then within
/// 2^-26 of e^r, relatively.
const EXP_POLY: [f32; 5] = [0.5, 0.16666573, 0.04166655, 0.008363774, 0.0013926927];

/// e^x as `(e^r, k)` with e^x = e^r 2^k: x = k ln 2 + r with k an integer and
/// |r| <= ln(2)/2, e^r by a polynomial. For x in [-104, 89] (NaN gives a NaN e^r).
#[inline(always)]
fn exp_parts(x: f32) -> (f32, i32) {
    let t = x.mul_add(std::f32::consts::LOG2_E, ROUND_MAGIC);
    let k = t - ROUND_MAGIC;
    let r = (-k).mul_add(LN2_HI, x);
    let r = (-k).mul_add(LN2_LO, r);
    let mut p = EXP_POLY[4];
    for &c in EXP_POLY[..4].iter().rev() {
        p = p.mul_add(r, c);
    }
    let e_r = (r * r).mul_add(p, r) + 1.0;
    // The low mantissa bits of `t` hold k + 2^22.
    (e_r, t.to_bits() as i32 - ROUND_MAGIC.to_bits() as i32)
}

/// e^x for f32, to within about one ulp (see the tests for the measured bound). 2^k is
/// applied as two factors so that results in the subnormal range round once. Overflow gives
/// +inf and underflow 0, as for the exact value.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // e^89 overflows and e^-104 rounds to 0; clamping keeps k in [-150, 128], where each half
    // of it gives a normal power of two. (`clamp` passes NaN through.)
    let x = x.clamp(-104.0, 89.0);
    let (e_r, k) = exp_parts(x);
    let k_half = k >> 1;
    let two_to = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    e_r * two_to(k_half) * two_to(k - k_half)
}

/// [`exp_f32`] for x in [0, 20], where e^x is a normal number: 2^k goes straight into the
/// exponent bits. The result is the same, with fewer instructions.
#[inline(always)]
fn exp_f32_normal(x: f32) -> f32 {
    let (e_r, k) = exp_parts(x);
    // Wrapping, as in release builds: a NaN input gives NaN bits whatever k is.
    f32::from_bits(e_r.to_bits().wrapping_add((k << 23) as u32))
}

/// `(tanh(x)/x - 1) / x^2` as a polynomial in x^2 on |x| <= atanh(1/2), lowest degree first:
/// the Chebyshev fit `mpmath.chebyfit(f, [0, 0.305], 5)` in y = x^2, rounded to f32.
/// `x + x^3 G(x^2)` is then within 2^-27 of tanh(x), relatively.
const TANH_POLY: [f32; 5] = [
    -0.3333333,
    0.13333108,
    -0.053908225,
    0.021302037,
    -0.0065964484,
];
/// atanh(1/2): below it tanh uses its polynomial, at and above it `1 - 2 / (e^2|x| + 1)`,
/// where the result is at least 1/2 so the subtraction loses nothing.
const TANH_POLY_BELOW: f32 = 0.54930615;

/// tanh for f32, to within about two ulps (see the tests for the measured bound).
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let a2 = a * a;
    let mut g = TANH_POLY[4];
    for &c in TANH_POLY[..4].iter().rev() {
        g = g.mul_add(a2, c);
    }
    let near_zero = (a * a2).mul_add(g, a);
    // tanh(10) is 1 in f32; clamping keeps e^2|x| normal.
    let a_clamped = if a > 10.0 { 10.0 } else { a };
    let far = 1.0 - 2.0 / (exp_f32_normal(2.0 * a_clamped) + 1.0);
    // NaN fails the comparison and takes the polynomial, which keeps it NaN.
    let t = if a >= TANH_POLY_BELOW { far } else { near_zero };
    t.copysign(x)
}

/// f32 to bf16, rounded to nearest with ties to even; NaN stays NaN (quiet, with its top
/// payload bits). Bitwise the same as `half::bf16::from_f32`, without branches.
#[inline(always)]
pub fn bf16_from_f32(x: f32) -> bf16 {
    let bits = x.to_bits();
    let lsb = (bits >> 16) & 1;
    let rounded = bits.wrapping_add(0x7FFF + lsb) >> 16;
    let quiet_nan = (bits >> 16) | 0x40;
    bf16::from_bits((if x.is_nan() { quiet_nan } else { rounded }) as u16)
}

/// Partial sums per lane in [`sum_f64`].
const SUM_LANES: usize = 16;

/// The f64 sum of `f(v)` over `values`, accumulated in 16 interleaved partial sums (so the loop
/// vectorizes) that are then added pairwise. It is more accurate than a sequential sum, and
/// deterministic: the order depends only on the length.
#[inline(always)]
pub fn sum_f64<T: Copy>(values: &[T], f: impl Fn(T) -> f64) -> f64 {
    let mut acc = [0.0f64; SUM_LANES];
    let chunks = values.chunks_exact(SUM_LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a += f(v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a += f(v);
    }
    let mut width = SUM_LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    acc[0]
}

/// For each of `width` columns, the [`sum_f64`] of its values in the rows that start at
/// `row_starts` (row `i` holds `data[row_starts[i]..][..width]`): bit for bit what gathering
/// each column into a row and summing it gives, with the same lanes and the same pairwise
/// fold, but reading the rows in place. A reduction over leading dims (a bias's gradient)
/// otherwise gathers every column with a stride.
#[inline(always)]
pub fn column_sums_f64<T: Copy>(
    data: &[T],
    row_starts: &[usize],
    width: usize,
    f: impl Fn(T) -> f64,
) -> Vec<f64> {
    // Columns at a time, so the partial sums stay in L1 (16 lanes of 64 f64: 8 KiB).
    const BLOCK: usize = 64;
    let mut sums = vec![0.0f64; width];
    let mut acc = [[0.0f64; BLOCK]; SUM_LANES];
    for first in (0..width).step_by(BLOCK) {
        let w = BLOCK.min(width - first);
        for lane in acc.iter_mut() {
            lane[..w].fill(0.0);
        }
        for (i, &start) in row_starts.iter().enumerate() {
            let row = &data[start + first..start + first + w];
            for (a, &v) in acc[i % SUM_LANES][..w].iter_mut().zip(row) {
                *a += f(v);
            }
        }
        let mut lanes = SUM_LANES;
        while lanes > 1 {
            lanes /= 2;
            let (low, high) = acc.split_at_mut(lanes);
            for (into, from) in low.iter_mut().zip(&*high) {
                for (a, &b) in into[..w].iter_mut().zip(&from[..w]) {
                    *a += b;
                }
            }
        }
        sums[first..first + w].copy_from_slice(&acc[0][..w]);
    }
    sums
}

/// The largest value, NaN when any value is NaN, -inf for an empty slice; lane-wise like
/// [`sum_f64`] so the loop vectorizes. (Which zero a row of zeros of both signs gives is
/// unspecified.)
#[inline(always)]
pub fn max_nan<T: Copy + PartialOrd>(values: &[T], neg_infinity: T) -> T {
    #[allow(clippy::eq_op)] // `v != v` is the generic NaN test.
    let pick = |m: T, v: T| if v > m || v != v { v } else { m };
    let mut acc = [neg_infinity; SUM_LANES];
    let chunks = values.chunks_exact(SUM_LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a = pick(*a, v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a = pick(*a, v);
    }
    acc.into_iter().fold(neg_infinity, pick)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Pseudo-random f32 bit patterns (a 64-bit LCG's high bits): every sign, exponent and
    /// payload, NaNs and infinities included.
    fn bit_patterns(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                f32::from_bits((s >> 32) as u32)
            })
            .collect()
    }

    /// Column sums read in place give the bits of summing each column gathered into a row,
    /// for row counts around the lane count, widths across the column blocks, and rows apart
    /// by more than their width (a strided view).
    #[test]
    fn column_sums_equal_the_sums_of_gathered_columns() {
        let values: Vec<f32> = bit_patterns(40_000, 7)
            .into_iter()
            .map(|v| {
                if v.is_finite() {
                    v.clamp(-1e6, 1e6)
                } else {
                    0.5
                }
            })
            .collect();
        for (rows, width, gap) in [
            (1, 1, 0),
            (15, 3, 0),
            (16, 64, 0),
            (17, 65, 5),
            (129, 130, 7),
            (40, 200, 0),
        ] {
            let starts: Vec<usize> = (0..rows).map(|i| 3 + i * (width + gap)).collect();
            let by_columns = column_sums_f64(&values, &starts, width, |v: f32| v as f64);
            for (j, &sum) in by_columns.iter().enumerate() {
                let column: Vec<f32> = starts.iter().map(|&s| values[s + j]).collect();
                let gathered = sum_f64(&column, |v: f32| v as f64);
                assert_eq!(
                    sum.to_bits(),
                    gathered.to_bits(),
                    "{rows} x {width}, column {j}"
                );
            }
        }
    }

    /// Values spread over [-lo, hi] plus the special ones.
    fn spread(n: usize, lo: f32, hi: f32) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n)
            .map(|i| lo + (hi - lo) * (i as f32 / (n - 1) as f32))
            .collect();
        v.extend([
            0.0,
            -0.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-40,
            -1e-40,
            f32::MAX,
            f32::MIN,
        ]);
        v
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// Error of `got` against an f64 reference in units of the f32 ulp at the reference.
    pub(crate) fn ulps(got: f32, want: f64) -> f64 {
        if got.is_nan() || want.is_nan() {
            return if got.is_nan() == want.is_nan() {
                0.0
            } else {
                f64::INFINITY
            };
        }
        if (want as f32).is_infinite() || got.is_infinite() {
            return if got == want as f32 {
                0.0
            } else {
                f64::INFINITY
            };
        }
        // The spacing of f32 values at the reference (2^-149 among the subnormals).
        let w = (want as f32).abs();
        let ulp = (f32::from_bits(w.to_bits() + 1) - w) as f64;
        (got as f64 - want).abs() / ulp
    }

    /// The largest errors in ulps of exp and tanh over `xs`.
    fn worst_ulps(xs: impl Iterator<Item = f32>) -> (f64, f64) {
        xs.fold((0.0f64, 0.0f64), |worst, x| {
            let e = ulps(exp_f32(x), (x as f64).exp());
            let t = ulps(tanh_f32(x), (x as f64).tanh());
            (worst.0.max(e), worst.1.max(t))
        })
    }

    #[test]
    fn exp_and_tanh_are_within_about_an_ulp_of_f64() {
        let xs = spread(400_001, -110.0, 95.0)
            .into_iter()
            .chain(spread(100_001, -1.0, 1.0))
            .chain(bit_patterns(400_000, 1));
        let worst = worst_ulps(xs);
        assert!(worst.0 < 1.5 && worst.1 < 2.5, "max ulp error {worst:?}");
    }

    /// Every f32 once: the bound the docs state. Slow (minutes), so run on demand:
    /// `cargo test --release -p neuronlab-core exhaustive_ulps -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn exhaustive_ulps() {
        use rayon::prelude::*;
        let worst = (0..=u32::MAX)
            .into_par_iter()
            .fold(
                || (0.0f64, 0.0f64),
                |w, bits| {
                    let v = worst_ulps(std::iter::once(f32::from_bits(bits)));
                    (w.0.max(v.0), w.1.max(v.1))
                },
            )
            .reduce(|| (0.0, 0.0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
        println!(
            "max ulp error over every f32: exp {:.3}, tanh {:.3}",
            worst.0, worst.1
        );
    }

    #[test]
    fn special_values() {
        assert!(same(exp_f32(0.0), 1.0));
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(same(exp_f32(f32::INFINITY), f32::INFINITY));
        assert!(same(exp_f32(f32::NEG_INFINITY), 0.0));
        assert!(same(exp_f32(88.8), f32::INFINITY));
        assert!(same(exp_f32(-103.0), (-103.0f64).exp() as f32));
        assert!(exp_f32(-103.0) > 0.0, "subnormal results are kept");
        assert!(same(exp_f32(-104.0), 0.0));
        assert!(same(tanh_f32(-0.0), -0.0));
        assert!(same(tanh_f32(f32::INFINITY), 1.0));
        assert!(same(tanh_f32(f32::NEG_INFINITY), -1.0));
        assert!(tanh_f32(f32::NAN).is_nan());
        assert!(same(tanh_f32(1e-30), 1e-30));
    }

    #[test]
    fn the_normal_range_exp_is_exp() {
        for x in spread(100_001, 0.0, 20.0) {
            if (0.0..=20.0).contains(&x) {
                assert!(same(exp_f32_normal(x), exp_f32(x)), "{x}");
            }
        }
    }

    #[test]
    fn bf16_rounding_matches_half() {
        let step = 4099; // prime: every exponent and every low-bit pattern class is visited
        let mut bits = 0u64;
        while bits <= u32::MAX as u64 {
            let x = f32::from_bits(bits as u32);
            assert_eq!(
                bf16_from_f32(x).to_bits(),
                bf16::from_f32(x).to_bits(),
                "{bits:#x}"
            );
            bits += step;
        }
        // Ties, both parities, and the largest finite values rounding to infinity.
        for b in [
            0x3F80_8000u32,
            0x3F81_8000,
            0x7F7F_FFFF,
            0xFF7F_FFFF,
            0x0000_8000,
            0x7F80_0001,
        ] {
            let x = f32::from_bits(b);
            assert_eq!(bf16_from_f32(x).to_bits(), bf16::from_f32(x).to_bits());
        }
    }

    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        let xs: Vec<f32> = spread(10_007, -30.0, 30.0)
            .into_iter()
            .chain(bit_patterns(10_007, 2))
            .collect();
        let one_at_a_time: Vec<(f32, f32, u16)> = xs
            .iter()
            .map(|&x| {
                (
                    std::hint::black_box(exp_f32)(x),
                    std::hint::black_box(tanh_f32)(x),
                    std::hint::black_box(bf16_from_f32)(x).to_bits(),
                )
            })
            .collect();
        for isa in Isa::available() {
            let lanes: Vec<(f32, f32, u16)> = vectorized!(
                @on isa,
                xs.iter()
                    .map(|&x| (exp_f32(x), tanh_f32(x), bf16_from_f32(x).to_bits()))
                    .collect()
            );
            for (i, (a, b)) in lanes.iter().zip(&one_at_a_time).enumerate() {
                assert!(
                    same(a.0, b.0) && same(a.1, b.1) && a.2 == b.2,
                    "{isa:?} at {}",
                    xs[i]
                );
            }
        }
        let finite: Vec<f32> = xs.iter().copied().filter(|v| v.is_finite()).collect();
        let sums: Vec<u64> = Isa::available()
            .into_iter()
            .map(|isa| vectorized!(@on isa, sum_f64(&finite, |v| v as f64)).to_bits())
            .collect();
        assert!(sums.windows(2).all(|w| w[0] == w[1]), "{sums:?}");
    }

    #[test]
    fn sums_and_maxima_over_lengths_with_tails() {
        for n in [0usize, 1, 5, 15, 16, 17, 31, 33, 100, 1000, 1023] {
            let v: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
            let exact: f64 = v.iter().map(|&x| x as f64).sum();
            assert_eq!(sum_f64(&v, |x| x as f64), exact, "n = {n}");
            let want = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max_nan(&v, f32::NEG_INFINITY), want, "n = {n}");
            if n > 0 {
                let mut with_nan = v.clone();
                with_nan[n / 2] = f32::NAN;
                assert!(max_nan(&with_nan, f32::NEG_INFINITY).is_nan());
            }
        }
    }
}

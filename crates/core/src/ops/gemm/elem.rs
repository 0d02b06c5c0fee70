//! The element types the GEMM reads and writes, with their 16-lane AVX-512 conversions.
//!
//! Inputs are widened to f32 exactly; outputs are rounded once from the f32 sums, to nearest
//! with ties to even, the same rounding as `half`'s `from_f32`.

use std::arch::x86_64::{
    __m256i, __m512, __mmask16, _mm256_loadu_si256, _mm512_add_epi32, _mm512_and_si512,
    _mm512_castps_si512, _mm512_castsi512_ps, _mm512_cmp_ps_mask, _mm512_cvtepu16_epi32,
    _mm512_cvtph_ps, _mm512_cvtps_ph, _mm512_loadu_ps, _mm512_mask_blend_epi32,
    _mm512_mask_cvtepi32_storeu_epi16, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps,
    _mm512_or_si512, _mm512_set1_epi32, _mm512_slli_epi32, _mm512_srli_epi32, _CMP_UNORD_Q,
    _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT,
};

use half::{bf16, f16};

/// An element the GEMM reads or writes. Arithmetic is always f32.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    /// Whether this is f32 itself, so partial sums can live in the output.
    const IS_F32: bool;
    /// Zero, for products with k = 0.
    const ZERO: Self;

    /// The value widened to f32 (exact).
    fn to_f32(self) -> f32;

    /// Loads 16 contiguous elements widened to f32.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F, and `src..src + 16` must be readable.
    unsafe fn load16(src: *const Self) -> __m512;

    /// Loads the elements `src + lane` of the lanes set in `mask`, widened to f32, and zero in
    /// the other lanes.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F, and `src + lane` must be readable for every lane set in
    /// `mask` (the others are not read).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load16_masked(src: *const Self, mask: __mmask16) -> __m512 {
        if mask == u16::MAX {
            // SAFETY: every lane is readable.
            return unsafe { Self::load16(src) };
        }
        // A masked load of 16-bit lanes needs AVX-512BW; the partial vectors at a matrix edge
        // are rare enough to go through a copy.
        let mut lanes = [Self::ZERO; 16];
        for (lane, value) in lanes.iter_mut().enumerate() {
            if mask & (1 << lane) != 0 {
                // SAFETY: the lane is set, so it is readable.
                *value = unsafe { *src.add(lane) };
            }
        }
        // SAFETY: `lanes` holds 16 elements.
        unsafe { Self::load16(lanes.as_ptr()) }
    }

    /// Stores the lanes of `v` selected by `mask`, rounded to this type, to `dst + lane`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F, and `dst + lane` must be writable for every lane set in
    /// `mask` (unselected lanes are not touched).
    unsafe fn store16(dst: *mut Self, v: __m512, mask: __mmask16);
}

impl Elem for f32 {
    const IS_F32: bool = true;
    const ZERO: f32 = 0.0;

    fn to_f32(self) -> f32 {
        self
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load16(src: *const f32) -> __m512 {
        // SAFETY: the caller guarantees 16 readable elements.
        unsafe { _mm512_loadu_ps(src) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load16_masked(src: *const f32, mask: __mmask16) -> __m512 {
        // SAFETY: the caller guarantees every selected lane is readable; the others are not
        // accessed.
        unsafe { _mm512_maskz_loadu_ps(mask, src) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store16(dst: *mut f32, v: __m512, mask: __mmask16) {
        // SAFETY: the caller guarantees every selected lane is writable.
        unsafe { _mm512_mask_storeu_ps(dst, mask, v) }
    }
}

impl Elem for bf16 {
    const IS_F32: bool = false;
    const ZERO: bf16 = bf16::ZERO;

    fn to_f32(self) -> f32 {
        self.to_f32()
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load16(src: *const bf16) -> __m512 {
        // SAFETY: the caller guarantees 16 readable elements (32 bytes); the load is unaligned.
        let halves = unsafe { _mm256_loadu_si256(src.cast::<__m256i>()) };
        // A bf16 is the top half of the f32 with the same value.
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(halves)))
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store16(dst: *mut bf16, v: __m512, mask: __mmask16) {
        let bits = _mm512_castps_si512(v);
        // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
        let kept_lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(1));
        let bias = _mm512_add_epi32(kept_lsb, _mm512_set1_epi32(0x7fff));
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(bits, bias));
        // NaNs keep their top bits and become quiet, as `bf16::from_f32` makes them.
        let quiet_nan = _mm512_or_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(0x40));
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        let out = _mm512_mask_blend_epi32(nan, rounded, quiet_nan);
        // SAFETY: the caller guarantees every selected lane is writable; the store truncates
        // each 32-bit lane to its low 16 bits, which hold the bf16.
        unsafe { _mm512_mask_cvtepi32_storeu_epi16(dst.cast(), mask, out) }
    }
}

impl Elem for f16 {
    const IS_F32: bool = false;
    const ZERO: f16 = f16::ZERO;

    fn to_f32(self) -> f32 {
        self.to_f32()
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load16(src: *const f16) -> __m512 {
        // SAFETY: the caller guarantees 16 readable elements (32 bytes); the load is unaligned.
        let halves = unsafe { _mm256_loadu_si256(src.cast::<__m256i>()) };
        _mm512_cvtph_ps(halves)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store16(dst: *mut f16, v: __m512, mask: __mmask16) {
        let halves = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        // SAFETY: the caller guarantees every selected lane is writable; the store truncates
        // each zero-extended 32-bit lane back to its 16-bit half.
        unsafe {
            _mm512_mask_cvtepi32_storeu_epi16(dst.cast(), mask, _mm512_cvtepu16_epi32(halves))
        }
    }
}

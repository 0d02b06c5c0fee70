//! The Rust types behind each [`DType`], the [`Buffer`] that holds them, and conversions.

use std::mem::MaybeUninit;

use half::{bf16, f16};

use super::DType;

/// A typed, owned element buffer: one variant per dtype.
#[derive(Clone, Debug)]
pub enum Buffer {
    /// `f32` elements.
    F32(Vec<f32>),
    /// `bf16` elements.
    Bf16(Vec<bf16>),
    /// `f16` elements.
    F16(Vec<f16>),
    /// `f64` elements.
    F64(Vec<f64>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `u8` elements.
    U8(Vec<u8>),
    /// `bool` elements.
    Bool(Vec<bool>),
}

impl Buffer {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::F32,
            Buffer::Bf16(_) => DType::Bf16,
            Buffer::F16(_) => DType::F16,
            Buffer::F64(_) => DType::F64,
            Buffer::I64(_) => DType::I64,
            Buffer::I32(_) => DType::I32,
            Buffer::U8(_) => DType::U8,
            Buffer::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::Bf16(v) => v.len(),
            Buffer::F16(v) => v.len(),
            Buffer::F64(v) => v.len(),
            Buffer::I64(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::U8(v) => v.len(),
            Buffer::Bool(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The little-endian bytes of the elements (bool as 0/1 bytes).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.append_le_bytes(&mut out);
        out
    }

    /// Appends the little-endian bytes of the elements to `out` (bool as 0/1 bytes): one
    /// pass, without a buffer of its own (collectives across processes send gigabytes so).
    pub fn append_le_bytes(&self, out: &mut Vec<u8>) {
        fn append<T: bytemuck::Pod, const W: usize>(
            out: &mut Vec<u8>,
            v: &[T],
            f: impl Fn(T) -> [u8; W],
        ) {
            // In memory the elements already are their little-endian bytes: one copy.
            if cfg!(target_endian = "little") {
                return out.extend_from_slice(bytemuck::cast_slice(v));
            }
            out.reserve(v.len() * W);
            for &x in v {
                out.extend_from_slice(&f(x));
            }
        }
        match self {
            Buffer::F32(v) => append(out, v, f32::to_le_bytes),
            Buffer::Bf16(v) => append(out, v, bf16::to_le_bytes),
            Buffer::F16(v) => append(out, v, f16::to_le_bytes),
            Buffer::F64(v) => append(out, v, f64::to_le_bytes),
            Buffer::I64(v) => append(out, v, i64::to_le_bytes),
            Buffer::I32(v) => append(out, v, i32::to_le_bytes),
            Buffer::U8(v) => out.extend_from_slice(v),
            Buffer::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
        }
    }

    /// The elements' memory as their little-endian bytes, where it is that (a little-endian
    /// host, any dtype but bool): what a transport sends without a copy.
    pub fn le_bytes(&self) -> Option<&[u8]> {
        if cfg!(target_endian = "big") {
            return None;
        }
        Some(match self {
            Buffer::F32(v) => bytemuck::cast_slice(v),
            Buffer::Bf16(v) => bytemuck::cast_slice(v),
            Buffer::F16(v) => bytemuck::cast_slice(v),
            Buffer::F64(v) => bytemuck::cast_slice(v),
            Buffer::I64(v) => bytemuck::cast_slice(v),
            Buffer::I32(v) => bytemuck::cast_slice(v),
            Buffer::U8(v) => v,
            Buffer::Bool(_) => return None,
        })
    }

    /// `len` elements of `dtype` whose little-endian bytes `write` puts straight into the new
    /// buffer's memory, given to it uninitialized (a transport receiving a tensor: no zeroing
    /// pass before the bytes arrive). `None`, without calling `write`, where
    /// [`Buffer::le_bytes`] is.
    ///
    /// # Safety
    ///
    /// `write` must initialize every byte of the slice it is given (`len` times the dtype's
    /// size). Any bytes are then valid elements: these dtypes have no invalid bit patterns.
    pub unsafe fn from_le_bytes_written(
        dtype: DType,
        len: usize,
        write: impl FnOnce(&mut [MaybeUninit<u8>]),
    ) -> Option<Buffer> {
        if cfg!(target_endian = "big") {
            return None;
        }
        /// # Safety
        ///
        /// As for `from_le_bytes_written`.
        unsafe fn written<T: bytemuck::Pod>(
            len: usize,
            write: impl FnOnce(&mut [MaybeUninit<u8>]),
        ) -> Vec<T> {
            let mut v = Vec::<T>::with_capacity(len);
            let spare = v.spare_capacity_mut();
            // SAFETY: the spare capacity is `len` uninitialized `T`s, so as many bytes times
            // `T`'s size, which `MaybeUninit<u8>` may view at any alignment.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut(
                    spare.as_mut_ptr().cast::<MaybeUninit<u8>>(),
                    std::mem::size_of_val(spare),
                )
            };
            write(bytes);
            // SAFETY: the caller's `write` initialized every byte, and every bit pattern is a
            // valid `T` (Pod).
            unsafe { v.set_len(len) };
            v
        }
        // SAFETY (each arm): passed on from the caller.
        Some(unsafe {
            match dtype {
                DType::F32 => Buffer::F32(written(len, write)),
                DType::Bf16 => Buffer::Bf16(written(len, write)),
                DType::F16 => Buffer::F16(written(len, write)),
                DType::F64 => Buffer::F64(written(len, write)),
                DType::I64 => Buffer::I64(written(len, write)),
                DType::I32 => Buffer::I32(written(len, write)),
                DType::U8 => Buffer::U8(written(len, write)),
                DType::Bool => return None,
            }
        })
    }

    /// Parses little-endian bytes as `dtype` elements. `None` when the length is not a multiple
    /// of the element size.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Option<Buffer> {
        if !bytes.len().is_multiple_of(dtype.size()) {
            return None;
        }
        fn parse<T: bytemuck::Pod, const W: usize>(b: &[u8], f: impl Fn([u8; W]) -> T) -> Vec<T> {
            if cfg!(target_endian = "little") {
                let n = b.len() / std::mem::size_of::<T>();
                let mut v = Vec::<T>::with_capacity(n);
                // SAFETY: the copy fills the n elements' bytes before `set_len`, and every bit
                // pattern is a valid `T` (Pod). One pass: a zeroed Vec first would be two.
                unsafe {
                    std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), b.len());
                    v.set_len(n);
                }
                return v;
            }
            b.chunks_exact(W)
                .map(|c| f(c.try_into().expect("chunks_exact yields W bytes")))
                .collect()
        }
        Some(match dtype {
            DType::F32 => Buffer::F32(parse(bytes, f32::from_le_bytes)),
            DType::Bf16 => Buffer::Bf16(parse(bytes, bf16::from_le_bytes)),
            DType::F16 => Buffer::F16(parse(bytes, f16::from_le_bytes)),
            DType::F64 => Buffer::F64(parse(bytes, f64::from_le_bytes)),
            DType::I64 => Buffer::I64(parse(bytes, i64::from_le_bytes)),
            DType::I32 => Buffer::I32(parse(bytes, i32::from_le_bytes)),
            DType::U8 => Buffer::U8(bytes.to_vec()),
            DType::Bool => Buffer::Bool(bytes.iter().map(|&b| b != 0).collect()),
        })
    }
}

/// A borrowed run of elements of one dtype: the slice form of [`Buffer`], so kernels can read
/// a tensor's storage or a buffer alike without copying.
#[derive(Clone, Copy, Debug)]
pub enum Elements<'a> {
    /// `f32` elements.
    F32(&'a [f32]),
    /// `bf16` elements.
    Bf16(&'a [bf16]),
    /// `f16` elements.
    F16(&'a [f16]),
    /// `f64` elements.
    F64(&'a [f64]),
    /// `i64` elements.
    I64(&'a [i64]),
    /// `i32` elements.
    I32(&'a [i32]),
    /// `u8` elements.
    U8(&'a [u8]),
    /// `bool` elements.
    Bool(&'a [bool]),
}

impl Elements<'_> {
    /// The dtype of the elements.
    pub fn dtype(self) -> DType {
        match self {
            Elements::F32(_) => DType::F32,
            Elements::Bf16(_) => DType::Bf16,
            Elements::F16(_) => DType::F16,
            Elements::F64(_) => DType::F64,
            Elements::I64(_) => DType::I64,
            Elements::I32(_) => DType::I32,
            Elements::U8(_) => DType::U8,
            Elements::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(self) -> usize {
        match self {
            Elements::F32(v) => v.len(),
            Elements::Bf16(v) => v.len(),
            Elements::F16(v) => v.len(),
            Elements::F64(v) => v.len(),
            Elements::I64(v) => v.len(),
            Elements::I32(v) => v.len(),
            Elements::U8(v) => v.len(),
            Elements::Bool(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// An owned copy.
    pub fn to_buffer(self) -> Buffer {
        match self {
            Elements::F32(v) => Buffer::F32(v.to_vec()),
            Elements::Bf16(v) => Buffer::Bf16(v.to_vec()),
            Elements::F16(v) => Buffer::F16(v.to_vec()),
            Elements::F64(v) => Buffer::F64(v.to_vec()),
            Elements::I64(v) => Buffer::I64(v.to_vec()),
            Elements::I32(v) => Buffer::I32(v.to_vec()),
            Elements::U8(v) => Buffer::U8(v.to_vec()),
            Elements::Bool(v) => Buffer::Bool(v.to_vec()),
        }
    }
}

impl Buffer {
    /// The elements, borrowed.
    pub fn elements(&self) -> Elements<'_> {
        match self {
            Buffer::F32(v) => Elements::F32(v),
            Buffer::Bf16(v) => Elements::Bf16(v),
            Buffer::F16(v) => Elements::F16(v),
            Buffer::F64(v) => Elements::F64(v),
            Buffer::I64(v) => Elements::I64(v),
            Buffer::I32(v) => Elements::I32(v),
            Buffer::U8(v) => Elements::U8(v),
            Buffer::Bool(v) => Elements::Bool(v),
        }
    }
}

/// A Rust element type that a [`Buffer`] can hold.
///
/// Conversions go through f64 for floats and i64 for integers so that casts follow PyTorch:
/// float to int truncates toward zero, anything to bool tests `!= 0`.
pub trait Element: Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
    /// The dtype of this Rust type.
    const DTYPE: DType;
    /// The elements of `buffer` when it holds this type.
    fn slice(buffer: &Buffer) -> Option<&[Self]>;
    /// The elements of `buffer`, to write, when it holds this type.
    fn slice_mut(buffer: &mut Buffer) -> Option<&mut [Self]>;
    /// The borrowed elements when they are of this type.
    fn of(elements: Elements<'_>) -> Option<&[Self]>;
    /// Borrows a slice of this type as [`Elements`].
    fn elements(v: &[Self]) -> Elements<'_>;
    /// Wraps a vector into a buffer.
    fn into_buffer(v: Vec<Self>) -> Buffer;
    /// The value as f64 (exact for every type but i64 above 2^53).
    fn to_f64(self) -> f64;
    /// The value as i64 (floats truncate toward zero, saturating).
    fn to_i64(self) -> i64;
    /// Converts from f64 with this type's rounding.
    fn from_f64(v: f64) -> Self;
    /// Converts from i64.
    fn from_i64(v: i64) -> Self;
    /// Converts any element, following PyTorch's cast rules.
    fn cast_from<S: Element>(v: S) -> Self {
        if Self::DTYPE.is_float() {
            Self::from_f64(v.to_f64())
        } else if Self::DTYPE == DType::Bool {
            Self::from_i64((v.to_f64() != 0.0) as i64)
        } else if S::DTYPE.is_float() {
            Self::from_f64(v.to_f64())
        } else {
            Self::from_i64(v.to_i64())
        }
    }
}

/// The items of [`Element`] that only name the dtype's variants.
macro_rules! element_storage {
    ($dt:ident) => {
        const DTYPE: DType = DType::$dt;
        fn slice(buffer: &Buffer) -> Option<&[Self]> {
            match buffer {
                Buffer::$dt(v) => Some(v),
                _ => None,
            }
        }
        fn slice_mut(buffer: &mut Buffer) -> Option<&mut [Self]> {
            match buffer {
                Buffer::$dt(v) => Some(v),
                _ => None,
            }
        }
        fn of(elements: Elements<'_>) -> Option<&[Self]> {
            match elements {
                Elements::$dt(v) => Some(v),
                _ => None,
            }
        }
        fn elements(v: &[Self]) -> Elements<'_> {
            Elements::$dt(v)
        }
        fn into_buffer(v: Vec<Self>) -> Buffer {
            Buffer::$dt(v)
        }
    };
}

macro_rules! element_float {
    ($t:ty, $dt:ident, $to:expr, $from:expr) => {
        impl Element for $t {
            element_storage!($dt);
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn to_i64(self) -> i64 {
                $to(self) as i64
            }
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn from_i64(v: i64) -> Self {
                $from(v as f64)
            }
        }
    };
}

element_float!(f32, F32, |x: f32| x as f64, |v: f64| v as f32);
element_float!(f64, F64, |x: f64| x, |v: f64| v);
element_float!(bf16, Bf16, bf16::to_f64, |v| bf16::from_f32(
    f32_round_to_odd(v)
));
element_float!(f16, F16, f16::to_f64, |v| f16::from_f32(f32_round_to_odd(
    v
)));

/// `v` as f32 rounded to odd: truncated toward zero, with the last bit set when inexact. A
/// second rounding to nearest into a type with at least two fewer significand bits (bf16,
/// f16) then gives the correctly rounded result. (`half`'s own `from_f64` rounds twice, which
/// is one ulp off when the first rounding makes a tie.)
fn f32_round_to_odd(v: f64) -> f32 {
    let r = v as f32;
    if v.is_nan() || r as f64 == v {
        return r;
    }
    let bits = if (r as f64).abs() > v.abs() {
        r.to_bits() - 1
    } else {
        r.to_bits()
    };
    f32::from_bits(bits | 1)
}

macro_rules! element_int {
    ($t:ty, $dt:ident) => {
        impl Element for $t {
            element_storage!($dt);
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn from_i64(v: i64) -> Self {
                // Wrapping, as a C cast (and PyTorch) does.
                v as $t
            }
        }
    };
}

element_int!(i64, I64);
element_int!(i32, I32);
element_int!(u8, U8);

impl Element for bool {
    element_storage!(Bool);
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
}

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`.
#[macro_export]
#[doc(hidden)]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::Bf16 => {
                type $T = half::bf16;
                $body
            }
            $crate::tensor::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::tensor::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::tensor::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::tensor::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::tensor::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_follow_pytorch() {
        assert_eq!(i32::cast_from(-2.7f32), -2);
        assert!(bool::cast_from(0.5f32));
        assert!(!bool::cast_from(0i64));
        assert_eq!(u8::cast_from(300i64), 44);
        assert_eq!(f32::cast_from(true), 1.0);
        // bf16 keeps 8 significant bits: 1 + 2^-9 rounds to 1.
        assert_eq!(bf16::cast_from(1.0 + 1.0 / 512.0f32).to_f64(), 1.0);
        // A value just above a bf16 tie rounds up; rounding through f32 first would make it
        // an exact tie and round it down to even.
        let above_tie = 1.0 + 1.0 / 256.0 + 1e-12;
        assert_eq!(
            <bf16 as Element>::from_f64(above_tie).to_f64(),
            1.0 + 1.0 / 128.0
        );
    }

    #[test]
    fn bytes_round_trip() {
        let b = Buffer::I32(vec![1, -2, 3]);
        let back = Buffer::from_le_bytes(DType::I32, &b.to_le_bytes()).unwrap();
        assert_eq!(i32::slice(&back).unwrap(), &[1, -2, 3]);
        assert!(Buffer::from_le_bytes(DType::F32, &[0, 1, 2]).is_none());
    }
}

//! [`DType`], the [`Element`] types that move between guest and host, and the 16-bit float
//! types [`Bf16`] and [`F16`].

use std::fmt;

/// The element type of a tensor, with the ABI's dtype codes.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let x = zeros(&[2, 2])?.cast(DType::Bf16)?;
/// assert_eq!(x.dtype(), DType::Bf16);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE single precision (code 0), the default float type.
    F32,
    /// bfloat16 (code 1): f32's exponent with an 8-bit significand.
    Bf16,
    /// IEEE half precision (code 2).
    F16,
    /// IEEE double precision (code 3).
    F64,
    /// Signed 64-bit integer (code 4), the index type.
    I64,
    /// Signed 32-bit integer (code 5).
    I32,
    /// Unsigned 8-bit integer (code 6).
    U8,
    /// Boolean (code 7), one byte per element holding 0 or 1.
    Bool,
}

impl DType {
    /// Every dtype, in code order.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::Bf16,
        DType::F16,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ];

    /// The ABI's code for this dtype.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::DType::Bf16.code(), 1);
    /// ```
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The dtype with an ABI code, if any.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::DType::from_code(4), Some(neuronlab::DType::I64));
    /// ```
    pub fn from_code(code: i32) -> Option<DType> {
        usize::try_from(code)
            .ok()
            .and_then(|i| DType::ALL.get(i))
            .copied()
    }

    /// The dtype's name, as the host spells it in attributes and output (`f32`, `bf16`, ...).
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::DType::Bf16.name(), "bf16");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    /// The size of one element in bytes.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::DType::F16.size(), 2);
    /// ```
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::Bf16 | DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    /// Conversion to and from the ABI's little-endian element bytes.
    pub trait Sealed: Sized {
        /// Reads one element from exactly `DTYPE.size()` bytes.
        fn decode(bytes: &[u8]) -> Self;
        /// Appends the element's bytes.
        fn encode(self, out: &mut Vec<u8>);
    }
}

pub(crate) use sealed::Sealed;

/// A Rust type that holds one element of a tensor: `f32`, `f64`, `i64`, `i32`, `u8`, `bool`,
/// [`Bf16`] and [`F16`]. [`Tensor::to_vec`](crate::Tensor::to_vec),
/// [`Tensor::item`](crate::Tensor::item) and [`from_slice`](crate::from_slice) use it.
///
/// The trait is sealed: the SDK implements it for exactly these types.
///
/// # Example
///
/// ```ignore
/// use neuronlab::{DType, Element};
///
/// assert_eq!(<i64 as Element>::DTYPE, DType::I64);
/// ```
pub trait Element: Copy + Sealed {
    /// The dtype whose elements this type holds.
    const DTYPE: DType;
}

macro_rules! le_element {
    ($($t:ty => $dtype:ident),* $(,)?) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
        }

        impl Sealed for $t {
            fn decode(bytes: &[u8]) -> Self {
                let mut raw = [0; std::mem::size_of::<$t>()];
                raw.copy_from_slice(bytes);
                <$t>::from_le_bytes(raw)
            }

            fn encode(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

le_element!(f32 => F32, f64 => F64, i64 => I64, i32 => I32, u8 => U8);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
}

impl Sealed for bool {
    fn decode(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }

    fn encode(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
}

/// A bfloat16 element, held as its 16-bit pattern.
///
/// Reading a `bf16` tensor with [`Tensor::to_vec::<Bf16>`](crate::Tensor::to_vec) gives the
/// exact stored values; [`Bf16::to_f32`] widens one exactly. The SDK does no f32 to bf16
/// rounding of its own: make an `f32` tensor and [`cast`](crate::Tensor::cast) it, so the
/// host rounds as the device would.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let h = from_slice(&[1.0f32, 0.1], &[2])?.cast(DType::Bf16)?;
/// let v: Vec<f32> = h.to_vec::<Bf16>()?.into_iter().map(Bf16::to_f32).collect();
/// assert_eq!(v, [1.0, 0.10009765625]);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Bf16(u16);

impl Bf16 {
    /// The value with this bit pattern.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::Bf16::from_bits(0x3f80).to_f32(), 1.0);
    /// ```
    pub const fn from_bits(bits: u16) -> Bf16 {
        Bf16(bits)
    }

    /// The bit pattern.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::Bf16::from_bits(0x3f80).to_bits(), 0x3f80);
    /// ```
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// The value as an f32 (exact).
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::Bf16::from_bits(0xc000).to_f32(), -2.0);
    /// ```
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

/// An IEEE half-precision element, held as its 16-bit pattern.
///
/// As with [`Bf16`], [`F16::to_f32`] widens exactly, and f32 to f16 rounding is left to the
/// host's [`cast`](crate::Tensor::cast).
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let h = from_slice(&[1.5f32], &[1])?.cast(DType::F16)?;
/// assert_eq!(h.item::<F16>()?.to_f32(), 1.5);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct F16(u16);

impl F16 {
    /// The value with this bit pattern.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::F16::from_bits(0x3c00).to_f32(), 1.0);
    /// ```
    pub const fn from_bits(bits: u16) -> F16 {
        F16(bits)
    }

    /// The bit pattern.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::F16::from_bits(0x3c00).to_bits(), 0x3c00);
    /// ```
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// The value as an f32 (exact, including subnormals, infinities and NaN payloads).
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::F16::from_bits(0x0001).to_f32(), 2f32.powi(-24));
    /// ```
    pub fn to_f32(self) -> f32 {
        let sign = u32::from(self.0 & 0x8000) << 16;
        let exponent = u32::from((self.0 >> 10) & 0x1f);
        let mantissa = u32::from(self.0 & 0x3ff);
        match exponent {
            0 => {
                // Zero or subnormal: mantissa * 2^-24, exact in f32.
                let magnitude = mantissa as f32 * (1.0 / 16_777_216.0);
                f32::from_bits(sign | magnitude.to_bits())
            }
            0x1f => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
            _ => f32::from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13)),
        }
    }
}

macro_rules! half_element {
    ($($t:ident => $dtype:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
        }

        impl Sealed for $t {
            fn decode(bytes: &[u8]) -> Self {
                $t(u16::from_le_bytes([bytes[0], bytes[1]]))
            }

            fn encode(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.0.to_le_bytes());
            }
        }

        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.to_f32(), f)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.to_f32(), f)
            }
        }

        impl From<$t> for f32 {
            fn from(v: $t) -> f32 {
                v.to_f32()
            }
        }
    )*};
}

half_element!(Bf16 => Bf16, F16 => F16);

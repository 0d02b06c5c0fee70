//! Element types and PyTorch's type promotion rules.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The element type of a tensor.
///
/// The set covers what training and inference on a NeuronCore compute in. `Bf16` and `F16` are
/// stored as 16-bit values and computed in f32, then rounded, as PyTorch does on CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Boolean, one byte per element.
    Bool,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer (the index type).
    I64,
    /// IEEE half precision.
    F16,
    /// bfloat16: f32's exponent with an 8-bit significand.
    Bf16,
    /// IEEE single precision, the default float type.
    F32,
    /// IEEE double precision.
    F64,
}

/// The three promotion categories. A higher category always wins, whatever the width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// `bool`.
    Bool,
    /// `u8`, `i32`, `i64`.
    Integer,
    /// `f16`, `bf16`, `f32`, `f64`.
    Float,
}

impl DType {
    /// Every dtype, in a stable order (used by listings and tests).
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

    /// The default floating type, as `torch.get_default_dtype()`.
    pub const DEFAULT_FLOAT: DType = DType::F32;

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The short name used everywhere (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// A stable small integer, used by the guest ABI.
    pub fn code(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::Bf16 => 1,
            DType::F16 => 2,
            DType::F64 => 3,
            DType::I64 => 4,
            DType::I32 => 5,
            DType::U8 => 6,
            DType::Bool => 7,
        }
    }

    /// The inverse of [`DType::code`].
    pub fn from_code(code: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.code() == code)
    }

    /// The promotion category of this dtype.
    pub fn category(self) -> Category {
        match self {
            DType::Bool => Category::Bool,
            DType::U8 | DType::I32 | DType::I64 => Category::Integer,
            _ => Category::Float,
        }
    }

    /// True for the four floating types.
    pub fn is_float(self) -> bool {
        self.category() == Category::Float
    }

    /// The dtype an op that always computes in floating point gives for this input:
    /// itself when floating, else the default float (as `torch.exp` on an int tensor).
    pub fn to_float(self) -> DType {
        if self.is_float() {
            self
        } else {
            DType::DEFAULT_FLOAT
        }
    }

    /// `torch.promote_types`: the smallest dtype both values fit in.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a.category(), b.category()) {
            (ca, cb) if ca != cb => {
                if ca > cb {
                    a
                } else {
                    b
                }
            }
            (Category::Float, _) => match (a, b) {
                // Neither half type holds the other: both go to f32, as in PyTorch.
                (F16, Bf16) | (Bf16, F16) => F32,
                _ => a.max(b),
            },
            // Integers (u8 < i32 < i64 in the enum order) and bools.
            _ => a.max(b),
        }
    }

    /// `torch.result_type` for a list of operands given as `(dtype, is_zero_dim)`.
    ///
    /// Dimensioned tensors take part first; a zero-dim tensor changes the result only when it is
    /// of a higher category (so `f16_tensor + f64_scalar_tensor` stays f16, as in PyTorch).
    pub fn result_type(operands: &[(DType, bool)]) -> Option<DType> {
        let fold = |zero_dim: bool| {
            operands
                .iter()
                .filter(|(_, z)| *z == zero_dim)
                .map(|(d, _)| *d)
                .reduce(DType::promote)
        };
        match (fold(false), fold(true)) {
            // A zero-dim operand of a higher category decides the result, at the width that
            // holds every zero-dim operand of that category (i32[3] + f64[] is f64).
            (Some(dim), Some(_)) => {
                let top = operands
                    .iter()
                    .filter(|(_, z)| *z)
                    .map(|(d, _)| d.category())
                    .max()
                    .expect("a zero-dim operand exists");
                if top > dim.category() {
                    operands
                        .iter()
                        .filter(|(d, z)| *z && d.category() == top)
                        .map(|(d, _)| *d)
                        .reduce(DType::promote)
                } else {
                    Some(dim)
                }
            }
            (a, b) => a.or(b),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for an unknown dtype name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDType(pub String);

impl fmt::Display for UnknownDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown dtype '{}': expected one of f32, bf16, f16, f64, i64, i32, u8, bool",
            self.0
        )
    }
}

impl FromStr for DType {
    type Err = UnknownDType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let d = match s {
            "f32" | "float32" | "float" => DType::F32,
            "bf16" | "bfloat16" => DType::Bf16,
            "f16" | "float16" | "half" => DType::F16,
            "f64" | "float64" | "double" => DType::F64,
            "i64" | "int64" | "long" => DType::I64,
            "i32" | "int32" | "int" => DType::I32,
            "u8" | "uint8" => DType::U8,
            "bool" => DType::Bool,
            other => return Err(UnknownDType(other.to_string())),
        };
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::DType::*;
    use super::*;

    #[test]
    fn promotion_follows_pytorch() {
        // Values from torch.promote_types.
        assert_eq!(DType::promote(Bool, U8), U8);
        assert_eq!(DType::promote(U8, I32), I32);
        assert_eq!(DType::promote(I32, I64), I64);
        assert_eq!(DType::promote(I64, F16), F16);
        assert_eq!(DType::promote(I64, Bf16), Bf16);
        assert_eq!(DType::promote(F16, Bf16), F32);
        assert_eq!(DType::promote(Bf16, F32), F32);
        assert_eq!(DType::promote(F32, F64), F64);
        assert_eq!(DType::promote(Bool, F16), F16);
    }

    #[test]
    fn zero_dim_operands_only_win_by_category() {
        assert_eq!(DType::result_type(&[(F16, false), (F64, true)]), Some(F16));
        assert_eq!(DType::result_type(&[(I32, false), (I64, true)]), Some(I32));
        assert_eq!(DType::result_type(&[(I32, false), (F64, true)]), Some(F64));
        assert_eq!(
            DType::result_type(&[(U8, false), (Bf16, true), (F16, true)]),
            Some(F32)
        );
        assert_eq!(DType::result_type(&[(U8, false), (I32, true)]), Some(U8));
        assert_eq!(DType::result_type(&[(I32, true), (F64, true)]), Some(F64));
        assert_eq!(DType::result_type(&[(Bool, false), (I64, true)]), Some(I64));
    }

    #[test]
    fn names_and_codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
            assert_eq!(DType::from_code(d.code()), Some(d));
        }
        assert!("f8"
            .parse::<DType>()
            .unwrap_err()
            .to_string()
            .contains("expected one of"));
    }
}

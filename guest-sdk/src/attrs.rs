//! [`Attrs`]: op attributes in the ABI's binary encoding.

use crate::dtype::DType;

/// Op attributes, encoded as ABI.md's "Attribute encoding" while they are added.
///
/// Each call appends one entry: `kind:u8 name_len:u8 name payload`, with little-endian
/// payloads (kind 1 an `i64`, kind 2 an `f64`, kind 3 a `u32` count and that many `i64`s,
/// kind 4 a `u32` length and UTF-8 bytes). When a name is given twice, the host uses the last.
///
/// The typed op methods build these for you; `Attrs` is for [`call`](crate::call), which
/// runs any op by name.
///
/// # Panics
///
/// Every builder method panics when `name` is longer than 255 bytes, which no op's attribute
/// is.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let x = randn(&[4, 8])?;
/// let attrs = Attrs::new().ints("dims", &[1]).int("keepdim", 1);
/// let out = neuronlab::call("sum", &[&x], &attrs)?;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    bytes: Vec<u8>,
}

const INT: u8 = 1;
const FLOAT: u8 = 2;
const INTS: u8 = 3;
const STRING: u8 = 4;

impl Attrs {
    /// No attributes.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert!(neuronlab::Attrs::new().as_bytes().is_empty());
    /// ```
    pub fn new() -> Attrs {
        Attrs::default()
    }

    /// Adds an int attribute (kind 1). The host also accepts an int where a float or an int
    /// list is expected.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let attrs = neuronlab::Attrs::new().int("dim", -1);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn int(self, name: &str, value: i64) -> Attrs {
        self.entry(INT, name, &value.to_le_bytes())
    }

    /// Adds a float attribute (kind 2).
    ///
    /// # Example
    ///
    /// ```ignore
    /// let attrs = neuronlab::Attrs::new().float("eps", 1e-6);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn float(self, name: &str, value: f64) -> Attrs {
        self.entry(FLOAT, name, &value.to_le_bytes())
    }

    /// Adds an int list attribute (kind 3), for dims, shapes and pads.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let attrs = neuronlab::Attrs::new().ints("shape", &[2, -1]);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn ints(self, name: &str, values: &[i64]) -> Attrs {
        let mut payload = Vec::with_capacity(4 + 8 * values.len());
        payload.extend_from_slice(&payload_len(values.len()).to_le_bytes());
        for v in values {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        self.entry(INTS, name, &payload)
    }

    /// Adds a string attribute (kind 4), for modes such as `approximate = "tanh"`.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let attrs = neuronlab::Attrs::new().str("reduction", "sum");
    /// ```
    #[must_use]
    #[track_caller]
    pub fn str(self, name: &str, value: &str) -> Attrs {
        let mut payload = Vec::with_capacity(4 + value.len());
        payload.extend_from_slice(&payload_len(value.len()).to_le_bytes());
        payload.extend_from_slice(value.as_bytes());
        self.entry(STRING, name, &payload)
    }

    /// Adds a dtype attribute: a string holding the dtype's name, as the ABI passes dtypes.
    ///
    /// # Example
    ///
    /// ```ignore
    /// use neuronlab::{Attrs, DType};
    ///
    /// assert_eq!(Attrs::new().dtype("dtype", DType::Bf16), Attrs::new().str("dtype", "bf16"));
    /// ```
    #[must_use]
    #[track_caller]
    pub fn dtype(self, name: &str, value: DType) -> Attrs {
        self.str(name, value.name())
    }

    /// The encoded entries, as `op_call` takes them.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let attrs = neuronlab::Attrs::new().int("dim", 0);
    /// assert_eq!(attrs.as_bytes()[..5], [1, 3, b'd', b'i', b'm']);
    /// ```
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    #[track_caller]
    fn entry(mut self, kind: u8, name: &str, payload: &[u8]) -> Attrs {
        let Ok(name_len) = u8::try_from(name.len()) else {
            panic!("attribute name '{name}' is longer than the ABI's 255 bytes");
        };
        self.bytes.push(kind);
        self.bytes.push(name_len);
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.extend_from_slice(payload);
        self
    }
}

/// A list or string length as the encoding's `u32`. On wasm32 every length fits.
fn payload_len(len: usize) -> u32 {
    u32::try_from(len).expect("a wasm32 length fits a u32")
}

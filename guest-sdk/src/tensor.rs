//! [`Tensor`]: an owned handle to a tensor that lives on the host, and [`from_slice`].

use std::fmt;

use crate::dtype::{DType, Element};
use crate::error::{Error, ErrorKind, Result};
use crate::sys;

/// A tensor on the host, held by the guest as a handle.
///
/// Dropping a `Tensor` frees its handle; cloning makes a new handle to the same (immutable)
/// data without copying it. Ops are methods (`a.matmul(&b)?`) or, for ops with no tensor
/// input or a list of them, free functions ([`zeros`](crate::zeros), [`cat`](crate::cat));
/// every op in the host's registry has one, generated from it (see [`ops`](crate::ops)).
///
/// `Display` prints the tensor as numpy does, with the host's summarization of large
/// tensors: `println!("{x}")` with [`neuronlab::println!`](crate::println) shows it in the
/// cell. `Debug` shows the shape, dtype and handle.
///
/// The arithmetic operators `+ - * /` and unary `-` work on `Tensor` and `&Tensor`. They
/// panic with the host's message where the op fails (say, shapes that do not broadcast): the
/// panic stops the guest, and the host reports it with that message. Use the methods
/// ([`Tensor::add`] and so on), which return a [`Result`], to handle the error instead.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
/// use neuronlab::println;
///
/// let a = arange_with(6.0, ArangeOptions::new().dtype(DType::F32))?.reshape(&[2, 3])?;
/// let b = from_slice(&[10.0f32, 20.0, 30.0], &[3])?;
/// let c = &a + &b; // broadcasts [2, 3] + [3]
/// println!("{c}");
/// assert_eq!(c.shape(), [2, 3]);
/// ```
pub struct Tensor {
    handle: u32,
}

impl Tensor {
    /// Takes ownership of a handle the host just returned.
    pub(crate) fn from_handle(handle: u32) -> Tensor {
        Tensor { handle }
    }

    /// The handle, for passing the tensor to an import.
    pub(crate) fn handle(&self) -> u32 {
        self.handle
    }

    /// The shape: one size per dim, outermost first (`[]` for a scalar).
    ///
    /// # Panics
    ///
    /// If the host rejects the handle, which a live `Tensor` never is. The same holds for
    /// [`rank`](Tensor::rank), [`dtype`](Tensor::dtype), [`numel`](Tensor::numel),
    /// [`nbytes`](Tensor::nbytes) and [`device`](Tensor::device).
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::zeros(&[2, 3])?.shape(), [2, 3]);
    /// ```
    #[track_caller]
    pub fn shape(&self) -> Vec<i64> {
        live(sys::tensor_shape(self.handle))
    }

    /// The number of dims.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::zeros(&[2, 3])?.rank(), 2);
    /// ```
    #[track_caller]
    pub fn rank(&self) -> usize {
        live(sys::tensor_rank(self.handle))
    }

    /// The element type.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::zeros(&[2])?.dtype(), neuronlab::DType::F32);
    /// ```
    #[track_caller]
    pub fn dtype(&self) -> DType {
        let code = live(sys::tensor_dtype(self.handle));
        match DType::from_code(code) {
            Some(dtype) => dtype,
            None => panic!("the host reported dtype code {code}, which ABI 1 lacks"),
        }
    }

    /// The number of elements.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::zeros(&[2, 3])?.numel(), 6);
    /// ```
    #[track_caller]
    pub fn numel(&self) -> i64 {
        live(sys::tensor_numel(self.handle))
    }

    /// The size of the dense data in bytes (`numel * dtype.size()`).
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::zeros(&[2, 3])?.nbytes(), 24);
    /// ```
    #[track_caller]
    pub fn nbytes(&self) -> i64 {
        live(sys::tensor_nbytes(self.handle))
    }

    /// The index of the NeuronCore the tensor lives on (`neuron:N`).
    ///
    /// # Example
    ///
    /// ```ignore
    /// neuronlab::println!("on neuron:{}", x.device());
    /// ```
    #[track_caller]
    pub fn device(&self) -> u32 {
        live(sys::tensor_device(self.handle))
    }

    /// The elements in row-major order.
    ///
    /// `T` must be the tensor's dtype: `f32`, `f64`, `i64`, `i32`, `u8`, `bool`, or [`Bf16`]
    /// and [`F16`] (their bit patterns; `to_f32` widens them). Anything else is an
    /// [`ErrorKind::Invalid`] error that suggests a [`cast`](Tensor::cast).
    ///
    /// [`Bf16`]: crate::Bf16
    /// [`F16`]: crate::F16
    ///
    /// # Example
    ///
    /// ```ignore
    /// let x = neuronlab::arange(4.0)?; // i64, as all of start, end and step are integral
    /// assert_eq!(x.to_vec::<i64>()?, [0, 1, 2, 3]);
    /// ```
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let dtype = self.dtype();
        if dtype != T::DTYPE {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "the tensor's dtype is {dtype}, not {}; cast it first: .cast(DType::{:?})",
                    T::DTYPE,
                    T::DTYPE
                ),
            ));
        }
        let bytes = sys::tensor_read(self.handle)?;
        Ok(bytes.chunks_exact(dtype.size()).map(T::decode).collect())
    }

    /// The value of a one-element tensor (of any shape, such as `[]` or `[1, 1]`).
    ///
    /// `T` must be the tensor's dtype, as for [`to_vec`](Tensor::to_vec); a tensor with
    /// another number of elements is an [`ErrorKind::Invalid`] error.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let total = neuronlab::ones(&[2, 3])?.sum()?.item::<f32>()?;
    /// assert_eq!(total, 6.0);
    /// ```
    #[track_caller]
    pub fn item<T: Element>(&self) -> Result<T> {
        let numel = self.numel();
        if numel != 1 {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "item() needs a tensor with one element, this one has shape {:?} \
                     ({numel} elements)",
                    self.shape()
                ),
            ));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// Shows the tensor richly: an HTML table in a notebook, numpy-style text in the REPL.
    ///
    /// # Example
    ///
    /// ```ignore
    /// neuronlab::randn(&[4, 4])?.display()?;
    /// ```
    #[track_caller]
    pub fn display(&self) -> Result<()> {
        sys::tensor_display(self.handle)
    }

    /// A new handle to the same tensor, or the host's error (such as a full handle table).
    /// `clone` does the same and panics on error.
    ///
    /// # Example
    ///
    /// ```ignore
    /// let y = x.try_clone()?;
    /// ```
    #[track_caller]
    pub fn try_clone(&self) -> Result<Tensor> {
        sys::tensor_clone(self.handle).map(Tensor::from_handle)
    }
}

/// The value of a metadata query on a live handle, which cannot fail.
#[track_caller]
fn live<T>(result: Result<T>) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("a live tensor's metadata query failed: {e}"),
    }
}

/// A tensor from row-major data and a shape; `data.len()` must equal the shape's product.
///
/// The element type gives the dtype: `&[f32]` makes an `f32` tensor, `&[Bf16]` a `bf16` one
/// (see [`Element`]).
///
/// # Example
///
/// ```ignore
/// let x = neuronlab::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let mask = neuronlab::from_slice(&[true, false], &[2])?;
/// let scalar = neuronlab::from_slice(&[7i64], &[])?;
/// ```
#[track_caller]
pub fn from_slice<T: Element>(data: &[T], shape: &[i64]) -> Result<Tensor> {
    let mut bytes = Vec::with_capacity(std::mem::size_of_val(data));
    for &v in data {
        v.encode(&mut bytes);
    }
    sys::tensor_create(T::DTYPE.code(), shape, &bytes).map(Tensor::from_handle)
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // A live handle is always dropped successfully; there is nothing to do on error.
        let _ = sys::tensor_drop(self.handle);
    }
}

impl Clone for Tensor {
    /// A new handle to the same data (nothing is copied).
    ///
    /// # Panics
    ///
    /// With the host's message when it cannot issue another handle; see
    /// [`Tensor::try_clone`].
    #[track_caller]
    fn clone(&self) -> Tensor {
        match self.try_clone() {
            Ok(t) => t,
            Err(e) => panic!("Tensor::clone failed: {e}"),
        }
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match sys::tensor_format(self.handle) {
            Ok(text) => f.write_str(&text),
            Err(e) => write!(f, "<tensor {:#x}: {e}>", self.handle),
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape())
            .field("dtype", &format_args!("{}", self.dtype()))
            .field("handle", &format_args!("{:#x}", self.handle))
            .finish()
    }
}

/// Unwraps an operator's result, panicking at the caller's location with the host's message.
#[track_caller]
fn operator(result: Result<Tensor>) -> Tensor {
    match result {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

macro_rules! binary_operator {
    ($($trait:ident, $method:ident;)*) => {$(
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;

            #[doc = concat!("Calls [`Tensor::", stringify!($method), "`]; panics with the host's message on error.")]
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                operator(Tensor::$method(self, rhs))
            }
        }

        impl std::ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;

            #[doc = concat!("Calls [`Tensor::", stringify!($method), "`]; panics with the host's message on error.")]
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                operator(Tensor::$method(self, &rhs))
            }
        }

        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;

            #[doc = concat!("Calls [`Tensor::", stringify!($method), "`]; panics with the host's message on error.")]
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                operator(Tensor::$method(&self, rhs))
            }
        }

        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Tensor;

            #[doc = concat!("Calls [`Tensor::", stringify!($method), "`]; panics with the host's message on error.")]
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                operator(Tensor::$method(&self, &rhs))
            }
        }
    )*};
}

binary_operator! {
    Add, add;
    Sub, sub;
    Mul, mul;
    Div, div;
}

impl std::ops::Neg for &Tensor {
    type Output = Tensor;

    /// Calls [`Tensor::neg`]; panics with the host's message on error.
    #[track_caller]
    fn neg(self) -> Tensor {
        operator(Tensor::neg(self))
    }
}

impl std::ops::Neg for Tensor {
    type Output = Tensor;

    /// Calls [`Tensor::neg`]; panics with the host's message on error.
    #[track_caller]
    fn neg(self) -> Tensor {
        operator(Tensor::neg(&self))
    }
}

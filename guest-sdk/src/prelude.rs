//! The names most experiments use: `use neuronlab::prelude::*;`.
//!
//! It holds [`Tensor`], [`DType`], the error types, [`Attrs`] and [`call`], [`from_slice`],
//! the 16-bit float types, compiling ([`compile`], [`lazy`]), the [`dist`] module with its
//! types ([`Group`], [`DeviceMesh`], [`DTensor`], [`Placement`], [`ReduceOp`]), the [`plot`],
//! [`fs`], [`checkpoint`] and [`tokenizer`] modules, [`DisplayHandle`] and [`clear_output`], and every
//! generated op function and options type (such as [`zeros`], [`cat`] and [`SumOptions`]).
//!
//! It does not hold the output macros: a glob import cannot shadow std's `println!`, so
//! import them by name.
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::prelude::*;
//! use neuronlab::{eprintln, println};
//!
//! let x = arange(10.0)?;
//! println!("{x}");
//! ```

pub use crate::ops::*;
pub use crate::optim::{
    clip_grad_norm_, cosine_schedule_with_warmup, linear_schedule_with_warmup, Adam, AdamConfig,
    AdamW, AdamWConfig, LrScheduler, Optimizer, SGDConfig, SGD,
};
pub use crate::{
    call, checkpoint, clear_output, compile, compile_with, dist, from_slice, fs, grad, lazy,
    no_grad, plot, sync, tokenizer, Attrs, Bf16, CompileOptions, Compiled, DTensor, DType,
    DeviceMesh, DisplayHandle, Error, ErrorKind, Group, Placement, ReduceOp, Result, Tensor, F16,
};

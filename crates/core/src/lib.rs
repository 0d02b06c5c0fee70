//! `neuronlab-core`: the eager Neuron runtime that every other neuronlab crate builds on.
//!
//! - [`dtype`]: the element types and PyTorch's type promotion.
//! - [`tensor`]: strided tensors with views, storage, numpy-style formatting.
//! - [`ops`]: the op registry (the single source of truth for an op) and the CPU kernels.
//! - [`device`]: the simulated Neuron topology, HBM accounting and the roofline cost model.
//! - [`events`]: the typed event stream, its bus, summaries and Chrome trace export.
//! - [`runtime`]: the eager runtime that ties them together, with the one dispatch path that
//!   every op run goes through.
//! - [`autograd`]: reverse-mode gradients recorded at the dispatch path, and the table of
//!   backward formulas.
//! - [`cancel`]: cooperative cancellation of long kernels.
//! - [`error`]: the error type of every fallible host call.
//! - [`paths`]: the cache and data folders, named once.
//! - [`testing`]: a seeded generator for reproducible tests.

#![deny(missing_docs)]

pub mod activity;
pub mod allocator;
pub mod autograd;
pub mod cancel;
pub mod device;
pub mod dtype;
pub mod error;
pub mod events;
pub mod ops;
pub mod paths;
pub mod runtime;
pub mod tensor;
pub mod testing;

pub use dtype::DType;
pub use error::{Error, Result};
pub use runtime::Runtime;
pub use tensor::Tensor;

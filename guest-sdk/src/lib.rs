//! `neuronlab`: the guest SDK for neuronlab experiments.
//!
//! An experiment is a `wasm32-unknown-unknown` cdylib that the neuronlab host runs in a
//! sandbox. Tensors live on the host, on a simulated NeuronCore; the guest holds them as
//! [`Tensor`] handles and runs ops through the host's op registry. This crate wraps the guest
//! ABI (`guest-sdk/ABI.md`, version 1.10) in safe Rust:
//!
//! - [`Tensor`]: shape, dtype, [`to_vec`](Tensor::to_vec), [`item`](Tensor::item),
//!   numpy-style `Display`, and the operators `+ - * /` and unary `-`.
//! - Every op of the registry, generated from it ([`ops`]): methods such as
//!   [`Tensor::matmul`] and [`Tensor::softmax`], free functions for creation ([`zeros`],
//!   [`randn`]) and list ops ([`cat`]), and [`call`] for any op by name with [`Attrs`].
//! - [`from_slice`] to make a tensor from guest data, and [`DType`] with the [`Element`]
//!   types.
//! - Output to the cell: [`println!`], [`print!`], [`eprintln!`], [`eprint!`], [`dbg!`],
//!   [`display_html`], [`display_svg`], [`display`], [`Tensor::display`]; a
//!   [`DisplayHandle`] to update a display in place, and [`clear_output`].
//! - Clocks: [`clock`] for host time, [`device_time`] for the modeled device time of what ran
//!   on this guest's core (the "modeled" figures of the cell summary), [`collective_time`]
//!   for the collectives' time and [`exposed_collective_time`] for the part of it no compute
//!   overlapped; [`peak_flops`] for the core's published matmul peak.
//! - [`memory`]: what the core held at its peak, by role (parameters, gradients, optimizer
//!   state, activations, collective buffers).
//! - [`plot`]: line, bar and heatmap plots with labelled axes and units, drawn by the host
//!   (SVG in a notebook, text in the REPL).
//! - [`compile`] for compiled functions with guards and recompile reasons, [`lazy`] and
//!   [`sync`] for lazy mode.
//! - [`dist`] for runs of several ranks (`neuronlab run --nproc N`): the rank and world size,
//!   process [`Group`]s and the collectives ([`dist::all_reduce`] and the rest), a
//!   [`DeviceMesh`] and distributed tensors ([`DTensor`] with [`Placement`]s).
//! - [`vars`] for session variables: tensors and plain values a notebook or REPL cell leaves
//!   for later cells ([`vars::set_tensor`], [`vars::tensor`], [`vars::set_value`],
//!   [`vars::value`]).
//! - [`fs`] for files in the folders the user granted (`--dir`, `%dir`):
//!   [`fs::read_file`], [`fs::read_range`], [`fs::write_file`], [`fs::list_dir`]; and
//!   [`checkpoint`] for safetensors checkpoints there ([`checkpoint::load`],
//!   [`checkpoint::save`], [`checkpoint::save_sharded`]).
//! - [`tokenizer`] for Hugging Face tokenizers on the host, from a `tokenizer.json` in a
//!   granted folder: [`Tokenizer::from_file`](tokenizer::Tokenizer::from_file),
//!   [`encode`](tokenizer::Tokenizer::encode) into `i64` ids and
//!   [`decode`](tokenizer::Tokenizer::decode), with the ids Python's `tokenizers` gives.
//! - [`main!`] to export an experiment's `run` entry point, with a panic hook that reports
//!   panics in the cell; [`args`] for what follows `--` on `neuronlab run`.
//!
//! # Errors
//!
//! Named functions and methods return [`Result`]: an [`Error`] carries the ABI error code and
//! the host's message (`ERR_OP: matmul(a: f32[2, 3], b: f32[2, 3]): ...`). The operators and
//! `Clone` cannot return one, so they panic with the same message; the panic stops the guest
//! and the host shows it.
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::prelude::*;
//! use neuronlab::println;
//!
//! fn run() -> neuronlab::Result<()> {
//!     let x = randn_with(&[2, 4], RandnOptions::new().seed(7))?;
//!     let w = ones(&[4, 3])?;
//!     let y = x.matmul(&w)?.softmax()?;
//!     println!("{y}");
//!     if let Err(e) = x.add(&w) {
//!         println!("caught: {e}");
//!     }
//!     Ok(())
//! }
//!
//! neuronlab::main!(run);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-unknown-unknown` as a `cdylib`; the
//! module exports `memory`, `run` and `neuronlab_abi_version`, and imports only from
//! `neuronlab`.

#![warn(missing_docs)]

mod attrs;
pub mod autograd;
pub mod checkpoint;
mod compile;
pub mod dist;
mod dtype;
mod entry;
mod error;
pub mod fs;
mod json;
pub mod memory;
pub mod nn;
mod op;
pub mod ops;
pub mod optim;
mod output;
pub mod plot;
pub mod prelude;
mod sys;
mod tensor;
pub mod tokenizer;
pub mod vars;

pub use attrs::Attrs;
pub use autograd::{grad, is_grad_enabled, no_grad};
pub use compile::{
    compile, compile_with, lazy, neuronlab_trampoline, sync, CompileOptions, CompileStats, Compiled,
};
pub use dist::{DTensor, DeviceMesh, Group, Placement, ReduceOp};
pub use dtype::{Bf16, DType, Element, F16};
pub use entry::{args, entry, neuronlab_abi_version, ABI_VERSION};
pub use error::{Error, ErrorKind, Result};
pub use op::call;
pub use ops::*;
pub use output::{
    clear_output, clock, collective_time, device_time, display, display_html, display_svg,
    exposed_collective_time, peak_flops, DisplayHandle, Displayable, Html, Svg,
};
pub use tensor::{from_slice, Tensor};

/// What the exported macros expand to. Not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::output::print;
    pub use crate::sys::Stream;
    pub use crate::vars::{
        show_text, KeepLocal, KeepPlain, KeepTensor, ShowDebug, ShowDisplay, ShowOpaque, ShowRich,
        ShowUnit, Wrap,
    };
}

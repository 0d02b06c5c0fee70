//! The sandbox: WebAssembly guests that call the host's tensor APIs through the ABI in
//! guest-sdk/ABI.md.
//!
//! - [`Sandbox`]: one wasmtime engine per process, a linker with the `neuronlab` imports, an
//!   epoch thread for deadlines and interrupts, and an on-disk cache of compiled modules.
//! - [`Guest`]: one store and instance: its handle table, limits and output sink. Calls run on
//!   a thread with a large native stack, so runaway recursion traps instead of aborting.
//! - Every host function bounds-checks guest pointers, validates handles and returns a status;
//!   host errors never trap and never panic (see `abi.rs`).

mod abi;
mod attrs;
mod cache;
mod dist;
mod error;
mod guest;
mod handles;
mod limits;
mod output;
mod tracing;
mod vars;

pub use abi::{ErrorCode, IMPORTS, MODULE};
pub use cache::{cache_root, data_root, ModuleSource};
pub use dist::DistValue;
pub use error::{GuestError, GuestErrorKind};
pub use guest::{Guest, GuestModule, InterruptHandle, Sandbox, ABI_MAJOR, ABI_MINOR};
pub use handles::{HandleError, HandleTable, MAX_HANDLES};
pub use limits::Limits;
pub use output::{
    GuestOutput, OutputSink, CLEAR_OUTPUT_MIME, DISPLAY_ID_MIME, MAX_DISPLAY_ID, RESULT_MIME,
    UPDATE_DISPLAY_MIME,
};

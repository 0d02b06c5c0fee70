//! The sandbox: WebAssembly guests that call the host's tensor APIs through the ABI in
//! guest-sdk/ABI.md.
//!
//! - [`Sandbox`]: one wasmtime engine per process, a linker with the `neuronlab` imports, an
//!   epoch thread for deadlines and interrupts, and an on-disk cache of compiled modules.
//! - [`Guest`]: one store and instance: its handle table, limits and output sink. Calls run on
//!   a thread with a large native stack, so runaway recursion traps instead of aborting.
//! - [`abi`]: the host side of the ABI, one import table. Every host function bounds-checks
//!   guest pointers, validates handles and returns a status; host errors never trap and never
//!   panic.
//! - [`spmd`]: one module launched as N ranks; [`var_store`]: the session's variables;
//!   [`grants`]: the folders guests may reach, and the check of every path against them;
//!   [`checkpoint`]: safetensors files and sharded folders, loaded onto a core and saved.

#![deny(missing_docs)]

pub mod abi;
pub mod checkpoint;
pub mod grants;
mod remote_ranks;
pub mod spmd;
pub mod var_store;

mod attr_codec;
mod cache;
mod collective_grad;
mod compile_state;
mod function_cache;
mod grad_trace;
mod guest;
mod guest_error;
mod guest_output;
mod handles;
mod limits;
mod status;
mod values;

pub use cache::ModuleSource;
pub use guest::{Guest, GuestModule, InterruptHandle, Sandbox, ABI_MAJOR, ABI_MINOR};
pub use guest_error::{GuestError, GuestErrorKind, Reported};
pub use guest_output::{
    GuestOutput, OutputSink, CLEAR_OUTPUT_MIME, DISPLAY_ID_MIME, MAX_DISPLAY_ID, RESULT_MIME,
    UPDATE_DISPLAY_MIME,
};
pub use limits::Limits;
pub use status::ErrorCode;
pub use values::DistValue;

use std::sync::Arc;

use grants::Grants;
use neuronlab_compile::recorder::ProgramCache;
use var_store::VarStore;

/// What the guests of one session share: its variables, its compiled programs and the folders
/// the user granted. The default is a fresh store, an in-memory program cache and no folder,
/// as for a guest on its own.
#[derive(Clone, Default)]
pub struct Shared {
    /// The session's variables, which `var_*` imports read and write.
    pub vars: Arc<VarStore>,
    /// The session's compiled programs, by graph hash (on disk too when it has a folder).
    pub programs: Arc<ProgramCache>,
    /// The folders guests may read (and write), which the `fs_*` and `ckpt_*` imports check
    /// every path against.
    pub files: Arc<Grants>,
    /// The run's arguments for its guests (what follows `--` on `neuronlab run`), which the
    /// `args` import returns; none in cells.
    pub args: Arc<[String]>,
}

//! The host side of the guest ABI (guest-sdk/ABI.md): the `neuronlab` imports.
//!
//! Every import returns a status and never traps: guest pointers are bounds-checked (with
//! overflow), handles are validated, and failures set the message `last_error` returns.
//!
//! - [`table`]: the [`Import`] row, and the `imports!` macro each group declares its rows with.
//! - `context.rs`: the guest's host state and the checked helpers every import uses.
//! - one file per group: `sys`, `tensor`, `op`, `compile`, `dist`, `vars`, `grad`, `fs`, `ckpt`,
//!   `tok`.
//!
//! [`IMPORTS`] is the one list: the load-time check of a module's imports, the linker, and
//! the test that keeps ABI.md, `neuronlab.h` and the Rust SDK's externs in step all read it.

mod ckpt;
mod compile;
pub(crate) mod context;
mod dist;
mod fs;
mod grad;
mod op;
mod sys;
pub mod table;
mod tensor;
mod tok;
mod vars;

use wasmtime::Linker;

use context::GuestState;
pub use table::{Group, Import, WasmType, MODULE};

/// Every import this host provides, group by group, in ABI.md's order.
pub static IMPORTS: [&[Import]; 10] = [
    sys::SYS,
    tensor::TENSOR,
    op::OP,
    compile::COMPILE,
    dist::DIST,
    vars::VARS,
    grad::GRAD,
    fs::FS,
    ckpt::CKPT,
    tok::TOK,
];

/// Every import, in order.
pub fn imports() -> impl Iterator<Item = &'static Import> {
    IMPORTS.iter().flat_map(|group| group.iter())
}

/// The import called `name`, if the host provides one.
pub fn import(name: &str) -> Option<&'static Import> {
    imports().find(|i| i.name == name)
}

/// Defines every import on `linker`.
pub(crate) fn define(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    imports().try_for_each(|i| (i.define)(linker))
}

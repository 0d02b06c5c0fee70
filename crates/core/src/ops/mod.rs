//! Ops: the registry (the single source of truth for every op) and the CPU kernels behind it.
//!
//! Each submodule contributes its ops' [`registry::OpDef`]s; [`registry::Registry::global`]
//! collects them. Adding an op means adding one `OpDef` in the module of its family.

pub mod attrs;
mod common;
pub mod creation;
mod elementwise;
mod gemm;
mod index;
pub mod math;
mod matmul;
mod nn;
mod optim;
mod reduce;
pub mod registry;
mod shape;
mod vmath;

pub use attrs::{AttrValue, Attrs};
// For the fused executor in `neuronlab_compile`.
pub use common::{broadcast_strides, cast_block};
pub use matmul::RowBands;
pub use registry::{OpDef, OpGroup, OpId, Registry};

impl Registry {
    /// The process-wide registry: every family's ops, in this order.
    pub fn global() -> &'static Registry {
        static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
        REGISTRY.get_or_init(|| {
            let families = [
                creation::defs(),
                shape::defs(),
                elementwise::defs(),
                reduce::defs(),
                matmul::defs(),
                nn::defs(),
                index::defs(),
                optim::defs(),
            ];
            Registry::new(families.into_iter().flatten().collect())
        })
    }
}

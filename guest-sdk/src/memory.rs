//! What this guest's core holds, by role (ABI.md "Memory roles"): parameters, gradients,
//! optimizer state, activations saved for backward, collective buffers, and the rest.
//!
//! The host names every role but one by itself; [`Tensor::set_memory_role`] is how the
//! optimizers here mark their state, and how a guest marks state of its own.
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::memory::{at_peak, MemoryRole};
//!
//! let activations = at_peak(MemoryRole::Activations)?;
//! ```

use crate::error::Result;
use crate::sys;
use crate::tensor::Tensor;

/// What a core's bytes hold. The discriminants are the ABI's role codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryRole {
    /// Leaves that require a gradient (under FSDP, this rank's shards).
    Parameters = 0,
    /// The gradients leaves hold.
    Gradients = 1,
    /// An optimizer's moments, momentum buffers, step counts and learning rate.
    OptimizerState = 2,
    /// Tensors recorded ops keep for backward.
    Activations = 3,
    /// Outputs of collectives: gathered parameters, reduced gradients.
    CollectiveBuffers = 4,
    /// Everything else: op outputs and inputs.
    Other = 5,
}

impl MemoryRole {
    /// Every role, in the order the host's tables show them.
    pub const ALL: [MemoryRole; 6] = [
        MemoryRole::Parameters,
        MemoryRole::Gradients,
        MemoryRole::OptimizerState,
        MemoryRole::Activations,
        MemoryRole::CollectiveBuffers,
        MemoryRole::Other,
    ];

    /// The role's name, as the host's tables print it.
    pub fn name(self) -> &'static str {
        match self {
            MemoryRole::Parameters => "parameters",
            MemoryRole::Gradients => "gradients",
            MemoryRole::OptimizerState => "optimizer state",
            MemoryRole::Activations => "activations",
            MemoryRole::CollectiveBuffers => "collective buffers",
            MemoryRole::Other => "other",
        }
    }
}

/// Bytes of `role` on this guest's core when its HBM in use was last at its peak. The roles
/// at the peak sum to the peak.
#[track_caller]
pub fn at_peak(role: MemoryRole) -> Result<i64> {
    sys::memory_at_peak(role as i32)
}

/// Starts this core's peak again from what it holds now, as
/// `torch.cuda.reset_peak_memory_stats`: [`at_peak`] then measures what follows.
#[track_caller]
pub fn reset_peak() -> Result<()> {
    sys::memory_reset_peak()
}

impl Tensor {
    /// Counts this tensor's storage as `role` on its core; data that later replaces it in
    /// place ([`Tensor::set_data`]) keeps the role.
    #[track_caller]
    pub fn set_memory_role(&self, role: MemoryRole) -> Result<()> {
        sys::tensor_set_memory_role(self.handle(), role as i32)
    }
}

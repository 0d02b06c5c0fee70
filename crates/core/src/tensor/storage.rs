//! [`Storage`]: the buffer behind tensors and the HBM reservation it holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::autograd::rematerialize::Rematerialize;
use crate::device::memory::Allocation;
use crate::device::role::Role;

use super::element::Buffer;

/// The elements behind one or more tensors, with the HBM reservation they hold on their core.
/// Dropping the last tensor that shares it frees the buffer and gives the bytes back.
pub struct Storage {
    buffer: Buffer,
    /// When the elements are ready on the core's modeled device clock, as f64 bits: set for
    /// a collective's output, which arrives while compute goes on; 0 (ready at once) else.
    ready_us: AtomicU64,
    /// How to make the elements again for backward instead of keeping them saved.
    rematerialize: OnceLock<Arc<dyn Rematerialize>>,
    // Held for its Drop, which returns the bytes to the core's quota.
    allocation: Option<Allocation>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("buffer", &self.buffer)
            .field("ready_us", &self.ready_us())
            .field("rematerialize", &self.rematerialize.get().is_some())
            .field("allocation", &self.allocation)
            .finish()
    }
}

impl Storage {
    /// Wraps a buffer with the reservation that accounts for it.
    pub fn new(buffer: Buffer, allocation: Option<Allocation>) -> Storage {
        Storage {
            buffer,
            ready_us: AtomicU64::new(0),
            rematerialize: OnceLock::new(),
            allocation,
        }
    }

    /// The elements.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// When the elements are ready on the modeled device clock, microseconds.
    pub fn ready_us(&self) -> f64 {
        f64::from_bits(self.ready_us.load(Ordering::Relaxed))
    }

    /// Marks the elements ready at `us` on the modeled device clock.
    pub fn set_ready_us(&self, us: f64) {
        self.ready_us.store(us.to_bits(), Ordering::Relaxed);
    }

    /// Sets the recipe that makes the elements again (the first one set stays).
    pub fn set_rematerialize(&self, recipe: Arc<dyn Rematerialize>) {
        let _ = self.rematerialize.set(recipe);
    }

    /// The recipe that makes the elements again, if one was set.
    pub fn rematerializer(&self) -> Option<Arc<dyn Rematerialize>> {
        self.rematerialize.get().cloned()
    }

    /// What the storage's bytes hold (`Other` for a storage nothing accounts).
    pub fn role(&self) -> Role {
        self.allocation
            .as_ref()
            .map_or(Role::Other, Allocation::role)
    }

    /// Counts the storage's bytes as `role`.
    pub fn set_role(&self, role: Role) {
        if let Some(a) = &self.allocation {
            a.set_role(role);
        }
    }
}

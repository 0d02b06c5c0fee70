//! [`Storage`]: the buffer behind tensors and the HBM reservation it holds.

use crate::device::memory::Allocation;
use crate::device::role::Role;

use super::element::Buffer;

/// The elements behind one or more tensors, with the HBM reservation they hold on their core.
/// Dropping the last tensor that shares it frees the buffer and gives the bytes back.
#[derive(Debug)]
pub struct Storage {
    buffer: Buffer,
    // Held for its Drop, which returns the bytes to the core's quota.
    allocation: Option<Allocation>,
}

impl Storage {
    /// Wraps a buffer with the reservation that accounts for it.
    pub fn new(buffer: Buffer, allocation: Option<Allocation>) -> Storage {
        Storage { buffer, allocation }
    }

    /// The elements.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
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

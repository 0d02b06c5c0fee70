//! [`Storage`]: the buffer behind tensors and the HBM reservation it holds.

use crate::device::memory::Allocation;

use super::element::Buffer;

/// The elements behind one or more tensors, with the HBM reservation they hold on their core.
/// Dropping the last tensor that shares it frees the buffer and gives the bytes back.
#[derive(Debug)]
pub struct Storage {
    buffer: Buffer,
    // Held for its Drop, which returns the bytes to the core's quota.
    _allocation: Option<Allocation>,
}

impl Storage {
    /// Wraps a buffer with the reservation that accounts for it.
    pub fn new(buffer: Buffer, allocation: Option<Allocation>) -> Storage {
        Storage {
            buffer,
            _allocation: allocation,
        }
    }

    /// The elements.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }
}

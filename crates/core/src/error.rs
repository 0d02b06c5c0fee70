//! The runtime's error type. Every error says what was asked, what was expected, and where it
//! helps, what to do next.

use crate::device::memory::MemoryError;
use crate::device::topology::TopologyError;

/// Errors from the runtime. None of them leaves the runtime in a bad state: the caller's other
/// tensors are untouched.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op rejected its operands or attributes.
    #[error("{op}({operands}): {message}")]
    Op {
        /// The op's name.
        op: String,
        /// The operands as `name: dtype[shape]`, comma-separated.
        operands: String,
        /// What was wrong and what was expected.
        message: String,
    },
    /// An op's outputs do not fit the core's HBM or the host memory cap.
    #[error("{op}({operands}): {source}")]
    OpOutOfMemory {
        /// The op's name.
        op: String,
        /// The operands as `name: dtype[shape]`, comma-separated.
        operands: String,
        /// Which limit, how much was asked and how much is in use.
        source: MemoryError,
    },
    /// No op has this name.
    #[error("{0}")]
    UnknownOp(String),
    /// Device memory or the host memory cap ran out.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A bad instance preset or core selection.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A bad argument outside any op (a buffer that does not match its shape, a bad core).
    #[error("{0}")]
    Invalid(String),
    /// A collective failed across ranks: the ranks disagreed on the op, dtype or shape, or a
    /// rank never arrived.
    #[error("{0}")]
    Collective(String),
    /// A gradient cannot be computed as asked: backward of a tensor that does not require
    /// one, a second backward through a freed graph, a non-scalar without a gradient.
    #[error("{0}")]
    Autograd(String),
    /// The work was cancelled (an interrupt).
    #[error("cancelled: {0}")]
    Cancelled(String),
}

/// Results with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

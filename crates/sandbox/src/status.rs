//! The statuses the ABI's imports return: an [`ErrorCode`] the guest sees, and the message
//! `last_error` gives.

use crate::handles::HandleError;
use neuronlab_core::Error;

/// The ABI's error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ErrorCode {
    /// A bad argument.
    Invalid = -1,
    /// A bad handle.
    Handle = -2,
    /// A pointer range outside guest memory.
    Bounds = -3,
    /// The op rejected its operands or attributes.
    Op = -4,
    /// A memory quota or limit.
    Memory = -5,
    /// No such op.
    UnknownOp = -6,
    /// Interrupted.
    Cancelled = -7,
    /// The output buffer is too small.
    TooSmall = -8,
    /// Known but not available here.
    Unavailable = -9,
    /// A collective failed across ranks.
    Collective = -10,
    /// A gradient cannot be computed as asked (autograd refused).
    Grad = -11,
    /// A file access was refused or failed: outside every grant, read-only, missing, an I/O
    /// error, or a malformed checkpoint.
    Fs = -12,
}

impl ErrorCode {
    /// The code's name in ABI.md: `ERR_HANDLE`, ...
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Invalid => "ERR_INVALID",
            ErrorCode::Handle => "ERR_HANDLE",
            ErrorCode::Bounds => "ERR_BOUNDS",
            ErrorCode::Op => "ERR_OP",
            ErrorCode::Memory => "ERR_MEMORY",
            ErrorCode::UnknownOp => "ERR_UNKNOWN_OP",
            ErrorCode::Cancelled => "ERR_CANCELLED",
            ErrorCode::TooSmall => "ERR_TOO_SMALL",
            ErrorCode::Unavailable => "ERR_UNAVAILABLE",
            ErrorCode::Collective => "ERR_COLLECTIVE",
            ErrorCode::Grad => "ERR_GRAD",
            ErrorCode::Fs => "ERR_FS",
        }
    }
}

/// A failed import: the code the guest sees and the message `last_error` gives.
pub(crate) struct Fail(pub(crate) ErrorCode, pub(crate) String);

pub(crate) type HostResult<T> = Result<T, Fail>;

impl From<HandleError> for Fail {
    /// A bad handle is `ERR_HANDLE`; running out of handles is a limit, `ERR_MEMORY`, like
    /// every other quota a guest can exhaust.
    fn from(e: HandleError) -> Fail {
        let code = match e {
            HandleError::Full | HandleError::Exhausted => ErrorCode::Memory,
            HandleError::Null | HandleError::Unknown(_) | HandleError::Stale(_) => {
                ErrorCode::Handle
            }
        };
        Fail(code, e.to_string())
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let code = match &e {
            Error::Op { .. } => ErrorCode::Op,
            Error::OpOutOfMemory { .. } | Error::Memory(_) => ErrorCode::Memory,
            Error::UnknownOp(_) => ErrorCode::UnknownOp,
            Error::Cancelled(_) => ErrorCode::Cancelled,
            Error::Collective(_) => ErrorCode::Collective,
            Error::Autograd(_) => ErrorCode::Grad,
            Error::Invalid(_) | Error::Topology(_) => ErrorCode::Invalid,
        };
        Fail(code, e.to_string())
    }
}

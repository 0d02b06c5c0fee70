//! [`Error`]: an ABI error code with the host's message.

use std::fmt;
use std::panic::Location;

/// The result of every fallible SDK call.
///
/// The error type defaults to [`Error`], so `Result<T>` reads as in most crates while
/// `Result<T, E>` still works where the prelude is glob-imported.
///
/// # Example
///
/// ```ignore
/// fn run() -> neuronlab::Result<()> {
///     let x = neuronlab::zeros(&[2, 3])?;
///     neuronlab::println!("{x}");
///     Ok(())
/// }
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which error an ABI call reported: the ABI's error codes (ABI.md, "Error codes").
///
/// # Example
///
/// ```ignore
/// use neuronlab::{ErrorKind, Tensor};
///
/// fn mismatch(a: &Tensor, b: &Tensor) -> bool {
///     matches!(a.add(b), Err(e) if e.kind() == ErrorKind::Op)
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `ERR_INVALID` (-1): a bad argument, such as a data length that does not match the
    /// shape or a malformed attribute encoding.
    Invalid,
    /// `ERR_HANDLE` (-2): a handle that is 0, freed, stale or foreign.
    Handle,
    /// `ERR_BOUNDS` (-3): a `(ptr, len)` range outside the guest's memory.
    Bounds,
    /// `ERR_OP` (-4): the op rejected its operands or attributes (a shape mismatch, a bad dim,
    /// a bad dtype, an index out of range).
    Op,
    /// `ERR_MEMORY` (-5): over the session's tensor quota, the core's HBM or the host cap.
    Memory,
    /// `ERR_UNKNOWN_OP` (-6): no op has this name or id.
    UnknownOp,
    /// `ERR_CANCELLED` (-7): the call was interrupted (Ctrl-C, a Jupyter interrupt, the
    /// deadline).
    Cancelled,
    /// `ERR_TOO_SMALL` (-8): an output buffer was smaller than the data.
    TooSmall,
    /// `ERR_UNAVAILABLE` (-9): the host knows the call but cannot serve it here.
    Unavailable,
    /// `ERR_COLLECTIVE` (-10): a collective failed across ranks: the ranks disagreed on the
    /// op, its attributes, the dtype or the shape, or a rank never arrived (it finished,
    /// trapped or waited elsewhere past the collective timeout).
    Collective,
    /// `ERR_GRAD` (-11): autograd refused: backward of a tensor that does not require a
    /// gradient, of a non-scalar without one, or twice through a freed graph; an in-place
    /// update that changes the shape.
    Grad,
    /// `ERR_FS` (-12): a file access was refused or failed: the path is outside every
    /// granted folder, the grant is read-only, the file does not exist, an I/O error, or a
    /// malformed checkpoint.
    Fs,
    /// A negative code this SDK does not know (from a newer host).
    Other(i32),
}

impl ErrorKind {
    /// The kind of an ABI error code.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::ErrorKind::from_code(-4), neuronlab::ErrorKind::Op);
    /// ```
    pub fn from_code(code: i32) -> ErrorKind {
        match code {
            -1 => ErrorKind::Invalid,
            -2 => ErrorKind::Handle,
            -3 => ErrorKind::Bounds,
            -4 => ErrorKind::Op,
            -5 => ErrorKind::Memory,
            -6 => ErrorKind::UnknownOp,
            -7 => ErrorKind::Cancelled,
            -8 => ErrorKind::TooSmall,
            -9 => ErrorKind::Unavailable,
            -10 => ErrorKind::Collective,
            -11 => ErrorKind::Grad,
            -12 => ErrorKind::Fs,
            other => ErrorKind::Other(other),
        }
    }

    /// The ABI error code.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::ErrorKind::Op.code(), -4);
    /// ```
    pub fn code(self) -> i32 {
        match self {
            ErrorKind::Invalid => -1,
            ErrorKind::Handle => -2,
            ErrorKind::Bounds => -3,
            ErrorKind::Op => -4,
            ErrorKind::Memory => -5,
            ErrorKind::UnknownOp => -6,
            ErrorKind::Cancelled => -7,
            ErrorKind::TooSmall => -8,
            ErrorKind::Unavailable => -9,
            ErrorKind::Collective => -10,
            ErrorKind::Grad => -11,
            ErrorKind::Fs => -12,
            ErrorKind::Other(code) => code,
        }
    }

    /// The code's name in ABI.md, such as `ERR_OP`; `ERR_OTHER` for an unknown code.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::ErrorKind::Op.name(), "ERR_OP");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "ERR_INVALID",
            ErrorKind::Handle => "ERR_HANDLE",
            ErrorKind::Bounds => "ERR_BOUNDS",
            ErrorKind::Op => "ERR_OP",
            ErrorKind::Memory => "ERR_MEMORY",
            ErrorKind::UnknownOp => "ERR_UNKNOWN_OP",
            ErrorKind::Cancelled => "ERR_CANCELLED",
            ErrorKind::TooSmall => "ERR_TOO_SMALL",
            ErrorKind::Unavailable => "ERR_UNAVAILABLE",
            ErrorKind::Collective => "ERR_COLLECTIVE",
            ErrorKind::Grad => "ERR_GRAD",
            ErrorKind::Fs => "ERR_FS",
            ErrorKind::Other(_) => "ERR_OTHER",
        }
    }

    /// The name a failing cell or rank shows for an error of this kind that stopped it:
    /// `OpError`, `OutOfMemory`, `Interrupted`, ...
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(neuronlab::ErrorKind::Op.failure_name(), "OpError");
    /// ```
    pub fn failure_name(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "InvalidArgument",
            ErrorKind::Handle => "HandleError",
            ErrorKind::Bounds => "BoundsError",
            ErrorKind::Op => "OpError",
            ErrorKind::Memory => "OutOfMemory",
            ErrorKind::UnknownOp => "UnknownOp",
            ErrorKind::Cancelled => "Interrupted",
            ErrorKind::TooSmall => "BufferTooSmall",
            ErrorKind::Unavailable => "Unavailable",
            ErrorKind::Collective => "CollectiveError",
            ErrorKind::Grad => "GradError",
            ErrorKind::Fs => "FsError",
            ErrorKind::Other(_) => "HostError",
        }
    }
}

/// An error from the host (its code and the message `last_error` gave) or from the SDK's own
/// checks (such as reading an `f32` tensor as `i64`).
///
/// It displays as `ERR_OP: <message>`; an unknown code shows as `error -99: <message>`.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
///
/// let a = zeros(&[2, 3])?;
/// let b = zeros(&[4])?;
/// match a.add(&b) {
///     Ok(_) => {}
///     Err(e) => neuronlab::println!("caught: {e}"), // caught: ERR_OP: add(...): ...
/// }
/// ```
#[derive(Clone, Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// Where the SDK call that failed was made: SDK functions that return a `Result` track
    /// their caller, so for a `?` on an op this is the user's line.
    location: Option<&'static Location<'static>>,
}

/// Errors are equal when their kind and message are; where they were made does not count.
impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for Error {}

impl Error {
    /// An error of `kind` with `message`, for guest code that reports its own failures.
    ///
    /// # Example
    ///
    /// ```ignore
    /// use neuronlab::{Error, ErrorKind};
    ///
    /// let e = Error::new(ErrorKind::Invalid, "steps must be positive");
    /// assert_eq!(e.to_string(), "ERR_INVALID: steps must be positive");
    /// ```
    #[track_caller]
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            location: Some(Location::caller()),
        }
    }

    /// Where the call that failed was made, as far as the SDK tracks its callers: the
    /// user's line for an op, an optimizer step or a module's forward called from it.
    ///
    /// # Example
    ///
    /// ```ignore
    /// if let Err(e) = a.add(&b) {
    ///     neuronlab::println!("failed at line {}", e.location().map_or(0, |at| at.line()));
    /// }
    /// ```
    pub fn location(&self) -> Option<&'static Location<'static>> {
        self.location
    }

    /// Which error this is.
    ///
    /// # Example
    ///
    /// ```ignore
    /// if e.kind() == neuronlab::ErrorKind::Cancelled { return Err(e); }
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The ABI error code (negative).
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert_eq!(e.code(), e.kind().code());
    /// ```
    pub fn code(&self) -> i32 {
        self.kind.code()
    }

    /// The message, without the code's name.
    ///
    /// # Example
    ///
    /// ```ignore
    /// assert!(e.message().contains("broadcast"));
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::Other(code) => write!(f, "error {code}: {}", self.message),
            kind => write!(f, "{}: {}", kind.name(), self.message),
        }
    }
}

impl std::error::Error for Error {}

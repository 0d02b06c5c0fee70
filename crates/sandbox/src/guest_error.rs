//! [`GuestError`]: everything that can stop a guest, with the trap kind and wasm backtrace.

use std::fmt;

/// Most distinct frames a printed backtrace shows.
const MAX_FRAMES: usize = 24;

/// What stopped a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestErrorKind {
    /// The bytes are not a valid module (or not valid WebAssembly text).
    Load,
    /// The module imports something the host does not provide.
    Link,
    /// The module was built for another ABI major version, or does not declare one.
    AbiVersion,
    /// The requested entry point is not exported.
    MissingEntry,
    /// The command-line arguments do not fit the entry's parameters.
    BadArguments,
    /// The guest trapped (stack overflow, out-of-bounds access, `unreachable`, ...).
    Trap,
    /// Someone interrupted it (Ctrl-C, a Jupyter interrupt).
    Interrupted,
    /// It ran past its deadline.
    Deadline,
    /// It hit a resource limit (its linear memory).
    ResourceLimit,
    /// The host failed (a bug, or the machine refused a thread).
    Host,
}

impl GuestErrorKind {
    /// A short name for the kind, used as the error's title.
    pub fn name(self) -> &'static str {
        match self {
            GuestErrorKind::Load => "LoadError",
            GuestErrorKind::Link => "LinkError",
            GuestErrorKind::AbiVersion => "AbiVersionError",
            GuestErrorKind::MissingEntry => "MissingEntry",
            GuestErrorKind::BadArguments => "BadArguments",
            GuestErrorKind::Trap => "GuestTrap",
            GuestErrorKind::Interrupted => "Interrupted",
            GuestErrorKind::Deadline => "DeadlineExceeded",
            GuestErrorKind::ResourceLimit => "ResourceLimit",
            GuestErrorKind::Host => "HostError",
        }
    }
}

/// An error from loading or running a guest. The host and the session's tensors are intact.
#[derive(Clone, Debug)]
pub struct GuestError {
    /// What kind of failure.
    pub kind: GuestErrorKind,
    /// What happened and what to do about it.
    pub message: String,
    /// The wasm call stack at a trap, innermost first (function names where the module has
    /// a name section).
    pub backtrace: Vec<String>,
}

impl GuestError {
    /// An error without a backtrace.
    pub fn new(kind: GuestErrorKind, message: impl Into<String>) -> GuestError {
        GuestError {
            kind,
            message: message.into(),
            backtrace: Vec::new(),
        }
    }
}

impl fmt::Display for GuestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)?;
        if self.backtrace.is_empty() {
            return Ok(());
        }
        write!(f, "\nwasm backtrace:")?;
        // Runs of one frame (deep recursion) print once with a count; long stacks are cut.
        let mut runs: Vec<(&str, usize)> = Vec::new();
        for frame in &self.backtrace {
            match runs.last_mut() {
                Some((name, n)) if *name == frame.as_str() => *n += 1,
                _ => runs.push((frame, 1)),
            }
        }
        for (i, (frame, n)) in runs.iter().take(MAX_FRAMES).enumerate() {
            write!(f, "\n  {i:>2}: {frame}")?;
            if *n > 1 {
                write!(f, " (x{n})")?;
            }
        }
        if runs.len() > MAX_FRAMES {
            write!(f, "\n  ... {} more frames", runs.len() - MAX_FRAMES)?;
        }
        Ok(())
    }
}

impl std::error::Error for GuestError {}

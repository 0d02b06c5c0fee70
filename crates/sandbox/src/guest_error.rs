//! [`GuestError`]: everything that can stop a guest, with the trap kind, what the guest said
//! stopped it, and the wasm backtrace.

use std::fmt;
use std::sync::OnceLock;

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
    /// Every kind.
    pub const ALL: [GuestErrorKind; 10] = [
        GuestErrorKind::Load,
        GuestErrorKind::Link,
        GuestErrorKind::AbiVersion,
        GuestErrorKind::MissingEntry,
        GuestErrorKind::BadArguments,
        GuestErrorKind::Trap,
        GuestErrorKind::Interrupted,
        GuestErrorKind::Deadline,
        GuestErrorKind::ResourceLimit,
        GuestErrorKind::Host,
    ];

    /// The kind whose [`name`](GuestErrorKind::name) is `name`.
    pub fn from_name(name: &str) -> Option<GuestErrorKind> {
        GuestErrorKind::ALL.into_iter().find(|k| k.name() == name)
    }

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
    /// The wasm call stack at a trap, innermost first: function names (Rust's demangled)
    /// where the module has a name section.
    pub backtrace: Vec<String>,
    /// What the guest reported through `fail` before it trapped: its panic, or the error its
    /// entry point returned. It names the failure better than the trap does.
    pub reported: Option<Box<Reported>>,
}

/// What a guest said stopped it (the `fail` import), just before it trapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reported {
    /// The failure's name: `Panic`, or the kind of the error returned (`OpError`, ...).
    pub name: String,
    /// What happened.
    pub message: String,
    /// Where, as `FILE:LINE:COLUMN` in the guest's sources, when the guest knew.
    pub location: Option<String>,
}

impl GuestError {
    /// An error without a backtrace.
    pub fn new(kind: GuestErrorKind, message: impl Into<String>) -> GuestError {
        GuestError {
            kind,
            message: message.into(),
            backtrace: Vec::new(),
            reported: None,
        }
    }

    /// The failure's name: the one the guest reported, else the kind's.
    pub fn name(&self) -> &str {
        match &self.reported {
            Some(r) => &r.name,
            None => self.kind.name(),
        }
    }

    /// What happened: the reported message, else the host's.
    pub fn summary(&self) -> &str {
        match &self.reported {
            Some(r) => &r.message,
            None => &self.message,
        }
    }

    /// The backtrace as printed: everything when `NEURONLAB_BACKTRACE=full`; otherwise
    /// nothing after a reported failure (it says where), and for a trap only the guest's own
    /// frames, without the standard library's and the SDK's (all of them when none is the
    /// guest's own). Runs of one frame (deep recursion) print once with a count.
    pub fn shown_backtrace(&self) -> Vec<String> {
        let full = full_backtrace_wanted();
        let frames: Vec<&str> = if full {
            self.backtrace.iter().map(String::as_str).collect()
        } else if self.reported.is_some() {
            Vec::new()
        } else {
            let own: Vec<&str> = self
                .backtrace
                .iter()
                .map(String::as_str)
                .filter(|f| !is_runtime_frame(f))
                .collect();
            match own.is_empty() {
                true => self.backtrace.iter().map(String::as_str).collect(),
                false => own,
            }
        };
        let mut runs: Vec<(&str, usize)> = Vec::new();
        for frame in frames {
            match runs.last_mut() {
                Some((name, n)) if *name == frame => *n += 1,
                _ => runs.push((frame, 1)),
            }
        }
        let mut lines: Vec<String> = runs
            .iter()
            .take(MAX_FRAMES)
            .enumerate()
            .map(|(i, (frame, n))| match n {
                1 => format!("{i:>2}: {frame}"),
                n => format!("{i:>2}: {frame} (x{n})"),
            })
            .collect();
        if runs.len() > MAX_FRAMES {
            lines.push(format!("... {} more frames", runs.len() - MAX_FRAMES));
        }
        let hidden = self.backtrace.len() - runs.iter().map(|(_, n)| n).sum::<usize>();
        if !full && hidden > 0 && !lines.is_empty() {
            lines.push(format!(
                "({hidden} frames of the standard library and the SDK hidden; \
                 NEURONLAB_BACKTRACE=full shows them)"
            ));
        }
        lines
    }
}

/// Whether `NEURONLAB_BACKTRACE=full` asks for whole backtraces.
fn full_backtrace_wanted() -> bool {
    static FULL: OnceLock<bool> = OnceLock::new();
    *FULL.get_or_init(|| std::env::var("NEURONLAB_BACKTRACE").is_ok_and(|v| v == "full"))
}

/// Whether a demangled frame belongs to Rust's standard library, its allocator or the
/// neuronlab SDK rather than to the guest's own code.
fn is_runtime_frame(frame: &str) -> bool {
    const RUNTIME: [&str; 7] = [
        "std::",
        "core::",
        "alloc::",
        "__rustc::",
        "dlmalloc::",
        "neuronlab::",
        "rust_begin_unwind",
    ];
    // Trait impls print as `<Type as Trait>::method`: what decides is the type's crate.
    let path = frame.trim_start_matches('<');
    RUNTIME.iter().any(|p| path.starts_with(p)) || path.starts_with("__rust")
}

/// A frame's function name as a person reads it: Rust's mangled names demangled without
/// their hash.
pub(crate) fn frame_name(raw: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(raw))
}

impl fmt::Display for GuestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name(), self.summary())?;
        if let Some(at) = self.reported.as_ref().and_then(|r| r.location.as_ref()) {
            write!(f, "\n  at {at}")?;
        }
        let backtrace = self.shown_backtrace();
        if !backtrace.is_empty() {
            write!(f, "\nwasm backtrace:")?;
            for line in backtrace {
                write!(f, "\n  {line}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for GuestError {}

//! The kernel's own diagnostics on stderr. Jupyter shows a kernel's stderr in the terminal
//! that started the server; when that terminal is gone, a write fails and is ignored (a
//! client that disappears must not bring the kernel down, as `eprintln!` would by
//! panicking).

use std::io::Write;

/// Writes one line, `neuronlab-kernel: ...`, to stderr; failures are ignored.
pub fn line(text: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "neuronlab-kernel: {text}");
}

/// Logs a line to stderr, like `eprintln!` but never panics.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {
        $crate::log::line(format_args!($($arg)*))
    };
}

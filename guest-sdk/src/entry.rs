//! The guest's entry points: [`main!`](crate::main!), [`entry`], the run's [`args`], the
//! panic hook and the `neuronlab_abi_version` export.

use std::any::Any;
use std::fmt::Display;
use std::panic::Location;
use std::sync::Once;

use crate::error::Error;
use crate::sys::{self, Stream};

/// The ABI version this SDK speaks: `(major << 16) | minor`, here 1.10.
pub const ABI_VERSION: i32 = (1 << 16) | 10;

/// The `neuronlab_abi_version` export the host checks before it runs a guest.
///
/// Every module that links this crate exports it; a guest does not define it.
#[unsafe(no_mangle)]
pub extern "C" fn neuronlab_abi_version() -> i32 {
    ABI_VERSION
}

/// Exports a function as the guest's `run` entry point.
///
/// The function takes no arguments and returns `Result<(), E>` for any `E: Display`, usually
/// [`neuronlab::Result<()>`](crate::Result). It runs through [`entry`]: a panic or an `Err`
/// stops the guest with a trap, and the host reports it as the cell's error, named after
/// its cause (`Panic`, `OpError`, ...) with the line it came from.
///
/// # Example
///
/// ```ignore
/// use neuronlab::prelude::*;
/// use neuronlab::println;
///
/// fn run() -> neuronlab::Result<()> {
///     println!("{}", randn(&[2, 2])?);
///     Ok(())
/// }
///
/// neuronlab::main!(run);
/// ```
#[macro_export]
macro_rules! main {
    ($f:expr) => {
        const _: () = {
            #[unsafe(export_name = "run")]
            extern "C" fn __neuronlab_run() {
                $crate::entry($f)
            }
        };
    };
}

/// Runs an experiment's body as an entry point does: installs the panic hook, calls `f`,
/// and on `Err` reports the error to the host (its kind as the failure's name, and where
/// the SDK call that failed was made) and traps. The host shows it as the one error of the
/// cell or the rank.
///
/// [`main!`](crate::main!) uses it for `run`; call it yourself from an entry point with
/// parameters, which the host parses from the command line.
///
/// # Example
///
/// ```ignore
/// #[unsafe(no_mangle)]
/// pub extern "C" fn train(steps: i32) {
///     neuronlab::entry(|| -> neuronlab::Result<()> {
///         for step in 0..steps {
///             neuronlab::println!("step {step}");
///         }
///         Ok(())
///     })
/// }
/// ```
pub fn entry<E: Display + 'static>(f: impl FnOnce() -> Result<(), E>) {
    // The generic part is kept to this call and the two below: every Rust cell is a crate
    // of its own that instantiates it, and what is not generic is compiled once, in the SDK.
    install_panic_hook();
    if let Err(e) = f() {
        report(&e, &e)
    }
}

/// Installs [`panic_hook`], once per instance.
#[inline(never)]
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| std::panic::set_hook(Box::new(panic_hook)));
}

/// Reports the error `e` (seen as `Any` to find the SDK's own, and as `Display` for any
/// other) to the host, then traps.
#[inline(never)]
fn report(any: &dyn Any, display: &dyn Display) -> ! {
    match ours(any) {
        Some(ours) => fail(ours.kind().failure_name(), ours.message(), ours.location()),
        None => fail("Error", &display.to_string(), None),
    }
}

/// The SDK's [`Error`] in `any`: the error itself, or what a boxed error (a cell's
/// `Box<dyn Error>`, which `?` converts to) holds.
fn ours(any: &dyn Any) -> Option<&Error> {
    any.downcast_ref::<Error>()
        .or_else(|| {
            any.downcast_ref::<Box<dyn std::error::Error>>()
                .and_then(|b| b.downcast_ref::<Error>())
        })
        .or_else(|| {
            any.downcast_ref::<Box<dyn std::error::Error + Send + Sync>>()
                .and_then(|b| b.downcast_ref::<Error>())
        })
}

/// Reports the failure to the host, then traps. A host that cannot take the report (it
/// refused the name, say) still gets the message, on stderr.
fn fail(name: &str, message: &str, at: Option<&Location<'_>>) -> ! {
    let at = at.map(|at| at.to_string()).unwrap_or_default();
    if sys::fail(name, message, &at).is_err() {
        let _ = sys::print(Stream::Stderr, &format!("{name}: {message}\n"));
    }
    std::process::abort()
}

/// The run's arguments: what follows `--` on `neuronlab run` (`neuronlab run exp.wasm --
/// --steps 10` gives `["--steps", "10"]`). Every rank gets the same; a cell gets none.
///
/// # Example
///
/// ```ignore
/// let steps: u32 = match neuronlab::args().as_slice() {
///     [flag, n] if flag == "--steps" => n.parse().unwrap_or(10),
///     _ => 10,
/// };
/// ```
pub fn args() -> Vec<String> {
    // The host fills the list itself: a failure here is a host that does not speak 1.5.
    sys::args().unwrap_or_else(|e| panic!("neuronlab::args: {e}"))
}

/// Reports a panic to the host as a `Panic` failure at the panic's location, and traps (a
/// panic aborts on `wasm32-unknown-unknown` in any case).
fn panic_hook(info: &std::panic::PanicHookInfo<'_>) {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("Box<dyn Any>");
    fail("Panic", message, info.location())
}

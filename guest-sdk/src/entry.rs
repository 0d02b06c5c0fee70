//! The guest's entry points: [`main!`](crate::main!), [`entry`], the run's [`args`], the
//! panic hook and the `neuronlab_abi_version` export.

use std::fmt::Display;
use std::sync::Once;

use crate::sys::{self, Stream};

/// The ABI version this SDK speaks: `(major << 16) | minor`, here 1.6.
pub const ABI_VERSION: i32 = (1 << 16) | 6;

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
/// is printed to the cell's stderr and stops the guest with a trap, which the host reports.
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
/// and on `Err` prints `error: <e>` to stderr and traps.
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
pub fn entry<E: Display>(f: impl FnOnce() -> Result<(), E>) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| std::panic::set_hook(Box::new(panic_hook)));
    if let Err(e) = f() {
        let _ = sys::print(Stream::Stderr, &format!("error: {e}\n"));
        std::process::abort();
    }
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

/// Sends `panicked at FILE:LINE:COL: MESSAGE` to stderr. A panic then aborts (the only
/// strategy on `wasm32-unknown-unknown`), and the trap ends the guest.
fn panic_hook(info: &std::panic::PanicHookInfo<'_>) {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("Box<dyn Any>");
    let text = match info.location() {
        Some(at) => format!("panicked at {at}: {message}\n"),
        None => format!("panicked: {message}\n"),
    };
    let _ = sys::print(Stream::Stderr, &text);
}

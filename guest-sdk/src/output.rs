//! Cell output: the `print!` family of macros and `dbg!`, rich display, the host clock and
//! the modeled device clock.

use std::fmt;
use std::time::Duration;

use crate::error::Result;
use crate::sys::{self, Stream};

/// Writes formatted text to the cell's stdout, like `std::print!`.
///
/// On `wasm32-unknown-unknown`, `std::print!` writes nowhere; this one writes through the
/// `print` import, so the text shows in the cell. Each call sends its text in one piece.
///
/// Glob imports cannot replace std's macros (`use neuronlab::prelude::*` would make
/// `println!` ambiguous), so import these by name: `use neuronlab::{print, println};`.
///
/// # Example
///
/// ```ignore
/// use neuronlab::print;
///
/// print!("loss = {:.4}", 0.25);
/// ```
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::__private::print(
            $crate::__private::Stream::Stdout,
            ::std::format_args!($($arg)*),
        )
    };
}

/// Writes formatted text and a newline to the cell's stdout, like `std::println!`.
///
/// See [`print!`](crate::print!) for why this exists and how to import it.
///
/// # Example
///
/// ```ignore
/// use neuronlab::println;
///
/// let x = neuronlab::randn(&[2, 3])?;
/// println!("x =\n{x}");
/// ```
#[macro_export]
macro_rules! println {
    () => {
        $crate::print!("\n")
    };
    ($($arg:tt)*) => {
        $crate::__private::print(
            $crate::__private::Stream::Stdout,
            ::std::format_args!("{}\n", ::std::format_args!($($arg)*)),
        )
    };
}

/// Writes formatted text to the cell's stderr, like `std::eprint!`.
///
/// See [`print!`](crate::print!) for why this exists and how to import it.
///
/// # Example
///
/// ```ignore
/// use neuronlab::eprint;
///
/// eprint!("warning: ");
/// ```
#[macro_export]
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::__private::print(
            $crate::__private::Stream::Stderr,
            ::std::format_args!($($arg)*),
        )
    };
}

/// Writes formatted text and a newline to the cell's stderr, like `std::eprintln!`.
///
/// See [`print!`](crate::print!) for why this exists and how to import it.
///
/// # Example
///
/// ```ignore
/// use neuronlab::eprintln;
///
/// eprintln!("skipping step {}: loss is NaN", 3);
/// ```
#[macro_export]
macro_rules! eprintln {
    () => {
        $crate::eprint!("\n")
    };
    ($($arg:tt)*) => {
        $crate::__private::print(
            $crate::__private::Stream::Stderr,
            ::std::format_args!("{}\n", ::std::format_args!($($arg)*)),
        )
    };
}

/// Prints an expression and its value to the cell's stderr and returns the value, like
/// `std::dbg!`.
///
/// `dbg!(expr)` writes `[file:line:col] expr = value` with the value's pretty `Debug`
/// (`{:#?}`), then returns the value (moving it, as std's does; use `dbg!(&x)` to keep `x`).
/// With several expressions it returns them as a tuple; with none it prints only the
/// location. On `wasm32-unknown-unknown`, `std::dbg!` writes nowhere; this one writes through
/// the `print` import. Import it by name: `use neuronlab::dbg;`.
///
/// # Example
///
/// ```ignore
/// use neuronlab::dbg;
///
/// let n = dbg!(2 * 21); // stderr: [src/lib.rs:3:9] 2 * 21 = 42
/// let (a, b) = dbg!(n, n + 1);
/// dbg!(&x.shape());
/// ```
#[macro_export]
macro_rules! dbg {
    () => {
        $crate::eprintln!(
            "[{}:{}:{}]",
            ::core::file!(),
            ::core::line!(),
            ::core::column!()
        )
    };
    ($val:expr $(,)?) => {
        // `match` keeps temporaries in `$val` alive for the print, as std's does.
        match $val {
            tmp => {
                $crate::eprintln!(
                    "[{}:{}:{}] {} = {:#?}",
                    ::core::file!(),
                    ::core::line!(),
                    ::core::column!(),
                    ::core::stringify!($val),
                    &tmp
                );
                tmp
            }
        }
    };
    ($($val:expr),+ $(,)?) => {
        ($($crate::dbg!($val)),+,)
    };
}

/// What the print macros call. Output has no caller to report an error to; the host only
/// rejects a `print` whose arguments this function never passes.
pub fn print(stream: Stream, args: fmt::Arguments<'_>) {
    let _ = match args.as_str() {
        Some(text) => sys::print(stream, text),
        None => sys::print(stream, &args.to_string()),
    };
}

/// Shows rich output: `data` of MIME type `mime`, such as `text/html`, `image/svg+xml` or
/// `image/png`. The front end shows it where it can: a notebook renders it, while the REPL
/// shows only `text/plain`.
///
/// # Example
///
/// ```ignore
/// neuronlab::display("text/markdown", b"**loss** fell to 0.12")?;
/// ```
#[track_caller]
pub fn display(mime: &str, data: &[u8]) -> Result<()> {
    sys::display(mime, data)
}

/// Shows an HTML fragment (`text/html`).
///
/// # Example
///
/// ```ignore
/// neuronlab::display_html("<b>step 3</b>: loss 0.12")?;
/// ```
#[track_caller]
pub fn display_html(html: &str) -> Result<()> {
    display("text/html", html.as_bytes())
}

/// Shows an SVG image (`image/svg+xml`).
///
/// # Example
///
/// ```ignore
/// neuronlab::display_svg(r#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>"#)?;
/// ```
#[track_caller]
pub fn display_svg(svg: &str) -> Result<()> {
    display("image/svg+xml", svg.as_bytes())
}

/// `display` MIME type: the next display is shown with a display id (ABI.md).
const DISPLAY_ID_MIME: &str = "application/vnd.neuronlab.display-id";
/// `display` MIME type: the next display replaces what the displays of an id show.
const UPDATE_DISPLAY_MIME: &str = "application/vnd.neuronlab.update-display";
/// `display` MIME type: clear the cell's output.
const CLEAR_OUTPUT_MIME: &str = "application/vnd.neuronlab.clear-output";

/// Something a cell can show: text (`&str`, `String`: `text/plain`), [`Html`], [`Svg`], a
/// [`Tensor`](crate::Tensor) or a [`Plot`](crate::plot::Plot).
pub trait Displayable {
    /// Shows it as one display.
    fn show(&self) -> Result<()>;
}

impl<T: Displayable + ?Sized> Displayable for &T {
    #[track_caller]
    fn show(&self) -> Result<()> {
        (**self).show()
    }
}

impl Displayable for str {
    #[track_caller]
    fn show(&self) -> Result<()> {
        display("text/plain", self.as_bytes())
    }
}

impl Displayable for String {
    #[track_caller]
    fn show(&self) -> Result<()> {
        self.as_str().show()
    }
}

/// An HTML fragment to show (`text/html`).
#[derive(Clone, Copy, Debug)]
pub struct Html<'a>(pub &'a str);

impl Displayable for Html<'_> {
    #[track_caller]
    fn show(&self) -> Result<()> {
        display_html(self.0)
    }
}

/// An SVG image to show (`image/svg+xml`).
#[derive(Clone, Copy, Debug)]
pub struct Svg<'a>(pub &'a str);

impl Displayable for Svg<'_> {
    #[track_caller]
    fn show(&self) -> Result<()> {
        display_svg(self.0)
    }
}

impl Displayable for crate::Tensor {
    #[track_caller]
    fn show(&self) -> Result<()> {
        self.display()
    }
}

impl Displayable for crate::plot::Plot {
    #[track_caller]
    fn show(&self) -> Result<()> {
        crate::plot::Plot::show(self)
    }
}

/// A display that can be updated in place, as IPython's `display(..., display_id=...)`: a
/// long loop shows its progress (text, a table, a plot) in one place instead of a new line per
/// step.
///
/// Every display shown with an id changes when that id is updated, in whichever cell it is.
/// In the REPL, an update of the display printed last redraws it in place on a terminal and
/// prints it again otherwise.
///
/// # Example
///
/// ```ignore
/// use neuronlab::{DisplayHandle, plot};
///
/// let progress = DisplayHandle::new("training");
/// progress.show("step 0")?;
/// for step in 1..=100 {
///     // ... one training step ...
///     progress.update(&format!("step {step}: loss {loss:.3}"))?;
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DisplayHandle {
    id: String,
}

impl DisplayHandle {
    /// A handle for display id `id` (1 to 256 bytes of UTF-8).
    pub fn new(id: &str) -> DisplayHandle {
        DisplayHandle { id: id.to_string() }
    }

    /// The display id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Shows `content` as a new display with this id.
    #[track_caller]
    pub fn show<T: Displayable + ?Sized>(&self, content: &T) -> Result<()> {
        display(DISPLAY_ID_MIME, self.id.as_bytes())?;
        content.show()
    }

    /// Replaces what the displays with this id show by `content`.
    #[track_caller]
    pub fn update<T: Displayable + ?Sized>(&self, content: &T) -> Result<()> {
        display(UPDATE_DISPLAY_MIME, self.id.as_bytes())?;
        content.show()
    }
}

/// Clears the cell's output, at once, or with `wait`, when the next output arrives (so a loop
/// that clears and redraws does not flicker). The REPL keeps what it printed.
///
/// # Example
///
/// ```ignore
/// for step in 0..10 {
///     neuronlab::clear_output(true)?;
///     neuronlab::println!("step {step}");
/// }
/// ```
#[track_caller]
pub fn clear_output(wait: bool) -> Result<()> {
    let data: &[u8] = if wait { b"wait" } else { b"" };
    display(CLEAR_OUTPUT_MIME, data)
}

/// Host monotonic time since the guest instance started.
///
/// `std::time::Instant` is not available on `wasm32-unknown-unknown`; this is the guest's
/// clock. It measures host time, not modeled device time.
///
/// # Example
///
/// ```ignore
/// let start = neuronlab::clock();
/// let y = x.matmul(&x)?;
/// neuronlab::println!("matmul took {:?} (host)", neuronlab::clock() - start);
/// ```
pub fn clock() -> Duration {
    Duration::from_nanos(u64::try_from(sys::clock_ns()).unwrap_or(0))
}

/// Modeled device time on this guest's core since the guest instance started (ABI 1.6).
///
/// The modeled times of every op, fused kernel and collective run on the core (the figures
/// the cell summary and `%events` report as "modeled"), laid out with the ops one after
/// another and the collectives beside them: an op waits only for a collective whose output
/// it reads (see [`exposed_collective_time`]). It counts by core, from
/// the instance's start, so a guest alone on its core (a cell, a rank of `neuronlab run`)
/// sees exactly its own work. It is the device's time, not the host's: see [`clock`].
///
/// # Example
///
/// ```ignore
/// let start = neuronlab::device_time();
/// for _ in 0..n_tokens {
///     logits = model.step(&logits)?;
/// }
/// let per_token = (neuronlab::device_time() - start) / n_tokens;
/// neuronlab::println!("modeled time per token: {per_token:?}");
/// ```
pub fn device_time() -> Duration {
    Duration::from_nanos(u64::try_from(sys::device_time_ns()).unwrap_or(0))
}

/// The modeled time of the collectives this guest's core ran (ABI 1.8). Collectives run
/// beside compute, and only the part that overlaps none counts in [`device_time`]: that is
/// [`exposed_collective_time`], and the rest overlapped compute.
pub fn collective_time() -> Duration {
    Duration::from_nanos(u64::try_from(sys::collective_time_ns()).unwrap_or(0))
}

/// The part of [`device_time`] that is communication overlapping no compute (ABI 1.10): the
/// core's waits for collectives' outputs and collectives still running after its last op.
/// [`device_time`] less it is compute.
///
/// # Example
///
/// ```ignore
/// let (t0, e0) = (neuronlab::device_time(), neuronlab::exposed_collective_time());
/// step()?;
/// let exposed = neuronlab::exposed_collective_time() - e0;
/// let compute = neuronlab::device_time() - t0 - exposed;
/// ```
pub fn exposed_collective_time() -> Duration {
    Duration::from_nanos(u64::try_from(sys::collective_exposed_ns()).unwrap_or(0))
}

/// The published peak matmul throughput of one NeuronCore of the simulated instance for
/// `dtype`, FLOP/s (ABI 1.8): what model FLOPs utilisation divides by.
///
/// # Example
///
/// ```ignore
/// let mfu = model_flops / step.as_secs_f64() / (neuronlab::peak_flops(DType::BF16) * cores);
/// ```
pub fn peak_flops(dtype: crate::DType) -> f64 {
    sys::peak_flops(dtype.code()).max(0) as f64
}

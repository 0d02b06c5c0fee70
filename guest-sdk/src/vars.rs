//! Session variables: what a notebook or REPL cell leaves for the next cells (ABI.md,
//! "vars").
//!
//! The host keeps the variables for the session; every cell (and every rank of a launch) of
//! the session sees the same ones. A plain `neuronlab run` has a store of its own that ends
//! with the run. A variable holds either
//!
//! - a tensor ([`set_tensor`], [`tensor`]), shared with the host, not copied; or
//! - a plain value kept as its `Display` text with its Rust type name ([`set_value`],
//!   [`value`]), parsed back with `FromStr`.
//!
//! Names are Rust identifiers: ASCII letters, digits and `_`, not starting with a digit.
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::vars;
//!
//! // One cell:
//! vars::set_tensor("w", &neuronlab::randn(&[4, 4])?)?;
//! vars::set_value("steps", &100u32)?;
//!
//! // A later cell:
//! let w = vars::tensor("w")?;
//! let steps: u32 = vars::value("steps")?;
//! ```
//!
//! # What a REPL cell's generated code uses
//!
//! The front end wraps a cell's code in a function and adds, out of the user's sight:
//!
//! - at the start, one declaration per variable of earlier cells:
//!   `let w = ::neuronlab::vars::__restore_tensor("w")?;` for a tensor and
//!   `let steps: u32 = ::neuronlab::vars::__restore::<u32>("steps")?;` for a plain value (with
//!   the type name the host's store reports);
//! - at the end, `::neuronlab::__keep!(name);` for every binding the cell leaves, which stores
//!   it whatever its type: a tensor as a tensor, a number, `bool`, `char` or string as a
//!   plain value, anything else as a local (its type name only, for `%vars`);
//! - for a cell that ends with an expression, `::neuronlab::__show!(expr);`, which shows the
//!   value as the cell's result.

use std::fmt::{Debug, Display};
use std::str::FromStr;

use crate::error::{Error, ErrorKind, Result};
use crate::output::Displayable;
use crate::sys;
use crate::tensor::Tensor;

/// Makes the session variable `name` refer to the tensor `t`, replacing what it held. The
/// tensor is shared, not copied; `t` stays usable.
///
/// # Errors
///
/// [`ErrorKind::Invalid`] when `name` is not a Rust identifier.
///
/// # Example
///
/// ```ignore
/// neuronlab::vars::set_tensor("x", &neuronlab::ones(&[2, 2])?)?;
/// ```
#[track_caller]
pub fn set_tensor(name: &str, t: &Tensor) -> Result<()> {
    sys::var_set_tensor(name, t.handle())
}

/// The tensor of the session variable `name`: a new handle to the same tensor.
///
/// # Errors
///
/// [`ErrorKind::Invalid`] when there is no such variable (the message lists the variables
/// there are) or it holds a plain value.
///
/// # Example
///
/// ```ignore
/// let x = neuronlab::vars::tensor("x")?;
/// ```
#[track_caller]
pub fn tensor(name: &str) -> Result<Tensor> {
    sys::var_get_tensor(name).map(Tensor::from_handle)
}

/// Makes the session variable `name` a plain value: `value`'s `Display` text and its Rust
/// type name (`i64`, `f64`, `bool`, `String`, ...; a `&str` or `&String` is a `String`),
/// replacing what it held. Read it back with [`value`], which parses the text.
///
/// # Errors
///
/// [`ErrorKind::Invalid`] when `name` is not a Rust identifier.
///
/// # Example
///
/// ```ignore
/// neuronlab::vars::set_value("lr", &3e-4)?;
/// neuronlab::vars::set_value("run_name", "baseline")?;
/// ```
#[track_caller]
pub fn set_value<T: Display + ?Sized>(name: &str, value: &T) -> Result<()> {
    let ty = value_type_name(std::any::type_name::<T>());
    set_plain(name, &ty, &value.to_string())
}

/// The plain session variable `name`, parsed from its text with `T`'s `FromStr`.
///
/// # Errors
///
/// [`ErrorKind::Invalid`] when there is no such plain value (the message lists the variables
/// there are, or says it holds a tensor), or its text does not parse as `T`.
///
/// # Example
///
/// ```ignore
/// let lr: f64 = neuronlab::vars::value("lr")?;
/// let name = neuronlab::vars::value::<String>("run_name")?;
/// ```
#[track_caller]
pub fn value<T: FromStr>(name: &str) -> Result<T> {
    // Generic only in the parse: every Rust cell instantiates this for each variable type it
    // restores, and the rest is compiled once, in the SDK.
    let (ty, text) = stored_value(name)?;
    text.parse()
        .map_err(|_| unparsable(name, &ty, &text, std::any::type_name::<T>()))
}

/// The type name and text of the plain variable `name`.
#[track_caller]
#[inline(never)]
fn stored_value(name: &str) -> Result<(String, String)> {
    let payload = sys::var_get_value(name)?;
    Ok(match payload.split_once('\n') {
        Some((ty, text)) => (ty.to_string(), text.to_string()),
        None => ("?".to_string(), payload),
    })
}

/// The error for a stored `text` of type `ty` that does not parse as `wanted`.
#[inline(never)]
fn unparsable(name: &str, ty: &str, text: &str, wanted: &str) -> Error {
    Error::new(
        ErrorKind::Invalid,
        format!(
            "the variable `{name}` holds the {ty} {text:?}, which does not parse as {}",
            short_type_name(wanted)
        ),
    )
}

/// What a cell's generated code calls to declare an earlier cell's tensor variable: the
/// same as [`tensor`].
#[doc(hidden)]
pub use self::tensor as __restore_tensor;

/// What a cell's generated code calls to declare an earlier cell's plain variable with its
/// type: the same as [`value`].
#[doc(hidden)]
pub use self::value as __restore;

/// Stores a plain value with an explicit type name.
#[track_caller]
fn set_plain(name: &str, ty: &str, text: &str) -> Result<()> {
    sys::var_set_value(name, 1, &format!("{ty}\n{text}"))
}

/// The type name stored for a plain value: references are dropped (the value is what is
/// kept), and `str` and `alloc::string::String` are `String`.
fn value_type_name(full: &str) -> String {
    let mut ty = full;
    loop {
        let stripped = ty
            .strip_prefix("&mut ")
            .or_else(|| ty.strip_prefix('&'))
            .map(str::trim_start);
        match stripped {
            Some(rest) => ty = rest,
            None => break,
        }
    }
    match ty {
        "str" | "alloc::string::String" | "std::string::String" => "String".to_string(),
        other => other.to_string(),
    }
}

/// A type name without module paths, for messages and `%vars`:
/// `alloc::vec::Vec<alloc::string::String>` is `Vec<String>`.
fn short_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut segment = String::new();
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            segment.push(c);
        } else if c == ':' && chars.peek() == Some(&':') {
            // `segment::` is a path prefix: drop it.
            chars.next();
            segment.clear();
        } else {
            out.push_str(&segment);
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(&segment);
    out
}

/// The variable name of a binding as `stringify!` gives it, without a raw identifier's `r#`.
fn binding_name(name: &str) -> &str {
    name.strip_prefix("r#").unwrap_or(name)
}

/// Reports a binding that could not be kept. `__keep!` has no caller to return an error to,
/// and failing the cell after its work is done would lose more than the variable.
fn keep_failed(name: &str, e: &Error) {
    let _ = sys::print(
        sys::Stream::Stderr,
        &format!("warning: `{name}` is not kept for later cells: {e}\n"),
    );
}

// The machinery of `__keep!` and `__show!`, which must act on a binding of any type in code
// generated without knowing the type. It uses autoref-based specialization: the macros call
// one method name on `&&Wrap(&x)` (or `&&&Wrap(&x)`), and several traits provide it, each on a
// different number of references to `Wrap<T>` and each with its own bound on `T`. Method
// lookup tries the receiver type with the most references first and takes off one reference
// at a time, so the impl on the most references whose bound holds wins: the first tier that
// fits `T`. Every trait is imported by the macro under `_`.

/// A reference to a binding, for the macros' specialization. Not part of the API.
#[doc(hidden)]
pub struct Wrap<'a, T: ?Sized>(pub &'a T);

impl<T: ?Sized> Clone for Wrap<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for Wrap<'_, T> {}

/// A tensor or a reference to one. Not part of the API.
#[doc(hidden)]
pub trait AsTensor {
    /// The tensor.
    fn as_tensor(&self) -> &Tensor;
}

impl AsTensor for Tensor {
    fn as_tensor(&self) -> &Tensor {
        self
    }
}

impl AsTensor for &Tensor {
    fn as_tensor(&self) -> &Tensor {
        self
    }
}

/// The types `__keep!` stores as plain values, with the type name a later cell declares
/// them with. Not part of the API.
#[doc(hidden)]
pub trait Plain: Display {
    /// The Rust type name: the type itself, or `String` for `str`.
    const TYPE: &'static str;
}

macro_rules! plain {
    ($($t:ident),*) => {$(
        impl Plain for $t {
            const TYPE: &'static str = stringify!($t);
        }
    )*};
}

plain!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64, bool, char);

impl Plain for String {
    const TYPE: &'static str = "String";
}

impl Plain for str {
    const TYPE: &'static str = "String";
}

/// A reference to a plain value (`&str`, `&String`, `&i64`) is kept as the value.
impl<T: Plain + ?Sized> Plain for &T {
    const TYPE: &'static str = T::TYPE;
}

/// `__keep!`, first tier: a tensor is kept as a tensor. Not part of the API.
#[doc(hidden)]
pub trait KeepTensor {
    /// Keeps the binding as the variable `name`.
    fn __neuronlab_keep(self, name: &str);
}

impl<T: AsTensor> KeepTensor for &&Wrap<'_, T> {
    fn __neuronlab_keep(self, name: &str) {
        let name = binding_name(name);
        if let Err(e) = set_tensor(name, self.0.as_tensor()) {
            keep_failed(name, &e);
        }
    }
}

/// `__keep!`, second tier: a number, `bool`, `char` or string is kept as a plain value. Not
/// part of the API.
#[doc(hidden)]
pub trait KeepPlain {
    /// Keeps the binding as the variable `name`.
    fn __neuronlab_keep(self, name: &str);
}

impl<T: Plain + ?Sized> KeepPlain for &Wrap<'_, T> {
    fn __neuronlab_keep(self, name: &str) {
        let name = binding_name(name);
        if let Err(e) = set_plain(name, T::TYPE, &self.0.to_string()) {
            keep_failed(name, &e);
        }
    }
}

/// `__keep!`, last tier: anything else stays local to its cell; the store records its type
/// name. Not part of the API.
#[doc(hidden)]
pub trait KeepLocal {
    /// Records the binding as the local `name`.
    fn __neuronlab_keep(self, name: &str);
}

impl<T: ?Sized> KeepLocal for Wrap<'_, T> {
    fn __neuronlab_keep(self, name: &str) {
        let name = binding_name(name);
        let ty = short_type_name(std::any::type_name::<T>());
        if let Err(e) = sys::var_set_value(name, 0, &ty) {
            keep_failed(name, &e);
        }
    }
}

/// Shows `text` as the cell's result (`text/plain`), which the front end tells apart from
/// what the cell printed. Not part of the API.
#[doc(hidden)]
pub fn show_text(text: &str) {
    // Output has no caller to report an error to; the host only rejects arguments this
    // function never passes.
    let _ = sys::display("text/plain", text.as_bytes());
}

/// The MIME type that announces a cell's result: the host takes the next display (a tensor or
/// text) as the value of the cell's final expression rather than as a display the cell asked
/// for. Its data is empty.
const RESULT_MARKER: &str = "application/vnd.neuronlab.result";

/// Tells the host that the next display is the cell's result. Not part of the API.
#[doc(hidden)]
pub fn announce_result() {
    // As `show_text`: nothing to report to, and the arguments are always valid.
    let _ = sys::display(RESULT_MARKER, &[]);
}

/// `__show!`, first tier: `()` shows nothing, as a statement would. Not part of the API.
#[doc(hidden)]
pub trait ShowUnit {
    /// Shows the value as the cell's result.
    fn __neuronlab_show(self);
}

impl ShowUnit for &&&&Wrap<'_, ()> {
    fn __neuronlab_show(self) {}
}

/// Every tier but `()` shows a value: it announces it first.
fn announced(show: impl FnOnce()) {
    announce_result();
    show();
}

/// `__show!`, second tier: something [`Displayable`] (a tensor, a plot, [`Html`](crate::Html),
/// text) is shown as its own display would show it. Not part of the API.
#[doc(hidden)]
pub trait ShowRich {
    /// Shows the value as the cell's result.
    fn __neuronlab_show(self);
}

impl<T: Displayable + ?Sized> ShowRich for &&&Wrap<'_, T> {
    fn __neuronlab_show(self) {
        announced(|| {
            if let Err(e) = self.0.show() {
                show_text(&format!("<cannot show the value: {e}>"));
            }
        })
    }
}

/// `__show!`, third tier: a value with `Display` (a number, a string, a distributed tensor,
/// a group, a mesh) shows its `Display` text. Not part of the API.
#[doc(hidden)]
pub trait ShowDisplay {
    /// Shows the value as the cell's result.
    fn __neuronlab_show(self);
}

impl<T: Display + ?Sized> ShowDisplay for &&Wrap<'_, T> {
    fn __neuronlab_show(self) {
        announced(|| show_text(&self.0.to_string()))
    }
}

/// `__show!`, fourth tier: a value with `Debug` shows `{:?}`. Not part of the API.
#[doc(hidden)]
pub trait ShowDebug {
    /// Shows the value as the cell's result.
    fn __neuronlab_show(self);
}

impl<T: Debug + ?Sized> ShowDebug for &Wrap<'_, T> {
    fn __neuronlab_show(self) {
        announced(|| show_text(&format!("{:?}", self.0)))
    }
}

/// `__show!`, last tier: anything else shows its type. Not part of the API.
#[doc(hidden)]
pub trait ShowOpaque {
    /// Shows the value as the cell's result.
    fn __neuronlab_show(self);
}

impl<T: ?Sized> ShowOpaque for Wrap<'_, T> {
    fn __neuronlab_show(self) {
        announced(|| {
            show_text(&format!(
                "<value of type {}>",
                short_type_name(std::any::type_name::<T>())
            ))
        })
    }
}

/// Keeps a cell's binding for later cells, whatever its type. For generated cell code; not
/// part of the API.
///
/// `::neuronlab::__keep!(x);` stores the binding `x` as the session variable `"x"`:
///
/// - a [`Tensor`](crate::Tensor) (or `&Tensor`) as a tensor, shared with the host;
/// - an `i8` to `i128`, `isize`, `u8` to `u128`, `usize`, `f32`, `f64`, `bool`, `char`,
///   `String`, `&str` or `&String` as a plain value, with its type name (`String` for the
///   string types) and its `Display` text;
/// - anything else as a local of its cell: only its type name is recorded (for `%vars`).
///
/// In a cell run as several ranks, only rank 0 keeps its bindings.
///
/// It takes a reference: the binding is neither moved nor changed. It evaluates to `()`; a
/// binding that cannot be kept gets a warning on stderr.
#[doc(hidden)]
#[macro_export]
macro_rules! __keep {
    ($name:ident) => {{
        #[allow(unused_imports)]
        use $crate::__private::{KeepLocal as _, KeepPlain as _, KeepTensor as _};
        // In a cell run as N ranks (`%%spmd`), rank 0's bindings are the ones kept, as rank
        // 0's output is the one shown.
        if $crate::dist::rank() == 0 {
            (&&$crate::__private::Wrap(&$name)).__neuronlab_keep(::core::stringify!($name))
        }
    }};
}

/// Shows the value of a cell's final expression as the cell's result. For generated cell
/// code; not part of the API.
///
/// `::neuronlab::__show!(expr);` shows
///
/// - a [`Tensor`](crate::Tensor) (or `&Tensor`) richly, as
///   [`Tensor::display`](crate::Tensor::display) does (an HTML
///   table in a notebook, numpy-style text in the REPL);
/// - a value with `Display` (numbers, strings, [`DTensor`](crate::DTensor),
///   [`Group`](crate::Group), [`DeviceMesh`](crate::DeviceMesh)) as its `Display` text;
/// - otherwise a value with `Debug` as `{:?}`;
/// - otherwise `<value of type T>`;
/// - `()` not at all.
///
/// A display with the MIME type `application/vnd.neuronlab.result` (no data) comes first, so
/// the front end can tell the result from what the cell printed or displayed; text goes to
/// the `display` import as `text/plain`. The expression is evaluated once and only borrowed.
#[doc(hidden)]
#[macro_export]
macro_rules! __show {
    ($e:expr) => {{
        #[allow(unused_imports)]
        use $crate::__private::{
            ShowDebug as _, ShowDisplay as _, ShowOpaque as _, ShowRich as _, ShowUnit as _,
        };
        (&&&&$crate::__private::Wrap(&$e)).__neuronlab_show()
    }};
}

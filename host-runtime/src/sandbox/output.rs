//! What a guest produces while it runs, delivered to the front end as it happens.

use crate::tensor::Tensor;

/// One piece of guest output.
#[derive(Clone, Debug)]
pub enum GuestOutput {
    /// Text for the cell's stdout.
    Stdout(String),
    /// Text for the cell's stderr.
    Stderr(String),
    /// Rich output: a MIME type and its data.
    Display {
        /// For example `text/html` or `image/svg+xml`.
        mime: String,
        /// The content.
        data: Vec<u8>,
    },
    /// A tensor to show richly (the front end renders it: text, or an HTML table).
    Tensor(Tensor),
}

/// Receives guest output as it happens.
pub type OutputSink = Box<dyn FnMut(GuestOutput) + Send>;

//! What a guest produces while it runs, delivered to the front end as it happens.
//!
//! Besides rich output, a guest's `display` carries a few requests to the front end, each a
//! MIME type of ours (guest-sdk/ABI.md lists them): the cell's result is next, the next
//! display has a display id (new or an update), clear the output, and a plot to draw.

use neuronlab_core::tensor::Tensor;
use neuronlab_plot::Plot;

/// `display` MIME type (no data): the next display is the value of the cell's final
/// expression (the SDK's `__show!` sends it).
pub const RESULT_MIME: &str = "application/vnd.neuronlab.result";
/// `display` MIME type (data: the id): the next display is shown with this display id.
pub const DISPLAY_ID_MIME: &str = "application/vnd.neuronlab.display-id";
/// `display` MIME type (data: the id): the next display replaces what the displays with this
/// id show.
pub const UPDATE_DISPLAY_MIME: &str = "application/vnd.neuronlab.update-display";
/// `display` MIME type (data: empty, or `wait`): clear the cell's output, at once or (wait)
/// when the next output arrives.
pub const CLEAR_OUTPUT_MIME: &str = "application/vnd.neuronlab.clear-output";
/// The longest display id, in bytes.
pub const MAX_DISPLAY_ID: usize = 256;

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
    /// A checked plot to draw (SVG in notebooks, text in terminals).
    Plot(Plot),
    /// The next display (or tensor, or plot) is the value of the cell's final expression.
    ResultNext,
    /// The next display (or tensor, or plot) goes to display `id`: shown anew, or, with
    /// `update`, replacing what the displays of that id show.
    DisplayIdNext {
        /// The display id the guest chose.
        id: String,
        /// Whether it updates the displays already shown with this id.
        update: bool,
    },
    /// Clear the cell's output now, or (`wait`) when the next output arrives.
    ClearOutput {
        /// Wait for the next output before clearing (no flicker in a loop).
        wait: bool,
    },
}

impl GuestOutput {
    /// The output a guest's `display(mime, data)` asks for: one of the requests above for our
    /// MIME types (checked; the error says what is wrong), rich output otherwise.
    pub fn from_display(mime: String, data: Vec<u8>) -> Result<GuestOutput, String> {
        let id = |data: Vec<u8>| match String::from_utf8(data) {
            Ok(id) if !id.is_empty() && id.len() <= MAX_DISPLAY_ID => Ok(id),
            _ => Err(format!(
                "a display id must be UTF-8 text of 1 to {MAX_DISPLAY_ID} bytes"
            )),
        };
        Ok(match mime.as_str() {
            RESULT_MIME if data.is_empty() => GuestOutput::ResultNext,
            RESULT_MIME => {
                return Err(format!(
                    "a result request takes no data, got {} bytes; display the value next",
                    data.len()
                ))
            }
            DISPLAY_ID_MIME => GuestOutput::DisplayIdNext {
                id: id(data)?,
                update: false,
            },
            UPDATE_DISPLAY_MIME => GuestOutput::DisplayIdNext {
                id: id(data)?,
                update: true,
            },
            CLEAR_OUTPUT_MIME => match data.as_slice() {
                b"" => GuestOutput::ClearOutput { wait: false },
                b"wait" => GuestOutput::ClearOutput { wait: true },
                _ => return Err("clear-output takes no data, or `wait`".to_string()),
            },
            neuronlab_plot::PLOT_MIME => GuestOutput::Plot(Plot::from_json(&data)?),
            _ => GuestOutput::Display { mime, data },
        })
    }
}

/// Receives guest output as it happens.
pub type OutputSink = Box<dyn FnMut(GuestOutput) + Send>;

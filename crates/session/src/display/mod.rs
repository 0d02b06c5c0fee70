//! Rich representations of what a cell shows, for front ends that render HTML (Jupyter):
//! tensors as tables with their statistics, and the cell's event summary as a compact block.
//!
//! Every fragment is self-contained: inline styles only, no scripts, no external resources,
//! and every text that goes in is escaped with [`escape`]. The `text/plain` representations
//! stay the numpy-style text and the summary's lines; these come beside them.
//!
//! - [`tensor_html`]: a tensor's header, statistics and (summarized) values.
//! - [`TensorStats`]: the statistics, computed in f64 over every element.
//! - [`summary_html`]: the cell's event summary, one line per item.

mod cell_summary;
mod stats;
mod tensor;

pub use cell_summary::summary_html;
pub use stats::{Moments, TensorStats};
pub use tensor::{tensor_html, HTML_EDGE, MAX_ROWS};

/// The font of every fragment: the notebook's monospace, so digits line up.
const FONT: &str = "font-family:monospace;font-size:12px";

/// `text` with HTML's special characters escaped (`&`, `<`, `>`, `"` and `'`): safe as
/// element content and inside a quoted attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use neuronlab_core::device::topology::Topology;
    use neuronlab_core::runtime::RuntimeOptions;
    use neuronlab_core::Runtime;

    /// A small runtime for the display tests' tensors.
    pub(crate) fn runtime() -> Runtime {
        Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).expect("a preset"),
            host_limit: 1 << 30,
        })
    }

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<b a="1" c='2'>&</b>"#),
            "&lt;b a=&quot;1&quot; c=&#39;2&#39;&gt;&amp;&lt;/b&gt;"
        );
        assert_eq!(escape("plain · µs"), "plain · µs");
    }
}

//! What executing a cell produces, front-end neutral: the REPL prints it, the Jupyter kernel
//! turns it into messages.

use std::collections::BTreeMap;

use super::display::tensor_html;
use neuronlab_core::tensor::{format_tensor, FormatOptions};
use neuronlab_core::Tensor;
use neuronlab_plot::Plot;

/// One piece of a cell's output, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Text the cell wrote to its stdout.
    Stdout(String),
    /// Text the cell wrote to its stderr (also progress notes of the session).
    Stderr(String),
    /// Rich output shown where it was asked for (a tensor, a table, a plot).
    Display(MimeBundle),
    /// Rich output with a display id: shown anew, or (`update`) replacing what the earlier
    /// displays of that id show, so a loop can show its progress in place.
    DisplayWithId {
        /// The id the guest chose.
        id: String,
        /// What to show.
        bundle: MimeBundle,
        /// Whether it replaces earlier displays of the id.
        update: bool,
    },
    /// Clear the cell's output now, or (`wait`) when the next output arrives.
    ClearOutput {
        /// Wait for the next output before clearing.
        wait: bool,
    },
    /// Text for the pager (a notebook's help pane), such as `%doc`'s.
    Page(MimeBundle),
    /// The value of the cell's final expression.
    Result(MimeBundle),
    /// Why the cell failed.
    Error(CellError),
    /// The cell's event summary (ops, modeled time, compiles, collectives).
    Summary(MimeBundle),
    /// How far a long operation has come (the first build of the standard library and the
    /// SDK, say): shown in place, each report replacing the last one of its id.
    Progress(Progress),
}

/// The [`Progress::unit`] of work counted in bytes, which its text shows as sizes.
pub const BYTES: &str = "bytes";

/// A long operation's progress: the front ends show it in place (an updating display in
/// Jupyter, one rewritten line on a terminal) from the text and fraction given here.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Which operation: a later report with the same id replaces the earlier one.
    pub id: String,
    /// What the operation is, as a phrase: `building the standard library and the SDK`.
    pub what: String,
    /// Steps done.
    pub done: u64,
    /// Of how many, once known.
    pub total: Option<u64>,
    /// What a step is, plural: `crates`.
    pub unit: &'static str,
    /// Time since the operation started.
    pub elapsed: std::time::Duration,
    /// Whether this is the last report: the operation ended.
    pub finished: bool,
    /// Whether the report is only for watching: what the operation shows when it ends says
    /// the rest (a run's own output and summary), so a terminal's line is cleared at the end
    /// and a log gets nothing.
    pub transient: bool,
}

impl Progress {
    /// `building the SDK: 12/29 crates · 8 s`, or at the end `building the SDK: done, 29
    /// crates in 52 s`.
    ///
    /// Counts of [`BYTES`] read as sizes: `loading ...: 1.50 GiB of 3.00 GiB · 4 s`.
    pub fn text(&self) -> String {
        let secs = self.elapsed.as_secs();
        let count = |n: u64| match self.unit {
            BYTES => neuronlab_core::events::fmt::bytes(n),
            unit => format!("{n} {unit}"),
        };
        if self.finished {
            return format!("{}: done, {} in {secs} s", self.what, count(self.done));
        }
        match (self.total, self.unit) {
            (Some(total), BYTES) => format!(
                "{}: {} of {} · {secs} s",
                self.what,
                count(self.done.min(total)),
                count(total)
            ),
            (Some(total), unit) => format!(
                "{}: {}/{total} {unit} · {secs} s",
                self.what,
                self.done.min(total)
            ),
            (None, _) => format!("{}: {} · {secs} s", self.what, count(self.done)),
        }
    }

    /// The share done, from 0 to 1, once the total is known.
    pub fn fraction(&self) -> Option<f64> {
        match (self.finished, self.total) {
            (true, _) => Some(1.0),
            (false, Some(total)) if total > 0 => Some((self.done.min(total)) as f64 / total as f64),
            _ => None,
        }
    }

    /// What a line-oriented front end writes for this report: on a terminal, the line
    /// rewritten in place (ended when the operation ends); elsewhere only the final report,
    /// so a log gets one line.
    pub fn terminal_text(&self, terminal: bool) -> Option<String> {
        match (terminal, self.finished, self.transient) {
            (true, false, _) => Some(format!("\r\x1b[K{}", self.text())),
            (true, true, true) => Some("\r\x1b[K".to_string()),
            (true, true, false) => Some(format!("\r\x1b[K{}\n", self.text())),
            (false, true, false) => Some(format!("{}\n", self.text())),
            (false, _, _) => None,
        }
    }

    /// The report as a bundle: the text, and in HTML a progress bar beside it.
    pub fn bundle(&self) -> MimeBundle {
        let bar = match self.fraction() {
            Some(f) => {
                format!("<progress value=\"{f:.3}\" max=\"1\" style=\"width:12em\"></progress> ")
            }
            None => "<progress style=\"width:12em\"></progress> ".to_string(),
        };
        let html = format!(
            "<div style=\"font-family:monospace;font-size:12px;color:#555\">{bar}{}</div>",
            crate::display::escape(&self.text())
        );
        MimeBundle::text(self.text()).with("text/html", html)
    }
}

/// One value in several representations, keyed by MIME type (`text/plain` is always there).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MimeBundle(pub BTreeMap<String, String>);

impl MimeBundle {
    /// A bundle with only `text/plain`.
    pub fn text(text: impl Into<String>) -> MimeBundle {
        MimeBundle(BTreeMap::from([("text/plain".to_string(), text.into())]))
    }

    /// Adds a representation.
    pub fn with(mut self, mime: &str, data: impl Into<String>) -> MimeBundle {
        self.0.insert(mime.to_string(), data.into());
        self
    }

    /// The `text/plain` representation.
    pub fn plain(&self) -> &str {
        self.0.get("text/plain").map_or("", String::as_str)
    }

    /// The representation for `mime`, if there is one.
    pub fn get(&self, mime: &str) -> Option<&str> {
        self.0.get(mime).map(String::as_str)
    }

    /// A plot: its text drawing, and SVG ([`neuronlab_plot::svg`]).
    pub fn plot(p: &Plot) -> MimeBundle {
        let bundle = MimeBundle::text(neuronlab_plot::text::render(p));
        match neuronlab_plot::svg::render(p) {
            Some(svg) => bundle.with("image/svg+xml", svg),
            None => bundle,
        }
    }

    /// A tensor: numpy-style text, and an HTML table with its statistics
    /// ([`tensor_html`]).
    pub fn tensor(t: &Tensor) -> MimeBundle {
        MimeBundle::text(format_tensor(t, &FormatOptions::default()))
            .with("text/html", tensor_html(t))
    }
}

/// A failed cell, as Jupyter reports errors: a name, a value and traceback lines.
#[derive(Clone, Debug, PartialEq)]
pub struct CellError {
    /// The kind: `CompileError`, `GuestTrap`, `Interrupted`, `MagicError`, ...
    pub ename: String,
    /// The one-line message.
    pub evalue: String,
    /// The full report, one entry per block (compiler errors, backtrace frames).
    pub traceback: Vec<String>,
}

impl CellError {
    /// The line front ends show first: `ename: evalue`, or the name alone.
    pub fn head(&self) -> String {
        if self.evalue.is_empty() {
            self.ename.clone()
        } else {
            format!("{}: {}", self.ename, self.evalue)
        }
    }

    /// What front ends show under the [`head`](CellError::head), block by block: each
    /// traceback block without the lines that repeat the message, and no block that adds
    /// nothing. The REPL and the Jupyter kernel both render exactly these.
    pub fn details(&self) -> Vec<String> {
        let head = self.head();
        let message = self.evalue.trim_end();
        self.traceback
            .iter()
            .filter_map(|block| {
                let block = block.trim_end();
                let rest = [head.as_str(), message]
                    .into_iter()
                    .filter(|m| !m.is_empty())
                    .find_map(|m| match unlabelled(block).strip_prefix(m) {
                        Some("") => Some(""),
                        Some(rest) => rest.strip_prefix('\n'),
                        None => None,
                    })
                    .unwrap_or(block);
                let rest = rest.trim_start_matches('\n');
                (!rest.is_empty()).then(|| rest.to_string())
            })
            .collect()
    }

    /// An error with no more detail than its message.
    pub fn new(ename: &str, evalue: impl Into<String>) -> CellError {
        let evalue = evalue.into();
        CellError {
            ename: ename.to_string(),
            traceback: vec![evalue.clone()],
            evalue,
        }
    }
}

/// A compiler diagnostic's block without its `error: ` or `error[E0308]: ` label, so that a
/// first line that only repeats the message is recognised as such.
fn unlabelled(block: &str) -> &str {
    let Some(rest) = block.strip_prefix("error") else {
        return block;
    };
    let rest = match rest.strip_prefix('[') {
        Some(coded) => match coded.split_once(']') {
            Some((code, rest)) if code.bytes().all(|b| b.is_ascii_alphanumeric()) => rest,
            _ => return block,
        },
        None => rest,
    };
    rest.strip_prefix(": ").unwrap_or(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_drop_what_repeats_the_message_even_over_several_lines() {
        let usage = CellError::new(
            "MagicError",
            "%load: give the module's file\nusage: %load FILE",
        );
        assert_eq!(
            usage.head(),
            "MagicError: %load: give the module's file\nusage: %load FILE"
        );
        assert!(usage.details().is_empty(), "{:?}", usage.details());

        let trap = CellError {
            ename: "GuestTrap".into(),
            evalue: "the guest aborted".into(),
            traceback: vec!["GuestTrap: the guest aborted\nwasm backtrace:\n   0: f".into()],
        };
        assert_eq!(trap.details(), ["wasm backtrace:\n   0: f"]);

        // A block that only starts with the message's words keeps its whole first line.
        let partial = CellError {
            ename: "BuildError".into(),
            evalue: "x".into(),
            traceback: vec!["x is not found\nhelp: define it".into()],
        };
        assert_eq!(partial.details(), ["x is not found\nhelp: define it"]);

        // A compiler diagnostic's header says again what the head says: it goes.
        let compile = CellError {
            ename: "CompileError".into(),
            evalue: "mismatched types".into(),
            traceback: vec![
                "error[E0308]: mismatched types\n --> cell [2], line 1:14\n".into(),
                "error: cannot find value `y`\n --> cell [2], line 2:5\n".into(),
            ],
        };
        assert_eq!(
            compile.details(),
            [
                " --> cell [2], line 1:14",
                "error: cannot find value `y`\n --> cell [2], line 2:5"
            ]
        );
    }
}

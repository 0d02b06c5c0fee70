//! A cell's [`Output`]s on a terminal: stream text as it is, displays and results as their
//! `text/plain`, errors in red with their traceback, the event summary dimmed. Colour only
//! when the stream is a terminal and `NO_COLOR` is unset.

use std::io::{IsTerminal, Write};

use neuronlab_session::output::Progress;
use neuronlab_session::{CellError, Output};

/// ANSI styles, applied only when colour is on.
pub mod style {
    pub const RESET: &str = "\x1b[0m";
    pub const BOLD: &str = "\x1b[1m";
    pub const DIM: &str = "\x1b[2m";
    pub const RED: &str = "\x1b[31m";
    pub const BOLD_RED: &str = "\x1b[1;31m";
    pub const GREEN: &str = "\x1b[32m";
    pub const BOLD_GREEN: &str = "\x1b[1;32m";
    pub const MAGENTA: &str = "\x1b[35m";
    pub const CYAN: &str = "\x1b[36m";
    pub const BOLD_BLUE: &str = "\x1b[1;34m";
}

/// Whether `NO_COLOR` asks for no colour (set to anything non-empty, per no-color.org).
fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Colour on stdout: a terminal, and `NO_COLOR` unset.
pub fn stdout_colour() -> bool {
    std::io::stdout().is_terminal() && !no_color()
}

/// Colour on stderr: a terminal, and `NO_COLOR` unset.
pub fn stderr_colour() -> bool {
    std::io::stderr().is_terminal() && !no_color()
}

/// `text` in `style` when `on`.
pub fn paint(on: bool, style: &str, text: &str) -> String {
    if on && !text.is_empty() {
        format!("{style}{text}{}", style::RESET)
    } else {
        text.to_string()
    }
}

/// Prints outputs in order, keeping track of unfinished lines so that what follows a partial
/// line starts on a line of its own.
pub struct Renderer {
    colour_out: bool,
    colour_err: bool,
    /// Whether stdout / stderr last ended a line (or nothing was written yet).
    out_at_line_start: bool,
    err_at_line_start: bool,
    /// Whether stdout is a terminal, where an update can redraw a display in place.
    terminal_out: bool,
    /// The display id shown last and its height in lines, while nothing has been written
    /// after it (so an update of it can move up and redraw it).
    last_display: Option<(String, usize)>,
    /// Whether the current stdout line is a progress line, which the next report rewrites.
    progress_line: bool,
}

impl Default for Renderer {
    fn default() -> Self {
        Renderer::new()
    }
}

impl Renderer {
    /// A renderer for this process's stdout and stderr.
    pub fn new() -> Renderer {
        Renderer {
            colour_out: stdout_colour(),
            colour_err: stderr_colour(),
            out_at_line_start: true,
            err_at_line_start: true,
            terminal_out: std::io::stdout().is_terminal(),
            last_display: None,
            progress_line: false,
        }
    }

    /// A renderer that writes for a file whatever stdout is: no colour, no progress line
    /// rewritten in place, no display redrawn. For a process under mpirun, whose stdout is
    /// a pseudo-terminal OpenMPI forwards to wherever mpirun's own stdout goes.
    pub fn plain() -> Renderer {
        Renderer {
            colour_out: false,
            colour_err: false,
            terminal_out: false,
            ..Renderer::new()
        }
    }

    /// Whether stdout gets colour.
    pub fn colour(&self) -> bool {
        self.colour_out
    }

    /// Shows one output of cell `cell`.
    pub fn output(&mut self, cell: u32, output: Output) {
        match output {
            Output::Stdout(text) => self.out(&text),
            Output::Stderr(text) => self.err(&text),
            Output::Display(bundle) | Output::Page(bundle) => {
                self.out_line_start();
                self.out(&with_newline(bundle.plain()));
            }
            Output::DisplayWithId { id, bundle, update } => {
                self.out_line_start();
                let text = with_newline(bundle.plain());
                match self.last_display.take() {
                    Some((last, lines)) if update && last == id && self.terminal_out => {
                        // Up to the display's first line, and clear from there down.
                        self.out(&format!("\x1b[{lines}A\x1b[J"));
                    }
                    _ => {}
                }
                self.out(&text);
                self.last_display = Some((id, text.lines().count()));
            }
            // A terminal keeps what it printed; the next output simply follows.
            Output::ClearOutput { .. } => {}
            Output::Result(bundle) => {
                self.out_line_start();
                let text = bundle.plain();
                let marker = paint(self.colour_out, style::RED, &format!("Out[{cell}]:"));
                // A multi-line value (a tensor) starts on its own line so its rows align.
                let sep = if text.contains('\n') { "\n" } else { " " };
                self.out(&format!("{marker}{sep}{}", with_newline(text)));
            }
            Output::Error(error) => {
                self.out_line_start();
                self.err_line_start();
                self.err(&error_text(&error, self.colour_err));
            }
            Output::Progress(progress) => self.progress(&progress),
            Output::Summary(bundle) => {
                self.err_line_start();
                self.out_line_start();
                self.out(&paint(
                    self.colour_out,
                    style::DIM,
                    bundle.plain().trim_end(),
                ));
                self.out("\n");
            }
        }
    }

    /// A progress report, as [`Progress::terminal_text`] says: on a terminal one line
    /// rewritten in place, kept when the operation ends (cleared if it was transient);
    /// elsewhere the final report alone. Other output clears the line first; the next
    /// report draws it again below that output.
    fn progress(&mut self, progress: &Progress) {
        let Some(text) = progress.terminal_text(self.terminal_out) else {
            return;
        };
        if !self.progress_line {
            self.out_line_start();
        }
        self.write_out(&text);
        self.progress_line = self.terminal_out && !progress.finished;
        if progress.finished && progress.transient {
            self.out_at_line_start = true;
        }
    }

    /// Clears a progress line still on the terminal, so other output takes its place.
    fn clear_progress(&mut self) {
        if self.progress_line {
            self.write_out("\r\x1b[K");
            self.out_at_line_start = true;
            self.progress_line = false;
        }
    }

    /// Ends the cell: a partial last line is finished so the next prompt starts at column 0.
    pub fn finish(&mut self) {
        self.out_line_start();
        self.err_line_start();
    }

    /// Writes `text` to stdout as it is (in place of a progress line on the terminal).
    pub fn out(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.clear_progress();
        self.write_out(text);
    }

    fn write_out(&mut self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        self.out_at_line_start = text.ends_with('\n');
        self.last_display = None;
        self.progress_line = false;
    }

    /// Writes `text` to stderr as it is.
    pub fn err(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        // Whatever stdout holds goes first, so the two streams interleave in order.
        self.clear_progress();
        let _ = std::io::stdout().flush();
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
        self.err_at_line_start = text.ends_with('\n');
        self.last_display = None;
    }

    fn out_line_start(&mut self) {
        if !self.out_at_line_start {
            self.out("\n");
        }
    }

    fn err_line_start(&mut self) {
        if !self.err_at_line_start {
            self.err("\n");
        }
    }
}

fn with_newline(text: &str) -> String {
    if text.ends_with('\n') {
        text.to_string()
    } else {
        format!("{text}\n")
    }
}

/// An error as the terminal shows it: its head in bold red, then its details in red, as
/// [`CellError`] shapes them.
pub fn error_text(error: &CellError, colour: bool) -> String {
    let mut text = paint(colour, style::BOLD_RED, &error.head());
    text.push('\n');
    for line in error.details().iter().flat_map(|block| block.lines()) {
        text.push_str(&paint(colour, style::RED, line));
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_shows_its_kind_message_and_extra_traceback() {
        let error = CellError {
            ename: "CompileError".into(),
            evalue: "cannot find value `y`".into(),
            traceback: vec![
                "cannot find value `y`".into(),
                "error[E0425]: cannot find value `y`\n --> cell[2]:1:1\n".into(),
            ],
        };
        assert_eq!(
            error_text(&error, false),
            "CompileError: cannot find value `y`\n --> cell[2]:1:1\n"
        );
        let trap = CellError {
            ename: "GuestTrap".into(),
            evalue: "the guest aborted".into(),
            traceback: vec!["GuestTrap: the guest aborted\nwasm backtrace:\n   0: f".into()],
        };
        assert_eq!(
            error_text(&trap, false),
            "GuestTrap: the guest aborted\nwasm backtrace:\n   0: f\n"
        );
        let plain = CellError::new("MagicError", "%nope is not a magic");
        assert_eq!(
            error_text(&plain, false),
            "MagicError: %nope is not a magic\n"
        );
        assert!(error_text(&plain, true).starts_with(style::BOLD_RED));
    }

    #[test]
    fn paint_is_plain_without_colour() {
        assert_eq!(paint(false, style::RED, "x"), "x");
        assert_eq!(paint(true, style::RED, "x"), "\x1b[31mx\x1b[0m");
        assert_eq!(paint(true, style::RED, ""), "");
    }
}

//! Guest output as cell outputs: text, displays and plots become [`Output`]s, a result marker
//! makes the next display the cell's result, and locations in the generated cell file
//! (`src/cell.rs:L:C`, from a panic or `dbg!`) become the user's `cell[N]:L:C`.

use neuronlab_sandbox::{GuestError, GuestErrorKind, GuestOutput};

use super::rust_cell::codegen;
use super::{CellError, MimeBundle, Output};

/// How the columns of the generated cell file differ from the user's: the declarations added
/// to the first line, and the `__show!(` before the final expression.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct CellColumns {
    header_chars: usize,
    show: Option<(usize, usize, usize)>,
}

impl CellColumns {
    pub(super) fn of(map: &codegen::SourceMap) -> CellColumns {
        CellColumns {
            header_chars: map.header_chars,
            show: map.show,
        }
    }

    /// The user's column of column `col` on line `line` of the generated file.
    fn user_column(&self, line: usize, col: usize) -> usize {
        let mut col = col;
        if line == 1 {
            col = col.saturating_sub(self.header_chars);
        }
        if let Some((show_line, show_col, width)) = self.show {
            if line == show_line && col >= show_col + width {
                col -= width;
            }
        }
        col.max(1)
    }
}

/// `text` with every `src/cell.rs:L:C` (a panic's or `dbg!`'s location) written as the
/// user's `cell[N]:L:C`.
fn user_locations(text: &str, cell: u32, columns: Option<CellColumns>) -> String {
    const FILE: &str = "src/cell.rs:";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(FILE) {
        out.push_str(&rest[..at]);
        rest = &rest[at + FILE.len()..];
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let line_len = digits(rest);
        let line: Option<usize> = rest[..line_len].parse().ok();
        let col_text = rest[line_len..].strip_prefix(':');
        match (line, col_text, columns) {
            (Some(line), Some(after), Some(columns)) if digits(after) > 0 => {
                let col_len = digits(after);
                let col: usize = after[..col_len].parse().unwrap_or(1);
                out.push_str(&format!(
                    "cell[{cell}]:{line}:{}",
                    columns.user_column(line, col)
                ));
                rest = &after[col_len..];
            }
            _ => out.push_str(&format!("cell[{cell}]:")),
        }
    }
    out.push_str(rest);
    out
}

/// Turns guest output into cell outputs: locations in the cell's file become `cell[N]:L:C`,
/// and the output after a result marker is the cell's result.
pub(super) struct OutputConverter {
    cell: u32,
    columns: Option<CellColumns>,
    result_next: bool,
    /// The display id (and whether it is an update) the next display goes to.
    display_id_next: Option<(String, bool)>,
    /// The last line on stderr that explains a failure (`error: ...`, `panicked at ...`).
    last_failure: Option<String>,
}

impl OutputConverter {
    pub(super) fn new(cell: u32, columns: Option<CellColumns>) -> OutputConverter {
        OutputConverter {
            cell,
            columns,
            result_next: false,
            display_id_next: None,
            last_failure: None,
        }
    }

    pub(super) fn convert(&mut self, output: GuestOutput) -> Option<Output> {
        let (cell, columns) = (self.cell, self.columns);
        let rename = |text: String| user_locations(&text, cell, columns);
        Some(match output {
            GuestOutput::Stdout(text) => Output::Stdout(rename(text)),
            GuestOutput::Stderr(text) => {
                let text = rename(text);
                if let Some(line) = text
                    .lines()
                    .rev()
                    .find(|l| l.starts_with("error: ") || l.starts_with("panicked at"))
                {
                    self.last_failure = Some(line.to_string());
                }
                Output::Stderr(text)
            }
            GuestOutput::ResultNext => {
                self.result_next = true;
                return None;
            }
            GuestOutput::DisplayIdNext { id, update } => {
                self.display_id_next = Some((id, update));
                return None;
            }
            GuestOutput::ClearOutput { wait } => Output::ClearOutput { wait },
            GuestOutput::Tensor(t) => self.shown(MimeBundle::tensor(&t)),
            GuestOutput::Plot(p) => self.shown(MimeBundle::plot(&p)),
            GuestOutput::Display { mime, data } => {
                let data = String::from_utf8_lossy(&data).into_owned();
                let bundle = if mime == "text/plain" {
                    MimeBundle::text(data)
                } else {
                    MimeBundle::text(format!("<{mime}: shown where the front end can>"))
                        .with(&mime, data)
                };
                self.shown(bundle)
            }
        })
    }

    fn shown(&mut self, bundle: MimeBundle) -> Output {
        let id = self.display_id_next.take();
        if std::mem::take(&mut self.result_next) {
            return Output::Result(bundle);
        }
        match id {
            Some((id, update)) => Output::DisplayWithId { id, bundle, update },
            None => Output::Display(bundle),
        }
    }

    /// The error to report for a failed guest call: what the guest reported (its panic, or
    /// the error its entry returned, at the user's line) when it did; else the trap, named
    /// by the last failure line an older guest printed on stderr.
    pub(super) fn error(&self, e: &GuestError) -> CellError {
        let rename = |text: &str| user_locations(text, self.cell, self.columns);
        let evalue = match (&e.reported, &self.last_failure, e.kind) {
            (Some(reported), _, _) => rename(&reported.message),
            (None, Some(line), GuestErrorKind::Trap) => line.clone(),
            _ => e.message.clone(),
        };
        let mut e = e.clone();
        e.backtrace = user_frames(&e.backtrace, self.cell);
        CellError {
            ename: e.name().to_string(),
            evalue,
            traceback: vec![rename(&e.to_string())],
        }
    }
}

/// The prefix of every frame of a Rust cell's own crate (see `build::package_name`).
const CELL_CRATE: &str = "neuronlab_cell_";

/// A Rust cell's backtrace as the user wrote it: the cell's body is `cell [N]`, an item kept
/// from an earlier cell goes by its own name, and the entry point the SDK's `main!` generated
/// around the body is dropped. Other modules' frames are left as they are.
fn user_frames(frames: &[String], cell: u32) -> Vec<String> {
    if !frames.iter().any(|f| f.starts_with(CELL_CRATE)) {
        return frames.to_vec();
    }
    let renamed = frames.iter().filter(|f| *f != "run").map(|f| {
        let Some(rest) = f.strip_prefix(CELL_CRATE) else {
            return f.clone();
        };
        let path = rest.split_once("::").map_or(rest, |(_, path)| path);
        match path.strip_prefix("__cell_body") {
            Some(inner) => format!("cell [{cell}]{inner}"),
            None => path.to_string(),
        }
    });
    renamed.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_locations_become_the_users_cell_line_and_column() {
        let columns = CellColumns {
            header_chars: 100,
            show: Some((3, 1, 19)),
        };
        let text = "panicked at src/cell.rs:3:21: index out of bounds\n[src/cell.rs:1:109] x = 2";
        assert_eq!(
            user_locations(text, 6, Some(columns)),
            "panicked at cell[6]:3:2: index out of bounds\n[cell[6]:1:9] x = 2"
        );
        assert_eq!(user_locations("at src/cell.rs:", 2, None), "at cell[2]:");
    }

    #[test]
    fn a_cells_frames_are_named_after_the_cell() {
        let frames: Vec<String> = [
            "core::panicking::panic",
            "neuronlab_cell_2d86430eaa66::__cell_body::{closure#0}",
            "neuronlab_cell_2d86430eaa66::helper",
            "neuronlab_cell_2d86430eaa66::__cell_body",
            "run",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            user_frames(&frames, 4),
            [
                "core::panicking::panic",
                "cell [4]::{closure#0}",
                "helper",
                "cell [4]",
            ]
        );
        let wat = vec!["spin".to_string(), "run".to_string()];
        assert_eq!(
            user_frames(&wat, 4),
            wat,
            "a module that is not a cell keeps its frames"
        );
    }
}

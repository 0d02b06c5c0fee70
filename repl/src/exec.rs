//! `neuronlab exec FILE`: the cells of a file, run in one session without a prompt, their
//! outputs printed as the REPL prints them under a `# %% [n]` header per cell.

use std::path::Path;

use neuronlab_session::Outcome;

use crate::repl::interrupt::CtrlC;
use crate::repl::render::{paint, style, Renderer};
use neuronlab_session::Session;

/// The line prefix that starts a cell.
pub const MARKER: &str = "# %%";

/// The cells of `text`: split at lines that start with `# %%` (the marker line itself is not
/// part of a cell); text before the first marker is the first cell. Blank cells are dropped.
pub fn split_cells(text: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut push = |lines: &mut Vec<&str>| {
        let cell = lines.join("\n");
        if !cell.trim().is_empty() {
            cells.push(cell.trim_end().to_string());
        }
        lines.clear();
    };
    for line in text.lines() {
        if line.starts_with(MARKER) {
            push(&mut current);
        } else {
            current.push(line);
        }
    }
    push(&mut current);
    cells
}

/// Runs the cells of `path`. Stops at the first failed cell unless `keep_going`; either way a
/// failed cell makes the result an error.
pub fn run(path: &Path, keep_going: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let cells = split_cells(&text);
    let mut session = Session::from_env()?;
    let ctrlc = CtrlC::install(session.interrupter())?;
    let mut renderer = Renderer::new();
    let colour = renderer.colour();
    let mut failed: Vec<u32> = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        let n = session.execution_count() + 1;
        renderer.out(&format!(
            "{}\n",
            paint(colour, style::GREEN, &format!("{MARKER} [{n}]"))
        ));
        ctrlc.start_cell();
        let outcome = session.execute(cell, &mut |o| renderer.output(n, o));
        renderer.finish();
        if outcome == Outcome::Ok {
            continue;
        }
        failed.push(n);
        let rest = cells.len() - i - 1;
        if outcome == Outcome::Interrupted || ctrlc.pressed() {
            return Err(format!(
                "interrupted in cell [{n}]; {} not run",
                plural(rest, "cell")
            ));
        }
        if !keep_going {
            return Err(if rest == 0 {
                format!("cell [{n}] failed")
            } else {
                format!(
                    "cell [{n}] failed; {} not run (--keep-going runs them)",
                    plural(rest, "cell")
                )
            });
        }
    }
    match failed.as_slice() {
        [] => Ok(()),
        cells => {
            let list: Vec<String> = cells.iter().map(|n| format!("[{n}]")).collect();
            Err(format!(
                "{} failed: {}",
                plural(cells.len(), "cell"),
                list.join(", ")
            ))
        }
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

#[cfg(test)]
mod tests {
    use super::split_cells;

    #[test]
    fn cells_split_at_markers() {
        let text = "%help\n# %%\n%%wat\n(module)\n\n# %% [markdown] a title\nlet x = 1;\n# %%\n\n";
        assert_eq!(
            split_cells(text),
            ["%help", "%%wat\n(module)", "let x = 1;"]
        );
        assert_eq!(split_cells("# %%\n%vars\n"), ["%vars"]);
        assert!(split_cells("").is_empty());
        // Only a marker at the start of a line counts.
        assert_eq!(
            split_cells("%help\n  # %% not a marker"),
            ["%help\n  # %% not a marker"]
        );
    }
}

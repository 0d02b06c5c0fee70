//! The interactive REPL: `neuronlab` with no subcommand. A thin loop over [`Session`]: read a
//! cell, run it, render its outputs. What a cell means, what completes and when a cell is
//! complete are the session's business.
//!
//! - [`editor`]: the line editor's helper (completion, multi-line cells, colour);
//! - [`render`]: outputs on a terminal (also used by `exec` and `tour`);
//! - [`interrupt`]: Ctrl-C while a cell runs.

pub mod editor;
pub mod interrupt;
pub mod render;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use neuronlab_core::paths::DataFile;
use neuronlab_session::Session;
use rustyline::config::{ColorMode, CompletionType, Config};
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{Cmd, Editor, EventHandler, KeyCode, KeyEvent, Modifiers};

use editor::{lock, Continuation, EnterHandler, ReplHelper};
use interrupt::CtrlC;
use render::{paint, style, Renderer};

/// The history file: `$XDG_DATA_HOME/neuronlab/history`, else
/// `~/.local/share/neuronlab/history`; `None` when neither base is known.
pub fn history_path() -> Option<PathBuf> {
    DataFile::ReplHistory.path()
}

/// Runs the REPL until Ctrl-D.
// The REPL loop: read, run, render, and what each key ends (Ctrl-C, Ctrl-D, errors).
pub fn run() -> Result<(), String> {
    let session = Session::from_env()?;
    let ctrlc = CtrlC::install(session.interrupter())?;
    let mut renderer = Renderer::new();
    let colour = renderer.colour();
    print!("{}", banner(&session, colour));
    let session = Arc::new(Mutex::new(session));

    let config = Config::builder()
        .completion_type(CompletionType::List)
        .history_ignore_dups(true)
        .map_err(|e| e.to_string())?
        .max_history_size(10_000)
        .map_err(|e| e.to_string())?
        .auto_add_history(false)
        // The helper draws the continuation prompt, also without colour: on a terminal it
        // is always called (rustyline would skip it under NO_COLOR), and adds colour only
        // when `colour` says so.
        .color_mode(if std::io::stdout().is_terminal() {
            ColorMode::Forced
        } else {
            ColorMode::Disabled
        })
        .indent_size(4)
        .build();
    let mut editor: Editor<ReplHelper, FileHistory> =
        Editor::with_config(config).map_err(|e| format!("cannot start the line editor: {e}"))?;
    let continuation = Continuation::default();
    editor.set_helper(Some(ReplHelper::new(
        session.clone(),
        colour,
        continuation.clone(),
    )));
    editor.bind_sequence(
        KeyEvent(KeyCode::Enter, Modifiers::NONE),
        EventHandler::Conditional(Box::new(EnterHandler::new(
            session.clone(),
            continuation.clone(),
        ))),
    );
    // Alt-Enter always starts a new line, to write past a point where the cell is complete.
    editor.bind_sequence(KeyEvent(KeyCode::Enter, Modifiers::ALT), Cmd::Newline);

    let history = history_path().and_then(|path| match prepare_history(&path) {
        Ok(()) => Some(path),
        Err(e) => {
            eprintln!("note: no history this session: {e}");
            None
        }
    });
    if let Some(path) = &history {
        if path.exists() {
            if let Err(e) = editor.load_history(path) {
                eprintln!("note: cannot read the history {}: {e}", path.display());
            }
        }
    }

    loop {
        let n = lock(&session).execution_count() + 1;
        let raw = format!("In [{n}]: ");
        continuation.set_prompt(&raw);
        let styled = format!(
            "{}In [{}{n}{}]: {}",
            style::GREEN,
            style::BOLD_GREEN,
            style::GREEN,
            style::RESET
        );
        let read = if colour {
            editor.readline(&(raw.as_str(), styled.as_str()))
        } else {
            editor.readline(raw.as_str())
        };
        let code = match read {
            Ok(code) => continuation.strip(&code),
            // Ctrl-C at the prompt drops the cell being edited, and says so.
            Err(ReadlineError::Interrupted) => {
                println!("(dropped; Ctrl-D leaves)");
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(format!("cannot read the input: {e}")),
        };
        if code.trim().is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(code.as_str());
        if let Some(path) = &history {
            // Appended after every cell, so a crash loses nothing and parallel sessions merge.
            if let Err(e) = editor.append_history(path) {
                eprintln!("note: cannot write the history {}: {e}", path.display());
            }
        }
        ctrlc.start_cell();
        // An error or an interrupt has been shown as an output; the loop goes on either way.
        lock(&session).execute(&code, &mut |o| renderer.output(n, o));
        renderer.finish();
        println!();
    }
    println!("{}", paint(colour, style::DIM, "bye"));
    Ok(())
}

/// Creates the history file's folder.
fn prepare_history(path: &std::path::Path) -> Result<(), String> {
    let dir = path.parent().ok_or("the history path has no folder")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// The first lines: the version, the simulated instance and how to get around.
fn banner(session: &Session, colour: bool) -> String {
    let topology = session.runtime().topology();
    let title = paint(
        colour,
        style::BOLD,
        &format!("neuronlab {}", env!("CARGO_PKG_VERSION")),
    );
    format!(
        "{title} · simulated {} ({} NeuronCores, LNC={}) on the CPU\n\
         Cells are Rust (a function body) or %magics. {} lists the magics, Tab completes,\n\
         Ctrl-C interrupts a running cell, Ctrl-D leaves.\n\n",
        topology.instance_name(),
        topology.num_cores(),
        topology.lnc(),
        paint(colour, style::MAGENTA, "%help"),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn history_lives_in_the_data_dir() {
        // Only the shape of the path: the environment is the test process's.
        if let Some(path) = super::history_path() {
            assert!(path.ends_with("neuronlab/history"), "{}", path.display());
        }
    }
}

//! The line editor's helper: completion from [`Session::complete`], multi-line cells from
//! [`Session::is_complete`] with a continuation prompt, and colour for magics and Rust
//! keywords. It only asks the session; what is complete or what completes is decided there.
//!
//! rustyline has no continuation prompt, and it places the cursor by the text's own width.
//! So Enter on an unfinished cell starts the new line with as many spaces as the prompt is
//! wide, the highlighter draws those spaces as `   ...: ` (the same width), and
//! [`Continuation::strip`] takes them off before the cell runs.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use neuronlab_session::{IsComplete, Session};
use rustyline::completion::{Completer, Pair};
use rustyline::highlight::{CmdKind, Highlighter};
use rustyline::hint::Hinter;
use rustyline::line_buffer::LineBuffer;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Changeset, Cmd, ConditionalEventHandler, Context, Event, EventContext, Helper};
use rustyline::{RepeatCount, Result};

use super::render::style;

/// The session, shared by the loop (which runs cells) and the editor (which asks it while a
/// line is edited; the two never overlap).
pub type Shared = Arc<Mutex<Session>>;

/// Locks the session; a panic in an earlier cell does not make it unusable.
pub fn lock(session: &Shared) -> MutexGuard<'_, Session> {
    session.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The continuation prompt of the cell being edited: as wide as its `In [n]: ` prompt.
#[derive(Clone, Default)]
pub struct Continuation {
    width: Arc<AtomicUsize>,
}

impl Continuation {
    /// The prompt text is `prompt`: continuation lines get its width.
    pub fn set_prompt(&self, prompt: &str) {
        self.width.store(prompt.chars().count(), Ordering::Relaxed);
    }

    /// The spaces that start a continuation line.
    fn lead(&self) -> String {
        " ".repeat(self.width.load(Ordering::Relaxed))
    }

    /// What the spaces of [`Continuation::lead`] are drawn as: `...: ` right-aligned.
    fn prompt(&self) -> String {
        format!("{:>w$}", "...: ", w = self.width.load(Ordering::Relaxed))
    }

    /// The cell as the user wrote it: each line after the first without the spaces Enter
    /// put there for the continuation prompt.
    pub fn strip(&self, code: &str) -> String {
        let lead = self.lead();
        let mut lines = code.split('\n');
        let first = lines.next().unwrap_or_default().to_string();
        lines.fold(first, |mut cell, line| {
            cell.push('\n');
            cell.push_str(line.strip_prefix(lead.as_str()).unwrap_or(line));
            cell
        })
    }
}

/// The rustyline helper of the REPL.
pub struct ReplHelper {
    session: Shared,
    colour: bool,
    continuation: Continuation,
    /// The end of the text the last completion replaces (it may extend past the cursor).
    completion_end: Cell<usize>,
}

impl ReplHelper {
    /// A helper over `session` drawing `continuation`; `colour` turns highlighting on.
    pub fn new(session: Shared, colour: bool, continuation: Continuation) -> ReplHelper {
        ReplHelper {
            session,
            colour,
            continuation,
            completion_end: Cell::new(0),
        }
    }
}

impl Helper for ReplHelper {}

impl Completer for ReplHelper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> Result<(usize, Vec<Pair>)> {
        let completion = lock(&self.session).complete(line, pos);
        let start = completion.start.min(pos);
        self.completion_end
            .set(completion.end.max(pos).min(line.len()));
        let matches = completion
            .matches
            .into_iter()
            .map(|item| Pair {
                display: item.text.clone(),
                replacement: item.text,
            })
            .collect();
        Ok((start, matches))
    }

    fn update(&self, line: &mut LineBuffer, start: usize, elected: &str, cl: &mut Changeset) {
        let end = self.completion_end.get().max(line.pos()).min(line.len());
        line.replace(start..end, elected, cl);
    }
}

impl Hinter for ReplHelper {
    type Hint = String;
}

impl Validator for ReplHelper {
    /// Enter on an unfinished cell continues it; anything else (a complete cell, or one the
    /// session will report as invalid) runs.
    fn validate(&self, ctx: &mut ValidationContext) -> Result<ValidationResult> {
        let cell = self.continuation.strip(ctx.input());
        Ok(match lock(&self.session).is_complete(&cell) {
            IsComplete::Incomplete { .. } => ValidationResult::Incomplete,
            _ => ValidationResult::Valid(None),
        })
    }
}

/// Enter: on an unfinished cell, a continuation line with the indent the session suggests;
/// otherwise the default (the validator above, then run).
pub struct EnterHandler {
    session: Shared,
    continuation: Continuation,
}

impl EnterHandler {
    /// A handler over `session`, starting lines for `continuation`.
    pub fn new(session: Shared, continuation: Continuation) -> EnterHandler {
        EnterHandler {
            session,
            continuation,
        }
    }
}

impl ConditionalEventHandler for EnterHandler {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        let session = lock(&self.session);
        let (line, pos) = (ctx.line(), ctx.pos());
        let cell = self.continuation.strip(line);
        let IsComplete::Incomplete { indent } = session.is_complete(&cell) else {
            return None;
        };
        // In the middle of the text, the indent is the one of the text before the cursor.
        let indent = if pos < line.len() {
            let before = line.get(..pos).map(|b| self.continuation.strip(b));
            match before.map(|before| session.is_complete(&before)) {
                Some(IsComplete::Incomplete { indent }) => indent,
                _ => String::new(),
            }
        } else {
            indent
        };
        Some(Cmd::Insert(
            1,
            format!("\n{}{indent}", self.continuation.lead()),
        ))
    }
}

impl Highlighter for ReplHelper {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        let text = match self.colour {
            true => Cow::Owned(highlight(line)),
            false => Cow::Borrowed(line),
        };
        if !line.contains('\n') {
            return text;
        }
        let (lead, prompt) = (self.continuation.lead(), self.continuation.prompt());
        let prompt = match self.colour {
            true => format!("{}{prompt}{}", style::GREEN, style::RESET),
            false => prompt,
        };
        let mut lines = text.split('\n');
        let first = lines.next().unwrap_or_default().to_string();
        Cow::Owned(lines.fold(first, |mut shown, line| {
            shown.push('\n');
            match line.strip_prefix(lead.as_str()) {
                Some(rest) => {
                    shown.push_str(&prompt);
                    shown.push_str(rest);
                }
                None => shown.push_str(line),
            }
            shown
        }))
    }

    fn highlight_char(&self, line: &str, _pos: usize, _kind: CmdKind) -> bool {
        // Every edit may change a keyword or a magic, and a new line needs its prompt drawn.
        self.colour || line.contains('\n')
    }
}

/// Rust keywords and the literals that read like them.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "false",
    "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref",
    "return", "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe",
    "use", "where", "while",
];

/// `code` with ANSI colours: magic names, Rust keywords, strings and comments. The display
/// width is unchanged (only escape sequences are added). The body of a `%%wat` cell is left
/// as it is.
pub fn highlight(code: &str) -> String {
    let mut out = String::with_capacity(code.len() * 2);
    let mut rust = true;
    let mut first_code_line = true;
    for (i, line) in code.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        let lead = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with('%') {
            let name_len = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
            let (name, rest) = trimmed.split_at(name_len);
            if first_code_line && name.starts_with("%%") {
                rust = name != "%%wat";
            }
            out.push_str(lead);
            out.push_str(style::MAGENTA);
            out.push_str(name);
            out.push_str(style::RESET);
            out.push_str(rest);
        } else if rust {
            highlight_rust_line(line, &mut out);
        } else {
            out.push_str(line);
        }
        if !trimmed.is_empty() {
            first_code_line = false;
        }
    }
    out
}

/// One line of Rust: keywords bold blue, string literals green, `//` comments dimmed.
fn highlight_rust_line(line: &str, out: &mut String) {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            out.push_str(style::DIM);
            out.push_str(&line[i..]);
            out.push_str(style::RESET);
            return;
        }
        if c == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(bytes.len());
            out.push_str(style::GREEN);
            out.push_str(&line[i..end]);
            out.push_str(style::RESET);
            i = end;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let mut j = i;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
                j += 1;
            }
            let word = &line[i..j];
            // `r#match` and `x.match_` are not keywords; a macro name (`loop!`) is not either.
            let raw = i >= 2 && &bytes[i - 2..i] == b"r#";
            if !raw && KEYWORDS.contains(&word) && bytes.get(j) != Some(&b'!') {
                out.push_str(style::BOLD_BLUE);
                out.push_str(word);
                out.push_str(style::RESET);
            } else {
                out.push_str(word);
            }
            i = j;
            continue;
        }
        // Copy one whole character (the line may hold non-ASCII text).
        let len = line[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&line[i..i + len]);
        i += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes ANSI escape sequences.
    fn strip(text: &str) -> String {
        let mut out = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn highlighting_only_adds_escapes() {
        for code in [
            "let x = neuronlab::randn(&[2, 2])?; // a comment",
            "%time let y = \"a \\\" string\";\n%vars",
            "%%wat\n(module (func (export \"run\") (loop br 0)))",
            "for i in 0..3 { println!(\"é {i}\"); }",
            "\"unterminated",
        ] {
            assert_eq!(strip(&highlight(code)), code);
        }
    }

    #[test]
    fn keywords_and_magics_are_coloured() {
        let text = highlight("let looped = loop { break 1 };");
        assert!(text.contains(&format!("{}let{}", style::BOLD_BLUE, style::RESET)));
        assert!(text.contains(&format!("{}loop{}", style::BOLD_BLUE, style::RESET)));
        assert!(
            text.contains(" looped "),
            "an identifier that starts like a keyword: {text:?}"
        );
        let magic = highlight("%help load");
        assert!(magic.starts_with(&format!("{}%help{}", style::MAGENTA, style::RESET)));
        let wat = highlight("%%wat\n(loop br 0)");
        assert!(
            wat.ends_with("\n(loop br 0)"),
            "a wat body is not Rust: {wat:?}"
        );
    }

    #[test]
    fn continuation_lines_are_drawn_with_a_prompt_and_run_without_it() {
        let continuation = Continuation::default();
        continuation.set_prompt("In [12]: ");
        let typed = "fn f() {\n             let y = 1;\n         }";
        assert_eq!(continuation.strip(typed), "fn f() {\n    let y = 1;\n}");
        let session = Arc::new(Mutex::new(Session::from_env().expect("a session")));
        let helper = ReplHelper::new(session, false, continuation);
        assert_eq!(
            helper.highlight(typed, 0),
            "fn f() {\n    ...:     let y = 1;\n    ...: }"
        );
        assert_eq!(helper.highlight("a pasted\nline", 0), "a pasted\nline");
    }
}

//! What front ends ask about cell text while it is being written: completions at the cursor
//! ([`Session::complete`]), what the word under the cursor is ([`Session::inspect`]), and
//! whether the text is a whole cell yet ([`Session::is_complete`]), for the REPL's tab key and
//! continuation prompt and the Jupyter kernel's complete, inspect and is_complete requests.
//!
//! Cursors are byte offsets into the text (a cursor inside a character counts from that
//! character's start).
//!
//! The scan behind `is_complete` (brackets, strings, comments) is the `syntax` submodule.

mod syntax;

use super::cell::{self, Cell};
use super::magics::views::LOCAL_NOTE;
use super::magics::{self, MagicKind, MAGICS};
use super::{MimeBundle, Session};
use neuronlab_core::ops::{OpDef, Registry};
use neuronlab_core::tensor::{format_tensor, FormatOptions};
use neuronlab_sandbox::var_store::Var;

/// The completions of the text at a cursor: replace `start..end` with one of `matches`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Completion {
    /// Where the replaced text starts (a byte offset).
    pub start: usize,
    /// Where it ends: the end of the word under the cursor.
    pub end: usize,
    /// What it may become, grouped by kind, each group sorted.
    pub matches: Vec<CompletionItem>,
}

/// One completion.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletionItem {
    /// The text that replaces the word.
    pub text: String,
    /// What it is: `magic`, `argument` (of a magic), `variable`, `op`, `method` (an op
    /// called on a tensor) or `keyword`.
    pub kind: &'static str,
    /// Its signature or type: a magic's usage, an op's schema, a variable's type and shape.
    pub detail: String,
}

/// Whether a text is a whole cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IsComplete {
    /// It can run as it is.
    Complete,
    /// More lines are expected; the next one starts with `indent`.
    Incomplete {
        /// Spaces for the next line.
        indent: String,
    },
    /// It cannot become valid by adding lines: running it reports the error.
    Invalid,
}

/// The Rust keywords completion offers.
const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "else", "enum", "false", "fn", "for", "if", "impl", "in",
    "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self", "Self", "static",
    "struct", "trait", "true", "type", "unsafe", "use", "where", "while",
];

impl Session {
    /// The completions of `code` at byte offset `cursor`: magic names after `%` or `%%` at
    /// the start of a line and the arguments of some magics; otherwise variables, ops and
    /// keywords, or only ops (as methods) after a `.`. Nothing inside strings and comments.
    pub fn complete(&self, code: &str, cursor: usize) -> Completion {
        let cursor = char_floor(code, cursor);
        let line_start = code[..cursor].rfind('\n').map_or(0, |i| i + 1);
        let line_end = code[cursor..].find('\n').map_or(code.len(), |i| cursor + i);
        let before = &code[line_start..cursor];
        let trimmed = before.trim_start();
        let first_line = code[..line_start].trim().is_empty();
        if trimmed.starts_with('%') && (first_line || !trimmed.starts_with("%%")) {
            // A magic line: its words are separated by whitespace.
            let start = before.trim_end_matches(|c: char| !c.is_whitespace()).len() + line_start;
            let end = code[cursor..line_end]
                .find(char::is_whitespace)
                .map_or(line_end, |i| cursor + i);
            let word = &code[start..cursor];
            let matches = if start == cursor - trimmed.len() {
                magic_names(word)
            } else {
                self.magic_arguments(trimmed, word)
            };
            return Completion {
                start,
                end,
                matches,
            };
        }
        let in_wat_body = matches!(cell::classify(code), Cell::CellMagic { name: "wat", .. });
        let start = cursor - ident_suffix(&code[..cursor]);
        let end = cursor + ident_prefix(&code[cursor..]);
        if in_wat_body || syntax::in_literal(&code[..cursor]) || trimmed.starts_with('%') {
            return Completion {
                start,
                end,
                matches: Vec::new(),
            };
        }
        let word = &code[start..cursor];
        let matches = if code[..start].ends_with('.') {
            ops(word, "method")
        } else {
            let mut matches = self.variables(word);
            matches.extend(ops(word, "op"));
            matches.extend(KEYWORDS.iter().filter(|k| k.starts_with(word)).map(|k| {
                CompletionItem {
                    text: k.to_string(),
                    kind: "keyword",
                    detail: String::new(),
                }
            }));
            matches
        };
        Completion {
            start,
            end,
            matches,
        }
    }

    /// What the word at byte offset `cursor` is: on a magic line, the magic's usage and help;
    /// otherwise a variable's type, shape, dtype, device, bytes and value, or an op's schema
    /// and doc. `None` when the word is none of these.
    pub fn inspect(&self, code: &str, cursor: usize) -> Option<MimeBundle> {
        let cursor = char_floor(code, cursor);
        let line_start = code[..cursor].rfind('\n').map_or(0, |i| i + 1);
        let line = code[line_start..].lines().next().unwrap_or("").trim_start();
        if let Some(magic) = line.strip_prefix('%') {
            let name = magic.trim_start_matches('%').split_whitespace().next()?;
            let m = magics::find(name)?;
            return Some(MimeBundle::text(format!("{}\n\n{}", m.usage, m.help)));
        }
        let start = cursor - ident_suffix(&code[..cursor]);
        let word = &code[start..cursor + ident_prefix(&code[cursor..])];
        if word.is_empty() {
            return None;
        }
        let op = Registry::global().ops().iter().find(|o| o.name == word);
        // After a dot the word is a method; otherwise a variable hides an op of its name.
        match self.shared.vars.get(word) {
            Some(v) if !code[..start].ends_with('.') => Some(describe_var(word, &v)),
            _ => op.map(describe_op),
        }
    }

    /// Whether `code` is a whole cell: magic lines are; a `%%` cell runs until a blank line;
    /// Rust is complete when its brackets, strings and comments are closed and it parses.
    /// Unclosed brackets ask for 4 spaces of indent each; a syntax error at the end of the
    /// text asks for more, until a blank line; one before the end, or a bracket closed by
    /// the wrong one, is [`IsComplete::Invalid`].
    pub fn is_complete(&self, code: &str) -> IsComplete {
        syntax::is_complete(code)
    }

    /// Variables whose names start with `word`.
    fn variables(&self, word: &str) -> Vec<CompletionItem> {
        self.shared
            .vars
            .snapshot()
            .into_iter()
            .filter(|(name, _)| name.starts_with(word))
            .map(|(name, var)| CompletionItem {
                text: name,
                kind: "variable",
                detail: var.to_string(),
            })
            .collect()
    }

    /// The arguments of the magic on `line` (from its `%`) that start with `word`, as its
    /// table entry's completer offers them.
    fn magic_arguments(&self, line: &str, word: &str) -> Vec<CompletionItem> {
        let mut words = line.trim_start_matches('%').split_whitespace();
        let name = words.next().unwrap_or("");
        // Arguments before the one being written.
        let position = words.count() - usize::from(!word.is_empty());
        let Some(complete) = magics::find(name).and_then(|m| m.complete) else {
            return Vec::new();
        };
        complete(self, position)
            .into_iter()
            .filter(|a| a.text.starts_with(word))
            .map(|a| CompletionItem {
                text: a.text,
                kind: "argument",
                detail: a.detail,
            })
            .collect()
    }
}

/// The magics `word` (with its `%` or `%%`) may become.
fn magic_names(word: &str) -> Vec<CompletionItem> {
    let cell = word.starts_with("%%");
    let name = word.trim_start_matches('%');
    MAGICS
        .iter()
        .filter(|m| m.name.starts_with(name))
        .filter(|m| match m.kind() {
            MagicKind::Line => !cell,
            MagicKind::Cell => cell,
            MagicKind::Both => true,
        })
        .map(|m| CompletionItem {
            text: format!("{}{}", if cell { "%%" } else { "%" }, m.name),
            kind: "magic",
            detail: m.usage.to_string(),
        })
        .collect()
}

/// Ops whose names start with `word`, as `kind` (`op` or `method`).
fn ops(word: &str, kind: &'static str) -> Vec<CompletionItem> {
    let mut ops: Vec<&OpDef> = Registry::global()
        .ops()
        .iter()
        .filter(|o| o.name.starts_with(word))
        .collect();
    ops.sort_by_key(|o| o.name);
    ops.into_iter()
        .map(|o| CompletionItem {
            text: o.name.to_string(),
            kind,
            detail: o.schema(),
        })
        .collect()
}

fn describe_op(op: &OpDef) -> MimeBundle {
    MimeBundle::text(format!(
        "{}\n\n{}\n\ngroup: {}",
        op.schema(),
        op.doc,
        op.group.name()
    ))
}

fn describe_var(name: &str, var: &Var) -> MimeBundle {
    let text = match var {
        Var::Tensor(t) => format!(
            "{name}: Tensor\nshape:  {:?}\ndtype:  {}\ndevice: {}\nbytes:  {}\n\n{}",
            t.shape(),
            t.dtype(),
            t.device(),
            neuronlab_core::events::fmt::bytes_exact(t.nbytes() as u64),
            format_tensor(t, &FormatOptions::default())
        ),
        Var::Value { ty, text } => format!("{name}: {ty}\nvalue: {text}"),
        Var::Local { ty } => format!("{name}: {ty}\n{LOCAL_NOTE}"),
    };
    MimeBundle::text(text)
}

/// The largest character boundary at or before `i`, within `text`.
fn char_floor(text: &str, i: usize) -> usize {
    let mut i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Bytes of identifier characters at the end of `text`.
fn ident_suffix(text: &str) -> usize {
    text.len() - text.trim_end_matches(is_ident).len()
}

/// Bytes of identifier characters at the start of `text`.
fn ident_prefix(text: &str) -> usize {
    text.len() - text.trim_start_matches(is_ident).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SessionOptions;
    use neuronlab_core::device::Topology;
    use neuronlab_core::runtime::RuntimeOptions;
    use neuronlab_core::tensor::Buffer;
    use neuronlab_sandbox::Limits;

    fn session() -> Session {
        let work_dir =
            std::env::temp_dir().join(format!("neuronlab-complete-{}", std::process::id()));
        let s = Session::new(SessionOptions {
            runtime: RuntimeOptions {
                topology: Topology::preset("trn2.3xlarge", None).unwrap(),
                host_limit: 1 << 30,
            },
            limits: Limits::default(),
            work_dir: Some(work_dir),
            world: Default::default(),
            program_cache: None,
            logs: Default::default(),
            sdk_dir: None,
        })
        .unwrap();
        let t = s
            .runtime()
            .tensor(Buffer::F32(vec![1.0, 2.0, 3.0]), &[3])
            .unwrap();
        s.vars().set_tensor("weights", t).unwrap();
        s.vars().set_value("steps", "i64", "10").unwrap();
        s.vars().set_local("names", "Vec<String>").unwrap();
        s
    }

    fn texts(c: &Completion) -> Vec<&str> {
        c.matches.iter().map(|m| m.text.as_str()).collect()
    }

    #[test]
    fn magics_complete_after_percent_signs() {
        let s = session();
        let c = s.complete("%ev", 3);
        assert_eq!((c.start, c.end, texts(&c)), (0, 3, vec!["%events"]));
        assert_eq!(c.matches[0].kind, "magic");
        assert_eq!(
            c.matches[0].detail,
            "%events [kind] [forward|backward] [--last N]"
        );
        // `%%` offers only cell magics, and only on the first line.
        assert_eq!(texts(&s.complete("%%w", 3)), ["%%wat"]);
        assert_eq!(texts(&s.complete("%%t", 3)), ["%%time"]);
        assert!(s.complete("%t", 2).matches.iter().all(|m| m.text != "%wat"));
        assert!(s.complete("let x = 1;\n%%w", 15).matches.is_empty());
        // The whole word is replaced, wherever the cursor is in it.
        let c = s.complete("  %tim", 4);
        assert_eq!(
            (c.start, c.end, texts(&c)),
            (2, 6, vec!["%time", "%trace", "%timeline"])
        );
    }

    #[test]
    fn magic_arguments_complete() {
        let s = session();
        let c = s.complete("%events co", 10);
        assert_eq!((c.start, texts(&c)), (8, vec!["compile", "collective"]));
        assert!(c.matches.iter().all(|m| m.kind == "argument"));
        assert_eq!(texts(&s.complete("%events op --l", 14)), ["--last"]);
        assert_eq!(texts(&s.complete("%events op b", 12)), ["backward"]);
        assert_eq!(texts(&s.complete("%cache ", 7)), ["ls", "clear"]);
        assert!(s.complete("%cache ls ", 10).matches.is_empty());
        assert_eq!(
            texts(&s.complete("%device trn1", 12)),
            ["trn1.32xlarge", "trn1.2xlarge"]
        );
        assert_eq!(texts(&s.complete("%help ti", 8)), ["time", "timeline"]);
        assert_eq!(texts(&s.complete("%trace s", 8)), ["save"]);
        assert!(s.complete("%vars x", 7).matches.is_empty());
    }

    #[test]
    fn rust_completes_variables_ops_and_keywords() {
        let s = session();
        let c = s.complete("let y = st", 10);
        assert_eq!(c.start, 8);
        let first = &c.matches[0];
        assert_eq!(
            (first.text.as_str(), first.kind, first.detail.as_str()),
            ("steps", "variable", "i64 = 10")
        );
        assert!(
            c.matches
                .iter()
                .any(|m| m.kind == "keyword" && m.text == "static"),
            "{c:?}"
        );
        let c = s.complete("let y = wei", 11);
        assert_eq!(c.matches[0].detail, "Tensor f32[3] on neuron:0");
        let c = s.complete("matm", 4);
        assert_eq!(texts(&c), ["matmul"]);
        assert_eq!(c.matches[0].kind, "op");
        assert!(c.matches[0].detail.starts_with("matmul("), "{c:?}");
        // After a dot: ops, as methods, and nothing else.
        let c = s.complete("weights.re", 10);
        assert!(
            c.matches
                .iter()
                .all(|m| m.kind == "method" && m.text.starts_with("re")),
            "{c:?}"
        );
        assert!(texts(&c).contains(&"relu"), "{c:?}");
        // The word ends where the identifier ends, even after the cursor.
        let c = s.complete("let y = ste + 1;", 10);
        assert_eq!((c.start, c.end), (8, 11));
        // Nothing in strings, comments or a %%wat body.
        assert!(s.complete("let s = \"st", 11).matches.is_empty());
        assert!(s.complete("// st", 5).matches.is_empty());
        assert!(s.complete("%%wat\n(modu", 11).matches.is_empty());
        // A cursor past the end or inside a character is clamped.
        assert_eq!(s.complete("ste", 99).start, 0);
        assert_eq!(s.complete("é", 1).start, 0);
    }

    #[test]
    fn inspect_describes_magics_ops_and_variables() {
        let s = session();
        let magic = s.inspect("%events op --last 3", 12).unwrap();
        assert!(
            magic
                .plain()
                .starts_with("%events [kind] [forward|backward] [--last N]\n\nThe events"),
            "{magic:?}"
        );
        let op = s.inspect("let y = matmul(a, b);", 10).unwrap();
        assert!(op.plain().starts_with("matmul("), "{op:?}");
        assert!(op.plain().contains("group: matmul"), "{op:?}");
        let var = s.inspect("weights", 3).unwrap();
        let text = var.plain();
        assert!(
            text.starts_with(
                "weights: Tensor\nshape:  [3]\ndtype:  f32\ndevice: neuron:0\nbytes:  12 B"
            ),
            "{text}"
        );
        assert!(
            text.contains("[1., 2., 3.]") || text.contains("1."),
            "{text}"
        );
        assert_eq!(
            s.inspect("steps", 5).unwrap().plain(),
            "steps: i64\nvalue: 10"
        );
        assert!(s
            .inspect("names", 0)
            .unwrap()
            .plain()
            .contains("stays in its cell"));
        assert!(s.inspect("nothing_here", 3).is_none());
        assert!(s.inspect("a + b", 2).is_none());
    }
}

//! Whether cell text is whole yet ([`super::Session::is_complete`]): a light scan of Rust's
//! brackets, strings, chars and comments, then `syn` for the rest.

use syn::parse::{ParseStream, Parser};

use super::super::cell::{self, Cell};
use super::{is_ident, IsComplete};

/// See [`Session::is_complete`](super::Session::is_complete).
pub(super) fn is_complete(code: &str) -> IsComplete {
    match cell::classify(code) {
        Cell::Empty | Cell::LineMagics(_) => IsComplete::Complete,
        Cell::CellMagic { name, body, .. } => {
            if ends_with_blank_line(code) {
                return IsComplete::Complete;
            }
            let indent = match name {
                "wat" => "  ".repeat(wat_depth(body)),
                _ => Scan::of(body).indent(),
            };
            IsComplete::Incomplete { indent }
        }
        Cell::Rust(code) => {
            let scan = Scan::of(code);
            if scan.mismatch {
                return IsComplete::Invalid;
            }
            if !scan.open.is_empty() || matches!(scan.inside, Some(Inside::Str | Inside::Comment)) {
                return IsComplete::Incomplete {
                    indent: scan.indent(),
                };
            }
            match parse_error_at_end(code) {
                None => IsComplete::Complete,
                // A blank line ends it anyway: running it shows the error.
                Some(true) if !ends_with_blank_line(code) => IsComplete::Incomplete {
                    indent: String::new(),
                },
                Some(_) => IsComplete::Invalid,
            }
        }
    }
}

/// Whether the last line of `code` is blank (the user pressed Enter on an empty line).
fn ends_with_blank_line(code: &str) -> bool {
    code.rsplit_once('\n')
        .is_some_and(|(_, last)| last.trim().is_empty())
}

/// How many parentheses of WebAssembly text are open (`;;` comments and strings aside).
fn wat_depth(text: &str) -> usize {
    let mut depth: usize = 0;
    for line in text.lines() {
        let mut in_string = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if in_string => {
                    chars.next();
                }
                '"' => in_string = !in_string,
                ';' if !in_string && chars.peek() == Some(&';') => break,
                '(' if !in_string => depth += 1,
                ')' if !in_string => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    depth
}

/// `None` when `code` parses as a cell (a function body); otherwise whether the error is at
/// the end of the text (syn reports the end of input at the call site, line 1 column 0,
/// with an empty span).
fn parse_error_at_end(code: &str) -> Option<bool> {
    let error = (|input: ParseStream| syn::Block::parse_within(input))
        .parse_str(code)
        .err()?;
    let (start, end) = (error.span().start(), error.span().end());
    let at_call_site = (start.line, start.column) == (1, 0) && start == end;
    Some(at_call_site || error.to_string().contains("end of input"))
}

/// Whether the end of `code` is inside a string or a comment.
pub(super) fn in_literal(code: &str) -> bool {
    Scan::of(code).inside.is_some()
}

/// Where a scan of Rust text ended, when not in plain code.
#[derive(Debug, PartialEq)]
enum Inside {
    /// A string literal (plain, byte or raw).
    Str,
    /// A block comment.
    Comment,
    /// A line comment.
    LineComment,
}

/// The brackets of Rust text: those still open, and whether one was closed by the wrong
/// kind. Strings, chars and comments are skipped.
#[derive(Debug, Default)]
struct Scan {
    open: Vec<char>,
    inside: Option<Inside>,
    mismatch: bool,
}

impl Scan {
    fn of(code: &str) -> Scan {
        let chars: Vec<char> = code.chars().collect();
        let mut scan = Scan::default();
        let mut i = 0;
        while i < chars.len() {
            let (c, next) = (chars[i], chars.get(i + 1).copied());
            let after_ident = i > 0 && is_ident(chars[i - 1]);
            i += 1;
            match c {
                '/' if next == Some('/') => match chars[i..].iter().position(|&c| c == '\n') {
                    Some(n) => i += n,
                    None => return scan.ending(Inside::LineComment),
                },
                '/' if next == Some('*') => {
                    let (mut depth, mut j) = (1, i + 1);
                    while depth > 0 && j < chars.len() {
                        match (chars[j], chars.get(j + 1)) {
                            ('/', Some('*')) => (depth, j) = (depth + 1, j + 2),
                            ('*', Some('/')) => (depth, j) = (depth - 1, j + 2),
                            _ => j += 1,
                        }
                    }
                    if depth > 0 {
                        return scan.ending(Inside::Comment);
                    }
                    i = j;
                }
                '"' => match string_end(&chars, i) {
                    Some(end) => i = end,
                    None => return scan.ending(Inside::Str),
                },
                'r' | 'b' if !after_ident => {
                    if let Some(hashes) = raw_string_start(&chars, i - 1) {
                        let quote = i - 1 + hashes.1;
                        match raw_string_end(&chars, quote + 1, hashes.0) {
                            Some(end) => i = end,
                            None => return scan.ending(Inside::Str),
                        }
                    }
                }
                '\'' => i = char_literal_end(&chars, i),
                '(' | '[' | '{' => scan.open.push(c),
                ')' | ']' | '}' => {
                    let opener = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    if scan.open.pop() != Some(opener) {
                        scan.mismatch = true;
                        return scan;
                    }
                }
                _ => {}
            }
        }
        scan
    }

    /// The indent of the next line: 4 spaces per open bracket, none inside a string or a
    /// block comment (whose text is kept as typed).
    fn indent(&self) -> String {
        match self.inside {
            Some(Inside::Str | Inside::Comment) => String::new(),
            _ => "    ".repeat(self.open.len()),
        }
    }

    fn ending(mut self, inside: Inside) -> Scan {
        self.inside = Some(inside);
        self
    }
}

/// The index after the closing quote of a string whose body starts at `i`.
fn string_end(chars: &[char], mut i: usize) -> Option<usize> {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// For a raw string starting at `i` (`r"`, `r#"`, `br##"`...): its number of `#`s and the
/// offset of its opening quote from `i`.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    (chars.get(j + hashes) == Some(&'"')).then_some((hashes, j + hashes - i))
}

/// The index after a raw string's closing quote and `hashes` `#`s, searching from `i`.
fn raw_string_end(chars: &[char], i: usize, hashes: usize) -> Option<usize> {
    (i..chars.len())
        .find(|&j| {
            chars[j] == '"'
                && chars[j + 1..]
                    .iter()
                    .take(hashes)
                    .filter(|&&c| c == '#')
                    .count()
                    == hashes
        })
        .map(|j| j + 1 + hashes)
}

/// The index after a char literal whose body starts at `i` (just after its quote), or `i`
/// itself for a lifetime or label (`'a`), which has no closing quote.
fn char_literal_end(chars: &[char], i: usize) -> usize {
    match (chars.get(i), chars.get(i + 1)) {
        // An escape: the closing quote is the first one after the escaped character.
        (Some('\\'), _) => (i + 2..chars.len())
            .find(|&j| chars[j] == '\'')
            .map_or(chars.len(), |j| j + 1),
        (Some(_), Some('\'')) => i + 2,
        _ => i,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_is_complete_when_balanced_and_parsed() {
        let complete = |code: &str| is_complete(code);
        let incomplete = |indent: &str| IsComplete::Incomplete {
            indent: indent.to_string(),
        };
        assert_eq!(complete("let x = 1;"), IsComplete::Complete);
        assert_eq!(complete("x + 1"), IsComplete::Complete);
        assert_eq!(complete("fn f() {\n    1\n}"), IsComplete::Complete);
        assert_eq!(complete(""), IsComplete::Complete);
        assert_eq!(complete("fn f() {"), incomplete("    "));
        assert_eq!(complete("let v = vec![(1,"), incomplete("        "));
        assert_eq!(complete("let x ="), incomplete(""));
        assert_eq!(complete("let x = 1"), incomplete(""));
        // A blank line after an unfinished statement sends it, to show the error; inside
        // open brackets, blank lines are part of the code.
        assert_eq!(complete("let x = 1\n"), IsComplete::Invalid);
        assert_eq!(complete("fn f() {\n\n"), incomplete("    "));
        assert_eq!(complete("let s = \"open"), incomplete(""));
        assert_eq!(complete("/* open"), incomplete(""));
        assert_eq!(complete("f(x) // a comment ("), IsComplete::Complete);
        assert_eq!(complete("let v = (1, 2]"), IsComplete::Invalid);
        assert_eq!(complete("}"), IsComplete::Invalid);
        assert_eq!(complete("1 2;\nlet y = 3;"), IsComplete::Invalid);
        assert_eq!(complete("let = 3;"), IsComplete::Invalid);
        // Brackets in strings, chars, raw strings and comments do not count; lifetimes are
        // not chars.
        assert_eq!(complete("let s = \"(\\\"[\";"), IsComplete::Complete);
        assert_eq!(
            complete("let c = '(';\nlet d = '\\'';"),
            IsComplete::Complete
        );
        assert_eq!(complete("let r = r#\"(\"]\"#;"), IsComplete::Complete);
        assert_eq!(complete("/* ( /* { */ */ let x = 1;"), IsComplete::Complete);
        assert_eq!(
            complete("fn f<'a>(x: &'a str) -> &'a str { x }"),
            IsComplete::Complete
        );
    }

    #[test]
    fn magics_and_cell_magics_are_complete_as_a_repl_needs() {
        assert_eq!(is_complete("%vars"), IsComplete::Complete);
        assert_eq!(is_complete("%events op\n%mem"), IsComplete::Complete);
        // A cell magic continues until a blank line.
        assert_eq!(
            is_complete("%%wat"),
            IsComplete::Incomplete {
                indent: String::new()
            }
        );
        assert_eq!(
            is_complete("%%wat\n(module\n  (func (export \"run\")"),
            IsComplete::Incomplete {
                indent: "    ".into()
            }
        );
        assert_eq!(is_complete("%%wat\n(module)\n"), IsComplete::Complete);
        assert_eq!(
            is_complete("%%wat\n(module) ;; (\n  \n"),
            IsComplete::Complete
        );
        assert_eq!(
            is_complete("%%time\nfor i in 0..3 {"),
            IsComplete::Incomplete {
                indent: "    ".into()
            }
        );
    }
}

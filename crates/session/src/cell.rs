//! What kind of cell a text is: magics (`%name args` lines), a cell magic (`%%name args` on
//! the first line, then a body), or Rust.

/// A cell, classified.
#[derive(Debug, PartialEq)]
pub enum Cell<'a> {
    /// Only whitespace and comments.
    Empty,
    /// One or more `%name args` lines.
    LineMagics(Vec<(&'a str, &'a str)>),
    /// `%%name args` followed by a body.
    CellMagic {
        /// The magic's name, without `%%`.
        name: &'a str,
        /// The rest of the first line.
        args: &'a str,
        /// The lines after the first.
        body: &'a str,
    },
    /// Rust code.
    Rust(&'a str),
}

/// Classifies `code`. A cell whose first code line starts with `%%` is a cell magic; one whose
/// lines all start with `%` (blank lines aside) is line magics; anything else is Rust, and a
/// Rust cell with a `%` line is a mistake the caller reports.
pub fn classify(code: &str) -> Cell<'_> {
    let trimmed = code.trim_start_matches(['\n', '\r', ' ', '\t']);
    if let Some(rest) = trimmed.strip_prefix("%%") {
        let (first, body) = rest.split_once('\n').unwrap_or((rest, ""));
        let (name, args) = split_name(first);
        return Cell::CellMagic { name, args, body };
    }
    let lines: Vec<&str> = code
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() || lines.iter().all(|l| l.starts_with("//")) {
        return Cell::Empty;
    }
    if lines.iter().all(|l| l.starts_with('%')) {
        return Cell::LineMagics(lines.iter().map(|l| split_name(&l[1..])).collect());
    }
    Cell::Rust(code)
}

/// The first `%` line of a Rust cell, which cannot run there.
pub fn stray_magic(code: &str) -> Option<(usize, &str)> {
    code.lines()
        .enumerate()
        .find(|(_, l)| l.trim_start().starts_with('%'))
        .map(|(i, l)| (i + 1, l.trim()))
}

fn split_name(line: &str) -> (&str, &str) {
    let line = line.trim();
    match line.split_once(char::is_whitespace) {
        Some((name, args)) => (name, args.trim()),
        None => (line, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_classified() {
        assert_eq!(classify("  \n// only a comment\n"), Cell::Empty);
        assert_eq!(
            classify("%vars\n%events op --last 3\n"),
            Cell::LineMagics(vec![("vars", ""), ("events", "op --last 3")])
        );
        assert_eq!(
            classify("\n%%wat\n(module)\n"),
            Cell::CellMagic {
                name: "wat",
                args: "",
                body: "(module)\n"
            }
        );
        assert_eq!(classify("let x = 1;"), Cell::Rust("let x = 1;"));
        assert_eq!(stray_magic("let x = 1;\n  %vars"), Some((2, "%vars")));
    }
}

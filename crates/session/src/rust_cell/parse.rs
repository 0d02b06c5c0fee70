//! Reading a Rust cell: which parts are items, which are statements, what the top-level `let`s
//! bind, and where the final expression is. Parsed with `syn` as the inside of a block, so a
//! cell is written exactly as a function body.

use std::ops::Range;

use proc_macro2::LineColumn;
use quote::ToTokens;
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Block, Expr, Item, Pat, Stmt};

/// A cell, split into its parts. Ranges are byte ranges into the cell's text.
#[derive(Debug, Default, PartialEq)]
pub struct ParsedCell {
    /// The top-level items (fn, struct, enum, impl, use, const, ...), in order.
    pub items: Vec<CellItem>,
    /// Whether the cell has anything besides items (statements or a final expression).
    pub has_statements: bool,
    /// The names bound by top-level `let`s, in order of their last binding.
    pub lets: Vec<LetBinding>,
    /// The final expression, written without a semicolon: its value is displayed.
    pub tail: Option<Range<usize>>,
}

/// One top-level item of a cell.
#[derive(Debug, PartialEq)]
pub struct CellItem {
    /// What a later definition replaces it by: `fn foo`, `struct Foo`, `impl Display for Foo`,
    /// or the whole text for a `use`.
    pub key: String,
    /// Its text, attributes and doc comments included.
    pub range: Range<usize>,
    /// The line it starts on, from 1.
    pub line: usize,
}

/// A name bound by a top-level `let`.
#[derive(Debug, PartialEq)]
pub struct LetBinding {
    /// The name.
    pub name: String,
}

/// A cell that is not valid Rust, with where.
#[derive(Debug, PartialEq)]
pub struct SyntaxError {
    /// What the parser said.
    pub message: String,
    /// Line from 1.
    pub line: usize,
    /// Column from 1, in characters.
    pub column: usize,
}

/// Splits `code` into items, statements, `let` names and the final expression.
pub fn parse(code: &str) -> Result<ParsedCell, SyntaxError> {
    let stmts = (|input: ParseStream| Block::parse_within(input))
        .parse_str(code)
        .map_err(|e| {
            let at = e.span().start();
            SyntaxError {
                message: e.to_string(),
                line: at.line,
                column: at.column + 1,
            }
        })?;
    let lines = LineIndex::new(code);
    let mut cell = ParsedCell::default();
    let last = stmts.len().checked_sub(1);
    for (i, stmt) in stmts.iter().enumerate() {
        match stmt {
            Stmt::Item(item) => cell.items.push(CellItem {
                key: item_key(item),
                range: lines.range(item.span().start(), item.span().end()),
                line: item.span().start().line,
            }),
            Stmt::Local(local) => {
                cell.has_statements = true;
                for name in bound_names(&local.pat) {
                    cell.lets.retain(|b| b.name != name);
                    cell.lets.push(LetBinding { name });
                }
            }
            Stmt::Expr(expr, None) if Some(i) == last && shows_value(expr) => {
                cell.has_statements = true;
                cell.tail = Some(lines.range(expr.span().start(), expr.span().end()));
            }
            _ => cell.has_statements = true,
        }
    }
    Ok(cell)
}

/// Macros whose value is `()` (or that never return): a cell ending in one shows nothing.
const UNIT_MACROS: &[&str] = &[
    "print",
    "println",
    "eprint",
    "eprintln",
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "panic",
    "todo",
    "unimplemented",
    "unreachable",
];

/// Whether a final expression has a value worth showing: loops, `if` without `else` and
/// printing macros are `()`.
fn shows_value(expr: &Expr) -> bool {
    match expr {
        Expr::ForLoop(_)
        | Expr::While(_)
        | Expr::If(syn::ExprIf {
            else_branch: None, ..
        }) => false,
        Expr::Macro(m) => !m
            .mac
            .path
            .segments
            .last()
            .is_some_and(|s| UNIT_MACROS.contains(&s.ident.to_string().as_str())),
        _ => true,
    }
}

/// The names a pattern binds (`x`, `mut y`, `(a, b)`, `z: T`); `_` binds nothing.
fn bound_names(pat: &Pat) -> Vec<String> {
    match pat {
        Pat::Ident(p) => vec![p.ident.to_string()],
        Pat::Type(p) => bound_names(&p.pat),
        Pat::Tuple(p) => p.elems.iter().flat_map(bound_names).collect(),
        Pat::Paren(p) => bound_names(&p.pat),
        Pat::Reference(p) => bound_names(&p.pat),
        _ => Vec::new(),
    }
}

/// What identifies an item across cells: a later item with the same key replaces it.
fn item_key(item: &Item) -> String {
    match item {
        Item::Fn(i) => format!("fn {}", i.sig.ident),
        Item::Struct(i) => format!("type {}", i.ident),
        Item::Enum(i) => format!("type {}", i.ident),
        Item::Union(i) => format!("type {}", i.ident),
        Item::Type(i) => format!("type {}", i.ident),
        Item::Trait(i) => format!("trait {}", i.ident),
        Item::TraitAlias(i) => format!("trait {}", i.ident),
        Item::Const(i) => format!("value {}", i.ident),
        Item::Static(i) => format!("value {}", i.ident),
        Item::Mod(i) => format!("mod {}", i.ident),
        Item::Macro(i) => match &i.ident {
            Some(name) => format!("macro {name}"),
            None => format!("macro call {}", tokens_text(item)),
        },
        Item::Impl(i) => {
            let of = i
                .trait_
                .as_ref()
                .map(|(_, path, _)| format!("{} for ", tokens_text(path)))
                .unwrap_or_default();
            format!("impl {of}{}", tokens_text(&i.self_ty))
        }
        other => tokens_text(other),
    }
}

/// Byte offsets of line starts, to turn `syn`'s line/column (columns in characters) into
/// byte ranges.
struct LineIndex<'a> {
    code: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(code: &'a str) -> LineIndex<'a> {
        let starts = std::iter::once(0)
            .chain(code.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex { code, starts }
    }

    fn offset(&self, at: LineColumn) -> usize {
        let start = self
            .starts
            .get(at.line - 1)
            .copied()
            .unwrap_or(self.code.len());
        let line = &self.code[start..];
        start
            + line
                .char_indices()
                .nth(at.column)
                .map_or(line.len(), |(i, _)| i)
    }

    fn range(&self, start: LineColumn, end: LineColumn) -> Range<usize> {
        self.offset(start)..self.offset(end)
    }
}

/// The tokens of `node` as text, as `proc_macro2` prints them: enough for keys.
fn tokens_text(node: &impl ToTokens) -> String {
    node.to_token_stream().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text<'a>(code: &'a str, r: &Range<usize>) -> &'a str {
        &code[r.clone()]
    }

    #[test]
    fn items_statements_lets_and_the_tail_are_told_apart() {
        let code = "use std::fmt;\n/// Doubles.\nfn double(x: i64) -> i64 { x * 2 }\nlet a = 1;\nlet (b, mut c): (i64, i64) = (2, 3);\nlet a = double(a);\na + b + c\n";
        let cell = parse(code).unwrap();
        let keys: Vec<&str> = cell.items.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, ["use std :: fmt ;", "fn double"]);
        assert_eq!(
            text(code, &cell.items[1].range),
            "/// Doubles.\nfn double(x: i64) -> i64 { x * 2 }"
        );
        assert_eq!(cell.items[1].line, 2);
        let names: Vec<&str> = cell.lets.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["b", "c", "a"]);
        assert_eq!(text(code, cell.tail.as_ref().unwrap()), "a + b + c");
        assert!(cell.has_statements);
    }

    #[test]
    fn an_items_only_cell_has_no_statements() {
        let cell = parse("struct P { x: f32 }\nimpl std::fmt::Display for P {\n  fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result { write!(f, \"{}\", self.x) }\n}\n").unwrap();
        assert!(!cell.has_statements);
        let keys: Vec<&str> = cell.items.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, ["type P", "impl std :: fmt :: Display for P"]);
    }

    #[test]
    fn statements_and_unit_tails_are_not_shown() {
        for code in [
            "let x = 1;",
            "println!(\"hi\")",
            "for i in 0..3 { }",
            "if true { }",
            "x;",
        ] {
            assert_eq!(parse(code).unwrap().tail, None, "{code}");
        }
        let code = "let s = \"héllo\"; s.len()";
        let cell = parse(code).unwrap();
        assert_eq!(text(code, cell.tail.as_ref().unwrap()), "s.len()");
    }

    #[test]
    fn syntax_errors_say_where() {
        let e = parse("let x = ;\n").unwrap_err();
        assert_eq!((e.line, e.column), (1, 9));
        assert!(e.message.contains("expected"), "{}", e.message);
    }
}

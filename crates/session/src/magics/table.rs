//! The tables magics show: aligned plain text for terminals, and an HTML `<table>` for
//! notebooks, from the same rows.

use super::super::display::escape;
use super::super::MimeBundle;

/// Rows under a header. Columns listed in `right` are right-aligned (numbers).
pub struct Table {
    header: Vec<&'static str>,
    right: Vec<usize>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column names.
    pub fn new(header: &[&'static str]) -> Table {
        Table {
            header: header.to_vec(),
            right: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Right-aligns the columns `columns`.
    pub fn right(mut self, columns: &[usize]) -> Table {
        self.right = columns.to_vec();
        self
    }

    /// Adds a row (missing cells are empty, extra ones are dropped).
    pub fn push(&mut self, mut row: Vec<String>) {
        row.resize(self.header.len(), String::new());
        self.rows.push(row);
    }

    /// True when it has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The aligned text: the header, then one line per row, columns two spaces apart.
    pub fn text(&self) -> String {
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        let lines: Vec<&Vec<String>> = std::iter::once(&header).chain(&self.rows).collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                lines
                    .iter()
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        lines
            .iter()
            .map(|row| {
                let cells: Vec<String> = row
                    .iter()
                    .zip(&widths)
                    .enumerate()
                    .map(|(c, (cell, &w))| match self.right.contains(&c) {
                        true => format!("{cell:>w$}"),
                        false => format!("{cell:<w$}"),
                    })
                    .collect();
                cells.join("  ").trim_end().to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The same rows as an HTML table. Every cell says its alignment: notebooks right-align
    /// table cells by default, which leaves text columns (reasons, names) ragged.
    pub fn html(&self) -> String {
        let align = |c: usize| match self.right.contains(&c) {
            true => " style=\"text-align:right\"",
            false => " style=\"text-align:left\"",
        };
        let mut html = String::from("<table>\n<thead><tr>");
        for (c, h) in self.header.iter().enumerate() {
            html.push_str(&format!("<th{}>{}</th>", align(c), escape(h)));
        }
        html.push_str("</tr></thead>\n<tbody>\n");
        for row in &self.rows {
            html.push_str("<tr>");
            for (c, cell) in row.iter().enumerate() {
                html.push_str(&format!("<td{}>{}</td>", align(c), escape(cell)));
            }
            html.push_str("</tr>\n");
        }
        html.push_str("</tbody>\n</table>");
        html
    }

    /// Text and HTML, with `note` (a title or a total) as a line after the table.
    pub fn bundle(&self, note: &str) -> MimeBundle {
        let (text, html) = match note {
            "" => (self.text(), self.html()),
            note => (
                format!("{}\n{note}", self.text()),
                format!("{}\n<p>{}</p>", self.html(), escape(note)),
            ),
        };
        MimeBundle::text(text).with("text/html", html)
    }
}

/// `n` and a noun, plural unless `n` is 1: `1 variable`, `3 variables`.
pub fn count(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_aligned_and_html_is_escaped() {
        let mut t = Table::new(&["name", "bytes"]).right(&[1]);
        t.push(vec!["x".into(), "12 B".into()]);
        t.push(vec!["longer<T>".into(), "1.50 KiB".into()]);
        assert_eq!(
            t.text(),
            "name          bytes\nx              12 B\nlonger<T>  1.50 KiB"
        );
        let b = t.bundle("2 variables");
        assert!(b.plain().ends_with("\n2 variables"));
        let html = b.get("text/html").unwrap();
        assert!(
            html.contains("<td style=\"text-align:left\">longer&lt;T&gt;</td>"),
            "{html}"
        );
        assert!(
            html.contains("<td style=\"text-align:right\">1.50 KiB</td>"),
            "{html}"
        );
        assert!(html.contains("<p>2 variables</p>"), "{html}");
    }
}

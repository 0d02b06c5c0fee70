//! A tensor as an HTML fragment: a header line (`tensor f32[2, 3] · neuron:0 · 24 B`), a
//! line of statistics ([`TensorStats::line`]), and a table of values.
//!
//! The table:
//! - 0-D: one cell; 1-D: one row under the indices; 2-D: rows by columns, each labelled
//!   with its index.
//! - 3-D and more: one row per index of the leading dims, labelled `[i, j]` (the row is
//!   `x[i, j]`, so it reads as Python indexing), over the columns of the last dim. The
//!   leading dims share one edge, shrunk from [`HTML_EDGE`] until the rows fit in
//!   [`MAX_ROWS`] (never below 1), so a deep tensor still gives a short table.
//! - A dim longer than `2 * edge` shows `edge` indices at each end and an ellipsis between,
//!   as numpy summarizes: `…` for a cut column, `⋮` for a cut row, `⋱` where both meet.
//!
//! Values are written exactly as the text representation writes them
//! ([`neuronlab_core::tensor::format_tensor`]): one float mode shared by every shown value, the
//! default precision, integers as integers, `True`/`False` for `bool`.

use super::{escape, TensorStats, FONT};
use neuronlab_core::events::fmt::bytes;
use neuronlab_core::tensor::{element_texts, shown, Element, FormatOptions};
use neuronlab_core::with_dtype;
use neuronlab_core::Tensor;

/// Indices shown at each end of a summarized dim (numpy's `edgeitems`, wider than the
/// text's 3: a table has the room).
pub const HTML_EDGE: usize = 5;

/// The rows a table of a tensor of rank 3 or more aims to stay within.
pub const MAX_ROWS: usize = 24;

const TABLE: &str = "border-collapse:collapse;margin-top:4px";
const INDEX: &str = "padding:1px 6px;color:#999;font-weight:normal;text-align:right";
const VALUE: &str = "padding:1px 6px;text-align:right";
const GAP: &str = "padding:1px 6px;color:#999;text-align:center";

/// `t` as a self-contained HTML fragment: header, statistics and values (see the module's
/// documentation for the table's shape).
pub fn tensor_html(t: &Tensor) -> String {
    let header = format!(
        "tensor {} · {} · {}",
        t.meta(),
        t.device(),
        bytes(t.nbytes() as u64)
    );
    let stats = TensorStats::of(t).line();
    let mut html = format!("<div style=\"{FONT}\">\n");
    html.push_str(&element("div", "font-weight:bold", &header));
    html.push('\n');
    html.push_str(&element(
        "div",
        "color:#666",
        stats.as_deref().unwrap_or("no elements"),
    ));
    html.push('\n');
    if t.numel() > 0 {
        html.push_str(&table(t));
    }
    html.push_str("</div>");
    html
}

/// The rows and columns a tensor's table shows.
struct Grid {
    /// Each row: the indices of the leading dims (all but the last), or `None` for a row of
    /// ellipses.
    rows: Vec<Option<Vec<usize>>>,
    /// Each column: an index of the last dim, or `None` for a column of ellipses.
    cols: Vec<Option<usize>>,
}

impl Grid {
    fn of(shape: &[usize]) -> Grid {
        let Some((&last, leading)) = shape.split_last() else {
            return Grid {
                rows: vec![Some(Vec::new())],
                cols: vec![Some(0)],
            };
        };
        let edge = match leading.len() {
            0 | 1 => HTML_EDGE,
            _ => (1..=HTML_EDGE)
                .rev()
                .find(|&e| row_count(leading, e) <= MAX_ROWS)
                .unwrap_or(1),
        };
        Grid {
            rows: rows(leading, edge),
            cols: shown(last, true, HTML_EDGE),
        }
    }
}

/// How many rows [`rows`] gives, without making them.
fn row_count(leading: &[usize], edge: usize) -> usize {
    let Some((&first, rest)) = leading.split_first() else {
        return 1;
    };
    let shown = shown(first, true, edge);
    let cut = shown.iter().filter(|i| i.is_none()).count();
    (shown.len() - cut)
        .saturating_mul(row_count(rest, edge))
        .saturating_add(cut)
}

/// The rows over `leading` dims, each summarized with `edge`.
fn rows(leading: &[usize], edge: usize) -> Vec<Option<Vec<usize>>> {
    let Some((&first, rest)) = leading.split_first() else {
        return vec![Some(Vec::new())];
    };
    let inner = rows(rest, edge);
    let mut out = Vec::new();
    for i in shown(first, true, edge) {
        match i {
            None => out.push(None),
            Some(i) => out.extend(inner.iter().map(|row| {
                row.as_ref()
                    .map(|r| std::iter::once(i).chain(r.iter().copied()).collect())
            })),
        }
    }
    out
}

/// The table of `t`'s values.
fn table(t: &Tensor) -> String {
    let rank = t.rank();
    let grid = Grid::of(t.shape());
    // Every shown value, row by row, so the float mode is chosen from all of them.
    let (mut raw, mut ints) = (Vec::new(), Vec::new());
    for lead in grid.rows.iter().flatten() {
        for &col in grid.cols.iter().flatten() {
            let mut index = lead.clone();
            if rank > 0 {
                index.push(col);
            }
            let (f, i) = read(t, &index);
            raw.push(f);
            ints.push(i);
        }
    }
    let precision = FormatOptions::default().precision;
    let mut texts = element_texts(t.dtype(), &raw, &ints, precision).into_iter();

    let labelled = rank >= 2;
    let mut html = format!("<table style=\"{TABLE}\">\n");
    if rank >= 1 {
        html.push_str("<tr>");
        if labelled {
            html.push_str(&element("th", INDEX, ""));
        }
        for col in &grid.cols {
            let label = col.map_or("…".to_string(), |c| c.to_string());
            html.push_str(&element("th", INDEX, &label));
        }
        html.push_str("</tr>\n");
    }
    for row in &grid.rows {
        html.push_str("<tr>");
        if labelled {
            let label = match row {
                None => "⋮".to_string(),
                Some(lead) if rank == 2 => lead[0].to_string(),
                Some(lead) => format!(
                    "[{}]",
                    lead.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            html.push_str(&element("th", INDEX, &label));
        }
        for col in &grid.cols {
            let cell = match (row, col) {
                (Some(_), Some(_)) => element("td", VALUE, &texts.next().unwrap_or_default()),
                (Some(_), None) => element("td", GAP, "…"),
                (None, Some(_)) => element("td", GAP, "⋮"),
                (None, None) => element("td", GAP, "⋱"),
            };
            html.push_str(&cell);
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    html
}

/// `<tag style="style">text</tag>`, with `text` escaped (`style` is one of this module's
/// constants).
fn element(tag: &str, style: &str, text: &str) -> String {
    format!("<{tag} style=\"{style}\">{}</{tag}>", escape(text))
}

/// The element of `t` at `index`, as f64 and as i64 (as the text formatter reads it).
fn read(t: &Tensor, index: &[usize]) -> (f64, i64) {
    let o = t.layout().offset_of(index);
    with_dtype!(t.dtype(), S => {
        let v = t.data::<S>()[o];
        (v.to_f64(), v.to_i64())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::display::tests::runtime;
    use neuronlab_core::tensor::{format_tensor, Buffer};

    /// The cells (`<td>`) of each row of the fragment's table, as text.
    fn cells(html: &str) -> Vec<Vec<String>> {
        html.split("<tr>")
            .skip(1)
            .map(|row| {
                row.split("<td style=\"")
                    .skip(1)
                    .map(|cell| {
                        let start = cell.find('>').unwrap() + 1;
                        let end = cell.find("</td>").unwrap();
                        cell[start..end].to_string()
                    })
                    .collect()
            })
            .filter(|row: &Vec<String>| !row.is_empty())
            .collect()
    }

    /// The index labels (`<th>`) of the fragment's rows, after the header row.
    fn row_labels(html: &str) -> Vec<String> {
        html.split("<tr>")
            .skip(2)
            .map(|row| {
                let start = row.find('>').unwrap() + 1;
                row[start..row.find("</th>").unwrap()].to_string()
            })
            .collect()
    }

    #[test]
    fn a_matrix_has_a_header_stats_and_rows_by_columns() {
        let rt = runtime();
        let t = rt
            .tensor(Buffer::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.5]), &[2, 3])
            .unwrap();
        let html = tensor_html(&t);
        assert!(
            html.starts_with("<div style=\"font-family:monospace"),
            "{html}"
        );
        assert!(
            html.contains(">tensor f32[2, 3] · neuron:0 · 24 B</div>"),
            "{html}"
        );
        assert!(
            html.contains(">min 1.0000 · max 6.5000 · mean 3.5833 · std 1.8352</div>"),
            "{html}"
        );
        assert_eq!(
            cells(&html),
            [
                ["1.0000", "2.0000", "3.0000"],
                ["4.0000", "5.0000", "6.5000"]
            ]
        );
        assert_eq!(row_labels(&html), ["0", "1"]);
        // The same texts as the text representation.
        assert!(format_tensor(&t, &FormatOptions::default()).contains("[4.0000, 5.0000, 6.5000]"));
        assert!(!html.contains("<script"));
    }

    #[test]
    fn scalars_and_vectors() {
        let rt = runtime();
        let scalar = rt.tensor(Buffer::I64(vec![-7]), &[]).unwrap();
        let html = tensor_html(&scalar);
        assert!(
            html.contains(">tensor i64[] · neuron:0 · 8 B</div>"),
            "{html}"
        );
        assert!(
            html.contains(">min -7 · max -7 · mean -7. · std 0.</div>"),
            "{html}"
        );
        assert_eq!(cells(&html), [["-7"]]);
        assert!(!html.contains("<th"), "{html}");

        let vector = rt.tensor(Buffer::F32(vec![1.0, 2.0, 3.0]), &[3]).unwrap();
        let html = tensor_html(&vector);
        assert_eq!(cells(&html), [["1.", "2.", "3."]]);
        assert!(html.contains("<th style=\"padding:1px 6px;color:#999;font-weight:normal;text-align:right\">2</th></tr>"), "{html}");
    }

    #[test]
    fn long_dims_are_summarized_with_ellipses() {
        let rt = runtime();
        let values: Vec<i32> = (0..12 * 20).collect();
        let t = rt.tensor(Buffer::I32(values), &[12, 20]).unwrap();
        let html = tensor_html(&t);
        let rows = cells(&html);
        assert_eq!(rows.len(), 11);
        assert_eq!(
            rows[0],
            ["0", "1", "2", "3", "4", "…", "15", "16", "17", "18", "19"]
        );
        assert_eq!(
            rows[5],
            ["⋮", "⋮", "⋮", "⋮", "⋮", "⋱", "⋮", "⋮", "⋮", "⋮", "⋮"]
        );
        assert_eq!(rows[10][10], "239");
        assert_eq!(
            row_labels(&html),
            ["0", "1", "2", "3", "4", "⋮", "7", "8", "9", "10", "11"]
        );
        assert!(html.contains(">…</th>"), "{html}");
    }

    #[test]
    fn higher_ranks_label_rows_with_the_leading_indices() {
        let rt = runtime();
        let values: Vec<f32> = (0..24).map(|v| v as f32 / 2.0).collect();
        let t = rt.tensor(Buffer::F32(values), &[2, 3, 4]).unwrap();
        let html = tensor_html(&t);
        assert_eq!(
            row_labels(&html),
            ["[0, 0]", "[0, 1]", "[0, 2]", "[1, 0]", "[1, 1]", "[1, 2]"]
        );
        assert_eq!(
            cells(&html)[5],
            ["10.0000", "10.5000", "11.0000", "11.5000"]
        );

        // Deep tensors shrink the leading dims' edge until the rows fit.
        let t = rt
            .tensor(Buffer::U8(vec![1; 20 * 20 * 3]), &[20, 20, 3])
            .unwrap();
        let html = tensor_html(&t);
        let labels = row_labels(&html);
        assert!(labels.len() <= MAX_ROWS, "{}", labels.len());
        assert_eq!(labels[0], "[0, 0]");
        assert_eq!(labels.last().unwrap(), "[19, 19]");
        assert!(labels.contains(&"⋮".to_string()));
        assert_eq!(row_count(&[20, 20], 2), rows(&[20, 20], 2).len());
    }

    #[test]
    fn bools_and_non_finite_values() {
        let rt = runtime();
        let t = rt
            .tensor(Buffer::Bool(vec![true, false, true]), &[3])
            .unwrap();
        let html = tensor_html(&t);
        assert!(html.contains(">true 2 of 3</div>"), "{html}");
        assert_eq!(cells(&html), [["True", "False", "True"]]);

        let t = rt
            .tensor(Buffer::F64(vec![f64::NAN, 1.5, f64::NEG_INFINITY]), &[3])
            .unwrap();
        let html = tensor_html(&t);
        assert!(
            html.contains(
                ">min 1.5000 · max 1.5000 · mean 1.5000 · std 0.0000 · nan 1 · -inf 1</div>"
            ),
            "{html}"
        );
        assert_eq!(cells(&html), [["nan", "1.5000", "-inf"]]);
    }

    #[test]
    fn empty_tensors_say_so() {
        let rt = runtime();
        let t = rt.tensor(Buffer::F32(vec![]), &[0, 4]).unwrap();
        let html = tensor_html(&t);
        assert!(html.contains(">no elements</div>"), "{html}");
        assert!(!html.contains("<table"), "{html}");
    }

    #[test]
    fn everything_is_escaped() {
        // Every text goes through `element`, which escapes it.
        assert_eq!(
            element("td", VALUE, "<b>&\"x\""),
            "<td style=\"padding:1px 6px;text-align:right\">&lt;b&gt;&amp;&quot;x&quot;</td>"
        );
        let rt = runtime();
        let t = rt.tensor(Buffer::F32(vec![1.0]), &[1]).unwrap();
        let html = tensor_html(&t);
        let opened = html.matches("<td").count();
        assert_eq!(opened, html.matches("</td>").count());
        assert_eq!(html.matches("<div").count(), html.matches("</div>").count());
    }
}

//! Plots a guest asks for (`plot::line`, `plot::bar`, `plot::heatmap` in the SDK): the JSON
//! spec a guest sends as a `display` of [`PLOT_MIME`], checked here at the ABI so a bad spec
//! is the guest's error, then drawn as SVG for notebooks ([`svg`]) and as text for the
//! terminal ([`text`]).
//!
//! The spec (guest-sdk/ABI.md has the same table):
//!
//! | field | meaning |
//! |---|---|
//! | `kind` | `line`, `bar` or `heatmap` |
//! | `title` | the caption |
//! | `x`, `y`, `color` | axes: `{"label": ..., "unit": ...}`; `color` is a heatmap's value scale |
//! | `series` | line and bar: `[{"name", "y": [...], "x": [...]?}]`; `null` is a missing value |
//! | `categories` | bar: one label per bar group; each series has one value per category |
//! | `grid` | heatmap: `{"rows", "cols", "values": [...]}` row-major, row 0 drawn on top |

#![deny(missing_docs)]

#[cfg(feature = "svg")]
pub mod svg;
pub mod text;

use serde::Deserialize;

/// The MIME type of a plot spec in a guest's `display`.
pub const PLOT_MIME: &str = "application/vnd.neuronlab.plot+json";

/// The most values a plot may carry; a heatmap bigger than the drawing is averaged down.
pub const MAX_VALUES: usize = 4_000_000;
/// The most series in one plot.
pub const MAX_SERIES: usize = 64;
/// The longest title, label, unit, series name or category, in characters.
pub const MAX_TEXT: usize = 200;

/// A checked plot spec.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plot {
    /// What is drawn.
    pub kind: PlotKind,
    /// The caption.
    #[serde(default)]
    pub title: String,
    /// The horizontal axis.
    #[serde(default)]
    pub x: Axis,
    /// The vertical axis.
    #[serde(default)]
    pub y: Axis,
    /// A heatmap's value scale.
    #[serde(default)]
    pub color: Axis,
    /// Line and bar data.
    #[serde(default)]
    pub series: Vec<Series>,
    /// A bar plot's groups.
    #[serde(default)]
    pub categories: Vec<String>,
    /// A heatmap's values.
    #[serde(default)]
    pub grid: Option<Grid>,
}

/// The kinds of plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlotKind {
    /// One line per series over x.
    Line,
    /// Grouped bars: a group per category, a bar per series.
    Bar,
    /// A grid of values as colours.
    Heatmap,
}

impl PlotKind {
    /// The kind as the spec spells it.
    pub fn name(self) -> &'static str {
        match self {
            PlotKind::Line => "line",
            PlotKind::Bar => "bar",
            PlotKind::Heatmap => "heatmap",
        }
    }
}

/// An axis: what it measures and in which unit.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    /// What the axis measures, such as `step`.
    #[serde(default)]
    pub label: String,
    /// Its unit, such as `ms`; empty for counts and plain numbers.
    #[serde(default)]
    pub unit: String,
}

impl Axis {
    /// The axis caption: `label (unit)`, the label alone, or the unit alone.
    pub fn caption(&self) -> String {
        match (self.label.is_empty(), self.unit.is_empty()) {
            (_, true) => self.label.clone(),
            (true, false) => format!("({})", self.unit),
            (false, false) => format!("{} ({})", self.label, self.unit),
        }
    }
}

/// One named series of values; `None` is a missing value (a gap in a line).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Series {
    /// The legend entry.
    #[serde(default)]
    pub name: String,
    /// The x of each value; absent means 0, 1, 2, ...
    #[serde(default)]
    pub x: Option<Vec<Option<f64>>>,
    /// The values.
    pub y: Vec<Option<f64>>,
}

impl Series {
    /// The `(x, y)` points with both coordinates present.
    pub fn points(&self) -> impl Iterator<Item = Option<(f64, f64)>> + '_ {
        self.y.iter().enumerate().map(|(i, y)| {
            let x = match &self.x {
                Some(xs) => xs[i],
                None => Some(i as f64),
            };
            x.zip(*y)
        })
    }
}

/// A heatmap's values, row-major.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    /// Rows, drawn top to bottom.
    pub rows: usize,
    /// Columns, drawn left to right.
    pub cols: usize,
    /// `rows * cols` values; `None` is drawn blank.
    pub values: Vec<Option<f64>>,
}

impl Grid {
    /// The smallest and largest present value, if any is present.
    pub fn range(&self) -> Option<(f64, f64)> {
        self.values
            .iter()
            .flatten()
            .fold(None, |acc, &v| match acc {
                None => Some((v, v)),
                Some((lo, hi)) => Some((v.min(lo), v.max(hi))),
            })
    }

    /// The grid averaged down to at most `max_rows` x `max_cols` (blocks of whole cells; a
    /// block's missing values are left out of its mean), or a copy when it already fits.
    pub fn shrink(&self, max_rows: usize, max_cols: usize) -> Grid {
        let (rs, cs) = (
            self.rows.div_ceil(max_rows.max(1)),
            self.cols.div_ceil(max_cols.max(1)),
        );
        if rs == 1 && cs == 1 {
            return self.clone();
        }
        let (rows, cols) = (self.rows.div_ceil(rs), self.cols.div_ceil(cs));
        let mut values = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            for c in 0..cols {
                let (mut sum, mut n) = (0.0, 0usize);
                for rr in r * rs..((r + 1) * rs).min(self.rows) {
                    for cc in c * cs..((c + 1) * cs).min(self.cols) {
                        if let Some(v) = self.values[rr * self.cols + cc] {
                            sum += v;
                            n += 1;
                        }
                    }
                }
                values.push((n > 0).then(|| sum / n as f64));
            }
        }
        Grid { rows, cols, values }
    }
}

impl Plot {
    /// Parses and checks a spec; the error says what to fix.
    pub fn from_json(data: &[u8]) -> Result<Plot, String> {
        let plot: Plot = serde_json::from_slice(data).map_err(|e| {
            format!("the plot spec is not valid: {e}; build plots with the SDK's `plot` module")
        })?;
        plot.check()?;
        Ok(plot)
    }

    /// How the plot names itself in errors and the text fallback.
    pub fn describe(&self) -> String {
        match self.title.is_empty() {
            true => format!("{} plot", self.kind.name()),
            false => format!("{} plot '{}'", self.kind.name(), self.title),
        }
    }

    fn check(&self) -> Result<(), String> {
        let what = self.describe();
        let texts = [&self.title, &self.x.label, &self.x.unit, &self.y.label]
            .into_iter()
            .chain([&self.y.unit, &self.color.label, &self.color.unit])
            .chain(self.series.iter().map(|s| &s.name))
            .chain(&self.categories);
        for text in texts {
            if text.chars().count() > MAX_TEXT {
                return Err(format!(
                    "{what}: the text '{}...' is longer than {MAX_TEXT} characters",
                    text.chars().take(24).collect::<String>()
                ));
            }
        }
        if self.series.len() > MAX_SERIES {
            return Err(format!(
                "{what} has {} series; the most is {MAX_SERIES}",
                self.series.len()
            ));
        }
        let values: usize = self.series.iter().map(|s| s.y.len()).sum::<usize>()
            + self.grid.as_ref().map_or(0, |g| g.values.len());
        if values > MAX_VALUES {
            return Err(format!(
                "{what} has {values} values; the most is {MAX_VALUES} (plot a summary instead)"
            ));
        }
        match self.kind {
            PlotKind::Line => self.check_line(&what),
            PlotKind::Bar => self.check_bar(&what),
            PlotKind::Heatmap => self.check_heatmap(&what),
        }
    }

    fn check_line(&self, what: &str) -> Result<(), String> {
        if self.series.is_empty() {
            return Err(format!(
                "{what} has no series; add one with `.series(name, &values)`"
            ));
        }
        for s in &self.series {
            if let Some(x) = s.x.as_ref().filter(|x| x.len() != s.y.len()) {
                return Err(format!(
                    "{what}: series '{}' has {} x values but {} y values",
                    s.name,
                    x.len(),
                    s.y.len()
                ));
            }
        }
        self.no_grid(what)
    }

    fn check_bar(&self, what: &str) -> Result<(), String> {
        if self.series.is_empty() {
            return Err(format!(
                "{what} has no series; add one with `.series(name, &values)`"
            ));
        }
        if self.categories.is_empty() {
            return Err(format!(
                "{what} has no categories; name the bars with `.categories(&[...])`"
            ));
        }
        for s in &self.series {
            if s.x.is_some() {
                return Err(format!(
                    "{what}: series '{}' has x values; a bar plot places values by category",
                    s.name
                ));
            }
            if s.y.len() != self.categories.len() {
                return Err(format!(
                    "{what}: series '{}' has {} values but there are {} categories",
                    s.name,
                    s.y.len(),
                    self.categories.len()
                ));
            }
        }
        self.no_grid(what)
    }

    fn check_heatmap(&self, what: &str) -> Result<(), String> {
        let Some(grid) = &self.grid else {
            return Err(format!("{what} has no grid; give it one with `.grid(...)`"));
        };
        if !self.series.is_empty() || !self.categories.is_empty() {
            return Err(format!(
                "{what} has series or categories; a heatmap has only a grid"
            ));
        }
        if grid.rows == 0 || grid.cols == 0 {
            return Err(format!(
                "{what}: the grid is {} x {}; it needs at least one row and one column",
                grid.rows, grid.cols
            ));
        }
        if grid.rows.checked_mul(grid.cols) != Some(grid.values.len()) {
            return Err(format!(
                "{what}: a {} x {} grid needs {} values, not {}",
                grid.rows,
                grid.cols,
                grid.rows.saturating_mul(grid.cols),
                grid.values.len()
            ));
        }
        Ok(())
    }

    fn no_grid(&self, what: &str) -> Result<(), String> {
        match self.grid {
            Some(_) => Err(format!("{what} has a grid; only a heatmap has one")),
            None => Ok(()),
        }
    }
}

/// A tick label: at most three decimals without trailing zeros (`0`, `2.5`, `0.125`,
/// `1200`), or scientific notation for very large or very small numbers (`1.5e6`).
pub fn tick(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        let text = format!("{v:.2e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        return format!("{mantissa}e{exponent}");
    }
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    match text {
        "-0" => "0".to_string(),
        text => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(json: &str) -> String {
        Plot::from_json(json.as_bytes()).unwrap_err()
    }

    #[test]
    fn a_line_plot_parses_with_gaps_and_defaults() {
        let plot = Plot::from_json(
            br#"{"kind":"line","title":"loss","x":{"label":"step"},
                 "y":{"label":"time","unit":"ms"},
                 "series":[{"name":"a","y":[1,null,3]},{"name":"b","x":[0,2],"y":[5,6]}]}"#,
        )
        .unwrap();
        assert_eq!(plot.kind, PlotKind::Line);
        assert_eq!(plot.x.caption(), "step");
        assert_eq!(plot.y.caption(), "time (ms)");
        let a: Vec<_> = plot.series[0].points().collect();
        assert_eq!(a, [Some((0.0, 1.0)), None, Some((2.0, 3.0))]);
        let b: Vec<_> = plot.series[1].points().collect();
        assert_eq!(b, [Some((0.0, 5.0)), Some((2.0, 6.0))]);
    }

    #[test]
    fn bad_specs_say_what_to_fix() {
        assert!(err("{").contains("not valid"));
        assert!(err(r#"{"kind":"pie"}"#).contains("unknown variant"));
        assert!(err(r#"{"kind":"line","colour":1}"#).contains("unknown field"));
        assert!(err(r#"{"kind":"line"}"#).contains("has no series"));
        assert!(err(r#"{"kind":"line","series":[{"x":[1],"y":[1,2]}]}"#)
            .contains("1 x values but 2 y values"));
        assert!(
            err(r#"{"kind":"bar","categories":["a"],"series":[{"name":"s","y":[1,2]}]}"#)
                .contains("series 's' has 2 values but there are 1 categories")
        );
        assert!(err(r#"{"kind":"bar","series":[{"y":[1]}]}"#).contains("no categories"));
        assert!(err(r#"{"kind":"heatmap","title":"h"}"#).contains("heatmap plot 'h' has no grid"));
        assert!(
            err(r#"{"kind":"heatmap","grid":{"rows":2,"cols":2,"values":[1,2,3]}}"#)
                .contains("a 2 x 2 grid needs 4 values, not 3")
        );
        assert!(
            err(r#"{"kind":"heatmap","grid":{"rows":0,"cols":2,"values":[]}}"#)
                .contains("at least one row")
        );
        let long = "x".repeat(MAX_TEXT + 1);
        assert!(err(&format!(r#"{{"kind":"line","title":"{long}"}}"#)).contains("longer than"));
    }

    #[test]
    fn grids_shrink_by_block_means_skipping_gaps() {
        let grid = Grid {
            rows: 3,
            cols: 4,
            values: (0..12).map(|v| (v != 5).then_some(v as f64)).collect(),
        };
        assert_eq!(grid.range(), Some((0.0, 11.0)));
        let small = grid.shrink(2, 2);
        assert_eq!((small.rows, small.cols), (2, 2));
        // Block (0, 0) is rows 0-1, cols 0-1: 0, 1, 4 (5 is missing).
        assert_eq!(small.values[0], Some((0.0 + 1.0 + 4.0) / 3.0));
        assert_eq!(small.values[3], Some((10.0 + 11.0) / 2.0));
        assert_eq!(grid.shrink(10, 10), grid);
    }
}

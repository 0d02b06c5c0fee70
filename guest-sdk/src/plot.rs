//! Plots: [`line`], [`bar`] and [`heatmap`] build a [`Plot`]; [`Plot::show`] sends it to the
//! host, which draws it as SVG in a notebook and as text in the REPL.
//!
//! Axes have a label and a unit (`.y_axis("host time", "ms")`), which the drawing shows as
//! `host time (ms)`. Values are anything numeric ([`PlotValue`]); NaN and infinities are
//! missing values (a gap in a line, no bar, a blank cell). The host checks the plot when it
//! is shown and says what is wrong (a series whose length does not match, say).
//!
//! A plot can also be the content of a [`DisplayHandle`](crate::DisplayHandle), so a loop can
//! redraw one plot in place as it goes.
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::plot;
//!
//! plot::line("Compiles per step")
//!     .x_axis("step", "")
//!     .y_axis("compiles", "")
//!     .series("growing", &[1, 2, 3, 4])
//!     .series("padded", &[1, 1, 1, 1])
//!     .show()?;
//! plot::bar("Modeled time per collective")
//!     .y_axis("modeled time", "µs")
//!     .categories(&["all_reduce", "all_gather"])
//!     .series("8 ranks", &[12.5, 4.0])
//!     .show()?;
//! plot::heatmap("attention").tensor(&scores)?.show()?;
//! ```

use std::fmt::Write;

use crate::error::{Error, ErrorKind, Result};
use crate::tensor::Tensor;
use crate::DType;

/// The MIME type of a plot spec (guest-sdk/ABI.md describes the JSON).
pub const PLOT_MIME: &str = "application/vnd.neuronlab.plot+json";

/// A number a plot can carry.
pub trait PlotValue: Copy {
    /// The value as `f64`.
    fn to_f64(self) -> f64;
}

macro_rules! plot_value {
    ($($t:ty),*) => {$(
        impl PlotValue for $t {
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
plot_value!(f32, f64, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

/// A line plot: one line per series, over x.
pub fn line(title: &str) -> Plot {
    Plot::new("line", title)
}

/// A bar plot: one group of bars per category, one bar per series in each.
pub fn bar(title: &str) -> Plot {
    Plot::new("bar", title)
}

/// A heatmap: a grid of values as colours, row 0 on top.
pub fn heatmap(title: &str) -> Plot {
    Plot::new("heatmap", title)
}

/// A plot being built; [`show`](Plot::show) sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    kind: &'static str,
    title: String,
    axes: [(String, String); 3],
    series: Vec<Series>,
    categories: Vec<String>,
    grid: Option<(usize, usize, Vec<f64>)>,
}

#[derive(Clone, Debug, PartialEq)]
struct Series {
    name: String,
    x: Option<Vec<f64>>,
    y: Vec<f64>,
}

impl Plot {
    fn new(kind: &'static str, title: &str) -> Plot {
        Plot {
            kind,
            title: title.to_string(),
            axes: Default::default(),
            series: Vec::new(),
            categories: Vec::new(),
            grid: None,
        }
    }

    /// Names the x axis and its unit (`""` for none).
    pub fn x_axis(mut self, label: &str, unit: &str) -> Plot {
        self.axes[0] = (label.to_string(), unit.to_string());
        self
    }

    /// Names the y axis and its unit (`""` for none).
    pub fn y_axis(mut self, label: &str, unit: &str) -> Plot {
        self.axes[1] = (label.to_string(), unit.to_string());
        self
    }

    /// Names a heatmap's value scale and its unit (`""` for none).
    pub fn color_axis(mut self, label: &str, unit: &str) -> Plot {
        self.axes[2] = (label.to_string(), unit.to_string());
        self
    }

    /// Adds a series: for a line, values at x = 0, 1, 2, ...; for a bar plot, one value per
    /// category.
    pub fn series<V: PlotValue>(mut self, name: &str, values: &[V]) -> Plot {
        self.series.push(Series {
            name: name.to_string(),
            x: None,
            y: values.iter().map(|v| v.to_f64()).collect(),
        });
        self
    }

    /// Adds a line series with its own x values (as many as `y`).
    pub fn series_xy<X: PlotValue, Y: PlotValue>(mut self, name: &str, x: &[X], y: &[Y]) -> Plot {
        self.series.push(Series {
            name: name.to_string(),
            x: Some(x.iter().map(|v| v.to_f64()).collect()),
            y: y.iter().map(|v| v.to_f64()).collect(),
        });
        self
    }

    /// Names a bar plot's categories, the groups along x.
    pub fn categories<S: AsRef<str>>(mut self, names: &[S]) -> Plot {
        self.categories = names.iter().map(|n| n.as_ref().to_string()).collect();
        self
    }

    /// Gives a heatmap its values: `rows * cols` of them, row-major.
    pub fn grid<V: PlotValue>(mut self, rows: usize, cols: usize, values: &[V]) -> Plot {
        self.grid = Some((rows, cols, values.iter().map(|v| v.to_f64()).collect()));
        self
    }

    /// Gives a heatmap the values of a 2-D tensor of any numeric dtype (a 1-D tensor is one
    /// row).
    #[track_caller]
    pub fn tensor(self, t: &Tensor) -> Result<Plot> {
        let shape = t.shape();
        let (rows, cols) = match shape[..] {
            [n] => (1, n),
            [r, c] => (r, c),
            _ => {
                return Err(Error::new(
                    ErrorKind::Invalid,
                    format!("a heatmap shows a 1-D or 2-D tensor, not one of shape {shape:?}; reshape or slice it first"),
                ))
            }
        };
        let values = match t.dtype() {
            DType::F64 => t.to_vec::<f64>()?,
            _ => t.cast(DType::F64)?.to_vec::<f64>()?,
        };
        Ok(self.grid(rows as usize, cols as usize, &values))
    }

    /// Sends the plot to the cell: SVG in a notebook, text in the REPL. The host checks it and
    /// returns an [`ErrorKind::Invalid`] error saying what is wrong.
    #[track_caller]
    pub fn show(&self) -> Result<()> {
        crate::display(PLOT_MIME, self.to_json().as_bytes())
    }

    /// The JSON spec the host reads.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 + 24 * self.value_count());
        out.push_str("{\"kind\":");
        string(&mut out, self.kind);
        out.push_str(",\"title\":");
        string(&mut out, &self.title);
        for (key, (label, unit)) in ["x", "y", "color"].iter().zip(&self.axes) {
            let _ = write!(out, ",\"{key}\":{{\"label\":");
            string(&mut out, label);
            out.push_str(",\"unit\":");
            string(&mut out, unit);
            out.push('}');
        }
        out.push_str(",\"series\":[");
        for (i, s) in self.series.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"name\":");
            string(&mut out, &s.name);
            if let Some(x) = &s.x {
                out.push_str(",\"x\":");
                numbers(&mut out, x);
            }
            out.push_str(",\"y\":");
            numbers(&mut out, &s.y);
            out.push('}');
        }
        out.push_str("],\"categories\":[");
        for (i, c) in self.categories.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            string(&mut out, c);
        }
        out.push(']');
        if let Some((rows, cols, values)) = &self.grid {
            let _ = write!(
                out,
                ",\"grid\":{{\"rows\":{rows},\"cols\":{cols},\"values\":"
            );
            numbers(&mut out, values);
            out.push('}');
        }
        out.push('}');
        out
    }

    fn value_count(&self) -> usize {
        let series: usize = self.series.iter().map(|s| s.y.len() * 2).sum();
        series + self.grid.as_ref().map_or(0, |g| g.2.len())
    }
}

/// `text` as a JSON string.
fn string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `values` as a JSON array; a NaN or infinity is `null`, a missing value.
fn numbers(out: &mut String, values: &[f64]) {
    out.push('[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match v.is_finite() {
            // `{:?}` keeps every digit an f64 needs (and never prints a bare `inf`).
            true => {
                let _ = write!(out, "{v:?}");
            }
            false => out.push_str("null"),
        }
    }
    out.push(']');
}

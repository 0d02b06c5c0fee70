//! `%timeline` as SVG, drawn with plotters' SVG backend: one lane per core (the lowest core on
//! top), a bar per op or collective at its place on the core's modeled clock (the layout of
//! the text timeline), an x axis of modeled device time in µs with ticks, the cores on the y
//! axis, and a legend of the ops with the most time, coloured as their bars. A core on which
//! backward ran ops gets a lane `neuron:N backward` under its own, and one that ran
//! collectives a lane `neuron:N collectives`, as the text timeline's rows; a line under the
//! legend says what each holds.
//!
//! plotters is built without fonts (no `ttf`, `ab_glyph` or bitmap features): its SVG backend
//! writes text as `<text>` elements for the viewer to render, and lays labels out with a
//! rough estimate of their width, so no system font is needed.
//!
//! A lane with more than [`MAX_BARS`] slices is drawn at the plot's resolution instead: each
//! of [`SAMPLES`] columns takes the colour of the slice at its middle (or, in a lane of one
//! phase, of the lane's slice with the most time in the column), and runs of one colour
//! become one bar, so a long loop gives a bounded drawing.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;

use super::timeline::{lay_out, rank, row_notes, rows, span, Ranked, Row, OTHER, SYMBOLS};
use neuronlab_core::events::fmt::duration;
use neuronlab_core::events::Event;
use neuronlab_plot::svg::{FONT, PALETTE};
use neuronlab_plot::tick;

/// The drawing's width, pixels.
pub const WIDTH: u32 = 760;
/// The most bars a lane gets one per slice.
pub const MAX_BARS: usize = 400;
/// Columns a busier lane is sampled at.
pub const SAMPLES: usize = 600;

/// The colour of the ops beyond the legend.
const OTHER_COLOR: RGBColor = RGBColor(186, 176, 172);

/// The vertical lines at the ticks.
const GRID: RGBColor = RGBColor(228, 228, 228);

const LEGEND_ROW: u32 = 18;
const LEGEND_COLUMNS: usize = 2;

/// The timeline of `events` as an SVG document, or `None` when none of them did device work
/// (or plotters failed, which writing to a string does not).
// One chart, drawn in the order plotters needs (mesh, then series, then labels).
pub fn render(events: &[Event]) -> Option<String> {
    let cores = lay_out(events);
    let span_s = span(&cores);
    if span_s <= 0.0 {
        return None;
    }
    let ranked = rank(&cores);
    let colour = |name: &str| {
        let i = ranked.iter().position(|r| r.name == name);
        i.and_then(|i| PALETTE.get(i))
            .copied()
            .unwrap_or(OTHER_COLOR)
    };
    let legend = legend(&ranked);
    let rows = rows(&cores);
    let notes = row_notes(&rows);
    let lanes = rows.len();
    let lane_px = (360 / lanes as u32).clamp(14, 36);
    let chart_height = 40 + lanes as u32 * lane_px + 56;
    let legend_rows = legend.len().div_ceil(LEGEND_COLUMNS) as u32 + notes.len() as u32;
    let height = chart_height + legend_rows * LEGEND_ROW + 12;

    let labels: Vec<String> = rows.iter().map(|r| r.label.clone()).collect();
    // Room for the longest label at about 7 px a character (the SVG's text has no metrics).
    let label_px = labels
        .iter()
        .map(|l| l.chars().count() as u32 * 7 + 32)
        .max();
    let n = lanes as f64;
    // Lane `k` (from the top) spans y in [n - 1 - k, n - k]; its label sits at the middle.
    let label_of = |y: &f64| {
        let k = (n - y - 0.5).round();
        match k >= 0.0 && (k as usize) < lanes {
            true => labels[k as usize].clone(),
            false => String::new(),
        }
    };
    let span_us = span_s * 1e6;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let (top, bottom) = root.split_vertically(chart_height);
        let mut chart = ChartBuilder::on(&top)
            .caption(
                format!(
                    "modeled device time {} (the busiest core)",
                    duration(span_s)
                ),
                (FONT, 15),
            )
            .margin(10)
            .margin_right(24)
            .x_label_area_size(44)
            .y_label_area_size(label_px.unwrap_or(0).max(88))
            .build_cartesian_2d(0.0..span_us, LaneAxis(lanes))
            .ok()?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .max_light_lines(0)
            .bold_line_style(GRID)
            .x_desc("modeled device time (µs)")
            .y_desc("core")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&label_of)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .ok()?;
        for (k, row) in rows.iter().enumerate() {
            let (y0, y1) = (n - k as f64 - 1.0, n - k as f64);
            let bars = bars(row, span_s, &colour).into_iter().map(|(s, e, c)| {
                let mut bar = Rectangle::new([(s * 1e6, y0), (e * 1e6, y1)], c.filled());
                bar.set_margin(3, 3, 0, 0);
                bar
            });
            chart.draw_series(bars).ok()?;
        }
        for (i, (colour, text)) in legend.iter().enumerate() {
            let x = 20 + (i % LEGEND_COLUMNS) as i32 * (WIDTH as i32 / LEGEND_COLUMNS as i32);
            let y = 4 + (i / LEGEND_COLUMNS) as i32 * LEGEND_ROW as i32;
            bottom
                .draw(&Rectangle::new([(x, y), (x + 12, y + 12)], colour.filled()))
                .ok()?;
            bottom
                .draw(&Text::new(text.clone(), (x + 18, y), (FONT, 13)))
                .ok()?;
        }
        let first_note = legend_rows as usize - notes.len();
        for (i, note) in notes.into_iter().enumerate() {
            let y = 4 + (first_note + i) as i32 * LEGEND_ROW as i32;
            bottom.draw(&Text::new(note, (20, y), (FONT, 13))).ok()?;
        }
        root.present().ok()?;
    }
    Some(svg)
}

/// The y axis: `lanes` lanes of height 1 from 0 up, with a key point (a label) at the middle
/// of each, and no other.
struct LaneAxis(usize);

impl Ranged for LaneAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = value / self.0 as f64;
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _: Hint) -> Vec<f64> {
        (0..self.0).map(|k| k as f64 + 0.5).collect()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.0 as f64
    }
}

/// The bars of one lane: `(start, end, colour)` in seconds, one per slice, or sampled runs
/// for a lane of more than [`MAX_BARS`] slices.
fn bars(row: &Row, span: f64, colour: &dyn Fn(&str) -> RGBColor) -> Vec<(f64, f64, RGBColor)> {
    if row.own().count() <= MAX_BARS {
        return row
            .own()
            .map(|s| (s.start, s.end, colour(&s.name)))
            .collect();
    }
    let width = span / SAMPLES as f64;
    let mut runs: Vec<(f64, f64, RGBColor)> = Vec::new();
    // Whether the previous column had a bar: a column of the other phase ends a run.
    let mut open = false;
    for col in 0..SAMPLES {
        let (start, end) = (col as f64 * width, (col + 1) as f64 * width);
        let Some(slice) = row.in_column(start, end) else {
            open = false;
            continue;
        };
        let c = colour(&slice.name);
        match runs.last_mut() {
            Some(run) if open && run.2 == c => run.1 = end,
            _ => runs.push((start, end, c)),
        }
        open = true;
    }
    runs
}

/// The legend's entries: the ranked ops as the text legend writes them, then the others.
fn legend(ranked: &[Ranked]) -> Vec<(RGBColor, String)> {
    let all: f64 = ranked.iter().map(|r| r.time).sum();
    let mut entries: Vec<(RGBColor, String)> = ranked
        .iter()
        .zip(PALETTE.iter().zip(SYMBOLS))
        .map(|(r, (&c, symbol))| {
            let text = format!(
                "{symbol} {}: {} × {}, {:.0}%",
                r.name,
                r.count,
                duration(r.time),
                100.0 * r.time / all
            );
            (c, text)
        })
        .collect();
    if let Some(rest) = ranked.get(SYMBOLS.len()..).filter(|r| !r.is_empty()) {
        let time: f64 = rest.iter().map(|r| r.time).sum();
        entries.push((
            OTHER_COLOR,
            format!(
                "{OTHER} {} other ops: {}, {:.0}%",
                rest.len(),
                duration(time),
                100.0 * time / all
            ),
        ));
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::magics::timeline::tests::{backward, collective, op};

    /// Checks that every tag of `svg` is closed in order (a tiny well-formedness check), and
    /// returns its `<text>` elements: the `y` attribute and the text.
    fn check_svg(svg: &str) -> Vec<(i32, String)> {
        let mut stack: Vec<&str> = Vec::new();
        let mut texts = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let close = rest[open..].find('>').expect("a tag ends") + open;
            let tag = &rest[open + 1..close];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name.trim()), "unbalanced </{name}>");
            } else if !tag.ends_with('/') && !tag.starts_with('?') && !tag.starts_with('!') {
                let name = tag.split_whitespace().next().unwrap_or("");
                stack.push(name);
                if name == "text" {
                    let end = rest[close..].find("</text>").unwrap() + close;
                    let y = tag.split(" y=\"").nth(1).and_then(|v| v.split('"').next());
                    let y = y.and_then(|y| y.parse().ok()).expect("a y");
                    texts.push((y, rest[close + 1..end].trim().to_string()));
                }
            }
            rest = &rest[close + 1..];
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        texts
    }

    #[test]
    fn lanes_axes_and_legend() {
        let events = vec![
            op(0, "matmul", 60.0),
            op(0, "add", 10.0),
            op(0, "reshape", 0.0),
            collective(0, 5.0),
            op(1, "matmul", 20.0),
            collective(1, 5.0),
            op(2, "exp<f32>", 3.0),
        ];
        let svg = render(&events).unwrap();
        assert!(svg.starts_with("<svg "), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
        let mut placed = check_svg(&svg);
        // One lane label per core, from the top.
        placed.sort();
        let texts: Vec<String> = placed.into_iter().map(|(_, t)| t).collect();
        let lanes: Vec<&String> = (texts.iter())
            .filter(|t| t.starts_with("neuron:") && !t.starts_with("neuron:N"))
            .collect();
        let want = [
            "neuron:0",
            "neuron:0 collectives",
            "neuron:1",
            "neuron:1 collectives",
            "neuron:2",
        ];
        assert_eq!(lanes, want, "{texts:?}");
        assert!(
            (texts.iter()).any(|t| t.starts_with("neuron:N collectives: its collectives")),
            "{texts:?}"
        );
        assert!(
            texts.contains(&"modeled device time (µs)".to_string()),
            "{texts:?}"
        );
        assert!(texts.contains(&"core".to_string()), "{texts:?}");
        assert!(
            texts.contains(&"modeled device time 75.0 µs (the busiest core)".to_string()),
            "{texts:?}"
        );
        assert!(texts.contains(&"0".to_string()) && texts.contains(&"70".to_string()));
        assert!(
            texts.contains(&"A matmul: 2 × 80.0 µs, 78%".to_string()),
            "{texts:?}"
        );
        // Text is escaped.
        assert!(
            texts.iter().any(|t| t.starts_with("D exp&lt;f32&gt;: 1 ×")),
            "{texts:?}"
        );
        // A bar per op and collective with device time: six, in the ops' colours.
        let matmul = format!("fill=\"#{:02X}{:02X}{:02X}\"", 78, 121, 167);
        assert_eq!(svg.matches(&matmul).count(), 2 + 1, "{svg}");
        assert!(render(&[op(0, "reshape", 0.0)]).is_none());
    }

    #[test]
    fn busy_lanes_are_sampled_and_ticks_are_short() {
        let events: Vec<Event> = (0..2 * MAX_BARS)
            .map(|i| op(0, if i % 2 == 0 { "a" } else { "b" }, 1.0))
            .collect();
        let svg = render(&events).unwrap();
        check_svg(&svg);
        assert!(
            svg.matches("<rect").count() <= SAMPLES + 16,
            "{}",
            svg.len()
        );
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.125), "0.125");
        assert_eq!(tick(1200.0), "1200");
    }

    #[test]
    fn backward_ops_have_their_own_lane_and_a_note() {
        let events = vec![
            op(0, "matmul", 30.0),
            backward(0, "matmul", 20.0),
            backward(0, "mul", 10.0),
            op(1, "add", 5.0),
        ];
        let svg = render(&events).unwrap();
        let mut placed = check_svg(&svg);
        placed.sort();
        let texts: Vec<String> = placed.into_iter().map(|(_, t)| t).collect();
        let lanes: Vec<&String> = texts.iter().filter(|t| t.starts_with("neuron:")).collect();
        assert_eq!(
            lanes,
            [
                "neuron:0",
                "neuron:0 backward",
                "neuron:1",
                "neuron:N backward: the ops backward ran on that core (gradients), at their \
                 place on its clock"
            ],
            "{texts:?}"
        );
        // Each op's bar is drawn once, in its lane: matmul's two, in the legend's colour.
        let matmul = format!("fill=\"#{:02X}{:02X}{:02X}\"", 78, 121, 167);
        assert_eq!(svg.matches(&matmul).count(), 2 + 1, "{svg}");

        // A busy lane is sampled per phase: a backward run never paints the forward lane.
        let busy: Vec<Event> = (0..2 * (MAX_BARS + 1))
            .map(|i| match i <= MAX_BARS {
                true => op(0, "a", 1.0),
                false => backward(0, "b", 1.0),
            })
            .collect();
        let svg = render(&busy).unwrap();
        check_svg(&svg);
        let b = format!(
            "fill=\"#{:02X}{:02X}{:02X}\"",
            PALETTE[1].0, PALETTE[1].1, PALETTE[1].2
        );
        // One sampled run for each op's lane, and the legend's swatch.
        assert_eq!(svg.matches(&b).count(), 1 + 1, "{svg}");
    }
}

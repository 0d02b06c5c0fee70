//! A [`Plot`] as an SVG document, drawn with plotters' SVG backend (built without fonts: text
//! is written as `<text>` elements for the viewer to render, as `%timeline` does).
//!
//! Lines split at missing values and mark their points when there are few; bars stand in
//! groups, one group per category; a heatmap draws row 0 on top with a colour bar (viridis)
//! at its right, and is averaged down to [`HEATMAP_CELLS`] cells a side when bigger.

use std::ops::Range;

use plotters::coord::ranged1d::{AsRangedCoord, DefaultFormatting, KeyPointHint};
use plotters::prelude::*;

use super::{tick, Grid, Plot, PlotKind, Series};

/// The drawing's size, pixels.
pub const SIZE: (u32, u32) = (720, 420);
/// A line with at most this many points gets a marker on each.
pub const MARKED_POINTS: usize = 60;
/// A heatmap is drawn with at most this many cells a side.
pub const HEATMAP_CELLS: usize = 120;

/// The series colours (Tableau 10), shared with `%timeline`.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(78, 121, 167),
    RGBColor(242, 142, 43),
    RGBColor(225, 87, 89),
    RGBColor(118, 183, 178),
    RGBColor(89, 161, 79),
    RGBColor(237, 201, 72),
    RGBColor(176, 122, 161),
    RGBColor(255, 157, 167),
];

/// The font family of every label; the viewer picks the face.
pub const FONT: &str = "sans-serif";

/// Grid lines at the ticks.
const GRID_LINES: RGBColor = RGBColor(228, 228, 228);

/// Viridis at five stops, interpolated linearly between them.
const VIRIDIS: [(f64, f64, f64); 5] = [
    (68.0, 1.0, 84.0),
    (59.0, 82.0, 139.0),
    (33.0, 145.0, 140.0),
    (94.0, 201.0, 98.0),
    (253.0, 231.0, 37.0),
];

/// The plot as SVG, or `None` if plotters fails (drawing into a string does not).
pub fn render(plot: &Plot) -> Option<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).ok()?;
        match plot.kind {
            PlotKind::Line => line(plot, &root)?,
            PlotKind::Bar => bar(plot, &root)?,
            PlotKind::Heatmap => heatmap(plot, plot.grid.as_ref()?, &root)?,
        }
        root.present().ok()?;
    }
    Some(svg)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

type Chart<'a, X, Y> = ChartContext<
    'a,
    SVGBackend<'a>,
    Cartesian2d<<X as AsRangedCoord>::CoordDescType, <Y as AsRangedCoord>::CoordDescType>,
>;

fn chart<'a, X: AsRangedCoord, Y: AsRangedCoord>(
    plot: &Plot,
    area: &Area<'a>,
    x: X,
    y: Y,
) -> Option<Chart<'a, X, Y>> {
    ChartBuilder::on(area)
        .caption(&plot.title, (FONT, 16))
        .margin(12)
        .margin_right(24)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .ok()
}

fn line(plot: &Plot, root: &Area) -> Option<()> {
    let points = || plot.series.iter().flat_map(Series::points).flatten();
    let x = padded(points().map(|p| p.0), 0.0);
    let y = padded(points().map(|p| p.1), 0.05);
    let mut chart = chart(plot, root, x, y)?;
    chart
        .configure_mesh()
        .max_light_lines(0)
        .bold_line_style(GRID_LINES)
        .x_desc(plot.x.caption())
        .y_desc(plot.y.caption())
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()
        .ok()?;
    for (i, series) in plot.series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let all: Vec<Option<(f64, f64)>> = series.points().collect();
        let mut labelled = false;
        for run in all.split(Option::is_none) {
            let run: Vec<(f64, f64)> = run.iter().flatten().copied().collect();
            if run.is_empty() {
                continue;
            }
            let drawn = chart
                .draw_series(LineSeries::new(run, colour.stroke_width(2)))
                .ok()?;
            if !labelled && !series.name.is_empty() {
                drawn.label(&series.name).legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2))
                });
                labelled = true;
            }
        }
        if all.len() <= MARKED_POINTS {
            let marks = all
                .iter()
                .flatten()
                .map(|&p| Circle::new(p, 3, colour.filled()));
            chart.draw_series(marks).ok()?;
        }
    }
    legend(plot, &mut chart)
}

fn bar(plot: &Plot, root: &Area) -> Option<()> {
    let groups = plot.categories.len();
    let values = plot
        .series
        .iter()
        .flat_map(|s| s.y.iter().flatten().copied());
    let y = padded(values.chain([0.0]), 0.05);
    let mut chart = chart(plot, root, Categories(groups), y)?;
    let label = |v: &f64| {
        let i = v.round();
        match i >= 0.0 && (i as usize) < groups {
            true => plot.categories[i as usize].clone(),
            false => String::new(),
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(0)
        .bold_line_style(GRID_LINES)
        .x_desc(plot.x.caption())
        .y_desc(plot.y.caption())
        .x_label_formatter(&label)
        .y_label_formatter(&|v| tick(*v))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()
        .ok()?;
    let width = 0.8 / plot.series.len() as f64;
    for (j, series) in plot.series.iter().enumerate() {
        let colour = PALETTE[j % PALETTE.len()];
        let bars = series.y.iter().enumerate().filter_map(|(c, v)| {
            let x0 = c as f64 - 0.4 + j as f64 * width;
            v.map(|v| Rectangle::new([(x0, 0.0), (x0 + width, v)], colour.filled()))
        });
        let drawn = chart.draw_series(bars).ok()?;
        if !series.name.is_empty() {
            drawn.label(&series.name).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
            });
        }
    }
    legend(plot, &mut chart)
}

fn legend<'a, X: Ranged, Y: Ranged>(
    plot: &Plot,
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> Option<()> {
    if plot.series.iter().all(|s| s.name.is_empty()) {
        return Some(());
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(GRID_LINES)
        .label_font((FONT, 12))
        .draw()
        .ok()
}

fn heatmap(plot: &Plot, grid: &Grid, root: &Area) -> Option<()> {
    let shown = grid.shrink(HEATMAP_CELLS, HEATMAP_CELLS);
    // Each shown cell covers this many cells of the original grid, whose indices the axes keep.
    let (rs, cs) = (
        grid.rows.div_ceil(shown.rows),
        grid.cols.div_ceil(shown.cols),
    );
    let (lo, hi) = grid.range().unwrap_or((0.0, 1.0));
    let (width, height) = SIZE;
    let (main, scale) = root.split_horizontally(width - 110);
    let rows = grid.rows as f64;
    let mut chart = chart(plot, &main, 0.0..grid.cols as f64, 0.0..rows)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(plot.x.caption())
        .y_desc(plot.y.caption())
        .x_label_formatter(&|v| tick(v.floor()))
        // The y axis counts rows down from the top.
        .y_label_formatter(&|v| tick((rows - v).floor()))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()
        .ok()?;
    let cells = shown.values.iter().enumerate().filter_map(|(i, v)| {
        let (r, c) = (i / shown.cols, i % shown.cols);
        let (x0, x1) = ((c * cs) as f64, (((c + 1) * cs).min(grid.cols)) as f64);
        let (top, bottom) = ((r * rs) as f64, (((r + 1) * rs).min(grid.rows)) as f64);
        v.map(|v| {
            Rectangle::new(
                [(x0, rows - top), (x1, rows - bottom)],
                viridis(share(v, lo, hi)).filled(),
            )
        })
    });
    chart.draw_series(cells).ok()?;

    // The colour bar: a column of bands from `lo` (bottom) to `hi` (top), labelled at both
    // ends and the middle, with the value scale's caption above.
    let (top, bottom, left) = (48i32, height as i32 - 60, 16i32);
    let bands = 64;
    let band = (bottom - top) as f64 / bands as f64;
    for k in 0..bands {
        let y1 = bottom - (k as f64 * band) as i32;
        let y0 = bottom - ((k + 1) as f64 * band).ceil() as i32;
        let colour = viridis((k as f64 + 0.5) / bands as f64);
        scale
            .draw(&Rectangle::new(
                [(left, y0), (left + 18, y1)],
                colour.filled(),
            ))
            .ok()?;
    }
    for (value, y) in [
        (hi, top),
        ((lo + hi) / 2.0, (top + bottom) / 2),
        (lo, bottom),
    ] {
        scale
            .draw(&Text::new(tick(value), (left + 24, y - 6), (FONT, 12)))
            .ok()?;
    }
    scale
        .draw(&Text::new(plot.color.caption(), (4, top - 26), (FONT, 12)))
        .ok()?;
    Some(())
}

/// Where `v` falls between `lo` and `hi`, from 0 to 1 (the middle when they are equal).
fn share(v: f64, lo: f64, hi: f64) -> f64 {
    match hi > lo {
        true => ((v - lo) / (hi - lo)).clamp(0.0, 1.0),
        false => 0.5,
    }
}

/// The viridis colour at `t` in [0, 1].
fn viridis(t: f64) -> RGBColor {
    let pos = t.clamp(0.0, 1.0) * (VIRIDIS.len() - 1) as f64;
    let i = (pos.floor() as usize).min(VIRIDIS.len() - 2);
    let f = pos - i as f64;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    let mix = |p: f64, q: f64| (p + (q - p) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// The range of `values` widened by `pad` of its span on each side; a single value gets a
/// unit-wide range around it, and no values give 0..1.
fn padded(values: impl Iterator<Item = f64>, pad: f64) -> Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return 0.0..1.0;
    }
    if lo == hi {
        return lo - 0.5..hi + 0.5;
    }
    let margin = (hi - lo) * pad;
    lo - margin..hi + margin
}

/// A bar plot's x axis: `groups` categories at 0, 1, 2, ... with a key point (a label) at
/// each and half a unit of room at both ends.
struct Categories(usize);

impl Ranged for Categories {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = (value + 0.5) / self.0 as f64;
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _: Hint) -> Vec<f64> {
        (0..self.0).map(|k| k as f64).collect()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot(json: &str) -> Plot {
        Plot::from_json(json.as_bytes()).unwrap()
    }

    /// The text of every `<text>` element of `svg`.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = &t[t.find('>')? + 1..];
                Some(body[..body.find("</text>")?].trim().to_string())
            })
            .collect()
    }

    #[test]
    fn a_line_plot_has_its_title_axes_units_legend_and_a_path_per_run() {
        let svg = render(&plot(
            r#"{"kind":"line","title":"compiles per step","x":{"label":"step"},
                "y":{"label":"host time","unit":"ms"},
                "series":[{"name":"growing","y":[1,2,null,4]},{"name":"padded","y":[1,1,1,1]}]}"#,
        ))
        .unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        let texts = texts(&svg);
        for want in [
            "compiles per step",
            "step",
            "host time (ms)",
            "growing",
            "padded",
        ] {
            assert!(texts.iter().any(|t| t == want), "no {want:?} in {texts:?}");
        }
        // The gap splits "growing" in two; "padded" is one line; each legend entry adds one.
        let lines = svg.matches(r#"stroke-width="2" points"#).count();
        assert_eq!(lines, 3 + 2, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 3 + 4);
    }

    #[test]
    fn a_bar_plot_labels_its_categories() {
        let svg = render(&plot(
            r#"{"kind":"bar","title":"modeled time","y":{"label":"time","unit":"µs"},
                "categories":["all_reduce","all_gather"],
                "series":[{"name":"8 ranks","y":[12.5,4]},{"name":"32 ranks","y":[20,null]}]}"#,
        ))
        .unwrap();
        let texts = texts(&svg);
        for want in [
            "all_reduce",
            "all_gather",
            "time (µs)",
            "8 ranks",
            "32 ranks",
        ] {
            assert!(texts.iter().any(|t| t == want), "no {want:?} in {texts:?}");
        }
    }

    #[test]
    fn a_heatmap_draws_a_cell_per_value_and_its_scale() {
        let values: Vec<String> = (0..6).map(|v| v.to_string()).collect();
        let svg = render(&plot(&format!(
            r#"{{"kind":"heatmap","title":"scores","color":{{"label":"score"}},
                "grid":{{"rows":2,"cols":3,"values":[{}]}}}}"#,
            values.join(",")
        )))
        .unwrap();
        let texts = texts(&svg);
        for want in ["scores", "score", "0", "2.5", "5"] {
            assert!(texts.iter().any(|t| t == want), "no {want:?} in {texts:?}");
        }
        // The first and the last cell take the ends of the colour map.
        assert!(svg.contains("fill=\"#440154\""), "{svg}");
        assert!(svg.contains("fill=\"#FDE725\""), "{svg}");
    }

    #[test]
    fn big_heatmaps_are_averaged_down() {
        let n = 1000;
        let values = vec!["1"; n * n].join(",");
        let spec =
            format!(r#"{{"kind":"heatmap","grid":{{"rows":{n},"cols":{n},"values":[{values}]}}}}"#);
        let svg = render(&plot(&spec)).unwrap();
        let cells = svg.matches("<rect").count();
        assert!(cells < HEATMAP_CELLS * HEATMAP_CELLS + 200, "{cells} rects");
    }

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.125), "0.125");
        assert_eq!(tick(1200.0), "1200");
        assert_eq!(tick(-0.0001), "-1e-4");
        assert_eq!(tick(1.5e6), "1.5e6");
    }
}

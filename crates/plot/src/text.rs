//! A [`Plot`] as a few lines of text, for terminals and as the `text/plain` of its display: a
//! sparkline per line series, a row of blocks per bar, a shaded grid for a heatmap, each with
//! the numbers a reader needs (ranges, values, units).

use super::{tick, Plot, PlotKind};

/// The widest drawing, in characters.
pub const WIDTH: usize = 60;

const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];

/// The plot as text, ending without a newline.
pub fn render(plot: &Plot) -> String {
    let mut lines = vec![plot.describe()];
    match plot.kind {
        PlotKind::Line => line(plot, &mut lines),
        PlotKind::Bar => bar(plot, &mut lines),
        PlotKind::Heatmap => heatmap(plot, &mut lines),
    }
    lines.join("\n")
}

fn unit(axis: &super::Axis) -> String {
    match axis.unit.is_empty() {
        true => String::new(),
        false => format!(" {}", axis.unit),
    }
}

fn name_width(plot: &Plot) -> usize {
    plot.series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
}

fn line(plot: &Plot, lines: &mut Vec<String>) {
    let width = name_width(plot);
    let (lo, hi) = range(
        plot.series
            .iter()
            .flat_map(|s| s.y.iter().flatten().copied()),
    );
    for s in &plot.series {
        let columns = resample(&s.y, WIDTH);
        let spark: String = columns
            .iter()
            .map(|v| match v {
                Some(v) => SPARKS[level(*v, lo, hi, SPARKS.len())],
                None => ' ',
            })
            .collect();
        let (slo, shi) = range(s.y.iter().flatten().copied());
        let present = s.y.iter().flatten().count();
        lines.push(format!(
            "  {:<width$}  {spark}  {} … {}{}, {present} points",
            s.name,
            tick(slo),
            tick(shi),
            unit(&plot.y)
        ));
    }
    let (xlo, xhi) = range(
        plot.series
            .iter()
            .flat_map(|s| s.points().flatten().map(|p| p.0)),
    );
    let x_name = match plot.x.label.is_empty() {
        true => "x",
        false => plot.x.label.as_str(),
    };
    let mut footer = format!("  {x_name}: {} … {}{}", tick(xlo), tick(xhi), unit(&plot.x));
    if !plot.y.caption().is_empty() {
        footer.push_str(&format!("   y: {}", plot.y.caption()));
    }
    lines.push(footer);
}

fn bar(plot: &Plot, lines: &mut Vec<String>) {
    let width = plot
        .categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let (_, hi) = range(
        plot.series
            .iter()
            .flat_map(|s| s.y.iter().flatten().map(|v| v.abs())),
    );
    for s in &plot.series {
        if plot.series.len() > 1 || !s.name.is_empty() {
            lines.push(format!("  {}:", s.name));
        }
        for (category, v) in plot.categories.iter().zip(&s.y) {
            let drawn = match v {
                Some(v) => {
                    let n = (v.abs() / hi.max(f64::MIN_POSITIVE) * 40.0).round() as usize;
                    let sign = if *v < 0.0 { "-" } else { "" };
                    format!(
                        "{sign}{} {}{}",
                        "█".repeat(n.max(1)),
                        tick(*v),
                        unit(&plot.y)
                    )
                }
                None => "(missing)".to_string(),
            };
            lines.push(format!("  {category:>width$}  {drawn}"));
        }
    }
    if !plot.y.label.is_empty() {
        lines.push(format!("  values: {}", plot.y.caption()));
    }
}

fn heatmap(plot: &Plot, lines: &mut Vec<String>) {
    let Some(grid) = &plot.grid else { return };
    let (lo, hi) = grid.range().unwrap_or((0.0, 0.0));
    lines.push(format!(
        "  {} x {} values from {} to {}{}",
        grid.rows,
        grid.cols,
        tick(lo),
        tick(hi),
        unit(&plot.color)
    ));
    let shown = grid.shrink(WIDTH / 2, WIDTH / 2);
    for r in 0..shown.rows {
        let row: String = shown.values[r * shown.cols..(r + 1) * shown.cols]
            .iter()
            .flat_map(|v| {
                let c = v.map_or(' ', |v| SHADES[level(v, lo, hi, SHADES.len())]);
                [c, c]
            })
            .collect();
        lines.push(format!("  │{row}│"));
    }
    let mut legend = String::from("  shades: ' ' low … '█' high");
    for (name, axis) in [("rows", &plot.y), ("cols", &plot.x)] {
        if !axis.caption().is_empty() {
            legend.push_str(&format!("   {name}: {}", axis.caption()));
        }
    }
    lines.push(legend);
}

/// The smallest and largest of `values` (0, 0 when there are none).
fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values
        .fold(None, |acc: Option<(f64, f64)>, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
        .unwrap_or((0.0, 0.0))
}

/// Which of `levels` steps `v` falls in between `lo` and `hi` (the top when they are equal).
fn level(v: f64, lo: f64, hi: f64, levels: usize) -> usize {
    if hi <= lo {
        return levels - 1;
    }
    (((v - lo) / (hi - lo)) * (levels - 1) as f64).round() as usize
}

/// `values` in at most `columns` columns, each the mean of the values it covers (missing
/// values left out; a column with none is missing).
fn resample(values: &[Option<f64>], columns: usize) -> Vec<Option<f64>> {
    if values.len() <= columns {
        return values.to_vec();
    }
    (0..columns)
        .map(|c| {
            let span = &values[c * values.len() / columns..(c + 1) * values.len() / columns];
            let present: Vec<f64> = span.iter().flatten().copied().collect();
            (!present.is_empty()).then(|| present.iter().sum::<f64>() / present.len() as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(json: &str) -> String {
        render(&Plot::from_json(json.as_bytes()).unwrap())
    }

    #[test]
    fn a_line_is_a_sparkline_with_its_range() {
        let t = text(
            r#"{"kind":"line","title":"compiles","x":{"label":"step"},"y":{"label":"compiles"},
                "series":[{"name":"growing","y":[1,2,3,4,5,6,7,8]},{"name":"padded","y":[1,1,1,1,1,1,1,1]}]}"#,
        );
        assert_eq!(
            t,
            "line plot 'compiles'\n  growing  ▁▂▃▄▅▆▇█  1 … 8, 8 points\n  padded   ▁▁▁▁▁▁▁▁  \
             1 … 1, 8 points\n  step: 0 … 7   y: compiles"
        );
    }

    #[test]
    fn bars_are_rows_of_blocks_and_heatmaps_shade() {
        let t = text(
            r#"{"kind":"bar","categories":["a","bb"],"y":{"label":"time","unit":"µs"},
                "series":[{"y":[2,4]}]}"#,
        );
        assert!(t.contains("   a  ████████████████████ 2 µs"), "{t}");
        assert!(
            t.contains("  bb  ████████████████████████████████████████ 4 µs"),
            "{t}"
        );
        let t = text(r#"{"kind":"heatmap","grid":{"rows":2,"cols":2,"values":[0,1,2,null]}}"#);
        assert!(t.contains("2 x 2 values from 0 to 2"), "{t}");
        assert!(t.contains("  │  ▒▒│\n  │██  │"), "{t}");
    }

    #[test]
    fn long_series_are_averaged_into_the_width() {
        let ys: Vec<String> = (0..600).map(|i| (i / 10).to_string()).collect();
        let t = text(&format!(
            r#"{{"kind":"line","series":[{{"y":[{}]}}]}}"#,
            ys.join(",")
        ));
        let spark = t.lines().nth(1).unwrap().split_whitespace().next().unwrap();
        assert_eq!(spark.chars().count(), WIDTH);
    }
}

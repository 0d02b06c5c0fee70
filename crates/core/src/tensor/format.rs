//! numpy/PyTorch-style text formatting: one width for all elements, a shared float mode
//! (integral, fixed or scientific), summarization of large tensors with `...`, and a
//! dtype and device suffix.

use super::{DType, Element, Tensor};
use crate::with_dtype;

/// How a tensor prints. The defaults are PyTorch's.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    /// Digits after the decimal point.
    pub precision: usize,
    /// Above this many elements, only the edges of each dim are shown.
    pub threshold: usize,
    /// Elements shown at each end of a summarized dim.
    pub edgeitems: usize,
    /// Characters per line before a row wraps.
    pub linewidth: usize,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            precision: 4,
            threshold: 1000,
            edgeitems: 3,
            linewidth: 80,
        }
    }
}

/// The indices shown along a dim of `size`; `None` marks the `...`.
pub fn shown(size: usize, summarize: bool, edge: usize) -> Vec<Option<usize>> {
    if summarize && size > 2 * edge {
        (0..edge)
            .map(Some)
            .chain(std::iter::once(None))
            .chain((size - edge..size).map(Some))
            .collect()
    } else {
        (0..size).map(Some).collect()
    }
}

/// How floats are written, chosen once from all shown values so the columns line up.
enum FloatMode {
    /// Every value is a whole number: `3.`
    Integral,
    /// `3.1416`
    Fixed,
    /// `3.1416e+00`
    Scientific,
}

/// The mode that writes every finite value of `values` alike (numpy's rules).
fn float_mode(values: &[f64]) -> FloatMode {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.iter().all(|v| v.fract() == 0.0) {
        let max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        return if max >= 1e8 {
            FloatMode::Scientific
        } else {
            FloatMode::Integral
        };
    }
    let nonzero: Vec<f64> = finite
        .iter()
        .map(|v| v.abs())
        .filter(|&v| v > 0.0)
        .collect();
    let max = nonzero.iter().copied().fold(0.0, f64::max);
    let min = nonzero.iter().copied().fold(f64::INFINITY, f64::min);
    if max >= 1e8 || min < 1e-4 || max / min > 1e3 {
        FloatMode::Scientific
    } else {
        FloatMode::Fixed
    }
}

/// One float in `mode` with `precision` digits; `nan`, `inf` and `-inf` as numpy writes them.
fn format_float(v: f64, mode: &FloatMode, precision: usize) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    match mode {
        FloatMode::Integral => format!("{v:.0}."),
        FloatMode::Fixed => format!("{v:.precision$}"),
        FloatMode::Scientific => {
            // Rust writes `1.2340e-5`; numpy and PyTorch write `1.2340e-05`.
            let s = format!("{v:.precision$e}");
            let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
            let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
            format!("{mantissa}e{sign}{digits:0>2}")
        }
    }
}

/// Formats a tensor as `tensor([...], dtype=f32, device=neuron:0)`.
pub fn format_tensor(t: &Tensor, opts: &FormatOptions) -> String {
    if t.numel() == 0 {
        // As torch prints it: no elements to list, so the shape says what it is (and a dim of
        // 2^40 next to a 0 costs nothing to print).
        let size = match t.shape() {
            [_] => String::new(),
            shape => {
                let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
                format!(", size=({})", dims.join(", "))
            }
        };
        return format!(
            "tensor([]{size}, dtype={}, device={})",
            t.dtype(),
            t.device()
        );
    }
    let summarize = t.numel() > opts.threshold;
    let dims: Vec<Vec<Option<usize>>> = t
        .shape()
        .iter()
        .map(|&d| shown(d, summarize, opts.edgeitems))
        .collect();
    // Every shown element's text, in row-major order of the shown grid.
    let mut index = vec![0usize; t.rank()];
    let mut raw: Vec<f64> = Vec::new();
    let mut ints: Vec<i64> = Vec::new();
    collect(t, &dims, 0, &mut index, &mut raw, &mut ints);
    let texts = element_texts(t.dtype(), &raw, &ints, opts.precision);
    let width = texts.iter().map(|s| s.len()).max().unwrap_or(0);
    let prefix = "tensor(";
    let mut next = texts.iter();
    let body = render(&dims, 0, prefix.len(), width, opts.linewidth, &mut next);
    format!(
        "{prefix}{body}, dtype={}, device={})",
        t.dtype(),
        t.device()
    )
}

/// The texts of elements of `dtype`, given as f64 (`raw`) and as i64 (`ints`), in the
/// order given: `True`/`False`, integers, or floats in one mode shared by all of them.
pub fn element_texts(dtype: DType, raw: &[f64], ints: &[i64], precision: usize) -> Vec<String> {
    match dtype {
        DType::Bool => ints
            .iter()
            .map(|&v| if v != 0 { "True" } else { "False" }.to_string())
            .collect(),
        d if d.is_float() => {
            let mode = float_mode(raw);
            raw.iter()
                .map(|&v| format_float(v, &mode, precision))
                .collect()
        }
        _ => ints.iter().map(|v| v.to_string()).collect(),
    }
}

fn collect(
    t: &Tensor,
    dims: &[Vec<Option<usize>>],
    d: usize,
    index: &mut Vec<usize>,
    raw: &mut Vec<f64>,
    ints: &mut Vec<i64>,
) {
    if d == dims.len() {
        let o = t.layout().offset_of(index);
        with_dtype!(t.dtype(), S => {
            let v = t.data::<S>()[o];
            raw.push(v.to_f64());
            ints.push(v.to_i64());
        });
        return;
    }
    for i in dims[d].iter().flatten() {
        index[d] = *i;
        collect(t, dims, d + 1, index, raw, ints);
    }
}

fn render<'a>(
    dims: &[Vec<Option<usize>>],
    d: usize,
    indent: usize,
    width: usize,
    linewidth: usize,
    next: &mut impl Iterator<Item = &'a String>,
) -> String {
    if d == dims.len() {
        return format!("{:>width$}", next.next().map_or("", |s| s.as_str()));
    }
    let last = d + 1 == dims.len();
    let mut out = String::from("[");
    let mut line_len = indent + 1;
    for (k, entry) in dims[d].iter().enumerate() {
        let item = match entry {
            Some(_) => render(dims, d + 1, indent + 1, width, linewidth, next),
            None => "...".to_string(),
        };
        if k > 0 {
            if last {
                out.push(',');
                // Wrap rows that would pass the line width, as numpy does.
                if line_len + 2 + item.len() > linewidth {
                    out.push('\n');
                    out.push_str(&" ".repeat(indent + 1));
                    line_len = indent + 1;
                } else {
                    out.push(' ');
                    line_len += 2;
                }
            } else {
                // One blank line between blocks of rank > 2, as numpy.
                let blank = dims.len() - d - 1;
                out.push(',');
                out.push_str(&"\n".repeat(blank));
                out.push_str(&" ".repeat(indent + 1));
            }
        }
        line_len += item.len();
        out.push_str(&item);
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scientific_uses_two_digit_exponents() {
        assert_eq!(
            format_float(1.234e-5, &FloatMode::Scientific, 4),
            "1.2340e-05"
        );
        assert_eq!(format_float(-3e12, &FloatMode::Scientific, 2), "-3.00e+12");
    }

    #[test]
    fn mode_is_shared_by_all_values() {
        assert!(matches!(float_mode(&[1.0, 2.0, -3.0]), FloatMode::Integral));
        assert!(matches!(float_mode(&[1.5, 2.0]), FloatMode::Fixed));
        assert!(matches!(float_mode(&[1e-6, 2.0]), FloatMode::Scientific));
        assert!(matches!(float_mode(&[f64::NAN, 2.0]), FloatMode::Integral));
    }

    #[test]
    fn summarized_dims_keep_the_edges() {
        assert_eq!(
            shown(10, true, 3),
            vec![Some(0), Some(1), Some(2), None, Some(7), Some(8), Some(9)]
        );
        assert_eq!(shown(5, true, 3).len(), 5);
    }
}

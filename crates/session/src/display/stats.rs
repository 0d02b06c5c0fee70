//! A tensor's statistics for its rich display: min, max, mean and standard deviation of the
//! finite values, the non-finite counts, and for `bool` the count of `true`.
//!
//! Everything is computed in f64 over every element (not only the shown ones), in two passes
//! (the mean, then the squared deviations from it) so the deviation does not lose digits to
//! cancellation. Integers are exact in f64 up to 2^53. The deviation is the population one
//! (numpy's default, `ddof=0`), so one element has a deviation of 0.

use neuronlab_core::tensor::{element_texts, strided, DType, Element};
use neuronlab_core::with_dtype;
use neuronlab_core::Tensor;

/// Min, max, mean and population standard deviation of a tensor's finite values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moments {
    /// The smallest finite value.
    pub min: f64,
    /// The largest finite value.
    pub max: f64,
    /// The mean of the finite values.
    pub mean: f64,
    /// Their population standard deviation (`ddof=0`).
    pub std: f64,
}

/// What a tensor's values amount to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorStats {
    /// The tensor's dtype.
    pub dtype: DType,
    /// Elements.
    pub numel: usize,
    /// The moments of the finite values; `None` when there are none.
    pub moments: Option<Moments>,
    /// NaN elements.
    pub nan: usize,
    /// `+inf` elements.
    pub pos_inf: usize,
    /// `-inf` elements.
    pub neg_inf: usize,
    /// Elements that are not zero (for `bool`, the `true` ones).
    pub nonzero: usize,
}

impl TensorStats {
    /// The statistics of every element of `t`.
    pub fn of(t: &Tensor) -> TensorStats {
        let mut stats = TensorStats {
            dtype: t.dtype(),
            numel: t.numel(),
            moments: None,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
            nonzero: 0,
        };
        let (mut finite, mut sum) = (0usize, 0.0f64);
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        each_value(t, |v| {
            stats.nonzero += usize::from(v != 0.0);
            if v.is_nan() {
                stats.nan += 1;
            } else if v == f64::INFINITY {
                stats.pos_inf += 1;
            } else if v == f64::NEG_INFINITY {
                stats.neg_inf += 1;
            } else {
                finite += 1;
                sum += v;
                min = min.min(v);
                max = max.max(v);
            }
        });
        if finite > 0 {
            let mean = sum / finite as f64;
            let mut squares = 0.0f64;
            each_value(t, |v| {
                if v.is_finite() {
                    squares += (v - mean) * (v - mean);
                }
            });
            stats.moments = Some(Moments {
                min,
                max,
                mean,
                std: (squares / finite as f64).sqrt(),
            });
        }
        stats
    }

    /// One line: `min 1.0000 · max 6.0000 · mean 3.5000 · std 1.7078`, then `nan N`,
    /// `+inf N`, `-inf N` when not zero; for `bool`, `true 4 of 6`. Numbers are written as the
    /// tensor's text writes them: a float mode shared by the four values, integers as
    /// integers. `None` for an empty tensor.
    pub fn line(&self) -> Option<String> {
        if self.numel == 0 {
            return None;
        }
        if self.dtype == DType::Bool {
            return Some(format!("true {} of {}", self.nonzero, self.numel));
        }
        let mut items = Vec::new();
        match self.moments {
            Some(m) => {
                let precision = neuronlab_core::tensor::FormatOptions::default().precision;
                let mut texts: Vec<String> = if self.dtype.is_float() {
                    let values = [m.min, m.max, m.mean, m.std];
                    element_texts(DType::F64, &values, &[0; 4], precision)
                } else {
                    let ends = [m.min, m.max];
                    let mut texts = element_texts(self.dtype, &ends, &ends.map(|v| v as i64), 0);
                    texts.extend(element_texts(
                        DType::F64,
                        &[m.mean, m.std],
                        &[0; 2],
                        precision,
                    ));
                    texts
                };
                texts.resize(4, String::new());
                let [min, max, mean, std] = [&texts[0], &texts[1], &texts[2], &texts[3]];
                items.push(format!("min {min} · max {max} · mean {mean} · std {std}"));
            }
            None => items.push("no finite values".to_string()),
        }
        let counts = [
            ("nan", self.nan),
            ("+inf", self.pos_inf),
            ("-inf", self.neg_inf),
        ];
        for (label, n) in counts.into_iter().filter(|(_, n)| *n > 0) {
            items.push(format!("{label} {n}"));
        }
        Some(items.join(" · "))
    }
}

/// Calls `f` with every element of `t` as f64, in row-major order.
fn each_value(t: &Tensor, mut f: impl FnMut(f64)) {
    let layout = t.layout();
    with_dtype!(t.dtype(), S => {
        let data = t.data::<S>();
        strided::for_each(&layout.shape, [&layout.strides], [layout.offset], |[o]| {
            f(data[o].to_f64())
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::display::tests::runtime;
    use neuronlab_core::tensor::Buffer;

    #[test]
    fn moments_match_a_direct_computation() {
        let rt = runtime();
        let values: Vec<f32> = (0..37)
            .map(|i| ((i * 7919) % 101) as f32 * 0.37 - 11.0)
            .collect();
        let t = rt.tensor(Buffer::F32(values.clone()), &[37]).unwrap();
        let m = TensorStats::of(&t).moments.unwrap();
        let xs: Vec<f64> = values.iter().map(|&v| v as f64).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert_eq!(m.min, xs.iter().copied().fold(f64::INFINITY, f64::min));
        assert_eq!(m.max, xs.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        assert!((m.mean - mean).abs() < 1e-12, "{} {mean}", m.mean);
        assert!(
            (m.std - var.sqrt()).abs() < 1e-12,
            "{} {}",
            m.std,
            var.sqrt()
        );
    }

    #[test]
    fn views_are_read_through_their_strides() {
        let rt = runtime();
        let t = rt
            .tensor(Buffer::I32(vec![1, 2, 3, 4, 5, 6]), &[2, 3])
            .unwrap();
        let column = rt
            .call1("transpose", &[&t], &neuronlab_core::ops::Attrs::new())
            .unwrap();
        let s = TensorStats::of(&column);
        assert_eq!(
            s.line().unwrap(),
            "min 1 · max 6 · mean 3.5000 · std 1.7078"
        );
    }

    #[test]
    fn non_finite_values_are_counted_apart() {
        let rt = runtime();
        let values = vec![
            1.0,
            f32::NAN,
            f32::INFINITY,
            3.0,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let t = rt.tensor(Buffer::F32(values), &[6]).unwrap();
        let s = TensorStats::of(&t);
        assert_eq!((s.nan, s.pos_inf, s.neg_inf), (2, 1, 1));
        assert_eq!(
            s.line().unwrap(),
            "min 1. · max 3. · mean 2. · std 1. · nan 2 · +inf 1 · -inf 1"
        );
        let t = rt.tensor(Buffer::F32(vec![f32::NAN]), &[1]).unwrap();
        assert_eq!(
            TensorStats::of(&t).line().unwrap(),
            "no finite values · nan 1"
        );
    }

    #[test]
    fn bools_count_their_trues() {
        let rt = runtime();
        let t = rt
            .tensor(Buffer::Bool(vec![true, false, true, true]), &[4])
            .unwrap();
        assert_eq!(TensorStats::of(&t).line().unwrap(), "true 3 of 4");
        let empty = rt.tensor(Buffer::F32(vec![]), &[0, 3]).unwrap();
        assert_eq!(TensorStats::of(&empty).line(), None);
    }
}

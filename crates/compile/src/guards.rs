//! Signatures, guards and recompile reasons a person can read.
//!
//! A compiled function's cache is keyed by its call signature: per input, dtype and shape
//! (`requires_grad` joins when gradients land), plus the options. A miss is explained against
//! the closest cached signature, listing every difference in the compact "expected / got"
//! style of Dynamo's guard failures and JAX's `explain_cache_misses`.

use std::fmt;

use neuronlab_core::tensor::TensorMeta;

/// What a call looks like to the cache: the inputs' dtypes and shapes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// One entry per input, in order.
    pub inputs: Vec<TensorMeta>,
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.inputs.iter().map(|m| m.to_string()).collect();
        write!(f, "({})", parts.join(", "))
    }
}

impl Signature {
    /// The guards that hold for this signature, one line per input.
    pub fn guards(&self, names: &[String]) -> Vec<String> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, m)| {
                format!(
                    "{}: dtype == {} and shape == {:?}",
                    input_label(i, names),
                    m.dtype,
                    m.shape
                )
            })
            .collect()
    }
}

/// `input 0 'x'` when the input has a name, else `input 0`.
pub fn input_label(i: usize, names: &[String]) -> String {
    match names.get(i).filter(|n| !n.is_empty()) {
        Some(name) => format!("input {i} '{name}'"),
        None => format!("input {i}"),
    }
}

/// Every guard of `cached` that `got` fails, as readable lines.
pub fn failures(cached: &Signature, got: &Signature, names: &[String]) -> Vec<String> {
    if cached.inputs.len() != got.inputs.len() {
        return vec![format!(
            "number of inputs changed: expected {}, got {}",
            cached.inputs.len(),
            got.inputs.len()
        )];
    }
    let mut out = Vec::new();
    for (i, (e, g)) in cached.inputs.iter().zip(&got.inputs).enumerate() {
        let label = input_label(i, names);
        if e.dtype != g.dtype {
            out.push(format!(
                "{label} dtype changed: expected {}, got {}",
                e.dtype, g.dtype
            ));
        }
        if e.shape.len() != g.shape.len() {
            out.push(format!(
                "{label} rank changed: expected {} ({:?}), got {} ({:?})",
                e.shape.len(),
                e.shape,
                g.shape.len(),
                g.shape
            ));
        } else if e.shape != g.shape {
            out.push(format!(
                "{label} shape changed: expected {:?}, got {:?}",
                e.shape, g.shape
            ));
        }
    }
    out
}

/// Why `got` missed a cache holding `cached`: `new function` when it is empty, else every
/// failed guard of the closest cached signature (the one with the fewest failures; the most
/// recent on a tie).
pub fn miss_reason<'a>(
    cached: impl IntoIterator<Item = &'a Signature>,
    got: &Signature,
    names: &[String],
) -> String {
    let best = cached
        .into_iter()
        .map(|s| failures(s, got, names))
        .enumerate()
        .min_by_key(|(i, f)| (f.len(), usize::MAX - i));
    match best {
        None => "new function".to_string(),
        Some((_, f)) if f.is_empty() => "the cached entry was dropped".to_string(),
        Some((_, f)) => f.join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuronlab_core::tensor::DType;

    fn sig(inputs: &[(&[usize], DType)]) -> Signature {
        Signature {
            inputs: inputs
                .iter()
                .map(|(s, d)| TensorMeta::new(s.to_vec(), *d))
                .collect(),
        }
    }

    #[test]
    fn reasons_list_every_difference_of_the_closest_signature() {
        let names = vec!["x".to_string(), "w".to_string()];
        let a = sig(&[(&[1, 17, 64], DType::F32), (&[64, 64], DType::F32)]);
        let b = sig(&[(&[1, 16, 64], DType::Bf16), (&[64, 64], DType::Bf16)]);
        let got = sig(&[(&[1, 18, 64], DType::F32), (&[64, 64], DType::F32)]);
        assert_eq!(miss_reason([], &got, &names), "new function");
        assert_eq!(
            miss_reason([&a, &b], &got, &names),
            "input 0 'x' shape changed: expected [1, 17, 64], got [1, 18, 64]"
        );
        let got = sig(&[(&[1, 18], DType::Bf16), (&[64, 64], DType::F32)]);
        assert_eq!(
            miss_reason([&a], &got, &[]),
            "input 0 dtype changed: expected f32, got bf16; input 0 rank changed: expected 3 ([1, 17, 64]), got 2 ([1, 18])"
        );
        assert!(miss_reason([&a], &sig(&[]), &[]).contains("number of inputs changed"));
    }

    #[test]
    fn guards_read_as_conditions() {
        let g = sig(&[(&[8, 128], DType::F32)]).guards(&["x".into()]);
        assert_eq!(g, vec!["input 0 'x': dtype == f32 and shape == [8, 128]"]);
    }
}

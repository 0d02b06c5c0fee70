//! Signatures, guards and recompile reasons a person can read.
//!
//! A compiled function's cache is keyed by its call signature: per input, dtype, shape and
//! whether it requires a gradient. A miss is explained against
//! the closest cached signature, listing every difference in the compact "expected / got"
//! style of Dynamo's guard failures and JAX's `explain_cache_misses`.

use std::fmt;

use neuronlab_core::tensor::{Tensor, TensorMeta};

/// What a call looks like to the cache: the inputs' dtypes, shapes and `requires_grad`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// One entry per input, in order.
    pub inputs: Vec<TensorMeta>,
    /// Per input: whether it requires a gradient.
    pub requires_grad: Vec<bool>,
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .inputs
            .iter()
            .zip(&self.requires_grad)
            .map(|(m, &r)| {
                if r {
                    format!("{m} requires_grad")
                } else {
                    m.to_string()
                }
            })
            .collect();
        write!(f, "({})", parts.join(", "))
    }
}

impl Signature {
    /// The signature of a call with `inputs`.
    pub fn of(inputs: &[Tensor]) -> Signature {
        Signature {
            inputs: inputs.iter().map(Tensor::meta).collect(),
            requires_grad: inputs.iter().map(Tensor::requires_grad).collect(),
        }
    }

    /// The guards that hold for this signature, one line per input.
    pub fn guards(&self, names: &[String]) -> Vec<String> {
        self.inputs
            .iter()
            .zip(&self.requires_grad)
            .enumerate()
            .map(|(i, (m, r))| {
                format!(
                    "{}: dtype == {} and shape == {:?} and requires_grad == {r}",
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
    for (i, (e, g)) in cached
        .requires_grad
        .iter()
        .zip(&got.requires_grad)
        .enumerate()
    {
        if e != g {
            out.push(format!(
                "{} requires_grad changed: expected {e}, got {g}",
                input_label(i, names)
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
    closest(cached.into_iter().map(|s| failures(s, got, names)))
}

/// The miss reason from each cached version's failed guards: `new function` when there are
/// no versions, else those of the version with the fewest failures (the most recent on a
/// tie).
pub fn closest(failures: impl IntoIterator<Item = Vec<String>>) -> String {
    let best = failures
        .into_iter()
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
            requires_grad: vec![false; inputs.len()],
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
        assert_eq!(
            g,
            vec!["input 0 'x': dtype == f32 and shape == [8, 128] and requires_grad == false"]
        );
    }

    #[test]
    fn requires_grad_is_part_of_the_signature() {
        let names = vec!["x".to_string(), "w".to_string()];
        let cached = sig(&[(&[4, 8], DType::F32), (&[8, 8], DType::F32)]);
        let mut got = cached.clone();
        let mut with_grad = cached.clone();
        with_grad.requires_grad[1] = true;
        got.requires_grad[1] = false;
        assert_eq!(
            miss_reason([&with_grad], &got, &names),
            "input 1 'w' requires_grad changed: expected true, got false"
        );
        assert_eq!(
            with_grad.to_string(),
            "(f32[4, 8], f32[8, 8] requires_grad)"
        );
    }
}

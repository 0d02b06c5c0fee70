//! The errors of backward, worded once for the eager engine and a traced backward alike.

use crate::error::Error;
use crate::tensor::TensorMeta;

/// `backward` or `grad` called with no tensors.
pub fn no_roots() -> Error {
    Error::Autograd("backward needs at least one tensor".into())
}

/// A gradient list whose length does not match the tensors'.
pub fn root_count(roots: usize, grads: usize) -> Error {
    Error::Autograd(format!(
        "{roots} tensors but {grads} gradients: give one gradient (or none) per tensor"
    ))
}

/// Root `i` does not require a gradient.
pub fn root_not_required(i: usize, meta: &TensorMeta) -> Error {
    Error::Autograd(format!(
        "tensor {i} ({meta}) does not require a gradient: nothing it was computed from was \
         marked with requires_grad, or it was computed under no_grad"
    ))
}

/// A given gradient whose shape is not its root's.
pub fn seed_shape(grad: &TensorMeta, root: &TensorMeta) -> Error {
    Error::Autograd(format!(
        "the gradient {grad} does not match the shape of its tensor {root}"
    ))
}

/// A root of more than one element without a gradient.
pub fn seed_needed(root: &TensorMeta) -> Error {
    Error::Autograd(format!(
        "backward of {root} needs a gradient of that shape: only a one-element tensor's \
         gradient is implicitly 1 (reduce it to a scalar loss, e.g. with sum or mean, or pass \
         the gradient)"
    ))
}

/// A second backward through op `op`, whose saved tensors the first freed.
pub fn freed(op: &str) -> Error {
    Error::Autograd(format!(
        "backward through {op} a second time: the first backward freed the tensors it saved; \
         pass retain_graph=true to the first backward to run backward through the graph again"
    ))
}

/// An op without a row in the table of backward formulas.
pub fn no_formula(op: &str) -> Error {
    Error::Autograd(format!(
        "{op} has no derivative in the table of backward formulas; run it under no_grad or on \
         detached inputs"
    ))
}

/// `grad` with respect to input `i`, which does not require a gradient.
pub fn input_not_required(i: usize, meta: &TensorMeta) -> Error {
    Error::Autograd(format!(
        "input {i} ({meta}) does not require a gradient, so none can be taken with respect to \
         it; mark it with requires_grad before computing the outputs"
    ))
}

/// `grad` with respect to input `i`, which the outputs do not depend on.
pub fn input_unused(i: usize, meta: &TensorMeta) -> Error {
    Error::Autograd(format!(
        "input {i} ({meta}) was not used to compute the outputs, so it has no gradient"
    ))
}

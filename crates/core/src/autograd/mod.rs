//! Reverse-mode autograd on the host, as torch's.
//!
//! - Recording ([`record`]): an op run through `Runtime::call_on` (the registry's entry to
//!   the one dispatch path) on a tensor that requires a gradient records a [`Node`]: the op's
//!   derivative, its attributes, and what that derivative saved of the inputs and outputs.
//!   Its float outputs then require a gradient too and point at the node.
//! - The table of backward formulas ([`derivatives`]): one row per registry op, either a VJP
//!   written as registry ops (so backward runs through the same kernels, costs and events, and
//!   can be traced) or explicitly not differentiable.
//! - Recorded functions ([`function`]): nodes whose backward the caller writes, for work that
//!   is not a registry op (collectives, recorded by the sandbox).
//! - The engine ([`engine`]): `backward` and the functional `grad` walk the recorded nodes in
//!   reverse creation order, reduce broadcast gradients back to each input's shape, accumulate
//!   leaves' `.grad`, and free saved tensors unless asked to retain the graph.
//!
//! - Rematerialized saves ([`rematerialize`]): a saved tensor whose storage carries a recipe
//!   is kept as the recipe and made again when backward reaches its node (FSDP's reshard
//!   after forward).
//!
//! Grad mode is per thread, as torch's: [`no_grad`] turns recording off around a closure.
//! Ops that backward runs are tagged [`Phase::Backward`](crate::events::Phase) in their events.
//!
//! [`Node`]: crate::tensor::grad::Node

pub mod derivatives;
pub mod engine;
pub mod errors;
pub mod function;
mod record;
pub mod rematerialize;

use std::cell::Cell;
use std::sync::Arc;

pub use engine::{backward, grad};
pub use function::{record_function, BackwardFn};
pub(crate) use record::record;

use crate::device::role::Role;
use crate::error::{Error, Result};
use crate::events::Phase;
use crate::runtime::Runtime;
use crate::tensor::grad::{GradEdge, Leaf};
use crate::tensor::Tensor;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static IN_BACKWARD: Cell<bool> = const { Cell::new(false) };
}

/// True when ops on tensors that require a gradient are recorded (the default; see
/// [`no_grad`]).
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Turns recording on or off for this thread and returns what it was.
pub fn set_grad_enabled(enabled: bool) -> bool {
    GRAD_ENABLED.with(|g| g.replace(enabled))
}

/// Runs `f` with recording off, as `torch.no_grad()`, and restores the mode after.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            set_grad_enabled(self.0);
        }
    }
    let _restore = Restore(set_grad_enabled(false));
    f()
}

/// True while this thread runs a backward pass.
pub fn in_backward() -> bool {
    IN_BACKWARD.with(Cell::get)
}

/// Runs `f` as backward: recording off, and its ops tagged as backward.
fn as_backward<R>(f: impl FnOnce() -> R) -> R {
    in_phase(Phase::Backward, f)
}

/// Runs `f` with recording off and its ops' events tagged `phase`: how a compiled program
/// runs the kernels of a traced backward (and everything else it runs, untaped).
pub fn in_phase<R>(phase: Phase, f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_BACKWARD.with(|b| b.set(self.0));
        }
    }
    let backward = phase == Phase::Backward;
    let _restore = Restore(IN_BACKWARD.with(|b| b.replace(backward)));
    no_grad(f)
}

/// `t` marked as a leaf that requires a gradient (torch's `requires_grad_()`): a new leaf
/// for a tensor outside the graph, `t` itself when it already is a leaf.
///
/// Only float tensors can require gradients, and an op's output cannot be made a leaf
/// (detach it first), as in torch.
pub fn requires_grad(rt: &Runtime, t: &Tensor) -> Result<Tensor> {
    if !t.dtype().is_float() {
        return Err(Error::Autograd(format!(
            "only float tensors can require gradients, not {}; cast it to a float dtype first",
            t.meta()
        )));
    }
    match t.grad_edge() {
        Some(GradEdge::Leaf(_)) => Ok(t.clone()),
        Some(GradEdge::Node { node, .. }) => Err(Error::Autograd(format!(
            "this tensor is the output of {} in the graph, not a leaf; \
             call detach() first to make a new leaf of its data",
            node.name
        ))),
        None => {
            let leaf = Leaf::new(rt.autograd_bytes(t.device())?);
            t.set_memory_role(Role::Parameter);
            Ok(t.detach()
                .with_grad_edge(Some(GradEdge::Leaf(Arc::new(leaf)))))
        }
    }
}

/// Replaces the gradient of leaf `t` (`None` clears it); the gradient must match the leaf's
/// shape, dtype and core.
pub fn set_grad(t: &Tensor, grad: Option<Tensor>) -> Result<()> {
    let Some(leaf) = t.leaf() else {
        return Err(Error::Autograd(format!(
            "only a leaf holds a gradient, and this {} is not one (mark it with requires_grad)",
            t.meta()
        )));
    };
    if let Some(g) = &grad {
        if g.meta() != t.meta() || g.device() != t.device() {
            return Err(Error::Autograd(format!(
                "a gradient must match its leaf: {} on {} for a leaf {} on {}",
                g.meta(),
                g.device(),
                t.meta(),
                t.device()
            )));
        }
    }
    leaf.set_grad(grad.map(|g| g.detach()));
    Ok(())
}

/// `param`'s leaf with its data replaced by `data` (an optimizer's in-place update): the
/// gradient and identity stay, the version counts one more. Shape, dtype and core must not
/// change.
pub fn replace_data(param: &Tensor, data: &Tensor) -> Result<Tensor> {
    if param.meta() != data.meta() || param.device() != data.device() {
        return Err(Error::Autograd(format!(
            "an in-place update must keep the tensor's shape, dtype and core: \
             {} on {} cannot become {} on {}",
            param.meta(),
            param.device(),
            data.meta(),
            data.device()
        )));
    }
    if let Some(GradEdge::Node { node, .. }) = param.grad_edge() {
        return Err(Error::Autograd(format!(
            "this tensor is the output of {} in the graph; only leaves and tensors outside \
             the graph can be updated in place",
            node.name
        )));
    }
    if let Some(leaf) = param.leaf() {
        leaf.bump_version();
    }
    // The role belongs to the variable: a parameter's or a moment's new data is still one.
    match (param.memory_role(), param.leaf()) {
        (Role::Other, Some(_)) => data.set_memory_role(Role::Parameter),
        (Role::Other, None) => {}
        (role, _) => data.set_memory_role(role),
    }
    Ok(data.detach().with_grad_edge(param.grad_edge().cloned()))
}

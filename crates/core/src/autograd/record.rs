//! Recording one op's node: what `Runtime::call_on` does after dispatch when an input
//! requires a gradient.

use std::sync::Arc;

use super::derivatives::{self, Derivative, OpBackward};
use super::is_grad_enabled;
use super::rematerialize::{Packed, Slot};
use crate::device::role::Role;
use crate::error::Result;
use crate::ops::attrs::ResolvedAttrs;
use crate::ops::registry::OpDef;
use crate::runtime::Runtime;
use crate::tensor::grad::{GradEdge, Node, SavedStorage};
use crate::tensor::Tensor;

/// Records `def` run on `inputs` into the graph, when grad mode is on and an input requires a
/// gradient, and returns `outputs` pointing at the new node (float outputs only: integer and
/// bool results never require gradients). Otherwise returns `outputs` as they are.
pub(crate) fn record(
    rt: &Runtime,
    def: &OpDef,
    attrs: &ResolvedAttrs,
    inputs: &[&Tensor],
    outputs: Vec<Tensor>,
) -> Result<Vec<Tensor>> {
    if !inputs.iter().any(|t| t.requires_grad()) || !is_grad_enabled() {
        return Ok(outputs);
    }
    let (saves, vjp) = match derivatives::of(def.name) {
        Some(Derivative::Vjp { saves, vjp }) => (*saves, *vjp),
        Some(Derivative::NotDifferentiable) => return Ok(outputs),
        None => return Err(super::errors::no_formula(def.name)),
    };
    if !outputs.iter().any(|o| o.dtype().is_float()) {
        return Ok(outputs);
    }
    let mut packed = Vec::new();
    let mut save = |slot: Slot, t: &Tensor| match Packed::of(slot, t) {
        Some(p) => {
            packed.push(p);
            None
        }
        None => Some(t.detach()),
    };
    let saved_inputs: Vec<Option<Tensor>> = (inputs.iter().enumerate())
        .map(|(i, t)| saves.inputs.then(|| save(Slot::Input(i), t)).flatten())
        .collect();
    let saved_outputs: Vec<Option<Tensor>> = (outputs.iter().enumerate())
        .map(|(i, t)| saves.outputs.then(|| save(Slot::Output(i), t)).flatten())
        .collect();
    let mut saved: Vec<SavedStorage> = saved_inputs
        .iter()
        .chain(&saved_outputs)
        .flatten()
        .inspect(|t| t.claim_memory_role(Role::Activation))
        .map(SavedStorage::of)
        .collect();
    saved.sort_by_key(|s| s.id);
    saved.dedup_by_key(|s| s.id);
    let core = outputs.first().map_or(rt.default_device(), |t| t.device());
    let state = OpBackward {
        vjp,
        attrs: attrs.clone(),
        input_metas: inputs.iter().map(|t| t.meta()).collect(),
        output_metas: outputs.iter().map(|t| t.meta()).collect(),
        inputs: saved_inputs,
        outputs: saved_outputs,
        packed,
        core,
    };
    let next = inputs.iter().map(|t| t.grad_edge().cloned()).collect();
    let node = Arc::new(Node::new(
        def.name,
        next,
        Box::new(state),
        saved,
        rt.autograd_bytes(core)?,
    ));
    Ok(point_at(&node, outputs))
}

/// `outputs` pointing at `node`, the one that produced them: float outputs only, as integer
/// and bool results never require gradients.
pub(super) fn point_at(node: &Arc<Node>, outputs: Vec<Tensor>) -> Vec<Tensor> {
    outputs
        .into_iter()
        .enumerate()
        .map(|(output, t)| {
            let edge = t.dtype().is_float().then(|| GradEdge::Node {
                node: node.clone(),
                output,
            });
            t.with_grad_edge(edge)
        })
        .collect()
}

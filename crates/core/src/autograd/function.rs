//! Nodes whose backward the recorder's caller writes (torch's `autograd.Function`): what the
//! layers above core record for work that is not a registry op, such as a collective, whose
//! backward is another collective.

use std::sync::Arc;

use super::derivatives::OpCalls;
use super::is_grad_enabled;
use crate::device::topology::CoreId;
use crate::error::{Error, Result};
use crate::ops::attrs::Attrs;
use crate::runtime::Runtime;
use crate::tensor::grad::Node;
use crate::tensor::{Tensor, TensorMeta};

/// A backward: the gradients of a node's inputs (`None` where `needs` wants none) from its
/// outputs' gradients.
pub type BackwardFn =
    Box<dyn Fn(&Runtime, &[Tensor], &[bool]) -> Result<Vec<Option<Tensor>>> + Send>;

/// A recorded function's state: its backward and the shapes its gradients must have.
pub struct FunctionBackward {
    pub(crate) backward: BackwardFn,
    pub(crate) input_metas: Vec<TensorMeta>,
    pub(crate) output_metas: Vec<TensorMeta>,
    pub(crate) core: CoreId,
}

impl FunctionBackward {
    /// The inputs' gradients, each checked against its input's shape and cast to its dtype.
    pub(crate) fn input_grads(
        &self,
        rt: &Runtime,
        name: &str,
        out_grads: &[Tensor],
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let grads = (self.backward)(rt, out_grads, needs)?;
        if grads.len() != self.input_metas.len() {
            return Err(Error::Invalid(format!(
                "internal error: the backward of {name} gave {} gradients for {} inputs",
                grads.len(),
                self.input_metas.len()
            )));
        }
        grads
            .into_iter()
            .zip(&self.input_metas)
            .zip(needs)
            .map(|((g, meta), &need)| match g {
                Some(g) if need => {
                    if g.shape() != meta.shape.as_slice() {
                        return Err(Error::Autograd(format!(
                            "the backward of {name} gave a gradient {} for an input {meta}",
                            g.meta()
                        )));
                    }
                    if g.dtype() == meta.dtype {
                        Ok(Some(g))
                    } else {
                        let attrs = Attrs::new().with("dtype", meta.dtype);
                        rt.call_op("cast", &[&g], attrs, self.core).map(Some)
                    }
                }
                _ => Ok(None),
            })
            .collect()
    }
}

/// Records a node named `name` that produced `outputs` from `inputs`, whose backward is
/// `backward`, when grad mode is on and an input requires a gradient; its float outputs then
/// require a gradient and point at it. Otherwise returns `outputs` as they are. The node
/// saves nothing the autograd memory accounting sees: what `backward` captures is its own.
pub fn record_function(
    rt: &Runtime,
    name: &'static str,
    inputs: &[&Tensor],
    outputs: Vec<Tensor>,
    backward: BackwardFn,
) -> Result<Vec<Tensor>> {
    if !inputs.iter().any(|t| t.requires_grad()) || !is_grad_enabled() {
        return Ok(outputs);
    }
    let Some(first) = outputs.first() else {
        return Ok(outputs);
    };
    let core = first.device();
    let bytes = rt.autograd_bytes(core)?;
    let state = FunctionBackward {
        backward,
        input_metas: inputs.iter().map(|t| t.meta()).collect(),
        output_metas: outputs.iter().map(|t| t.meta()).collect(),
        core,
    };
    let next = inputs.iter().map(|t| t.grad_edge().cloned()).collect();
    let node = Arc::new(Node::new(name, next, Box::new(state), Vec::new(), bytes));
    Ok(super::record::point_at(&node, outputs))
}

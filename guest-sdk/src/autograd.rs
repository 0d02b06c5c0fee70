//! Autograd, spelled as torch's: mark leaves with [`Tensor::requires_grad`], call
//! [`Tensor::backward`] on a scalar loss, read [`Tensor::grad`]; [`no_grad`] and
//! [`Tensor::detach`] keep computations out of the graph, and [`grad`] is the functional
//! form (`torch.autograd.grad`). The host records and runs backward (ABI.md "grad").
//!
//! # Example
//!
//! ```ignore
//! let w = randn(&[3])?.requires_grad()?;
//! let loss = w.square()?.sum()?;
//! loss.backward()?;
//! let g = w.grad()?.expect("backward reached w"); // 2 * w
//! ```

use crate::error::Result;
use crate::sys;
use crate::tensor::Tensor;

impl Tensor {
    /// This tensor marked as a leaf that requires a gradient (torch's `requires_grad_()`):
    /// ops on it record for backward, and [`backward`](Tensor::backward) fills its
    /// [`grad`](Tensor::grad). `ERR_GRAD` for a non-float tensor, or one computed from a leaf
    /// (call [`detach`](Tensor::detach) first).
    #[track_caller]
    pub fn requires_grad(self) -> Result<Tensor> {
        sys::grad_requires(self.handle())?;
        Ok(self)
    }

    /// True when gradients flow through this tensor: a leaf marked with
    /// [`requires_grad`](Tensor::requires_grad), or a result computed from one.
    pub fn is_grad_required(&self) -> bool {
        sys::grad_is_required(self.handle()).unwrap_or(false)
    }

    /// Computes the gradient of this one-element tensor (a loss) with respect to every leaf
    /// it depends on, and adds it into their [`grad`](Tensor::grad). Frees the graph's saved
    /// tensors: a second backward through it is an error (see
    /// [`backward_with`](Tensor::backward_with)).
    #[track_caller]
    pub fn backward(&self) -> Result<()> {
        self.backward_with(None, false)
    }

    /// [`backward`](Tensor::backward) with this tensor's gradient (needed when it has more
    /// than one element) and `retain_graph`, which keeps the graph for another backward.
    #[track_caller]
    pub fn backward_with(&self, gradient: Option<&Tensor>, retain_graph: bool) -> Result<()> {
        let g = gradient.map_or(0, Tensor::handle);
        sys::grad_backward(self.handle(), g, retain_graph)
    }

    /// The gradient accumulated in this leaf, `None` when no backward has reached it since
    /// it was last cleared (or when it is not a leaf).
    #[track_caller]
    pub fn grad(&self) -> Result<Option<Tensor>> {
        Ok(sys::grad_get(self.handle())?.map(Tensor::from_handle))
    }

    /// Clears this leaf's gradient (torch's `zero_grad`, which sets it to `None`).
    #[track_caller]
    pub fn zero_grad(&self) -> Result<()> {
        self.set_grad(None)
    }

    /// Replaces this leaf's gradient (`None` clears it), as assigning torch's `.grad`; the
    /// gradient must have the leaf's shape and dtype.
    #[track_caller]
    pub fn set_grad(&self, grad: Option<&Tensor>) -> Result<()> {
        sys::grad_set(self.handle(), grad.map_or(0, Tensor::handle))
    }

    /// The same data outside the graph: no gradient flows through the result.
    #[track_caller]
    pub fn detach(&self) -> Result<Tensor> {
        sys::grad_detach(self.handle()).map(Tensor::from_handle)
    }

    /// Replaces this tensor's data with `data`'s in place, keeping it the same leaf (its
    /// gradient and identity): how optimizers update parameters. The shape, dtype and core
    /// must stay the same.
    #[track_caller]
    pub fn set_data(&self, data: &Tensor) -> Result<()> {
        sys::grad_assign(self.handle(), data.handle())
    }
}

/// Runs `f` with grad mode off, as `torch.no_grad()`: its ops record nothing. The mode is
/// restored after, also when `f` returns an error.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            sys::grad_set_enabled(self.0);
        }
    }
    let _restore = Restore(sys::grad_set_enabled(false));
    f()
}

/// True when grad mode is on (the default; see [`no_grad`]).
pub fn is_grad_enabled() -> bool {
    let previous = sys::grad_set_enabled(true);
    sys::grad_set_enabled(previous);
    previous
}

/// The gradients of the one-element `outputs` with respect to each of `inputs`, as
/// `torch.autograd.grad`: the inputs may be any tensors that require a gradient, and no
/// leaf's [`grad`](Tensor::grad) changes. Frees the graph.
#[track_caller]
pub fn grad(outputs: &[&Tensor], inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let outs: Vec<u32> = outputs.iter().map(|t| t.handle()).collect();
    let grads = vec![0u32; outs.len()];
    let ins: Vec<u32> = inputs.iter().map(|t| t.handle()).collect();
    let results = sys::grad_compute(&outs, &grads, &ins, false)?;
    Ok(results.into_iter().map(Tensor::from_handle).collect())
}

//! Saved tensors made again for backward instead of kept: what FSDP's
//! `reshard_after_forward` needs. An all-gathered parameter is saved by every op that reads
//! it (a matmul keeps its weight for the input's gradient), so keeping the saved tensor would
//! keep the whole parameter alive from forward to backward on every rank, which is what
//! sharding was meant to avoid. A storage that can be made again carries a [`Rematerialize`]
//! recipe; a node that saves a view of it keeps the recipe and the view's layout
//! ([`Packed`]), and backward runs the recipe (the all-gather again) just before the node's
//! formula reads it, then drops the result when the formula is done.

use std::sync::Arc;

use crate::device::topology::CoreId;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::tensor::{DType, Layout, Tensor};

/// How to make a storage's elements again.
pub trait Rematerialize: Send + Sync {
    /// A tensor over a new storage with the same elements (the same buffer length) as the one
    /// the recipe was attached to. Runs during backward, with recording off.
    fn rematerialize(&self, rt: &Runtime) -> Result<Tensor>;
}

/// Which of an op's saved tensors a [`Packed`] stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Input `i`.
    Input(usize),
    /// Output `i`.
    Output(usize),
}

/// A saved tensor kept as its storage's recipe and its own layout over that storage.
pub struct Packed {
    slot: Slot,
    layout: Layout,
    dtype: DType,
    device: CoreId,
    recipe: Arc<dyn Rematerialize>,
}

impl Packed {
    /// `t` packed, when its storage carries a recipe.
    pub(crate) fn of(slot: Slot, t: &Tensor) -> Option<Packed> {
        t.rematerializer().map(|recipe| Packed {
            slot,
            layout: t.layout().clone(),
            dtype: t.dtype(),
            device: t.device(),
            recipe,
        })
    }

    /// Which saved tensor this is.
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// The saved tensor again: the recipe's storage seen through the saved layout.
    pub fn unpack(&self, rt: &Runtime) -> Result<Tensor> {
        let whole = self.recipe.rematerialize(rt)?;
        if whole.device() != self.device
            || whole.dtype() != self.dtype
            || self.layout.storage_extent() > whole.storage_buffer().len()
        {
            return Err(Error::Autograd(format!(
                "a saved tensor made again for backward does not match the one forward saved: \
                 {} of at least {} elements on {} expected, {} of {} on {} made",
                self.dtype,
                self.layout.storage_extent(),
                self.device,
                whole.dtype(),
                whole.storage_buffer().len(),
                whole.device()
            )));
        }
        Ok(whole.view(self.layout.clone()))
    }
}

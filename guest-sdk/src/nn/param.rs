//! [`Param`]: a module's parameter, whole or sharded. A module computes with
//! [`Param::value`]; an optimizer updates [`Param::tensor`], the leaf this rank holds.
//!
//! Sharding is FSDP2's: the leaf is this rank's `torch.chunk` chunk of dim 0 over the
//! data-parallel group, padded to the largest chunk so every rank's shard has one shape.
//! `value` all-gathers the shards and cuts the padding off; the all-gather's backward is a
//! reduce-scatter (averaged over the group: the mean of the ranks' losses), so the leaf's
//! gradient is this rank's shard of the whole gradient. With `reshard_after_forward` the
//! whole parameter is not kept for backward: backward all-gathers it again.

use std::cell::RefCell;
use std::rc::Rc;

use crate::dist::{self, Group};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::ops::{zeros_with, ZerosOptions};
use crate::tensor::Tensor;

/// A parameter: its leaf, and how it is split and sharded.
pub struct Param {
    tensor: Tensor,
    /// Tensor parallelism's cut: this rank holds one of equal slices along a dim.
    split: Option<Split>,
    shard: Option<Shard>,
    /// The whole parameter gathered ahead of its use ([`Param::prefetch`]), with the grad
    /// mode it was gathered in.
    prefetched: RefCell<Option<(Tensor, bool)>>,
}

/// A tensor-parallel slice: the group and the dim the whole is cut along.
struct Split {
    group: Rc<Group>,
    dim: usize,
}

/// An FSDP shard: the group, the whole parameter's dim 0, and the options its all-gather
/// and reduce-scatter follow.
struct Shard {
    group: Rc<Group>,
    rows: i64,
    options: FullyShardOptions,
}

/// How FSDP shards a parameter (torch: `fully_shard`'s keyword arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FullyShardOptions {
    /// The dtypes it is gathered and its gradient reduced in (torch: `mp_policy`).
    pub mp_policy: MixedPrecisionPolicy,
    /// Free the gathered parameter after forward and gather it again for backward (torch:
    /// `reshard_after_forward`, true by default): the ops that saved it for backward keep a
    /// recipe for the all-gather instead of the whole parameter, so between forward and
    /// backward each rank holds only its shard. False keeps it from forward to backward and
    /// saves the second all-gather.
    pub reshard_after_forward: bool,
}

impl Default for FullyShardOptions {
    fn default() -> FullyShardOptions {
        FullyShardOptions {
            mp_policy: MixedPrecisionPolicy::default(),
            reshard_after_forward: true,
        }
    }
}

/// FSDP2's `MixedPrecisionPolicy`: the dtype parameters are gathered and computed in, and
/// the dtype gradients are reduce-scattered in. `None` keeps the parameter's own dtype (and,
/// for `reduce_dtype`, the gradient's: `param_dtype`). The shard the optimizer steps keeps
/// the parameter's original dtype either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MixedPrecisionPolicy {
    /// The dtype of the unsharded parameter (torch: `param_dtype`).
    pub param_dtype: Option<DType>,
    /// The dtype of the gradient reduce-scatter (torch: `reduce_dtype`).
    pub reduce_dtype: Option<DType>,
}

impl Param {
    /// A whole parameter.
    pub fn new(tensor: Tensor) -> Param {
        Param {
            tensor,
            split: None,
            shard: None,
            prefetched: RefCell::new(None),
        }
    }

    /// The leaf this rank holds (a shard under FSDP): what optimizers update and
    /// checkpoints of this rank hold.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// The parameter to compute with: the leaf, or under FSDP the all-gathered whole (the
    /// prefetched one, if [`Param::prefetch`] gathered it in the same grad mode).
    #[track_caller]
    pub fn value(&self) -> Result<Tensor> {
        match self.prefetched.borrow_mut().take() {
            Some((whole, grad)) if grad == crate::autograd::is_grad_enabled() => Ok(whole),
            _ => self.gather(),
        }
    }

    /// Starts gathering a sharded parameter before its use, as FSDP2's forward prefetch: the
    /// all-gather is issued now and runs beside the compute issued until [`Param::value`]
    /// reads it. Nothing for an unsharded parameter or one already prefetched.
    #[track_caller]
    pub fn prefetch(&self) -> Result<()> {
        if self.shard.is_none() || self.prefetched.borrow().is_some() {
            return Ok(());
        }
        let whole = self.gather()?;
        *self.prefetched.borrow_mut() = Some((whole, crate::autograd::is_grad_enabled()));
        Ok(())
    }

    /// The leaf, or the all-gathered whole of a sharded parameter in the policy's dtypes.
    #[track_caller]
    fn gather(&self) -> Result<Tensor> {
        match &self.shard {
            None => self.tensor.try_clone(),
            Some(s) => {
                let p = s.options.mp_policy;
                let gathered = dist::region::unshard_as(
                    &self.tensor,
                    0,
                    &s.group,
                    p.param_dtype,
                    p.reduce_dtype,
                    s.options.reshard_after_forward,
                )?;
                gathered.narrow(0, 0, s.rows)
            }
        }
    }

    /// The parameter's shape on this rank before FSDP sharding: the whole parameter, or its
    /// tensor-parallel slice.
    pub fn shape(&self) -> Vec<i64> {
        let mut shape = self.tensor.shape();
        if let Some(s) = &self.shard {
            shape[0] = s.rows;
        }
        shape
    }

    /// The whole parameter's shape, across tensor-parallel slices too.
    pub fn full_shape(&self) -> Vec<i64> {
        let mut shape = self.shape();
        if let Some(s) = &self.split {
            shape[s.dim] *= s.group.size() as i64;
        }
        shape
    }

    /// The parameter's dtype.
    pub fn dtype(&self) -> crate::dtype::DType {
        self.tensor.dtype()
    }

    /// True when the parameter is sharded (FSDP).
    pub fn is_sharded(&self) -> bool {
        self.shard.is_some()
    }

    /// Another handle to the same parameter (the same leaf): how tied weights share one.
    #[track_caller]
    pub fn tie(&self) -> Result<Param> {
        Ok(Param {
            tensor: self.tensor.try_clone()?,
            split: self.split.as_ref().map(|s| Split {
                group: s.group.clone(),
                dim: s.dim,
            }),
            shard: self.shard.as_ref().map(|s| Shard {
                group: s.group.clone(),
                rows: s.rows,
                options: s.options,
            }),
            prefetched: RefCell::new(None),
        })
    }

    /// Keeps this rank's slice of `size` entries from `start` along `dim` as a new leaf that
    /// requires grad (tensor parallelism's cut over `group`), before any FSDP sharding.
    #[track_caller]
    pub(crate) fn split(
        &mut self,
        group: &Rc<Group>,
        dim: usize,
        start: i64,
        size: i64,
    ) -> Result<()> {
        if self.split.is_some() || self.shard.is_some() {
            return Err(Error::new(
                ErrorKind::Invalid,
                "tensor parallelism cuts whole parameters: parallelize before fully_shard, once",
            ));
        }
        let slice = crate::autograd::no_grad(|| {
            owned(&self.tensor.detach()?.narrow(dim as i64, start, size)?, 0)
        })?;
        self.tensor = slice.requires_grad()?;
        self.split = Some(Split {
            group: group.clone(),
            dim,
        });
        Ok(())
    }

    /// Shards the parameter on dim 0 over `group` (FSDP2's `fully_shard`): this rank keeps
    /// its chunk, padded to the largest chunk, as a new leaf that requires grad; `policy`
    /// sets the dtypes of its all-gather and gradient reduce-scatter.
    #[track_caller]
    pub(crate) fn shard(&mut self, group: &Rc<Group>, options: FullyShardOptions) -> Result<()> {
        if self.shard.is_some() {
            return Err(Error::new(
                ErrorKind::Invalid,
                "this parameter is sharded already",
            ));
        }
        let shape = self.tensor.shape();
        let rows = *shape.first().ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid,
                "FSDP shards dim 0, and a 0-d parameter has none",
            )
        })?;
        let n = group.size() as i64;
        let chunk = (rows + n - 1) / n;
        let position = group.rank()? as i64;
        let start = (position * chunk).min(rows);
        let length = chunk.min(rows - start);
        let mine = crate::autograd::no_grad(|| -> Result<Tensor> {
            if length == 0 {
                let mut empty = shape.clone();
                empty[0] = chunk;
                return zeros_with(&empty, ZerosOptions::new().dtype(self.tensor.dtype()));
            }
            owned(
                &self.tensor.detach()?.narrow(0, start, length)?,
                chunk - length,
            )
        })?;
        self.tensor = mine.requires_grad()?;
        self.shard = Some(Shard {
            group: group.clone(),
            rows,
            options,
        });
        Ok(())
    }

    /// The whole parameter, gathered from every rank's shard and slice (no gradient): what a
    /// consolidated checkpoint holds. Every rank of the groups must call it.
    #[track_caller]
    pub fn full(&self) -> Result<Tensor> {
        crate::autograd::no_grad(|| {
            let value = self.value()?;
            match &self.split {
                None => value.contiguous(),
                Some(s) => dist::all_gather(&value.contiguous()?, s.dim, &s.group),
            }
        })
    }
}

/// `part` in a storage of its own, with `pad_rows` zero rows after it on dim 0: a rank keeps
/// only its slice, as FSDP2 copies each shard into a buffer of its own. (`contiguous` would
/// return a narrow on dim 0 as a view, keeping the whole parameter's storage alive.)
#[track_caller]
fn owned(part: &Tensor, pad_rows: i64) -> Result<Tensor> {
    // pad lists the trailing dim first, before and after.
    let rank = part.shape().len();
    let mut widths = vec![0i64; 2 * rank];
    widths[2 * rank - 1] = pad_rows;
    part.pad(&widths)
}

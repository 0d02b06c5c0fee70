//! Gradients through collectives: a collective on a tensor that requires a gradient records
//! a node whose backward is another collective on the same group, issued by a clone of the
//! rank's communicator when backward reaches it. Every rank records and runs its nodes in
//! the same order, so the backward collectives meet as the forward ones did.
//!
//! The `backward` attribute picks the backward (ABI.md "dist"): `adjoint`, the default, is the
//! collective's mathematical adjoint, right when each rank's gradient is its own part of one
//! sum (data parallelism, FSDP). Tensor parallelism computes the loss once per rank on
//! replicated values instead, and needs Megatron-LM's conjugates: `identity` (the backward of
//! the all-reduce after a row-parallel layer), `all_reduce` (of the identity before a
//! column-parallel one), `split` and `all_gather`.

use neuronlab_core::autograd::derivatives::OpCalls;
use neuronlab_core::autograd::rematerialize::Rematerialize;
use neuronlab_core::autograd::{record_function, BackwardFn};
use neuronlab_core::ops::attrs::Attrs;
use neuronlab_core::runtime::Runtime;
use neuronlab_core::tensor::{DType, Tensor};
use neuronlab_core::{Error, Result};
use neuronlab_dist::{ProcessGroup, RankComm, ReduceOp};
use std::sync::{Arc, Mutex, PoisonError};

/// The backwards the `backward` attribute names, in ABI.md's order.
pub(crate) const BACKWARDS: &[&str] = &[
    "adjoint",
    "identity",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "split",
    "none",
];

/// One collective call, as backward needs it again.
pub(crate) struct Call<'a> {
    /// The forward collective's name.
    pub op: &'a str,
    /// Its reduce op (sum for those without one).
    pub reduce: ReduceOp,
    /// Its dim (`all_gather`, `reduce_scatter`, `split`).
    pub dim: usize,
    /// `all_to_all`'s dims.
    pub split_dim: usize,
    /// `all_to_all`'s concat dim.
    pub concat_dim: usize,
    /// `broadcast`'s source rank.
    pub src: u32,
    /// The `backward` attribute.
    pub backward: &'a str,
    /// The reduce op of a reducing backward (`backward_op`).
    pub backward_reduce: ReduceOp,
    /// The dtype the gradient is cast to before the backward's collective
    /// (`backward_dtype`); the result is then cast to the input's dtype.
    pub backward_dtype: Option<DType>,
}

/// What backward does with the output's gradient.
#[derive(Clone, Copy, Debug)]
enum Step {
    Identity,
    AllReduce(ReduceOp),
    AllGather(usize),
    ReduceScatter(ReduceOp, usize),
    Split(usize),
    AllToAll {
        split_dim: usize,
        concat_dim: usize,
    },
    /// The reduction of the gradients lands on `src`; the other ranks get zeros.
    ReduceTo(u32),
}

/// The backward step of `call`, `None` for `backward: none`.
fn step(call: &Call) -> Result<Option<Step>> {
    let (d, r) = (call.dim, call.backward_reduce);
    let step = match call.backward {
        "none" => return Ok(None),
        "identity" => Step::Identity,
        "all_reduce" => Step::AllReduce(r),
        "all_gather" => Step::AllGather(d),
        "reduce_scatter" => Step::ReduceScatter(r, d),
        "split" => Step::Split(d),
        _ => match call.op {
            "all_reduce" if matches!(call.reduce, ReduceOp::Sum | ReduceOp::Avg) => {
                Step::AllReduce(call.reduce)
            }
            "all_reduce" => {
                return Err(Error::Autograd(format!(
                    "all_reduce with op {} has no gradient; use sum or avg, or backward \"none\"",
                    call.reduce.name()
                )))
            }
            "all_gather" => Step::ReduceScatter(r, d),
            "reduce_scatter" if call.reduce == ReduceOp::Sum => Step::AllGather(d),
            "reduce_scatter" => {
                return Err(Error::Autograd(format!(
                    "the adjoint of reduce_scatter with op {} is not built; use sum",
                    call.reduce.name()
                )))
            }
            "all_to_all" => Step::AllToAll {
                split_dim: call.concat_dim,
                concat_dim: call.split_dim,
            },
            "broadcast" => Step::ReduceTo(call.src),
            "identity" => Step::Identity,
            "split" => Step::AllGather(d),
            other => {
                return Err(Error::Autograd(format!(
                    "{other} has no adjoint; give backward explicitly"
                )))
            }
        },
    };
    Ok(Some(step))
}

/// `output` of the collective `call` on `input`, recorded for backward when `input` requires
/// a gradient: `comm` (a clone) and `group` run the backward's collective.
pub(crate) fn record(
    rt: &Runtime,
    comm: &RankComm,
    group: &Arc<ProcessGroup>,
    call: &Call,
    input: &Tensor,
    output: Tensor,
) -> Result<Tensor> {
    if !input.requires_grad() || !neuronlab_core::autograd::is_grad_enabled() {
        return Ok(output);
    }
    let Some(step) = step(call)? else {
        return Ok(output);
    };
    let (comm, group) = (comm.clone(), group.clone());
    let input_shape = input.shape().to_vec();
    let reduce_dtype = call.backward_dtype;
    let backward: BackwardFn = Box::new(move |rt, grads, needs| {
        if !needs.first().copied().unwrap_or(false) {
            return Ok(vec![None]);
        }
        let g = cast_to(rt, &grads[0], reduce_dtype)?;
        let g = run(rt, &mut comm.clone(), &group, step, &g)?;
        if g.shape() != input_shape.as_slice() {
            return Err(Error::Autograd(format!(
                "the backward ({step:?}) of a collective gave a gradient of shape {:?} for an input \
                 of shape {input_shape:?}: the ranks' inputs must have equal sizes along the dim",
                g.shape()
            )));
        }
        Ok(vec![Some(g)])
    });
    let name = collective_name(call.op);
    Ok(record_function(rt, name, &[input], vec![output], backward)?.swap_remove(0))
}

/// Marks `gathered`, the all-gather of `shard` (cast to `dtype`), to be gathered again for
/// backward instead of kept saved (FSDP's `reshard_after_forward`): the ops that save it keep
/// this recipe, so the whole parameter is freed once forward is done with it and comes back
/// as an all-gather when backward reaches the first op that reads it.
pub(crate) fn regather_for_backward(
    comm: &RankComm,
    group: &Arc<ProcessGroup>,
    call: &Call,
    shard: &Tensor,
    dtype: Option<DType>,
    gathered: &Tensor,
) {
    gathered.set_rematerialize(Arc::new(Regather {
        comm: Mutex::new(comm.clone()),
        group: group.clone(),
        shard: shard.detach(),
        dtype,
        dim: call.dim,
    }));
}

/// The recipe [`regather_for_backward`] attaches.
struct Regather {
    comm: Mutex<RankComm>,
    group: Arc<ProcessGroup>,
    /// The shard as forward gathered it (a parameter's data, which the optimizer replaces
    /// only after backward).
    shard: Tensor,
    dtype: Option<DType>,
    dim: usize,
}

impl Rematerialize for Regather {
    fn rematerialize(&self, rt: &Runtime) -> Result<Tensor> {
        let moved = cast_to(rt, &self.shard, self.dtype)?;
        let mut comm = self.comm.lock().unwrap_or_else(PoisonError::into_inner);
        comm.all_gather(&self.group, &moved, self.dim)
    }
}

/// `t` outside the graph, cast to `dtype` when one is given and differs (the `dtype` and
/// `backward_dtype` attributes).
pub(crate) fn cast_to(rt: &Runtime, t: &Tensor, dtype: Option<DType>) -> Result<Tensor> {
    match dtype {
        Some(dtype) if dtype != t.dtype() => {
            let attrs = Attrs::new().with("dtype", dtype);
            rt.call_op("cast", &[&t.detach()], attrs, t.device())
        }
        _ => Ok(t.detach()),
    }
}

/// The node name of a collective, for errors and listings.
fn collective_name(op: &str) -> &'static str {
    match op {
        "all_reduce" => "all_reduce",
        "all_gather" => "all_gather",
        "reduce_scatter" => "reduce_scatter",
        "all_to_all" => "all_to_all",
        "broadcast" => "broadcast",
        "identity" => "identity (collective)",
        "split" => "split (collective)",
        _ => "collective",
    }
}

/// This rank's `torch.chunk` chunk of `t` along `dim`, over `group`.
pub(crate) fn own_chunk(
    rt: &Runtime,
    comm: &RankComm,
    group: &ProcessGroup,
    t: &Tensor,
    dim: usize,
) -> Result<Tensor> {
    let position = group
        .rank_in_group(comm.rank())
        .map_err(|e| Error::Invalid(format!("split: {e}")))?;
    let sizes = neuronlab_dist::chunk_sizes(t.shape()[dim], group.size());
    let start: usize = sizes[..position].iter().sum();
    let attrs = Attrs::new()
        .with("dim", dim as i64)
        .with("start", start as i64)
        .with("length", sizes[position] as i64);
    rt.call_op("narrow", &[t], attrs, t.device())
}

fn run(
    rt: &Runtime,
    comm: &mut RankComm,
    group: &ProcessGroup,
    step: Step,
    g: &Tensor,
) -> Result<Tensor> {
    match step {
        Step::Identity => Ok(g.clone()),
        Step::AllReduce(op) => comm.all_reduce(group, g, op),
        Step::AllGather(dim) => comm.all_gather(group, g, dim),
        Step::ReduceScatter(op, dim) => comm.reduce_scatter(group, g, op, dim),
        Step::Split(dim) => own_chunk(rt, comm, group, g, dim),
        Step::AllToAll {
            split_dim,
            concat_dim,
        } => comm.all_to_all(group, g, split_dim, concat_dim),
        Step::ReduceTo(src) => {
            let total = comm.all_reduce(group, g, ReduceOp::Sum)?;
            if comm.rank() == src {
                Ok(total)
            } else {
                let shape: Vec<i64> = g.shape().iter().map(|&d| d as i64).collect();
                let attrs = Attrs::new().with("shape", shape).with("dtype", g.dtype());
                rt.call_op("zeros", &[], attrs, g.device())
            }
        }
    }
}

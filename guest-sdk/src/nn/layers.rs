//! The basic layers: [`Linear`], [`Embedding`], [`RmsNorm`], [`LayerNorm`] and the SwiGLU
//! [`Mlp`], each with torch's semantics and parameter names.

use std::rc::Rc;

use super::param::Param;
use super::{join, scalar, Module};
use crate::dist::{region, Group};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::ops::{
    ones_with, randn_with, zeros_with, LayerNormOptions, MeanOptions, OnesOptions, RandnOptions,
    ZerosOptions,
};
use crate::tensor::Tensor;

/// A tensor drawn from N(0, std²) in `dtype`, a leaf that requires grad.
#[track_caller]
pub(crate) fn normal(shape: &[i64], std: f64, seed: i64, dtype: DType) -> Result<Tensor> {
    let x = randn_with(shape, RandnOptions::new().seed(seed))?.mul(&scalar(std, DType::F32)?)?;
    x.cast(dtype)?.requires_grad()
}

/// A tensor of ones in `dtype`, a leaf that requires grad.
#[track_caller]
pub(crate) fn ones_param(shape: &[i64], dtype: DType) -> Result<Tensor> {
    ones_with(shape, OnesOptions::new().dtype(dtype))?.requires_grad()
}

/// `y = x Wᵀ + b`, torch's `nn.Linear`: `weight` is `[out_features, in_features]`. Under
/// tensor parallelism ([`Parallel`]) this rank holds a slice of the weight and the layer
/// runs the collectives of its style.
pub struct Linear {
    /// `[out_features, in_features]` (this rank's rows or columns under tensor parallelism).
    pub weight: Param,
    /// `[out_features]`, if the layer has a bias.
    pub bias: Option<Param>,
    /// How the layer is split over a tensor-parallel group.
    pub parallel: Parallel,
}

impl Linear {
    /// A layer with these parameters.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Linear {
        Linear {
            weight: Param::new(weight),
            bias: bias.map(Param::new),
            parallel: Parallel::None,
        }
    }

    /// A layer with weights from N(0, std²) (Hugging Face's init for Llama) and a zero bias.
    #[track_caller]
    pub fn init(
        in_features: i64,
        out_features: i64,
        bias: bool,
        std: f64,
        seed: i64,
        dtype: DType,
    ) -> Result<Linear> {
        let weight = normal(&[out_features, in_features], std, seed, dtype)?;
        let bias = if bias {
            Some(zeros_with(&[out_features], ZerosOptions::new().dtype(dtype))?.requires_grad()?)
        } else {
            None
        };
        Ok(Linear::new(weight, bias))
    }

    /// `x Wᵀ + b` over the last dim of `x`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_copied(&self.copy_input(x)?)
    }

    /// `x` as a column-parallel layer takes it: copied into the group (its gradient
    /// all-reduced in backward); unchanged for other layers. Layers that read one input
    /// (q, k and v; gate and up) share one copy, so backward all-reduces once for them.
    #[track_caller]
    pub fn copy_input(&self, x: &Tensor) -> Result<Tensor> {
        match &self.parallel {
            Parallel::Colwise {
                group,
                sequence_parallel: true,
                ..
            } => region::gather_sequence(x, sequence_dim(x)?, group),
            Parallel::Colwise { group, .. } => region::copy_to(x, group),
            _ => x.try_clone(),
        }
    }

    /// [`forward`](Linear::forward) of an input already passed through
    /// [`copy_input`](Linear::copy_input).
    #[track_caller]
    pub fn forward_copied(&self, x: &Tensor) -> Result<Tensor> {
        let bias = self.bias.as_ref().map(Param::value).transpose()?;
        let add_bias = |y: Tensor| match &bias {
            Some(b) => y.add(b),
            None => Ok(y),
        };
        let y = x.matmul(&self.weight.value()?.transpose()?)?;
        match &self.parallel {
            Parallel::None => add_bias(y),
            Parallel::Colwise {
                group,
                gather_output,
                ..
            } => {
                let y = add_bias(y)?;
                if *gather_output {
                    region::gather_from(&y, y.rank() - 1, group)
                } else {
                    Ok(y)
                }
            }
            // The bias is added once, after the sum of the partial products.
            Parallel::Rowwise {
                group,
                sequence_parallel: false,
            } => add_bias(region::reduce_from(&y, group)?),
            Parallel::Rowwise {
                group,
                sequence_parallel: true,
            } => add_bias(region::reduce_scatter_sequence(
                &y,
                sequence_dim(&y)?,
                group,
            )?),
        }
    }

    /// `in_features` (this rank's, under row-wise parallelism).
    pub fn in_features(&self) -> i64 {
        self.weight.shape()[1]
    }

    /// `out_features` (this rank's, under column-wise parallelism).
    pub fn out_features(&self) -> i64 {
        self.weight.shape()[0]
    }
}

impl Module for Linear {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        f(join(prefix, "weight"), &self.weight);
        if let Some(b) = &self.bias {
            f(join(prefix, "bias"), b);
        }
    }
}

/// How a [`Linear`] is split over a tensor-parallel group (torch's `ColwiseParallel` and
/// `RowwiseParallel` on Megatron-LM's mappings).
pub enum Parallel {
    /// The whole layer on every rank.
    None,
    /// This rank holds a block of output rows: the input is replicated (its gradient
    /// all-reduced in backward) and the output sharded on its last dim, or gathered whole
    /// when `gather_output` (a vocabulary-parallel LM head).
    Colwise {
        /// The tensor-parallel group.
        group: Rc<Group>,
        /// All-gather the output's last dim.
        gather_output: bool,
        /// The input comes sharded along the sequence (sequence parallelism): all-gathered
        /// along it, the gradient reduce-scattered back, instead of copied.
        sequence_parallel: bool,
    },
    /// This rank holds a block of input columns: the input is sharded on its last dim and
    /// the partial outputs are all-reduced (their gradient passes unchanged).
    Rowwise {
        /// The tensor-parallel group.
        group: Rc<Group>,
        /// Reduce-scatter the partial outputs along the sequence instead (sequence
        /// parallelism), the gradient all-gathered back.
        sequence_parallel: bool,
    },
}

/// The sequence dim of activations `[batch, seq, hidden]` (or `[seq, hidden]`): the one
/// before the last.
fn sequence_dim(x: &Tensor) -> Result<usize> {
    x.rank().checked_sub(2).ok_or_else(|| {
        crate::error::Error::new(
            crate::error::ErrorKind::Invalid,
            format!(
                "sequence parallelism shards [.., seq, hidden] activations, not {:?}",
                x.shape()
            ),
        )
    })
}

/// Rows of a table picked by integer ids, torch's `nn.Embedding`; vocabulary-parallel
/// (Megatron's `VocabParallelEmbedding`) when `vocab_parallel` is set.
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]` (this rank's rows when vocabulary-parallel).
    pub weight: Param,
    /// The tensor-parallel group and this rank's first row, when the rows are split.
    pub vocab_parallel: Option<(Rc<Group>, i64)>,
    /// Under sequence parallelism the rows picked on each rank are reduce-scattered along
    /// the sequence instead of all-reduced: each rank keeps its sequence shard.
    pub sequence_parallel: bool,
}

impl Embedding {
    /// An embedding with this table.
    pub fn new(weight: Tensor) -> Embedding {
        Embedding {
            weight: Param::new(weight),
            vocab_parallel: None,
            sequence_parallel: false,
        }
    }

    /// `weight[ids]`: `ids` of any shape, integer; the result has one more dim. Split over
    /// the vocabulary, each rank looks up the ids in its rows (zeros for the others) and the
    /// ranks' rows are summed.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] for an id outside `0..num_embeddings`, naming it.
    #[track_caller]
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let weight = self.weight.value()?;
        let Some((group, first)) = &self.vocab_parallel else {
            return ids.embedding(&weight);
        };
        let rows = weight.shape()[0];
        let local = ids.sub(&scalar(*first as f64, ids.dtype())?)?;
        let mine = local
            .ge(&scalar(0.0, ids.dtype())?)?
            .logical_and(&local.lt(&scalar(rows as f64, ids.dtype())?)?)?;
        let safe = mine.where_(&local, &scalar(0.0, ids.dtype())?)?;
        let picked = safe.embedding(&weight)?;
        let kept = mine
            .unsqueeze(-1)?
            .where_(&picked, &scalar(0.0, weight.dtype())?)?;
        if self.sequence_parallel {
            region::reduce_scatter_sequence(&kept, sequence_dim(&kept)?, group)
        } else {
            region::reduce_from(&kept, group)
        }
    }
}

impl Module for Embedding {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        f(join(prefix, "weight"), &self.weight);
    }
}

/// Root-mean-square norm over the last dim, as Hugging Face's `LlamaRMSNorm`: computed in
/// f32, cast back to the input's dtype, then scaled by `weight`.
pub struct RmsNorm {
    /// `[hidden_size]`.
    pub weight: Param,
    /// Added to the mean square.
    pub eps: f64,
    /// Under sequence parallelism (torch's `SequenceParallel`) each rank normalizes its own
    /// sequence shard, so the weight's gradient is each rank's part of the whole: the weight
    /// is copied into this group, whose backward all-reduces that gradient.
    pub sequence_parallel: Option<Rc<Group>>,
}

impl RmsNorm {
    /// A norm with this weight.
    pub fn new(weight: Tensor, eps: f64) -> RmsNorm {
        RmsNorm {
            weight: Param::new(weight),
            eps,
            sequence_parallel: None,
        }
    }

    /// `weight * (x / sqrt(mean(x²) + eps))`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let h = in_dtype(x, DType::F32)?;
        let mean_square = h
            .square()?
            .mean_with(MeanOptions::new().dims(&[-1]).keepdim(1))?;
        let normed = h.mul(&mean_square.add(&scalar(self.eps, DType::F32)?)?.rsqrt()?)?;
        let weight = match &self.sequence_parallel {
            Some(group) => region::copy_to(&self.weight.value()?, group)?,
            None => self.weight.value()?,
        };
        weight.mul(&in_dtype(&normed, dtype)?)
    }
}

impl Module for RmsNorm {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        f(join(prefix, "weight"), &self.weight);
    }
}

/// `x` in `dtype`, cast only when it is not already.
#[track_caller]
pub(crate) fn in_dtype(x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        x.try_clone()
    } else {
        x.cast(dtype)
    }
}

/// Layer norm over the last dim, torch's `nn.LayerNorm`.
pub struct LayerNorm {
    /// `[hidden_size]`, if the norm is affine.
    pub weight: Option<Param>,
    /// `[hidden_size]`, if the norm has a bias.
    pub bias: Option<Param>,
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// A norm with these parameters.
    pub fn new(weight: Option<Tensor>, bias: Option<Tensor>, eps: f64) -> LayerNorm {
        LayerNorm {
            weight: weight.map(Param::new),
            bias: bias.map(Param::new),
            eps,
        }
    }

    /// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let last = *x.shape().last().ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid,
                "LayerNorm needs a tensor with at least one dim",
            )
        })?;
        let weight = self.weight.as_ref().map(Param::value).transpose()?;
        let bias = self.bias.as_ref().map(Param::value).transpose()?;
        x.layer_norm_with(
            weight.as_ref(),
            bias.as_ref(),
            LayerNormOptions::new()
                .normalized_shape(&[last])
                .eps(self.eps),
        )
    }
}

impl Module for LayerNorm {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        if let Some(w) = &self.weight {
            f(join(prefix, "weight"), w);
        }
        if let Some(b) = &self.bias {
            f(join(prefix, "bias"), b);
        }
    }
}

/// The SwiGLU MLP of Llama: `down_proj(silu(gate_proj(x)) * up_proj(x))`.
pub struct Mlp {
    /// `hidden → intermediate`, through SiLU.
    pub gate_proj: Linear,
    /// `hidden → intermediate`.
    pub up_proj: Linear,
    /// `intermediate → hidden`.
    pub down_proj: Linear,
}

impl Mlp {
    /// The MLP of `x` (`[..., hidden]`).
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = &self.gate_proj.copy_input(x)?;
        let gate = self.gate_proj.forward_copied(x)?.silu()?;
        self.down_proj
            .forward(&gate.mul(&self.up_proj.forward_copied(x)?)?)
    }
}

impl Module for Mlp {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        self.gate_proj
            .visit_parameters(&join(prefix, "gate_proj"), f);
        self.up_proj.visit_parameters(&join(prefix, "up_proj"), f);
        self.down_proj
            .visit_parameters(&join(prefix, "down_proj"), f);
    }
}

//! Causal self-attention with grouped-query heads, as Hugging Face's `LlamaAttention` with
//! its eager attention: rotary embeddings on queries and keys, scores scaled by
//! `head_dim^-0.5`, masked causally, softmax in f32.

use super::cache::KvCache;
use super::layers::Linear;
use super::param::Param;
use super::{join, rotary, scalar, Module};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::{SoftmaxOptions, TransposeOptions};
use crate::tensor::Tensor;

/// Multi-head attention whose `num_heads` query heads share `num_kv_heads` key/value heads
/// (`num_heads / num_kv_heads` queries per group).
pub struct Attention {
    /// `hidden → num_heads · head_dim`.
    pub q_proj: Linear,
    /// `hidden → num_kv_heads · head_dim`.
    pub k_proj: Linear,
    /// `hidden → num_kv_heads · head_dim`.
    pub v_proj: Linear,
    /// `num_heads · head_dim → hidden`.
    pub o_proj: Linear,
    /// Query heads.
    pub num_heads: i64,
    /// Key/value heads.
    pub num_kv_heads: i64,
    /// Width of one head.
    pub head_dim: i64,
}

/// What every layer's attention shares in one forward: the rotary tables and the mask.
pub(crate) struct AttentionInputs<'a> {
    /// `[batch, seq, head_dim]`, in the activations' dtype.
    pub cos: &'a Tensor,
    /// `[batch, seq, head_dim]`, in the activations' dtype.
    pub sin: &'a Tensor,
    /// `[seq, key_len]` bool: true where a query may see a key.
    pub visible: &'a Tensor,
    /// The position of the first new token, 0-d i64.
    pub position: &'a Tensor,
}

impl Attention {
    /// Attention over `x` (`[batch, seq, hidden]`), writing this layer's keys and values into
    /// `cache` (when there is one) and attending over all of them.
    #[track_caller]
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        inputs: &AttentionInputs,
        layer: usize,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        // The whole sequence: under sequence parallelism `x` is this rank's chunk of it, and
        // the copy into the group gathers it.
        let x = &self.q_proj.copy_input(x)?;
        let shape = x.shape();
        let (batch, seq) = (shape[0], shape[1]);
        let heads = |t: Tensor, n: i64| -> Result<Tensor> {
            t.view(&[batch, seq, n, self.head_dim])?
                .transpose_with(TransposeOptions::new().dim0(1).dim1(2))
        };
        let q = heads(self.q_proj.forward_copied(x)?, self.num_heads)?;
        let k = heads(self.k_proj.forward_copied(x)?, self.num_kv_heads)?;
        let v = heads(self.v_proj.forward_copied(x)?, self.num_kv_heads)?;
        let q = rotary::apply(&q, inputs.cos, inputs.sin)?;
        let k = rotary::apply(&k, inputs.cos, inputs.sin)?;
        let (k, v) = match cache {
            Some(cache) => cache.update(layer, &k, &v, inputs.position)?,
            None => (k, v),
        };
        // Grouped heads: queries [b, kv, group, seq, d] against keys [b, kv, 1, keys, d], so
        // each key/value head is read once rather than repeated per query head.
        let group = self.num_heads / self.num_kv_heads;
        let q = q.reshape(&[batch, self.num_kv_heads, group, seq, self.head_dim])?;
        let k = k.unsqueeze(2)?;
        let v = v.unsqueeze(2)?;
        let last_two = TransposeOptions::new().dim0(-2).dim1(-1);
        let scores = q.matmul(&k.transpose_with(last_two)?)?;
        let scores = scores.mul(&scalar((self.head_dim as f64).powf(-0.5), DType::F32)?)?;
        let masked = inputs
            .visible
            .where_(&scores, &scalar(f64::NEG_INFINITY, DType::F32)?)?;
        let dtype = x.dtype();
        // In f32 as `softmax(..., dtype=torch.float32)`; an f32 `masked` is not copied.
        let probs = super::layers::in_dtype(&masked, DType::F32)?
            .softmax_with(SoftmaxOptions::new().dim(-1))?;
        let probs = super::layers::in_dtype(&probs, dtype)?;
        let out = probs.matmul(&v)?; // [b, kv, group, seq, d]
        let out = out
            .reshape(&[batch, self.num_heads, seq, self.head_dim])?
            .transpose_with(TransposeOptions::new().dim0(1).dim1(2))?
            .reshape(&[batch, seq, self.num_heads * self.head_dim])?;
        self.o_proj.forward(&out)
    }
}

impl Module for Attention {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        self.q_proj.visit_parameters(&join(prefix, "q_proj"), f);
        self.k_proj.visit_parameters(&join(prefix, "k_proj"), f);
        self.v_proj.visit_parameters(&join(prefix, "v_proj"), f);
        self.o_proj.visit_parameters(&join(prefix, "o_proj"), f);
    }
}

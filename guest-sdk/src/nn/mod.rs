//! Neural-network modules with torch's semantics and Hugging Face's parameter names, and a
//! Llama-family causal LM that loads a Hub checkpoint folder unchanged.
//!
//! - Layers: [`Linear`], [`Embedding`], [`RmsNorm`], [`LayerNorm`], [`RotaryEmbedding`],
//!   [`Attention`] (causal, grouped-query heads), [`Mlp`] (SwiGLU) and [`DecoderLayer`].
//! - [`LlamaConfig`] reads a `config.json` by its own field names; [`LlamaForCausalLM`] is
//!   built from one, with random weights ([`LlamaForCausalLM::new`]) or from a folder
//!   holding `config.json` and safetensors weights ([`LlamaForCausalLM::from_pretrained`]).
//! - [`KvCache`]: a dynamic cache (grows by concatenation) or a static one (preallocated,
//!   written at the cache position), and [`Generator`] (or
//!   [`generate`](LlamaForCausalLM::generate) for one call) with greedy or seeded sampling,
//!   its steps compiled.
//! - [`parallel`]: tensor parallelism and FSDP for the Llama model, and its consolidated
//!   state dict.
//! - Every module is a [`Module`]: [`named_parameters`](Module::named_parameters) gives the
//!   state-dict names (`model.layers.0.self_attn.q_proj.weight`), and
//!   [`parameters`](Module::parameters) what an optimizer takes.
//!
//! Tensors keep the dtype they are loaded or made in (torch's `torch_dtype="auto"`); norms
//! and softmax compute in f32 as Hugging Face's Llama does, and every other op computes in
//! its operands' dtype.
//!
//! # Example
//!
//! ```ignore
//! let model = LlamaForCausalLM::from_pretrained("tiny-llama")?;
//! let ids = from_slice(&[1i64, 15, 7], &[1, 3])?;
//! let logits = model.forward(&ids)?; // [1, 3, vocab]
//! let out = model.generate(&[1, 15, 7], &GenerationConfig::new(8))?;
//! println!("{:?}", out.tokens);
//! ```

mod attention;
mod cache;
mod generate;
mod layers;
mod llama;
pub mod parallel;
mod param;
mod rotary;
mod state_dict;

pub use attention::Attention;
pub use cache::{CacheKind, KvCache};
pub use generate::{GenerationConfig, GenerationOutput, Generator, Sampler};
pub use layers::{Embedding, LayerNorm, Linear, Mlp, Parallel, RmsNorm};
pub use llama::{DecoderLayer, LlamaConfig, LlamaForCausalLM, LlamaModel, RopeScaling};
pub use param::{FullyShardOptions, MixedPrecisionPolicy, Param};
pub use rotary::RotaryEmbedding;
pub use state_dict::StateDict;

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::{full_with, FullOptions};
use crate::tensor::Tensor;

/// A module: something that holds parameters under state-dict names.
pub trait Module {
    /// Calls `f` with each parameter's full name (`prefix` joined to the module's own names
    /// with dots) and the parameter, in registration order, each once.
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param));

    /// Every parameter with its state-dict name.
    fn named_params(&self) -> Vec<(String, &Param)> {
        let mut out = Vec::new();
        self.visit_parameters("", &mut |name, p| out.push((name, p)));
        out
    }

    /// Every parameter's leaf (this rank's shard under FSDP or tensor parallelism) with its
    /// state-dict name, as torch's `named_parameters()`.
    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        self.named_params()
            .into_iter()
            .map(|(n, p)| (n, p.tensor()))
            .collect()
    }

    /// Every parameter's leaf, as torch's `parameters()`: what an optimizer takes.
    fn parameters(&self) -> Vec<&Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// The number of parameter elements (whole, not this rank's shards).
    fn num_parameters(&self) -> i64 {
        self.named_params()
            .iter()
            .map(|(_, p)| p.shape().iter().product::<i64>())
            .sum()
    }
}

/// `prefix.name`, or `name` at the top.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A 0-d tensor of `value` in `dtype`: as an operand it keeps the other tensor's dtype.
#[track_caller]
pub(crate) fn scalar(value: f64, dtype: DType) -> Result<Tensor> {
    full_with(&[], value, FullOptions::new().dtype(dtype))
}

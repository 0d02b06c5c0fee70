//! Tensor parallelism and FSDP for a [`LlamaForCausalLM`], as torch's
//! `parallelize_module` with the Llama plan and FSDP2's `fully_shard` per decoder layer and
//! at the root, on a 1-D group each or the two dims of a 2-D mesh.
//!
//! - [`parallelize`]: q/k/v and gate/up column-wise (each rank holds a block of heads and of
//!   the MLP's width), o and down row-wise, the embedding vocabulary-parallel, the LM head
//!   column-wise over the vocabulary with its logits gathered. The norms stay replicated.
//!   [`parallelize_with`] adds sequence parallelism: the norms and the residual stream
//!   sharded along the sequence between the blocks.
//! - [`fully_shard`]: every parameter (a tensor-parallel slice, if cut) sharded on dim 0
//!   over the group; each forward all-gathers it, each backward reduce-scatters its gradient.
//!   [`fully_shard_with`] takes FSDP2's mixed-precision policy: gather and compute in
//!   `param_dtype`, reduce gradients in `reduce_dtype`, step the shards in their own dtype.
//! - [`full_state_dict`]: every parameter gathered whole under its Hugging Face name, the
//!   consolidated checkpoint `save_pretrained` writes.
//!
//! Sharded training runs eagerly: collectives are graph breaks under `compile`. By default
//! (FSDP2's `reshard_after_forward=True`) a decoder layer's gathered parameters are freed
//! once its forward is done and gathered again when backward reaches them; the root's
//! (embedding, final norm, LM head) stay gathered from forward to backward, as FSDP2 does for
//! the root, whose parameters backward needs first.

use std::rc::Rc;

use super::layers::{Linear, Parallel};
use super::llama::LlamaForCausalLM;
use super::param::FullyShardOptions;
use super::Module;
use crate::dist::Group;
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::Tensor;

#[track_caller]
fn divides(what: &str, n: i64, parts: usize) -> Result<i64> {
    let parts = parts as i64;
    if n % parts != 0 {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("tensor parallelism over {parts} ranks needs {what} ({n}) to be a multiple of {parts}"),
        ));
    }
    Ok(n / parts)
}

/// Cuts `linear` column-wise (its output rows) over `group`; its input comes sharded along
/// the sequence under sequence parallelism.
#[track_caller]
fn colwise(
    linear: &mut Linear,
    group: &Rc<Group>,
    gather_output: bool,
    sequence_parallel: bool,
) -> Result<()> {
    let rows = linear.out_features();
    let size = divides("a column-parallel layer's out_features", rows, group.size())?;
    let start = group.rank()? as i64 * size;
    linear.weight.split(group, 0, start, size)?;
    if let Some(b) = &mut linear.bias {
        b.split(group, 0, start, size)?;
    }
    linear.parallel = Parallel::Colwise {
        group: group.clone(),
        gather_output,
        sequence_parallel,
    };
    Ok(())
}

/// Cuts `linear` row-wise (its input columns) over `group`; the bias stays whole. Under
/// sequence parallelism its output is reduce-scattered along the sequence.
#[track_caller]
fn rowwise(linear: &mut Linear, group: &Rc<Group>, sequence_parallel: bool) -> Result<()> {
    let cols = linear.in_features();
    let size = divides("a row-parallel layer's in_features", cols, group.size())?;
    linear
        .weight
        .split(group, 1, group.rank()? as i64 * size, size)?;
    linear.parallel = Parallel::Rowwise {
        group: group.clone(),
        sequence_parallel,
    };
    Ok(())
}

/// How [`parallelize_with`] cuts the model (torch: the plan's styles).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorParallelOptions {
    /// Megatron's sequence parallelism (torch: `SequenceParallel` on the norms, with
    /// `ColwiseParallel(input_layouts=Shard(1))` and `RowwiseParallel(output_layouts=
    /// Shard(1))`): between the blocks each rank holds its `torch.chunk` chunk of the
    /// sequence, so the norms and the residual stream cost 1/tp of the activations; the
    /// column-parallel layers all-gather their input along the sequence (its gradient
    /// reduce-scattered) and the row-parallel ones reduce-scatter their output (its
    /// gradient all-gathered) in place of TP's all-reduces, and the norms' weight gradients
    /// are all-reduced over the group.
    pub sequence_parallel: bool,
}

/// Applies the Llama tensor-parallel plan over `tp`: each rank keeps its slices as new
/// leaves (build optimizers after this). Head counts, the MLP's width and the vocabulary
/// must be multiples of the group's size. As [`parallelize_with`] with the default options
/// (no sequence parallelism).
#[track_caller]
pub fn parallelize(model: &mut LlamaForCausalLM, tp: &Rc<Group>) -> Result<()> {
    parallelize_with(model, tp, TensorParallelOptions::default())
}

/// [`parallelize`] with `options`.
#[track_caller]
pub fn parallelize_with(
    model: &mut LlamaForCausalLM,
    tp: &Rc<Group>,
    options: TensorParallelOptions,
) -> Result<()> {
    let sp = options.sequence_parallel;
    let norm_group = sp.then(|| tp.clone());
    let c = &model.config;
    let n = tp.size();
    divides("num_attention_heads", c.num_attention_heads, n)?;
    divides("num_key_value_heads", c.num_key_value_heads, n)?;
    divides("intermediate_size", c.intermediate_size, n)?;
    let rows = divides("vocab_size", c.vocab_size, n)?;
    for layer in &mut model.model.layers {
        let attn = &mut layer.self_attn;
        for proj in [&mut attn.q_proj, &mut attn.k_proj, &mut attn.v_proj] {
            colwise(proj, tp, false, sp)?;
        }
        rowwise(&mut attn.o_proj, tp, sp)?;
        attn.num_heads /= n as i64;
        attn.num_kv_heads /= n as i64;
        colwise(&mut layer.mlp.gate_proj, tp, false, sp)?;
        colwise(&mut layer.mlp.up_proj, tp, false, sp)?;
        rowwise(&mut layer.mlp.down_proj, tp, sp)?;
        layer.input_layernorm.sequence_parallel = norm_group.clone();
        layer.post_attention_layernorm.sequence_parallel = norm_group.clone();
    }
    model.model.norm.sequence_parallel = norm_group;
    let first = tp.rank()? as i64 * rows;
    let embed = &mut model.model.embed_tokens;
    embed.weight.split(tp, 0, first, rows)?;
    embed.vocab_parallel = Some((tp.clone(), first));
    embed.sequence_parallel = sp;
    if model.config.tie_word_embeddings {
        model.lm_head.weight = model.model.embed_tokens.weight.tie()?;
        model.lm_head.parallel = Parallel::Colwise {
            group: tp.clone(),
            gather_output: true,
            sequence_parallel: sp,
        };
    } else {
        colwise(&mut model.lm_head, tp, true, sp)?;
    }
    Ok(())
}

/// Shards every parameter of `model` on dim 0 over `fsdp` (FSDP2's `fully_shard` on each
/// decoder layer and the root): each rank keeps its padded chunk as a new leaf (build
/// optimizers after this). Tied embeddings stay one parameter. As [`fully_shard_with`] with
/// the default options: gathered and reduced in the parameters' own dtype, decoder layers
/// resharded after forward.
#[track_caller]
pub fn fully_shard(model: &mut LlamaForCausalLM, fsdp: &Rc<Group>) -> Result<()> {
    fully_shard_with(model, fsdp, FullyShardOptions::default())
}

/// [`fully_shard`] with FSDP2's options (torch: `fully_shard(..., mp_policy=...,
/// reshard_after_forward=...)`): with `param_dtype` bf16 each forward gathers bf16 parameters
/// and computes in bf16, and with `reduce_dtype` f32 the gradients are reduce-scattered in
/// f32 into the f32 shards the optimizer steps. `reshard_after_forward` applies to the
/// decoder layers; the root's parameters are never resharded after forward.
#[track_caller]
pub fn fully_shard_with(
    model: &mut LlamaForCausalLM,
    fsdp: &Rc<Group>,
    options: FullyShardOptions,
) -> Result<()> {
    let shard = |p: &mut super::Param| p.shard(fsdp, options);
    for layer in &mut model.model.layers {
        let attn = &mut layer.self_attn;
        for proj in [
            &mut attn.q_proj,
            &mut attn.k_proj,
            &mut attn.v_proj,
            &mut attn.o_proj,
        ] {
            shard(&mut proj.weight)?;
            if let Some(b) = &mut proj.bias {
                shard(b)?;
            }
        }
        let mlp = &mut layer.mlp;
        for proj in [&mut mlp.gate_proj, &mut mlp.up_proj, &mut mlp.down_proj] {
            shard(&mut proj.weight)?;
            if let Some(b) = &mut proj.bias {
                shard(b)?;
            }
        }
        shard(&mut layer.input_layernorm.weight)?;
        shard(&mut layer.post_attention_layernorm.weight)?;
    }
    let root = FullyShardOptions {
        reshard_after_forward: false,
        ..options
    };
    let shard = |p: &mut super::Param| p.shard(fsdp, root);
    shard(&mut model.model.embed_tokens.weight)?;
    shard(&mut model.model.norm.weight)?;
    if model.config.tie_word_embeddings {
        model.lm_head.weight = model.model.embed_tokens.weight.tie()?;
    } else {
        shard(&mut model.lm_head.weight)?;
    }
    Ok(())
}

/// Every parameter gathered whole, by its Hugging Face name (`lm_head.weight` left out when
/// tied): what `save_pretrained` writes, loadable on one rank. Every rank must call it.
#[track_caller]
pub fn full_state_dict(model: &LlamaForCausalLM) -> Result<Vec<(String, Tensor)>> {
    model
        .named_params()
        .into_iter()
        .map(|(name, p)| Ok((name, p.full()?)))
        .collect()
}

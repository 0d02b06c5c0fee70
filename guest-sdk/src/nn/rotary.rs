//! Rotary position embeddings as Hugging Face's Llama computes them: inverse frequencies in
//! f32 (with the `llama3` and `linear` scalings), angles `position · inv_freq` in f32, and the
//! rotate-half form `x·cos + rotate_half(x)·sin`.

use super::llama::RopeScaling;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::{cat_with, CatOptions};
use crate::tensor::{from_slice, Tensor};

/// The rotary embedding of one model: its inverse frequencies, `[head_dim / 2]` f32.
pub struct RotaryEmbedding {
    /// `1 / theta^(2i / head_dim)`, scaled as the config asks.
    pub inv_freq: Tensor,
}

impl RotaryEmbedding {
    /// The embedding for heads of `head_dim` with base `theta`.
    #[track_caller]
    pub fn new(head_dim: i64, theta: f64, scaling: &RopeScaling) -> Result<RotaryEmbedding> {
        let half = head_dim / 2;
        // torch computes `1.0 / base ** (arange(0, dim, 2).float() / dim)` in f32.
        let mut inv: Vec<f32> = (0..half)
            .map(|i| {
                let exponent = (2 * i) as f32 / head_dim as f32;
                1.0f32 / (theta as f32).powf(exponent)
            })
            .collect();
        scaling.apply(&mut inv);
        Ok(RotaryEmbedding {
            inv_freq: from_slice(&inv, &[half])?,
        })
    }

    /// `(cos, sin)` for integer `positions` `[batch, seq]`: each `[batch, seq, head_dim]` in
    /// `dtype`.
    #[track_caller]
    pub fn cos_sin(&self, positions: &Tensor, dtype: DType) -> Result<(Tensor, Tensor)> {
        let angles = positions
            .cast(DType::F32)?
            .unsqueeze(-1)?
            .mul(&self.inv_freq)?;
        let emb = cat_with(&[&angles, &angles], CatOptions::new().dim(-1))?;
        Ok((emb.cos()?.cast(dtype)?, emb.sin()?.cast(dtype)?))
    }
}

/// `[-x₂, x₁]` for the halves `x₁, x₂` of the last dim.
#[track_caller]
fn rotate_half(x: &Tensor) -> Result<Tensor> {
    let half = x.shape()[x.rank() - 1] / 2;
    let first = x.narrow(-1, 0, half)?;
    let second = x.narrow(-1, half, half)?;
    cat_with(&[&second.neg()?, &first], CatOptions::new().dim(-1))
}

/// `x·cos + rotate_half(x)·sin` for `x` `[batch, heads, seq, head_dim]` and `cos`, `sin`
/// `[batch, seq, head_dim]`.
#[track_caller]
pub(crate) fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let cos = cos.unsqueeze(1)?;
    let sin = sin.unsqueeze(1)?;
    x.mul(&cos)?.add(&rotate_half(x)?.mul(&sin)?)
}

//! The basic layers: [`Linear`], [`Embedding`], [`RmsNorm`], [`LayerNorm`] and the SwiGLU
//! [`Mlp`], each with torch's semantics and parameter names.

use super::{join, scalar, Module};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::ops::{
    ones_with, randn_with, zeros_with, LayerNormOptions, MeanOptions, OnesOptions, RandnOptions,
    ZerosOptions,
};
use crate::tensor::Tensor;

/// A tensor drawn from N(0, std²) in `dtype`, a leaf that requires grad.
pub(crate) fn normal(shape: &[i64], std: f64, seed: i64, dtype: DType) -> Result<Tensor> {
    let x = randn_with(shape, RandnOptions::new().seed(seed))?.mul(&scalar(std, DType::F32)?)?;
    x.cast(dtype)?.requires_grad()
}

/// A tensor of ones in `dtype`, a leaf that requires grad.
pub(crate) fn ones_param(shape: &[i64], dtype: DType) -> Result<Tensor> {
    ones_with(shape, OnesOptions::new().dtype(dtype))?.requires_grad()
}

/// `y = x Wᵀ + b`, torch's `nn.Linear`: `weight` is `[out_features, in_features]`.
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, if the layer has a bias.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer with these parameters.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Linear {
        Linear { weight, bias }
    }

    /// A layer with weights from N(0, std²) (Hugging Face's init for Llama) and a zero bias.
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
        Ok(Linear { weight, bias })
    }

    /// `x Wᵀ + b` over the last dim of `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.matmul(&self.weight.transpose()?)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// `in_features`.
    pub fn in_features(&self) -> i64 {
        self.weight.shape()[1]
    }

    /// `out_features`.
    pub fn out_features(&self) -> i64 {
        self.weight.shape()[0]
    }
}

impl Module for Linear {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Tensor)) {
        f(join(prefix, "weight"), &self.weight);
        if let Some(b) = &self.bias {
            f(join(prefix, "bias"), b);
        }
    }
}

/// Rows of a table picked by integer ids, torch's `nn.Embedding`.
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
}

impl Embedding {
    /// An embedding with this table.
    pub fn new(weight: Tensor) -> Embedding {
        Embedding { weight }
    }

    /// `weight[ids]`: `ids` of any shape, integer; the result has one more dim.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] for an id outside `0..num_embeddings`, naming it.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        ids.embedding(&self.weight)
    }
}

impl Module for Embedding {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Tensor)) {
        f(join(prefix, "weight"), &self.weight);
    }
}

/// Root-mean-square norm over the last dim, as Hugging Face's `LlamaRMSNorm`: computed in
/// f32, cast back to the input's dtype, then scaled by `weight`.
pub struct RmsNorm {
    /// `[hidden_size]`.
    pub weight: Tensor,
    /// Added to the mean square.
    pub eps: f64,
}

impl RmsNorm {
    /// A norm with this weight.
    pub fn new(weight: Tensor, eps: f64) -> RmsNorm {
        RmsNorm { weight, eps }
    }

    /// `weight * (x / sqrt(mean(x²) + eps))`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let h = in_dtype(x, DType::F32)?;
        let mean_square = h
            .square()?
            .mean_with(MeanOptions::new().dims(&[-1]).keepdim(1))?;
        let normed = h.mul(&mean_square.add(&scalar(self.eps, DType::F32)?)?.rsqrt()?)?;
        self.weight.mul(&in_dtype(&normed, dtype)?)
    }
}

impl Module for RmsNorm {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Tensor)) {
        f(join(prefix, "weight"), &self.weight);
    }
}

/// `x` in `dtype`, cast only when it is not already.
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
    pub weight: Option<Tensor>,
    /// `[hidden_size]`, if the norm has a bias.
    pub bias: Option<Tensor>,
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// A norm with these parameters.
    pub fn new(weight: Option<Tensor>, bias: Option<Tensor>, eps: f64) -> LayerNorm {
        LayerNorm { weight, bias, eps }
    }

    /// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let last = *x.shape().last().ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid,
                "LayerNorm needs a tensor with at least one dim",
            )
        })?;
        x.layer_norm_with(
            self.weight.as_ref(),
            self.bias.as_ref(),
            LayerNormOptions::new()
                .normalized_shape(&[last])
                .eps(self.eps),
        )
    }
}

impl Module for LayerNorm {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Tensor)) {
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
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate_proj.forward(x)?.silu()?;
        self.down_proj
            .forward(&gate.mul(&self.up_proj.forward(x)?)?)
    }
}

impl Module for Mlp {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Tensor)) {
        self.gate_proj
            .visit_parameters(&join(prefix, "gate_proj"), f);
        self.up_proj.visit_parameters(&join(prefix, "up_proj"), f);
        self.down_proj
            .visit_parameters(&join(prefix, "down_proj"), f);
    }
}

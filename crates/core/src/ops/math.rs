//! The f32 math the elementwise kernels share, for code outside the crate that must measure
//! against exactly that math: `neuronlab bench` times the 8-op chain written by hand over
//! these functions, the floor that the compiled chain is compared with.
//!
//! Each function is the element function the eager kernels and the fused executor call, so a
//! loop over it computes their results to the bit (see [`super::vmath`]'s invariant).

pub use super::vmath::{exp_f32, tanh_f32, Isa};

/// gelu with approximate='tanh', as the `gelu` op computes it for f32.
#[inline(always)]
pub fn gelu_tanh_f32(x: f32) -> f32 {
    super::elementwise::gelu_tanh(x)
}

//! Creation ops: tensors made from attributes alone, including seeded random tensors.
//!
//! Random values come from Philox4x32-10 (the counter-based generator PyTorch and JAX use on
//! accelerators) keyed by the seed, with element `i` drawn from counter `i`. So a value depends
//! only on the seed and its position: not on the thread count, nor on any other tensor.

use super::attrs::{AttrDefault, AttrKind, AttrSpec};
use super::common::streaming_cost;
use smallvec::smallvec;

use super::registry::{Exec, KernelArgs, KernelResult, MetaArgs, OpDef, OpGroup};
use crate::device::cost::{Engine, OpCost};
use crate::tensor::{checked_numel, Buffer, DType, Element, TensorMeta};
use crate::with_dtype;

/// Philox4x32 with 10 rounds (Salmon et al., SC'11): four 32-bit words per 128-bit counter.
pub fn philox4x32(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    const W0: u32 = 0x9E37_79B9;
    const W1: u32 = 0xBB67_AE85;
    let (mut c, mut k) = (counter, key);
    for _ in 0..10 {
        let p0 = M0 * c[0] as u64;
        let p1 = M1 * c[2] as u64;
        c = [
            (p1 >> 32) as u32 ^ c[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ c[3] ^ k[1],
            p0 as u32,
        ];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

fn words(seed: i64, i: usize) -> [u32; 4] {
    let s = seed as u64;
    let i = i as u64;
    philox4x32(
        [i as u32, (i >> 32) as u32, 0, 0],
        [s as u32, (s >> 32) as u32],
    )
}

/// A uniform double in [0, 1) from two words (53 random bits).
fn unit(hi: u32, lo: u32) -> f64 {
    let bits = ((hi as u64) << 21) ^ (lo as u64 >> 11);
    bits as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Element `i` of `rand(seed)`: uniform in [0, 1).
pub fn uniform_at(seed: i64, i: usize) -> f64 {
    let w = words(seed, i);
    unit(w[0], w[1])
}

/// Element `i` of `randn(seed)`: standard normal, by Box-Muller on two uniforms.
pub fn normal_at(seed: i64, i: usize) -> f64 {
    let w = words(seed, i);
    let u1 = 1.0 - unit(w[0], w[1]); // in (0, 1], so the log is finite
    let u2 = unit(w[2], w[3]);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn generate<T: Element>(n: usize, f: impl Fn(usize) -> f64 + Sync + Send) -> Buffer {
    T::into_buffer(crate::tensor::strided::fill(n, |start, out| {
        for (k, o) in out.iter_mut().enumerate() {
            o.write(T::from_f64(f(start + k)));
        }
    }))
}

fn shape_attr(a: &MetaArgs) -> Result<Vec<usize>, String> {
    let shape = a.attrs.ints("shape");
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(format!("shape {shape:?} has a negative size {d}"));
    }
    let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    checked_numel(&shape).ok_or_else(|| format!("shape {shape:?} overflows the element count"))?;
    Ok(shape)
}

fn dtype_attr(a: &MetaArgs) -> DType {
    a.attrs.opt_dtype("dtype").unwrap_or(DType::F32)
}

fn infer_filled(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    Ok(vec![TensorMeta::new(shape_attr(a)?, dtype_attr(a))])
}

fn infer_random(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let dtype = dtype_attr(a);
    if !dtype.is_float() {
        return Err(format!(
            "random values need a floating dtype, got {dtype}; draw floats and cast"
        ));
    }
    infer_filled(a)
}

fn fill(a: &KernelArgs, value: f64) -> KernelResult {
    let out = &a.outputs[0];
    Ok(smallvec![
        with_dtype!(out.dtype, T => T::into_buffer(vec![T::from_f64(value); out.numel()])),
    ])
}

fn random(a: &KernelArgs, f: impl Fn(i64, usize) -> f64 + Sync + Send) -> KernelResult {
    let out = &a.outputs[0];
    let seed = a.attrs.int("seed");
    Ok(smallvec![
        with_dtype!(out.dtype, T => generate::<T>(out.numel(), |i| f(seed, i))),
    ])
}

/// `rand`: uniforms truncated to the output dtype's significand width (as torch draws them), so
/// every value is exact in the dtype and below 1; rounding to nearest would turn values close to
/// 1 into 1.0 in bf16 and f16.
fn rand_kernel(a: &KernelArgs) -> KernelResult {
    let bits = match a.outputs[0].dtype {
        DType::Bf16 => 8,
        DType::F16 => 11,
        DType::F32 => 24,
        _ => 53,
    };
    let steps = (1u64 << bits) as f64;
    random(a, move |seed, i| {
        (uniform_at(seed, i) * steps).floor() / steps
    })
}

fn arange_len(a: &MetaArgs) -> Result<usize, String> {
    let (start, end, step) = (
        a.attrs.float("start"),
        a.attrs.float("end"),
        a.attrs.float("step"),
    );
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
        return Err(format!(
            "arange needs finite start and end and a non-zero step, got start={start}, end={end}, step={step}"
        ));
    }
    let n = ((end - start) / step).ceil().max(0.0);
    if n > (1u64 << 40) as f64 {
        return Err(format!("arange would have {n} elements; that is too many"));
    }
    Ok(n as usize)
}

fn infer_arange(a: &MetaArgs) -> Result<Vec<TensorMeta>, String> {
    let n = arange_len(a)?;
    let integral = ["start", "end", "step"]
        .iter()
        .all(|k| a.attrs.float(k).fract() == 0.0);
    let default = if integral { DType::I64 } else { DType::F32 };
    Ok(vec![TensorMeta::new(
        vec![n],
        a.attrs.opt_dtype("dtype").unwrap_or(default),
    )])
}

fn arange_kernel(a: &KernelArgs) -> KernelResult {
    let out = &a.outputs[0];
    let (start, step) = (a.attrs.float("start"), a.attrs.float("step"));
    Ok(smallvec![
        with_dtype!(out.dtype, T => generate::<T>(out.numel(), |i| start + i as f64 * step)),
    ])
}

fn write_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    streaming_cost(a, o, 0.0, Engine::Vector)
}

fn random_cost(a: &MetaArgs, o: &[TensorMeta]) -> OpCost {
    streaming_cost(a, o, 1.0, Engine::Vector)
}

static SHAPE_DTYPE: &[AttrSpec] = &[
    AttrSpec::new("shape", AttrKind::Ints, AttrDefault::Required),
    AttrSpec::new("dtype", AttrKind::DType, AttrDefault::Str("f32")),
];
static FULL_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("shape", AttrKind::Ints, AttrDefault::Required),
    AttrSpec::new("value", AttrKind::Float, AttrDefault::Required),
    AttrSpec::new("dtype", AttrKind::DType, AttrDefault::Str("f32")),
];
static RANDOM_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("shape", AttrKind::Ints, AttrDefault::Required),
    AttrSpec::new("seed", AttrKind::Int, AttrDefault::Int(0)),
    AttrSpec::new("dtype", AttrKind::DType, AttrDefault::Str("f32")),
];
static ARANGE_ATTRS: &[AttrSpec] = &[
    AttrSpec::new("start", AttrKind::Float, AttrDefault::Float(0.0)),
    AttrSpec::new("end", AttrKind::Float, AttrDefault::Required),
    AttrSpec::new("step", AttrKind::Float, AttrDefault::Float(1.0)),
    AttrSpec::new("dtype", AttrKind::DType, AttrDefault::Optional),
];
static OUT: &[&str] = &["out"];

/// The creation ops.
pub fn defs() -> Vec<OpDef> {
    let def = |name, doc, attrs, infer, exec, cost| OpDef {
        name,
        doc,
        group: OpGroup::Creation,
        inputs: &[],
        attrs,
        outputs: OUT,
        infer,
        exec: Exec::Compute(exec),
        cost,
        pointwise: None,
        rowwise: None,
    };
    vec![
        def(
            "zeros",
            "a tensor of zeros",
            SHAPE_DTYPE,
            infer_filled,
            |a| fill(a, 0.0),
            write_cost,
        ),
        def(
            "ones",
            "a tensor of ones",
            SHAPE_DTYPE,
            infer_filled,
            |a| fill(a, 1.0),
            write_cost,
        ),
        def(
            "full",
            "a tensor filled with value",
            FULL_ATTRS,
            infer_filled,
            |a| fill(a, a.attrs.float("value")),
            write_cost,
        ),
        def(
            "arange",
            "start, start+step, ... below end (i64 when all three are integral)",
            ARANGE_ATTRS,
            infer_arange,
            arange_kernel,
            write_cost,
        ),
        def(
            "rand",
            "uniform random values in [0, 1), counter-based from seed",
            RANDOM_ATTRS,
            infer_random,
            rand_kernel,
            random_cost,
        ),
        def(
            "randn",
            "standard normal random values, counter-based from seed",
            RANDOM_ATTRS,
            infer_random,
            |a| random(a, normal_at),
            random_cost,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_the_published_known_answer() {
        // Random123's kat_vectors: philox4x32_10 with counter and key all ones (0xffffffff).
        let out = philox4x32([u32::MAX; 4], [u32::MAX; 2]);
        assert_eq!(out, [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]);
        let out = philox4x32([0; 4], [0; 2]);
        assert_eq!(out, [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
    }

    #[test]
    fn values_depend_only_on_seed_and_position() {
        assert_eq!(uniform_at(7, 1000), uniform_at(7, 1000));
        assert_ne!(uniform_at(7, 1000), uniform_at(8, 1000));
        let n = 200_000;
        let mean = (0..n).map(|i| normal_at(3, i)).sum::<f64>() / n as f64;
        let var = (0..n).map(|i| normal_at(3, i).powi(2)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
    }
}

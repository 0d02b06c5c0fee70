//! bucketing: why padding sequence lengths to multiples of 128 limits recompiles.
//!
//! A batch of sequences of varying lengths goes through a compiled encoder layer (layer_norm,
//! a GELU MLP with a residual, and a mean over the tokens). Run on the exact lengths, every new
//! length is a new input shape and so a new compiled graph. Padded to the next multiple of 128
//! (the TensorEngine's tile), with a mask so the padding does not count in the mean, the lengths
//! fall into a few buckets and the layer compiles once per bucket. Both give the same result.
//! Run it with `NEURONLAB_LOGS=recompiles` to see each reason.

use neuronlab::prelude::*;
use neuronlab::println;

/// Model width.
const D: i64 = 64;
/// MLP width.
const HIDDEN: i64 = 256;
/// Bucket size: the TensorEngine's 128-row tile.
const BUCKET: i64 = 128;
/// The sequence lengths of the batch, in arrival order.
const LENGTHS: [i64; 10] = [37, 90, 150, 128, 200, 300, 77, 260, 12, 129];

/// `[x [rows, D], mask [rows, 1], w1, w2]` to the masked mean of the layer's output, `[1, D]`.
fn encoder(args: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> {
    let [x, mask, w1, w2] = args else {
        return Err(neuronlab::Error::new(neuronlab::ErrorKind::Invalid, "encoder takes 4 tensors"));
    };
    let h = x.layer_norm(None, None)?;
    let y = x.add(&h.matmul(w1)?.gelu()?.matmul(w2)?)?; // residual MLP
    let total = y.mul(mask)?.sum_with(SumOptions::new().dims(&[0]).keepdim(1))?;
    let count = mask.sum()?;
    Ok(vec![total.div(&count)?])
}

/// The number of compiled versions, from the first line of `explain`.
fn versions(f: &Compiled) -> neuronlab::Result<String> {
    let text = f.explain()?;
    let first = text.lines().next().unwrap_or_default();
    Ok(first.split(": ").nth(1).and_then(|s| s.split(',').next()).unwrap_or("?").to_string())
}

fn run() -> neuronlab::Result<()> {
    let scale = |seed, shape: &[i64], fan_in: i64| -> neuronlab::Result<Tensor> {
        Ok(randn_with(shape, RandnOptions::new().seed(seed))? / full(&[], (fan_in as f64).sqrt())?)
    };
    let w1 = scale(1, &[D, HIDDEN], D)?;
    let w2 = scale(2, &[HIDDEN, D], HIDDEN)?;
    let options = || CompileOptions::new().recompile_limit(64).input_names(&["x", "mask", "w1", "w2"]);
    let exact = compile_with("encoder (exact lengths)", encoder, options())?;
    let bucketed = compile_with("encoder (buckets of 128)", encoder, options())?;

    let mut max_diff = 0.0f32;
    for (i, &len) in LENGTHS.iter().enumerate() {
        let x = randn_with(&[len, D], RandnOptions::new().seed(100 + i as i64))?;
        let mask = ones(&[len, 1])?;
        let a = exact.call1(&[&x, &mask, &w1, &w2])?;

        let bucket = (len + BUCKET - 1) / BUCKET * BUCKET;
        let padded = x.pad(&[0, 0, 0, bucket - len])?;
        let padded_mask = mask.pad(&[0, 0, 0, bucket - len])?;
        let b = bucketed.call1(&[&padded, &padded_mask, &w1, &w2])?;

        let diff = a.sub(&b)?.abs()?.max()?.item::<f32>()?;
        max_diff = max_diff.max(diff);
        println!("sequence {i}: length {len:>3} -> bucket {bucket}");
    }
    println!("compiled graphs: exact lengths {}, buckets {}", versions(&exact)?, versions(&bucketed)?);
    println!("max |exact - bucketed| = {max_diff:e}");
    Ok(())
}

neuronlab::main!(run);

//! generation-cache: why static shapes matter on Neuron.
//!
//! A toy decoder generates tokens. Each step attends over every token so far. It runs two ways:
//!
//! - **growing**: the step's input is all `t` tokens so far, `[t, D]`. The shape changes every
//!   step. On Neuron, as on XLA, every new shape is a new graph to compile.
//! - **padded**: the tokens live in a static cache of `CACHE` rows, `[CACHE, D]`, and a mask
//!   hides the rows not written yet. Every step has the same shapes, so the step compiles
//!   once. This is the static KV-cache and bucketing idea.
//!
//! The step is a compiled function, so each new shape is a visible recompile: the growing way
//! recompiles every step until it reaches its recompile limit and falls back to eager; the
//! padded way compiles once and then runs from the cache. Run it with
//! `NEURONLAB_LOGS=recompiles` to see each reason. Both ways give the same next-token
//! features; the experiment prints each step's input shape, how many distinct step shapes
//! each way has seen, and the largest difference between the two ways, and plots the
//! compiles of each way per step (from `Compiled::stats`).

use neuronlab::prelude::*;
use neuronlab::println;

/// Model width.
const D: i64 = 64;
/// Rows of the static cache: a multiple of 128, the TensorEngine's tile.
const CACHE: i64 = 128;
/// Tokens the prompt starts with.
const PROMPT: i64 = 4;
/// Tokens generated.
const STEPS: i64 = 12;

/// The model's weights.
struct Weights {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
}

fn weights() -> neuronlab::Result<Weights> {
    let w = |seed| -> neuronlab::Result<Tensor> {
        Ok(randn_with(&[D, D], RandnOptions::new().seed(seed))? / full(&[], (D as f64).sqrt())?)
    };
    Ok(Weights { q: w(1)?, k: w(2)?, v: w(3)?, out: w(4)? })
}

/// One decoder step, compiled: `[tokens [rows, D], visible bool [rows], select [1, rows],
/// wq, wk, wv, wo]` to the new token's features `[1, D]`. `select` is a one-hot row picking
/// the newest token, so the step has no integer argument that would change its graph.
fn step(args: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> {
    let [tokens, visible, select, wq, wk, wv, wo] = args else {
        return Err(neuronlab::Error::new(neuronlab::ErrorKind::Invalid, "step takes 7 tensors"));
    };
    let h = tokens.layer_norm(None, None)?;
    let query = select.matmul(&h)?.matmul(wq)?; // [1, D]
    let keys = h.matmul(wk)?; // [rows, D]
    let values = h.matmul(wv)?; // [rows, D]
    let scores = query.matmul(&keys.transpose()?)? / full(&[], (D as f64).sqrt())?; // [1, rows]
    let masked = visible.where_(&scores, &full(&[], f64::NEG_INFINITY)?)?;
    let attn = masked.softmax()?.matmul(&values)?; // [1, D]
    Ok(vec![attn.matmul(wo)?.tanh()?])
}

/// A one-hot `[1, rows]` row selecting `index`.
fn one_hot(rows: i64, index: i64) -> neuronlab::Result<Tensor> {
    let positions = arange_with(rows as f64, ArangeOptions::new().dtype(DType::I64))?;
    let hit = positions.eq(&full_with(&[], index as f64, FullOptions::new().dtype(DType::I64))?)?;
    hit.cast(DType::F32)?.unsqueeze(0)
}

fn run() -> neuronlab::Result<()> {
    let w = weights()?;
    let prompt = randn_with(&[PROMPT, D], RandnOptions::new().seed(7))?;
    let names = ["tokens", "visible", "select", "wq", "wk", "wv", "wo"];
    let growing_step = compile_with("decode_step (growing)", step, CompileOptions::new().input_names(&names))?;
    let padded_step = compile_with("decode_step (padded)", step, CompileOptions::new().input_names(&names))?;

    // Growing: the input is exactly the tokens so far.
    let mut growing = prompt.try_clone()?;
    let mut growing_shapes: Vec<Vec<i64>> = Vec::new();
    let mut growing_out = Vec::new();
    let mut growing_compiles = Vec::new();
    for t in PROMPT..PROMPT + STEPS {
        let visible = ones_with(&[t], OnesOptions::new().dtype(DType::Bool))?;
        let select = one_hot(t, t - 1)?;
        let next = growing_step.call1(&[&growing, &visible, &select, &w.q, &w.k, &w.v, &w.out])?;
        growing_compiles.push(growing_step.stats()?.compiles);
        if !growing_shapes.contains(&growing.shape()) {
            growing_shapes.push(growing.shape());
        }
        println!("growing step {t:>2}: input {:?} -> distinct shapes so far: {}", growing.shape(), growing_shapes.len());
        growing_out.push(next.to_vec::<f32>()?);
        growing = cat(&[&growing, &next])?;
    }

    // Padded: the same tokens in a static [CACHE, D] cache; a mask hides the empty rows.
    let mut cache = prompt.pad(&[0, 0, 0, CACHE - PROMPT])?;
    let positions = arange_with(CACHE as f64, ArangeOptions::new().dtype(DType::I64))?;
    let mut padded_shapes: Vec<Vec<i64>> = Vec::new();
    let mut max_diff = 0.0f32;
    let mut padded_compiles = Vec::new();
    for (i, t) in (PROMPT..PROMPT + STEPS).enumerate() {
        let visible = positions.lt(&full_with(&[], t as f64, FullOptions::new().dtype(DType::I64))?)?;
        let select = one_hot(CACHE, t - 1)?;
        let next = padded_step.call1(&[&cache, &visible, &select, &w.q, &w.k, &w.v, &w.out])?;
        padded_compiles.push(padded_step.stats()?.compiles);
        if !padded_shapes.contains(&cache.shape()) {
            padded_shapes.push(cache.shape());
        }
        println!("padded  step {t:>2}: input {:?} -> distinct shapes so far: {}", cache.shape(), padded_shapes.len());
        for (a, b) in next.to_vec::<f32>()?.iter().zip(&growing_out[i]) {
            max_diff = max_diff.max((a - b).abs());
        }
        // Write the new token into row t of the cache: rows before, the token, rows after.
        let before = cache.narrow(0, 0, t)?;
        let after = cache.narrow(0, t + 1, CACHE - t - 1)?;
        cache = cat(&[&before, &next, &after])?;
    }

    println!("distinct step shapes: growing {}, padded {}", growing_shapes.len(), padded_shapes.len());
    println!("max |growing - padded| over {STEPS} steps = {max_diff:e}");
    println!("last token features (first 4): {:?}", &growing_out[growing_out.len() - 1][..4]);
    let tokens: Vec<i64> = (PROMPT..PROMPT + STEPS).collect();
    plot::line("Compiles of the decode step, so far, per generated token")
        .x_axis("tokens in the context", "")
        .y_axis("compiles so far", "")
        .series_xy("growing input", &tokens, &growing_compiles)
        .series_xy("padded cache", &tokens, &padded_compiles)
        .show()?;
    Ok(())
}

neuronlab::main!(run);

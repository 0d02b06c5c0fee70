//! `neuronlab demo`: one pre-norm transformer block (attention with a causal mask, then a GELU
//! MLP), run eagerly op by op on neuron:0, followed by the op table and the summary.

use std::path::Path;

use neuronlab_core::events::{op_table, save_chrome_trace, Summary};
use neuronlab_core::ops::Attrs;
use neuronlab_core::tensor::{format_tensor, FormatOptions};
use neuronlab_core::{Runtime, Tensor};

const MODEL: usize = 256;
const HIDDEN: usize = 1024;

/// Runs the demo with `tokens` tokens and optionally writes a Chrome trace.
pub fn run(tokens: usize, trace: Option<&Path>) -> Result<(), String> {
    let rt = Runtime::from_env().map_err(|e| e.to_string())?;
    println!("{}\n", rt.topology());
    let out = block(&rt, tokens).map_err(|e| e.to_string())?;
    println!("output of the block (first 4 tokens, first 6 features):");
    let head = call(
        &rt,
        "slice",
        &[&out],
        Attrs::new().with("dim", 0).with("end", 4),
    )
    .and_then(|t| {
        call(
            &rt,
            "slice",
            &[&t],
            Attrs::new().with("dim", 1).with("end", 6),
        )
    })
    .map_err(|e| e.to_string())?;
    println!("{}\n", format_tensor(&head, &FormatOptions::default()));
    let events = rt.bus().events();
    println!("{}\n", op_table(&events));
    println!("{}", Summary::from_events(&events));
    if let Some(path) = trace {
        save_chrome_trace(path, &events).map_err(|e| format!("{}: {e}", path.display()))?;
        println!(
            "\ntrace written to {} (open it in Perfetto or chrome://tracing)",
            path.display()
        );
    }
    Ok(())
}

fn call(
    rt: &Runtime,
    op: &str,
    inputs: &[&Tensor],
    attrs: Attrs,
) -> neuronlab_core::Result<Tensor> {
    rt.call1(op, inputs, &attrs)
}

fn randn(rt: &Runtime, shape: &[usize], seed: i64, scale: f64) -> neuronlab_core::Result<Tensor> {
    let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let x = call(
        rt,
        "randn",
        &[],
        Attrs::new().with("shape", shape).with("seed", seed),
    )?;
    let s = call(
        rt,
        "full",
        &[],
        Attrs::new()
            .with("shape", Vec::<i64>::new())
            .with("value", scale),
    )?;
    call(rt, "mul", &[&x, &s], Attrs::new())
}

fn block(rt: &Runtime, tokens: usize) -> neuronlab_core::Result<Tensor> {
    let x = randn(rt, &[tokens, MODEL], 0, 1.0)?;
    let init = 1.0 / (MODEL as f64).sqrt();
    let (wq, wk, wv, wo) = (
        randn(rt, &[MODEL, MODEL], 1, init)?,
        randn(rt, &[MODEL, MODEL], 2, init)?,
        randn(rt, &[MODEL, MODEL], 3, init)?,
        randn(rt, &[MODEL, MODEL], 4, init)?,
    );
    let w1 = randn(rt, &[MODEL, HIDDEN], 5, init)?;
    let w2 = randn(rt, &[HIDDEN, MODEL], 6, 1.0 / (HIDDEN as f64).sqrt())?;

    // Attention with a causal mask.
    let h = call(rt, "layer_norm", &[&x], Attrs::new())?;
    let q = call(rt, "matmul", &[&h, &wq], Attrs::new())?;
    let k = call(rt, "matmul", &[&h, &wk], Attrs::new())?;
    let v = call(rt, "matmul", &[&h, &wv], Attrs::new())?;
    let kt = call(rt, "transpose", &[&k], Attrs::new())?;
    let scores = call(rt, "matmul", &[&q, &kt], Attrs::new())?;
    let scale = call(
        rt,
        "full",
        &[],
        Attrs::new()
            .with("shape", Vec::<i64>::new())
            .with("value", init),
    )?;
    let scores = call(rt, "mul", &[&scores, &scale], Attrs::new())?;
    let n = tokens as i64;
    let ones = call(
        rt,
        "ones",
        &[],
        Attrs::new().with("shape", vec![n, n]).with("dtype", "bool"),
    )?;
    let future = call(rt, "triu", &[&ones], Attrs::new().with("diagonal", 1))?;
    let neg = call(
        rt,
        "full",
        &[],
        Attrs::new()
            .with("shape", Vec::<i64>::new())
            .with("value", f64::NEG_INFINITY),
    )?;
    let masked = call(rt, "where", &[&future, &neg, &scores], Attrs::new())?;
    let probs = call(rt, "softmax", &[&masked], Attrs::new().with("dim", -1))?;
    let ctx = call(rt, "matmul", &[&probs, &v], Attrs::new())?;
    let attn = call(rt, "matmul", &[&ctx, &wo], Attrs::new())?;
    let x = call(rt, "add", &[&x, &attn], Attrs::new())?;

    // MLP.
    let h = call(rt, "layer_norm", &[&x], Attrs::new())?;
    let up = call(rt, "matmul", &[&h, &w1], Attrs::new())?;
    let act = call(rt, "gelu", &[&up], Attrs::new().with("approximate", "tanh"))?;
    let down = call(rt, "matmul", &[&act, &w2], Attrs::new())?;
    call(rt, "add", &[&x, &down], Attrs::new())
}

//! train-mlp: a two-layer MLP regression, `pred = relu(x @ W1 + b1) @ W2 + b2`, trained with
//! AdamW on a mean-squared-error loss: forward, `loss.backward()`, and the optimizer step.
//!
//! Run it with `neuronlab run train-mlp.wasm`. It prints the data and the initial parameters
//! (so a reference can redo the training), then `step N loss X`, one line per step.
//! `neuronlab run train-mlp.wasm --entry steps 40` trains for 40 steps (default 20).

use neuronlab::prelude::*;
use neuronlab::println;

/// Examples in the batch.
const BATCH: i64 = 16;
/// Input features.
const FEATURES: i64 = 4;
/// Hidden units.
const HIDDEN: i64 = 8;

fn randn_f32(shape: &[i64], seed: i64, scale: f64) -> neuronlab::Result<Tensor> {
    let t = randn_with(shape, RandnOptions::new().seed(seed).dtype(DType::F32))?;
    t.mul(&full(&[], scale)?)
}

fn show(name: &str, t: &Tensor) -> neuronlab::Result<()> {
    println!("{name} = {:?}", t.to_vec::<f32>()?);
    Ok(())
}

fn train(steps: i64) -> neuronlab::Result<()> {
    let x = randn_f32(&[BATCH, FEATURES], 1, 1.0)?;
    // The target: a fixed smooth function of the inputs.
    let y = x.sin()?.sum_with(SumOptions::new().dims(&[1]).keepdim(1))?;
    let w1 = randn_f32(&[FEATURES, HIDDEN], 2, 0.5)?.requires_grad()?;
    let b1 = zeros(&[HIDDEN])?.requires_grad()?;
    let w2 = randn_f32(&[HIDDEN, 1], 3, 0.5)?.requires_grad()?;
    let b2 = zeros(&[1])?.requires_grad()?;
    for (name, t) in [("x", &x), ("y", &y), ("w1", &w1), ("w2", &w2)] {
        show(name, t)?;
    }
    let config = AdamWConfig {
        lr: 1e-2,
        ..neuronlab::optim::adamw_defaults()
    };
    let mut opt = AdamW::new(vec![&w1, &b1, &w2, &b2], config)?;
    for step in 1..=steps {
        let hidden = x.matmul(&w1)?.add(&b1)?.relu()?;
        let pred = hidden.matmul(&w2)?.add(&b2)?;
        let loss = pred.sub(&y)?.square()?.mean()?;
        opt.zero_grad()?;
        loss.backward()?;
        opt.step()?;
        println!("step {step} loss {}", loss.item::<f32>()?);
    }
    Ok(())
}

neuronlab::main!(|| train(20));

/// `neuronlab run train-mlp.wasm --entry steps 40`: that many steps.
#[unsafe(export_name = "steps")]
extern "C" fn steps(n: i64) {
    neuronlab::entry(|| train(n));
}

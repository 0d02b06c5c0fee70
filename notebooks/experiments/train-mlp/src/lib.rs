//! train-mlp: a two-layer MLP regression, `pred = relu(x @ W1 + b1) @ W2 + b2`, trained with
//! AdamW on a mean-squared-error loss: forward, `loss.backward()`, and the optimizer step.
//!
//! Run it with `neuronlab run train-mlp.wasm`. It prints the data and the initial parameters
//! (so a reference can redo the training), then `step N loss X`, one line per step.
//! `neuronlab run train-mlp.wasm --entry steps 40` trains for 40 steps (default 20).
//!
//! `--entry compiled 20` trains the same model from the same start with the whole step
//! (forward, backward, AdamW) compiled into one graph: the closure captures the parameters and
//! the optimizer, so it compiles once and every later call runs the cached program, which
//! updates the parameters and the optimizer's state in place. It prints the same lines, then
//! the explanation of the compiled step and its call counts.

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

/// The data and the parameters, as both runs start.
struct Model {
    x: Tensor,
    y: Tensor,
    params: [Tensor; 4],
}

impl Model {
    fn new() -> neuronlab::Result<Model> {
        let x = randn_f32(&[BATCH, FEATURES], 1, 1.0)?;
        // The target: a fixed smooth function of the inputs.
        let y = x.sin()?.sum_with(SumOptions::new().dims(&[1]).keepdim(1))?;
        let params = [
            randn_f32(&[FEATURES, HIDDEN], 2, 0.5)?.requires_grad()?,
            zeros(&[HIDDEN])?.requires_grad()?,
            randn_f32(&[HIDDEN, 1], 3, 0.5)?.requires_grad()?,
            zeros(&[1])?.requires_grad()?,
        ];
        let [w1, _, w2, _] = &params;
        for (name, t) in [("x", &x), ("y", &y), ("w1", w1), ("w2", w2)] {
            show(name, t)?;
        }
        Ok(Model { x, y, params })
    }

    fn optimizer(&self) -> neuronlab::Result<AdamW<'_>> {
        let config = AdamWConfig {
            lr: 1e-2,
            ..neuronlab::optim::adamw_defaults()
        };
        AdamW::new(self.params.iter().collect(), config)
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> neuronlab::Result<Tensor> {
        let [w1, b1, w2, b2] = &self.params;
        let hidden = x.matmul(w1)?.add(b1)?.relu()?;
        let pred = hidden.matmul(w2)?.add(b2)?;
        pred.sub(y)?.square()?.mean()
    }
}

fn train(steps: i64) -> neuronlab::Result<()> {
    let model = Model::new()?;
    let mut opt = model.optimizer()?;
    for step in 1..=steps {
        let loss = model.loss(&model.x, &model.y)?;
        opt.zero_grad()?;
        loss.backward()?;
        opt.step()?;
        println!("step {step} loss {}", loss.item::<f32>()?);
    }
    Ok(())
}

fn train_compiled(steps: i64) -> neuronlab::Result<()> {
    let model = Model::new()?;
    let mut opt = model.optimizer()?;
    let step = compile_with(
        "train_step",
        |batch: &[Tensor]| {
            let loss = model.loss(&batch[0], &batch[1])?;
            opt.zero_grad()?;
            loss.backward()?;
            opt.step()?;
            Ok(vec![loss.detach()?])
        },
        CompileOptions::new().input_names(&["x", "y"]),
    )?;
    for n in 1..=steps {
        let loss = step.call1(&[&model.x, &model.y])?;
        println!("step {n} loss {}", loss.item::<f32>()?);
    }
    println!("{}", step.explain()?);
    let stats = step.stats()?;
    println!(
        "train_step: {} calls, {} compile(s), {} cache hits",
        stats.calls, stats.compiles, stats.cache_hits
    );
    Ok(())
}

neuronlab::main!(|| train(20));

/// `neuronlab run train-mlp.wasm --entry steps 40`: that many steps.
#[unsafe(export_name = "steps")]
extern "C" fn steps(n: i64) {
    neuronlab::entry(|| train(n));
}

/// `neuronlab run train-mlp.wasm --entry compiled 20`: that many compiled steps.
#[unsafe(export_name = "compiled")]
extern "C" fn compiled(n: i64) {
    neuronlab::entry(|| train_compiled(n));
}

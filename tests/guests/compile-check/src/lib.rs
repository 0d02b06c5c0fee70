//! compile-check: exercises compiled functions from a real Rust guest. Each line it prints
//! starts with a label that tests/python/test_compile.py looks for; the host's compile
//! events are printed by `NEURONLAB_LOGS=all`.

use neuronlab::prelude::*;
use neuronlab::println;

fn f32_range(n: i64) -> neuronlab::Result<Tensor> {
    arange_with(n as f64, ArangeOptions::new().dtype(DType::F32))
}

/// x @ w, then a bias and gelu, then a softmax: 5 ops.
fn mlp(args: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> {
    let (x, w, b) = (&args[0], &args[1], &args[2]);
    let h = x.matmul(w)?.add(b)?.gelu()?;
    Ok(vec![(&h * &h).softmax()?])
}

/// Reads a value in the middle: a graph break.
fn with_break(args: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> {
    let x = &args[0];
    let m = x.exp()?.sum()?;
    let scale = m.item::<f32>()?; // reads data: graph break
    let y = x.mul(&full(&[], 1.0 / scale as f64)?)?.tanh()?;
    Ok(vec![y])
}

fn double(args: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> {
    Ok(vec![(&args[0] + &args[0]).relu()?])
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> neuronlab::Result<f32> {
    Ok(a.sub(b)?.abs()?.max()?.item::<f32>()?)
}

/// sum((x @ w)^2), with its backward inside when `w` requires a gradient.
fn loss_and_backward(args: &[Tensor]) -> neuronlab::Result<Vec<Tensor>> {
    let (x, w) = (&args[0], &args[1]);
    let loss = x.matmul(w)?.square()?.sum()?;
    if w.is_grad_required() {
        loss.backward()?;
    }
    Ok(vec![loss.detach()?])
}

fn mse(x: &Tensor, p: &Tensor) -> neuronlab::Result<Tensor> {
    x.matmul(p)?.square()?.mean()
}

/// Compiled training steps: gradients written back, requires_grad in the signature, captured
/// parameters read at every call, and the errors of a bad step.
fn training() -> neuronlab::Result<()> {
    let x = randn_with(&[5, 4], RandnOptions::new().seed(7))?;
    let w = randn_with(&[4, 3], RandnOptions::new().seed(8))?.requires_grad()?;
    let f = compile_with(
        "grad_step",
        loss_and_backward,
        CompileOptions::new().input_names(&["x", "w"]),
    )?;
    f.call1(&[&x, &w])?;
    let got = w.grad()?.expect("the compiled step left a gradient");
    let twin = w.detach()?.requires_grad()?;
    loss_and_backward(&[x.try_clone()?, twin.try_clone()?])?;
    let want = twin.grad()?.expect("eager backward left a gradient");
    println!("grad_step grad vs eager max diff: {}", max_abs_diff(&got, &want)?);
    // The gradient exists now, so the step accumulates into it: a new version.
    f.call1(&[&x, &w])?;
    let twice = want.add(&want)?;
    let accumulated = w.grad()?.expect("still a gradient");
    println!("grad_step accumulated vs twice max diff: {}", max_abs_diff(&accumulated, &twice)?);
    f.call1(&[&x, &w.detach()?])?;

    // A closure over a parameter and its optimizer, against the same steps run eagerly.
    let p = randn_with(&[4, 2], RandnOptions::new().seed(9))?.requires_grad()?;
    let pe = p.detach()?.requires_grad()?;
    let config = SGDConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let mut opt = SGD::new(vec![&p], config)?;
    let mut opt_e = SGD::new(vec![&pe], config)?;
    let step = compile_with(
        "sgd_step",
        |args: &[Tensor]| {
            let loss = mse(&args[0], &p)?;
            opt.zero_grad()?;
            loss.backward()?;
            opt.step()?;
            Ok(vec![loss.detach()?])
        },
        CompileOptions::new().input_names(&["x"]),
    )?;
    let mut worst = 0.0f32;
    for _ in 0..3 {
        let compiled = step.call1(&[&x])?;
        let eager = mse(&x, &pe)?;
        opt_e.zero_grad()?;
        eager.backward()?;
        opt_e.step()?;
        worst = worst.max(max_abs_diff(&compiled, &eager.detach()?)?);
    }
    worst = worst.max(max_abs_diff(&p, &pe)?);
    println!("sgd_step compiled vs eager max diff: {worst}");
    // The parameter is read at every call, not baked in: zero it, and the loss is zero.
    p.set_data(&zeros_with(&[4, 2], ZerosOptions::new().dtype(DType::F32))?)?;
    let after = step.call1(&[&x])?;
    println!("sgd_step loss after set_data: {}", after.item::<f32>()?);
    let stats = step.stats()?;
    println!("sgd_step compiles: {} of {} calls", stats.compiles, stats.calls);
    drop(step);

    // Bad steps: each a clear error, the parameter untouched.
    let before = p.try_clone()?;
    let q = &p;
    let twice_backward = compile("twice_backward", |args: &[Tensor]| {
        let loss = mse(&args[0], q)?;
        loss.backward()?;
        loss.backward()?;
        Ok(vec![loss.detach()?])
    })?;
    if let Err(e) = twice_backward.call1(&[&x]) {
        println!("twice_backward error: {e}");
    }
    let reshaping = compile("reshaping", |_: &[Tensor]| {
        q.set_data(&zeros(&[3])?)?;
        Ok(vec![])
    })?;
    if let Err(e) = reshaping.call(&[]) {
        println!("reshaping error: {e}");
    }
    let reading = compile("reading", |args: &[Tensor]| {
        let loss = mse(&args[0], q)?;
        loss.backward()?;
        println!("never printed: {}", loss.item::<f32>()?);
        Ok(vec![])
    })?;
    if let Err(e) = reading.call(&[&x]) {
        println!("reading error: {e}");
    }
    let forward_only = compile("forward_only", |args: &[Tensor]| Ok(vec![mse(&args[0], q)?]))?;
    if let Err(e) = forward_only.call(&[&x]) {
        println!("forward_only error: {e}");
    }
    println!("p unchanged by the bad steps: {}", max_abs_diff(&p, &before)? == 0.0);
    Ok(())
}

fn run() -> neuronlab::Result<()> {
    let w = randn_with(&[64, 32], RandnOptions::new().seed(1))?;
    let b = randn_with(&[32], RandnOptions::new().seed(2))?;
    let step = compile_with("mlp", mlp, CompileOptions::new().input_names(&["x", "w", "b"]))?;

    // The same signature twice: one compile, then a cache hit. Results equal eager.
    let x4 = f32_range(256)?.reshape(&[4, 64])?.div(&full(&[], 256.0)?)?;
    let eager = mlp(&[x4.try_clone()?, w.try_clone()?, b.try_clone()?])?.remove(0);
    let first = step.call1(&[&x4, &w, &b])?;
    let second = step.call1(&[&x4, &w, &b])?;
    println!("mlp compiled vs eager max diff: {}", max_abs_diff(&first, &eager)?);
    println!("mlp second call vs first max diff: {}", max_abs_diff(&second, &first)?);

    // A new shape and a new dtype: two recompiles, each with its reason.
    let x5 = randn_with(&[5, 64], RandnOptions::new().seed(3))?;
    let y5 = step.call1(&[&x5, &w, &b])?;
    println!("mlp [5, 64] output shape: {:?}", y5.shape());
    let xh = x5.cast(DType::Bf16)?;
    let wh = w.cast(DType::Bf16)?;
    let bh = b.cast(DType::Bf16)?;
    let yh = step.call1(&[&xh, &wh, &bh])?;
    println!("mlp bf16 output dtype: {}", yh.dtype());

    // A graph break: the result is still right.
    let broken = compile("with_break", with_break)?;
    let x = f32_range(6)?.div(&full(&[], 6.0)?)?;
    let got = broken.call1(&[&x])?;
    let want = with_break(&[x.try_clone()?])?.remove(0);
    println!("with_break vs eager max diff: {}", max_abs_diff(&got, &want)?);
    broken.call1(&[&x])?;
    // Under fullgraph the break is an error.
    let strict = compile_with("with_break_fullgraph", with_break, CompileOptions::new().fullgraph())?;
    match strict.call1(&[&x]) {
        Ok(_) => println!("fullgraph: unexpectedly succeeded"),
        Err(e) => println!("fullgraph error: {e}"),
    }

    // The recompile limit: past it, calls run eagerly and stay correct.
    let limited = compile_with("double", double, CompileOptions::new().recompile_limit(2))?;
    for n in 1..=5 {
        let x = f32_range(n)?;
        let y = limited.call1(&[&x])?;
        println!("double n={n}: {:?}", y.to_vec::<f32>()?);
    }
    let failing = compile_with(
        "double_strict",
        double,
        CompileOptions::new().recompile_limit(1).fail_on_recompile(),
    )?;
    for n in 1..=3 {
        match failing.call1(&[&f32_range(n)?]) {
            Ok(y) => println!("double_strict n={n}: {:?}", y.to_vec::<f32>()?),
            Err(e) => println!("double_strict n={n} error: {e}"),
        }
    }

    // Lazy mode: the same graph twice compiles once.
    for round in 0..2 {
        let y = lazy(|| {
            let h = x4.matmul(&w)?.relu()?;
            h.sum_with(SumOptions::new().dims(&[1]))
        })?;
        println!("lazy round {round}: {:?}", y.shape());
    }

    println!("explain:\n{}", step.explain()?);
    training()
}

neuronlab::main!(run);

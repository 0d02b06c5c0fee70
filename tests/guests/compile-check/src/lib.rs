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
    Ok(())
}

neuronlab::main!(run);

//! hello-tensors: a first neuronlab experiment.
//!
//! It makes tensors, runs eager ops on the simulated NeuronCore and prints the results, then
//! catches a shape error. Every input comes from `arange`, so each printed value can be
//! checked against numpy:
//!
//! ```python
//! a = np.arange(6, dtype=np.float32).reshape(2, 3)
//! b = np.arange(3, dtype=np.float32)
//! ```
//!
//! The lines that start with a name and `=` hold row-major values, as Rust prints a `Vec`.

use neuronlab::prelude::*;
use neuronlab::println;

fn run() -> neuronlab::Result<()> {
    // Creation. `arange` with integral bounds gives i64, as numpy and torch do; ask for f32.
    let f32_range = |end: f64| arange_with(end, ArangeOptions::new().dtype(DType::F32));
    let a = f32_range(6.0)?.reshape(&[2, 3])?;
    let b = f32_range(3.0)?;
    let z = zeros(&[2, 2])?;
    let r = randn_with(&[2, 3], RandnOptions::new().seed(42))?;
    println!("a: {:?} {}", a.shape(), a.dtype());
    println!("{a}");
    println!("zeros: {z}");
    println!("randn(seed=42) shape: {:?}", r.shape());

    // Eager ops.
    let sum = &a + &b; // [2, 3] + [3] broadcasts
    println!("a + b = {:?}", sum.to_vec::<f32>()?);
    let gram = a.matmul(&a.transpose()?)?; // a @ a.T: [2, 2]
    println!("a @ a.T = {:?}", gram.to_vec::<f32>()?);
    let soft = a.softmax()?; // along the last dim
    println!("softmax(a, -1) = {:?}", soft.to_vec::<f32>()?);
    let norm = a.layer_norm(None, None)?; // over the last dim, eps 1e-5
    println!("layer_norm(a) = {:?}", norm.to_vec::<f32>()?);
    let rows = a.sum_with(SumOptions::new().dims(&[1]))?;
    println!("a.sum(1) = {:?}", rows.to_vec::<f32>()?);
    println!("a.sum() = {:?}", a.sum()?.item::<f32>()?);
    let scaled = (&a - &b) * a.sqrt()?; // operators chain like numpy expressions
    println!("(a - b) * sqrt(a) = {:?}", scaled.to_vec::<f32>()?);

    // bf16: the host rounds as the device would; Bf16::to_f32 reads the stored values.
    let thirds = (&b / (&b + &ones(&[3])?)).cast(DType::Bf16)?;
    let thirds_f32: Vec<f32> = thirds
        .to_vec::<Bf16>()?
        .into_iter()
        .map(f32::from)
        .collect();
    println!("bf16(b / (b + 1)) = {thirds_f32:?}");
    println!("{thirds}");

    // A shape error comes back as a Result.
    match a.matmul(&b.reshape(&[3, 1])?.transpose()?) {
        Ok(t) => println!("unexpected: {t}"),
        Err(e) => println!("caught: {e}"),
    }
    Ok(())
}

neuronlab::main!(run);

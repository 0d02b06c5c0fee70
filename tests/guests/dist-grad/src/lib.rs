//! dist-grad: gradients through collectives, for tests/python/test_dist_training.py. Run with
//! `--nproc N`; each rank prints JSON lines comparing its sharded computation with the same
//! model computed whole on the rank.
//!
//! - `tp`: a two-layer MLP, the first layer column-parallel and the second row-parallel
//!   (Megatron-LM), its input copied into and its output reduced out of the group.
//! - `fsdp`: the same MLP with each weight sharded on dim 0, all-gathered before use (its
//!   gradient reduce-scattered by the all-gather's adjoint), each rank on its own batch.
//! - `adjoints`: the gradient of a weighted sum of each collective's output, by backward
//!   and by hand.

use neuronlab::dist::{self, region, Group, ReduceOp};
use neuronlab::prelude::*;
use neuronlab::println;

const B: i64 = 6;
const H: i64 = 8;
const F: i64 = 12;

fn randn_seeded(shape: &[i64], seed: i64) -> Result<Tensor> {
    randn_with(shape, RandnOptions::new().seed(seed))
}

/// The largest absolute difference of two tensors.
fn max_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    no_grad(|| a.sub(b)?.abs()?.max()?.cast(DType::F64)?.item::<f64>())
}

fn mlp(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Result<Tensor> {
    x.matmul(w1)?.tanh()?.matmul(w2)
}

fn loss(y: &Tensor, target: &Tensor) -> Result<Tensor> {
    y.sub(target)?.square()?.mean()
}

/// This rank's chunk of `t` along `dim` (equal chunks: the sizes divide).
fn chunk(t: &Tensor, dim: i64, group: &Group) -> Result<Tensor> {
    let n = group.size() as i64;
    let size = t.shape()[dim as usize] / n;
    t.narrow(dim, group.rank()? as i64 * size, size)?
        .contiguous()
}

fn tp() -> Result<()> {
    let group = Group::world();
    let x = randn_seeded(&[B, H], 1)?;
    let target = randn_seeded(&[B, H], 2)?;
    let w1 = randn_seeded(&[H, F], 3)?.requires_grad()?;
    let w2 = randn_seeded(&[F, H], 4)?.requires_grad()?;
    let whole = loss(&mlp(&x, &w1, &w2)?, &target)?;
    whole.backward()?;

    let w1_shard = chunk(&w1.detach()?, 1, &group)?.requires_grad()?; // column-parallel
    let w2_shard = chunk(&w2.detach()?, 0, &group)?.requires_grad()?; // row-parallel
    let x_in = region::copy_to(&x, &group)?;
    let partial = x_in.matmul(&w1_shard)?.tanh()?.matmul(&w2_shard)?;
    let y = region::reduce_from(&partial, &group)?;
    let sharded = loss(&y, &target)?;
    sharded.backward()?;
    println!(
        "{{\"entry\": \"tp\", \"rank\": {}, \"loss\": {}, \"loss_whole\": {}, \"w1\": {}, \"w2\": {}}}",
        dist::rank(),
        sharded.item::<f32>()?,
        whole.item::<f32>()?,
        max_diff(&w1_shard.grad()?.expect("w1 grad"), &chunk(&w1.grad()?.expect("grad"), 1, &group)?)?,
        max_diff(&w2_shard.grad()?.expect("w2 grad"), &chunk(&w2.grad()?.expect("grad"), 0, &group)?)?,
    );
    Ok(())
}

fn fsdp() -> Result<()> {
    let group = Group::world();
    let n = group.size() as i64;
    // The global batch is n rows per rank; each rank trains on its own rows.
    let x = randn_seeded(&[B * n, H], 1)?;
    let target = randn_seeded(&[B * n, H], 2)?;
    let w1 = randn_seeded(&[H, F], 3)?.requires_grad()?;
    let w2 = randn_seeded(&[F, H], 4)?.requires_grad()?;
    let whole = loss(&mlp(&x, &w1, &w2)?, &target)?;
    whole.backward()?;

    let w1_shard = chunk(&w1.detach()?, 0, &group)?.requires_grad()?;
    let w2_shard = chunk(&w2.detach()?, 0, &group)?.requires_grad()?;
    let full1 = dist::all_gather(&w1_shard, 0, &group)?;
    let full2 = dist::all_gather(&w2_shard, 0, &group)?;
    let (mine, mine_target) = (chunk(&x, 0, &group)?, chunk(&target, 0, &group)?);
    // The global loss is the mean of the ranks' losses: each backward sends 1/n of its part.
    let local = loss(&mlp(&mine, &full1, &full2)?, &mine_target)?;
    let scaled = local.div(&full(&[], n as f64)?)?;
    scaled.backward()?;
    let global = dist::all_reduce(&local.detach()?, ReduceOp::Avg, &group)?;
    println!(
        "{{\"entry\": \"fsdp\", \"rank\": {}, \"loss\": {}, \"loss_whole\": {}, \"w1\": {}, \"w2\": {}}}",
        dist::rank(),
        global.item::<f32>()?,
        whole.item::<f32>()?,
        max_diff(&w1_shard.grad()?.expect("w1 grad"), &chunk(&w1.grad()?.expect("grad"), 0, &group)?)?,
        max_diff(&w2_shard.grad()?.expect("w2 grad"), &chunk(&w2.grad()?.expect("grad"), 0, &group)?)?,
    );
    Ok(())
}

/// Each collective's gradient for the loss `sum(out * c_r)`, with `c_r` a different tensor on
/// each rank: by backward, and the formula written out with plain collectives.
fn adjoints() -> Result<()> {
    let group = Group::world();
    let r = dist::rank() as i64;
    let n = group.size() as i64;
    let x = || randn_seeded(&[n * 2, 3], 10 + r);
    let weights = |shape: &[i64]| randn_seeded(shape, 100 + r);
    let check = |name: &str, out: &Tensor, input: &Tensor, expected: Tensor| -> Result<()> {
        let c = weights(&out.shape())?;
        out.mul(&c)?.sum()?.backward()?;
        let _ = &c;
        let got = input.grad()?.expect("a gradient");
        println!(
            "{{\"entry\": \"adjoint\", \"op\": \"{name}\", \"rank\": {r}, \"diff\": {}}}",
            max_diff(&got, &expected)?
        );
        Ok(())
    };
    // all_reduce(sum): d/dx_r sum_s <c_s, sum_t x_t> = sum_s c_s.
    let a = x()?.requires_grad()?;
    let out = dist::all_reduce(&a, ReduceOp::Sum, &group)?;
    let c_shape = out.shape();
    check(
        "all_reduce",
        &out,
        &a,
        no_grad(|| dist::all_reduce(&weights(&c_shape)?, ReduceOp::Sum, &group))?,
    )?;
    // all_gather(dim 0): the rows of sum_s c_s that came from this rank.
    let a = x()?.requires_grad()?;
    let out = dist::all_gather(&a, 0, &group)?;
    let c_shape = out.shape();
    let summed = no_grad(|| dist::all_reduce(&weights(&c_shape)?, ReduceOp::Sum, &group))?;
    check("all_gather", &out, &a, chunk(&summed, 0, &group)?)?;
    // reduce_scatter(sum, dim 0): every rank's c, gathered.
    let a = x()?.requires_grad()?;
    let out = dist::reduce_scatter(&a, ReduceOp::Sum, 0, &group)?;
    let c_shape = out.shape();
    check(
        "reduce_scatter",
        &out,
        &a,
        no_grad(|| dist::all_gather(&weights(&c_shape)?, 0, &group))?,
    )?;
    // broadcast from rank 0: the sum of every c on rank 0, zeros elsewhere.
    let a = x()?.requires_grad()?;
    let out = dist::broadcast(&a, 0, &group)?;
    let c_shape = out.shape();
    let summed = no_grad(|| dist::all_reduce(&weights(&c_shape)?, ReduceOp::Sum, &group))?;
    let expected = if r == 0 {
        summed
    } else {
        summed.mul(&zeros(&[])?)?
    };
    check("broadcast", &out, &a, expected)?;
    // all_to_all(split 0, concat 1) has all_to_all(split 1, concat 0) as adjoint.
    let a = x()?.requires_grad()?;
    let out = dist::all_to_all(&a, 0, 1, &group)?;
    let c_shape = out.shape();
    check(
        "all_to_all",
        &out,
        &a,
        no_grad(|| dist::all_to_all(&weights(&c_shape)?, 1, 0, &group))?,
    )?;
    Ok(())
}

fn run() -> Result<()> {
    match neuronlab::args().first().map(String::as_str) {
        Some("tp") => tp(),
        Some("fsdp") => fsdp(),
        Some("adjoints") => adjoints(),
        _ => Err(Error::new(
            ErrorKind::Invalid,
            "usage: -- tp | fsdp | adjoints",
        )),
    }
}

neuronlab::main!(run);

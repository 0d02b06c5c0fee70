//! tp-mlp: a two-layer MLP, `y = relu(x @ W1) @ W2`, run tensor-parallel (Megatron style).
//!
//! Run it on several ranks: `neuronlab run tp-mlp.wasm --nproc 4`. The world is a 1-D mesh
//! named `tp`. Every rank makes the same `x` [8, 16] (tokens x d_model), `W1` [16, 64] and
//! `W2` [64, 16] from fixed seeds, then:
//!
//! - `W1` is split by columns (`Shard(1)`, column-parallel): rank `r` holds hidden units
//!   `r*16..(r+1)*16` (with 4 ranks), so `h_r = relu(x @ W1_r)` needs no communication;
//!   relu is elementwise, so it applies to each rank's columns on their own.
//! - `W2` is split by rows (`Shard(0)`, row-parallel) to match: `h_r @ W2_r` is this rank's
//!   share of `y`, and `y` is the sum of the shares.
//! - The shares are wrapped as a `Partial(sum)` distributed tensor and redistributed to
//!   `Replicate()`: that is one `all_reduce(sum)` over the tp group, the only collective of
//!   the forward pass (`distribute` broadcasts rank 0's inputs once, at setup).
//!
//! Every rank also computes the dense `y_ref` and compares. Shards follow `torch.chunk`, so
//! any number of ranks works (with 3 ranks, the hidden dim splits 22, 22, 20). The printed
//! lines are deterministic and, when the world size divides 64, the same on every rank.

use neuronlab::prelude::*;
use neuronlab::println;

/// Tokens in the batch.
const TOKENS: i64 = 8;
/// Model width.
const D_MODEL: i64 = 16;
/// MLP hidden width, split over the ranks.
const HIDDEN: i64 = 64;

/// An f32 standard-normal tensor from `seed`: the same on every rank.
fn randn_f32(shape: &[i64], seed: i64) -> neuronlab::Result<Tensor> {
    randn_with(shape, RandnOptions::new().seed(seed).dtype(DType::F32))
}

/// The largest absolute value of a tensor.
fn max_abs(t: &Tensor) -> neuronlab::Result<f32> {
    t.abs()?.max()?.item::<f32>()
}

fn run() -> neuronlab::Result<()> {
    let world = dist::world_size();
    let mesh = DeviceMesh::new(&[world as usize], &["tp"])?;

    let x = randn_f32(&[TOKENS, D_MODEL], 1)?;
    let w1 = randn_f32(&[D_MODEL, HIDDEN], 2)?;
    let w2 = randn_f32(&[HIDDEN, D_MODEL], 3)?;

    // Every rank passes the whole tensor and keeps its shard (rank 0's data is the source).
    let x_dist = DTensor::distribute(&x, &mesh, &[Placement::Replicate])?;
    let w1_dist = DTensor::distribute(&w1, &mesh, &[Placement::Shard(1)])?;
    let w2_dist = DTensor::distribute(&w2, &mesh, &[Placement::Shard(0)])?;
    let x_local = x_dist.to_local()?;
    let w1_local = w1_dist.to_local()?;
    let w2_local = w2_dist.to_local()?;
    println!("world size: {world} (a 1-D mesh \"tp\" over every rank)");
    println!(
        "W1 {:?} as Shard(1), column-parallel: local shard {:?}",
        w1.shape(),
        w1_local.shape()
    );
    println!(
        "W2 {:?} as Shard(0), row-parallel: local shard {:?}",
        w2.shape(),
        w2_local.shape()
    );

    // This rank's hidden units, then its share of y.
    let h = x_local.matmul(&w1_local)?.relu()?;
    let y_partial = h.matmul(&w2_local)?;
    let partial = [Placement::Partial(ReduceOp::Sum)];
    let y = DTensor::from_local(&y_partial, &mesh, &partial)?
        .redistribute(&[Placement::Replicate])?
        .to_local()?;
    println!("y = relu(x @ W1) @ W2: {:?}", y.shape());

    // The dense reference, on every rank.
    let y_ref = x.matmul(&w1)?.relu()?.matmul(&w2)?;
    let diff = max_abs(&y.sub(&y_ref)?)?;
    let scale = max_abs(&y_ref)?;
    println!("max |y_tp - y_ref| = {diff:.3e}");
    if diff <= 1e-5 * scale {
        println!("tp-mlp: OK");
    } else {
        println!("tp-mlp: MISMATCH");
    }
    println!("{y}");
    println!(
        "the forward pass ran one collective: redistributing y from Partial(sum) to \
         Replicate() is an all_reduce(sum) of the {world} partial {:?} products over the tp \
         group; the column-parallel W1 and the relu need none (distribute only broadcast rank \
         0's x, W1 and W2 once, at setup)",
        y_partial.shape()
    );
    Ok(())
}

neuronlab::main!(run);

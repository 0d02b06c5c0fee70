//! mesh-4x8: a 2-D device mesh of 32 ranks, FSDP across chips and tensor parallelism inside
//! each chip, as torch's `init_device_mesh("neuron", (8, 4), mesh_dim_names=("fsdp", "tp"))`.
//!
//! Run it with `neuronlab run mesh-4x8.wasm --nproc 32`: 8 Trainium2 chips of 4 logical
//! NeuronCores each (LNC=2), rank `r` on `neuron:r`.
//!
//! The mesh is `arange(32).reshape(8, 4)`, so rank `r` sits at `fsdp = r / 4`, `tp = r % 4`:
//!
//! - a `tp` group is one row: 4 consecutive ranks, `[4c, 4c+1, 4c+2, 4c+3]`, the 4 cores of
//!   chip `c`. Tensor parallelism talks at every layer, so its traffic stays on the chip;
//! - an `fsdp` group is one column: the ranks `t, t+4, ..., t+28`, strided by 4, core `t` of
//!   each of the 8 chips. FSDP talks once per parameter (gather) and gradient (reduce-scatter),
//!   so it is the dim that crosses the chip-to-chip links.
//!
//! It then checks three things on every rank:
//!
//! 1. a parameter `P` [64, 32] distributed as `[Shard(0), Replicate()]` (its rows split over
//!    the 8 fsdp ranks, each tp rank of a chip holding the same rows) gathers back exactly;
//! 2. a gradient `G` [64, 32], different on every rank, wrapped as `[Partial(sum),
//!    Replicate()]` and redistributed to `[Shard(0), Replicate()]` (a reduce-scatter over each
//!    fsdp group) equals the matching rows of an `all_reduce(sum)` of `G` over the fsdp group,
//!    bit for bit: both fold the ranks in group order;
//! 3. an `all_reduce` over the tp group and a barrier on the world.

use neuronlab::prelude::*;
use neuronlab::println;

/// The ranks this experiment lays out.
const WORLD: u32 = 32;
/// The mesh: 8 chips (fsdp) by 4 cores per chip (tp).
const MESH: [usize; 2] = [8, 4];
/// Rows of the parameter and the gradient, sharded over fsdp.
const ROWS: i64 = 64;
/// Columns of the parameter and the gradient.
const COLS: i64 = 32;
/// The seed of the parameter (the same on every rank) and the base seed of the gradients.
const SEED: i64 = 1234;

/// An f32 standard-normal tensor from `seed`.
fn randn_f32(shape: &[i64], seed: i64) -> neuronlab::Result<Tensor> {
    randn_with(shape, RandnOptions::new().seed(seed).dtype(DType::F32))
}

/// Whether two f32 tensors have the same shape and bit-identical values.
fn identical(a: &Tensor, b: &Tensor) -> neuronlab::Result<bool> {
    if a.shape() != b.shape() {
        return Ok(false);
    }
    let (a, b) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    Ok(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()))
}

/// `ok` as the word the check lines end with.
fn verdict(ok: bool) -> &'static str {
    if ok {
        "exact"
    } else {
        "MISMATCH"
    }
}

fn run() -> neuronlab::Result<()> {
    let world = dist::world_size();
    if world != WORLD {
        println!(
            "mesh-4x8 lays out 32 ranks on an [8, 4] mesh, but this run has {world}: run it \
             with `neuronlab run mesh-4x8.wasm --nproc 32`"
        );
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("mesh-4x8 needs 32 ranks, got {world}: run it with --nproc 32"),
        ));
    }
    let rank = dist::rank();

    // The last mesh dim varies fastest, so "tp" groups are consecutive ranks (the 4 cores of
    // one chip) and "fsdp" groups are strided by 4 (one core on each chip).
    let mesh = DeviceMesh::new(&MESH, &["fsdp", "tp"])?;
    let fsdp_coord = mesh.coordinate("fsdp")?;
    let tp_coord = mesh.coordinate("tp")?;
    let tp = mesh.group("tp")?;
    let fsdp = mesh.group("fsdp")?;
    println!("{mesh}");
    println!("rank {rank} of {world}: coordinates fsdp={fsdp_coord}, tp={tp_coord}");
    println!("tp group: {tp}");
    println!("fsdp group: {fsdp}");
    println!(
        "tp groups are 4 consecutive ranks, the 4 cores of one Trainium2 chip (chip \
         {fsdp_coord} here), so tp traffic stays on the chip; fsdp groups are strided by 4, \
         core {tp_coord} of each of the 8 chips, so fsdp traffic crosses chips"
    );

    // torch.chunk of ROWS over the 8 fsdp ranks: this rank's rows.
    let chunk = (ROWS + MESH[0] as i64 - 1) / MESH[0] as i64;
    let first_row = (fsdp_coord as i64 * chunk).min(ROWS);
    let n_rows = chunk.min(ROWS - first_row);
    let sharded = [Placement::Shard(0), Placement::Replicate];

    // (a) FSDP shards a parameter's rows over fsdp and replicates it over tp; gathering it
    // back gives the original.
    let p = randn_f32(&[ROWS, COLS], SEED)?;
    let p_dist = DTensor::distribute(&p, &mesh, &sharded)?;
    let p_local = p_dist.to_local()?;
    println!(
        "P {:?} as [{}]: local shard {:?} (rows {first_row}..{} of P)",
        p.shape(),
        Placement::join(&sharded),
        p_local.shape(),
        first_row + n_rows
    );
    let p_ok = identical(&p_dist.full_tensor()?, &p)?;
    println!("all-gather of the sharded parameter: {}", verdict(p_ok));

    // (b) Each data-parallel replica (fsdp coordinate) computed a different gradient; the tp
    // ranks of one chip hold the same one, as Replicate() over tp says. As Partial(sum) over
    // fsdp, its value is the sum over the fsdp group; redistributing to Shard(0) is a
    // reduce-scatter over each fsdp group, which leaves each rank the sum of its rows only.
    let g = randn_f32(&[ROWS, COLS], SEED + fsdp_coord as i64)?;
    let partial = [Placement::Partial(ReduceOp::Sum), Placement::Replicate];
    let g_shard = DTensor::from_local(&g, &mesh, &partial)?
        .redistribute(&sharded)?
        .to_local()?;
    let g_sum = dist::all_reduce(&g, ReduceOp::Sum, &fsdp)?;
    let g_ok = identical(&g_shard, &g_sum.narrow(0, first_row, n_rows)?)?;
    println!(
        "G {:?} as [{}] -> [{}]: local shard {:?}",
        g.shape(),
        Placement::join(&partial),
        Placement::join(&sharded),
        g_shard.shape()
    );
    println!("reduce-scatter of the gradient: {}", verdict(g_ok));

    // (c) An all_reduce inside the chip: [rank, 1] summed over the tp group gives the sum of
    // its ranks and its size.
    let mine = from_slice(&[rank as f32, 1.0], &[2])?;
    let total = dist::all_reduce(&mine, ReduceOp::Sum, &tp)?.to_vec::<f32>()?;
    let group_first = rank - tp_coord as u32;
    let expected = [(0..4).map(|t| (group_first + t) as f32).sum::<f32>(), 4.0];
    let tp_ok = total == expected;
    println!(
        "all_reduce(sum) of [rank, 1] over the tp group: {total:?} ({})",
        if tp_ok { "as expected" } else { "MISMATCH" }
    );
    dist::barrier(&Group::world())?;
    println!("barrier on the world: every rank arrived");

    if p_ok && g_ok && tp_ok {
        println!("mesh-4x8: OK");
    } else {
        println!("mesh-4x8: MISMATCH");
    }
    Ok(())
}

neuronlab::main!(run);

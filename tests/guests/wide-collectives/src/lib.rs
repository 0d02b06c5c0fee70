//! wide-collectives: every collective on inputs of 32 to 256 KiB per rank in each dtype, for
//! tests/python/test_mpi.py. Across processes, inputs this large travel as a message of
//! their own, sent from the tensor's memory and received into the result's; the test checks
//! that `mpirun -n P ... --nproc T` prints what `--nproc P*T` prints in one process.
//!
//! Each rank prints, per dtype and collective, the shape of its result and an FNV-1a hash of
//! its elements (as f64 bits), so any element that differs shows. Run with a world size that
//! divides 64.

use neuronlab::dist::{self, Group, ReduceOp};
use neuronlab::prelude::*;
use neuronlab::println;

/// Rows and columns of each rank's input: 32,768 elements.
const ROWS: i64 = 64;
const COLS: i64 = 512;

/// FNV-1a over the elements' values as f64 bits.
fn digest(t: &Tensor) -> Result<String> {
    let values = t.cast(DType::F64)?.to_vec::<f64>()?;
    let mut h: u64 = 0xcbf29ce484222325;
    for v in values {
        for b in v.to_bits().to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
    }
    Ok(format!("{:?} {h:016x}", t.shape()))
}

/// This rank's input of `dtype`: different on every rank, small enough that sums of the
/// integer dtypes stay in range.
fn input(dtype: DType, rank: u32) -> Result<Tensor> {
    let x = randn_with(&[ROWS, COLS], RandnOptions::new().seed(17 + rank as i64))?;
    match dtype {
        DType::Bool => x.gt(&full(&[], 0.0)?),
        DType::U8 => x.abs()?.mul(&full(&[], 20.0)?)?.cast(dtype),
        d if is_float(d) => x.cast(dtype),
        _ => x.mul(&full(&[], 1000.0)?)?.cast(dtype),
    }
}

fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::Bf16 | DType::F16 | DType::F64)
}

fn run() -> Result<()> {
    let world = Group::world();
    let rank = dist::rank();
    // Every dtype: bool travels inline, the others as their own bytes.
    for dtype in DType::ALL {
        let x = input(dtype, rank)?;
        let numeric = dtype != DType::Bool;
        if numeric {
            let op = if is_float(dtype) {
                ReduceOp::Sum
            } else {
                ReduceOp::Max
            };
            println!(
                "{dtype} all_reduce {}",
                digest(&dist::all_reduce(&x, op, &world)?)?
            );
            // A strided input: its elements are copied out before they travel.
            let strided = dist::all_reduce(&x.transpose()?, op, &world)?;
            println!("{dtype} all_reduce of a transpose {}", digest(&strided)?);
            let scattered = dist::reduce_scatter(&x, op, 0, &world)?;
            println!("{dtype} reduce_scatter {}", digest(&scattered)?);
        }
        println!(
            "{dtype} all_gather {}",
            digest(&dist::all_gather(&x, 1, &world)?)?
        );
        println!(
            "{dtype} broadcast {}",
            digest(&dist::broadcast(&x, 1 % dist::world_size(), &world)?)?
        );
        println!(
            "{dtype} all_to_all {}",
            digest(&dist::all_to_all(&x, 0, 1, &world)?)?
        );
    }
    Ok(())
}

neuronlab::main!(run);

//! The 8-op chain written by hand over the runtime's element functions: all eight steps on a
//! tile of positions small enough to stay in L1, tile after tile, blocks of tiles in parallel,
//! into a new output. No graph, no executor, no events: what the chain's math and its memory
//! traffic cost on this machine, the floor the compiled chain is measured against
//! (bench/compare.py prints eager / this: the most eager / compiled could reach with this
//! math). The case checks first that it computes the compiled chain's result to the bit.

use std::mem::MaybeUninit;
use std::sync::Arc;

use neuronlab_compile::program::optimize;
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::ops::math::{exp_f32, gelu_tanh_f32, tanh_f32, Isa};
use neuronlab_core::{Runtime, Tensor};
use rayon::prelude::*;

use super::compile::{chain8, WrittenOut};
use super::{measure, Case, Sample, Work};

/// Positions per tile: three f32 tile buffers plus the tile's x and y, 27 KiB of a 48 KiB L1.
const TILE: usize = 1344;
/// Positions per parallel block, about what the fused executor gives this chain.
const BLOCK: usize = 24 << 10;

/// x*0.5 + y -> gelu(tanh) -> -x -> exp -> *y -> tanh -> +x, by hand.
pub fn chain8_by_hand(x: &[f32], y: &[f32]) -> Vec<f32> {
    assert_eq!(x.len(), y.len(), "the chain's operands have one length");
    let mut out: Vec<f32> = Vec::with_capacity(x.len());
    out.spare_capacity_mut()[..x.len()]
        .par_chunks_mut(BLOCK)
        .enumerate()
        .for_each(|(b, block)| {
            let start = b * BLOCK;
            let (x, y) = (
                &x[start..start + block.len()],
                &y[start..start + block.len()],
            );
            block_on_this_cpu(x, y, block);
        });
    // SAFETY: the blocks cover the first `x.len()` slots and `block_by_hand` wrote every slot
    // of its block.
    unsafe { out.set_len(x.len()) };
    out
}

/// [`block_by_hand`] compiled for the widest vectors this CPU has, as the runtime compiles
/// its kernels' loops.
fn block_on_this_cpu(x: &[f32], y: &[f32], out: &mut [MaybeUninit<f32>]) {
    match Isa::detected() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::detected` found the level's features on this CPU.
        Isa::Avx512 => unsafe { block_avx512(x, y, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { block_avx2(x, y, out) },
        _ => block_by_hand(x, y, out),
    }
}

/// [`block_by_hand`] for x86-64-v4 (AVX-512).
///
/// # Safety
/// The CPU must have the features ([`Isa::detected`] is [`Isa::Avx512`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2")]
unsafe fn block_avx512(x: &[f32], y: &[f32], out: &mut [MaybeUninit<f32>]) {
    block_by_hand(x, y, out)
}

/// [`block_by_hand`] for x86-64-v3 (AVX2).
///
/// # Safety
/// The CPU must have the features ([`Isa::detected`] is at least [`Isa::Avx2`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,bmi1,bmi2")]
unsafe fn block_avx2(x: &[f32], y: &[f32], out: &mut [MaybeUninit<f32>]) {
    block_by_hand(x, y, out)
}

/// One block of the chain, a tile at a time; writes every slot of `out`. It always inlines,
/// so each caller above compiles its loops for its own instruction set.
#[inline(always)]
fn block_by_hand(x: &[f32], y: &[f32], out: &mut [MaybeUninit<f32>]) {
    let mut p = [0f32; TILE];
    let mut q = [0f32; TILE];
    for ((x, y), out) in x.chunks(TILE).zip(y.chunks(TILE)).zip(out.chunks_mut(TILE)) {
        let (p, q) = (&mut p[..x.len()], &mut q[..x.len()]);
        for (p, &x) in p.iter_mut().zip(x) {
            *p = x * 0.5;
        }
        for ((q, &p), &y) in q.iter_mut().zip(p.iter()).zip(y) {
            *q = p + y;
        }
        for (p, &q) in p.iter_mut().zip(q.iter()) {
            *p = gelu_tanh_f32(q);
        }
        for ((q, &p), &x) in q.iter_mut().zip(p.iter()).zip(x) {
            *q = p - x;
        }
        for (p, &q) in p.iter_mut().zip(q.iter()) {
            *p = exp_f32(q);
        }
        for ((q, &p), &y) in q.iter_mut().zip(p.iter()).zip(y) {
            *q = p * y;
        }
        for (p, &q) in p.iter_mut().zip(q.iter()) {
            *p = tanh_f32(q);
        }
        for ((o, &p), &x) in out.iter_mut().zip(p.iter()).zip(x) {
            o.write(p + x);
        }
    }
}

/// The chain's two operands, once the chain by hand has computed the compiled chain's
/// result on them to the bit.
fn same_as_compiled(rt: &Runtime, written: &WrittenOut) -> Result<(Vec<f32>, Vec<f32>), String> {
    let (x, y) = (
        written.inputs[0].to_vec::<f32>(),
        written.inputs[1].to_vec::<f32>(),
    );
    let (program, _) = optimize(rt, &written.graph()?).map_err(|e| e.to_string())?;
    let refs: Vec<&Tensor> = written.inputs.iter().collect();
    let want = program
        .run(rt, CoreId(0), &refs)
        .map_err(|e| e.to_string())?[0]
        .to_vec::<f32>();
    let got = chain8_by_hand(&x, &y);
    match (0..want.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        Some(i) => Err(format!(
            "the chain by hand differs from the compiled chain at {i}: {} vs {}",
            got[i], want[i]
        )),
        None => Ok((x, y)),
    }
}

/// The by-hand case, on the 4M chain's inputs.
pub fn case() -> Case {
    Case::new(
        "chain8_f32_4m_by_hand",
        "the 8-op chain on 4M f32 written by hand over the runtime's element functions (all \
         steps per L1 tile, blocks in parallel, no executor): the floor for its compiled form",
        "extra",
        |rt: &Arc<Runtime>| {
            let (x, y) = same_as_compiled(rt, &chain8(rt)?)?;
            let timing = measure(
                || {
                    std::hint::black_box(chain8_by_hand(&x, &y));
                },
                || {},
            );
            Ok(Sample::new(timing, Work::Bytes(3.0 * 4.0 * x.len() as f64)))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::compile::chain8_of;

    #[test]
    fn the_chain_by_hand_is_the_compiled_chain_to_the_bit() {
        let rt = Runtime::from_env().expect("a runtime");
        // Lengths with a partial tile and a partial block.
        for len in [1, TILE as i64 + 5, BLOCK as i64 * 2 + 77] {
            let (x, _) = same_as_compiled(&rt, &chain8_of(&rt, len).unwrap()).unwrap();
            assert_eq!(x.len(), len as usize);
        }
    }
}

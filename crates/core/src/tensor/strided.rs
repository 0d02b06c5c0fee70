//! Row-major iteration over strided operands, sequential and parallel.
//!
//! Every kernel that reads views (broadcast, transposed, sliced) goes through here: it hands
//! the kernel the storage offsets of N operands for each output element, after merging
//! dimensions that are contiguous for every operand so the inner loop is as long as possible.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::is_row_major;
use crate::cancel::Token;

/// Below this many elements a loop runs on the calling thread (rayon's overhead would dominate).
pub const PARALLEL_THRESHOLD: usize = 1 << 15;
/// Elements per parallel task: big enough to amortize scheduling, small enough to balance.
const CHUNK: usize = 1 << 14;

/// Merges adjacent dims that are contiguous for every operand and drops size-1 dims.
pub fn coalesce<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
) -> (Vec<usize>, [Vec<usize>; N]) {
    let mut out_shape: Vec<usize> = Vec::with_capacity(shape.len());
    let mut out_strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::with_capacity(shape.len()));
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let mergeable = !out_shape.is_empty()
            && (0..N).all(|k| {
                let last = *out_strides[k].last().expect("same length as out_shape");
                last == strides[k][d] * shape[d]
            });
        if mergeable {
            *out_shape.last_mut().expect("checked non-empty") *= shape[d];
            for k in 0..N {
                *out_strides[k].last_mut().expect("same length") = strides[k][d];
            }
        } else {
            out_shape.push(shape[d]);
            for k in 0..N {
                out_strides[k].push(strides[k][d]);
            }
        }
    }
    (out_shape, out_strides)
}

/// Visits elements `start..end` (row-major positions in `shape`) in runs along the innermost
/// dim, calling `f(i, len, offsets)` for each run of `len` elements whose first element is at
/// `offsets` and is position `start + i`. Within a run, operand `k` advances by its innermost
/// stride, `strides[k].last()`.
pub fn visit_runs<const N: usize>(
    shape: &[usize],
    strides: &[Vec<usize>; N],
    base: [usize; N],
    start: usize,
    end: usize,
    mut f: impl FnMut(usize, usize, [usize; N]),
) {
    if start >= end {
        return;
    }
    if shape.is_empty() {
        f(0, 1, base);
        return;
    }
    let rank = shape.len();
    let inner = shape[rank - 1];
    // Multi-index of `start`; inline for the usual ranks, since a reduction walks one row per
    // output element through here.
    let mut index = smallvec::SmallVec::<[usize; 8]>::from_elem(0, rank);
    let mut rem = start;
    for d in (0..rank).rev() {
        index[d] = rem % shape[d];
        rem /= shape[d];
    }
    let mut pos = start;
    while pos < end {
        let offs: [usize; N] = std::array::from_fn(|k| {
            base[k]
                + index
                    .iter()
                    .zip(&strides[k])
                    .map(|(a, s)| a * s)
                    .sum::<usize>()
        });
        let run = (inner - index[rank - 1]).min(end - pos);
        f(pos - start, run, offs);
        pos += run;
        // Advance the odometer past the finished row.
        index[rank - 1] = 0;
        let mut d = rank - 1;
        while d > 0 {
            d -= 1;
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// The innermost stride of each operand (0 for a zero-dim loop): how far a run advances.
pub fn inner_strides<const N: usize>(strides: &[Vec<usize>; N]) -> [usize; N] {
    std::array::from_fn(|k| strides[k].last().copied().unwrap_or(0))
}

/// Visits elements `start..end` (row-major positions in `shape`), calling `f(i, offsets)` where `i`
/// counts from 0 at `start`.
pub(crate) fn visit_range<const N: usize>(
    shape: &[usize],
    strides: &[Vec<usize>; N],
    base: [usize; N],
    start: usize,
    end: usize,
    mut f: impl FnMut(usize, [usize; N]),
) {
    let inner = inner_strides(strides);
    visit_runs(shape, strides, base, start, end, |i, len, mut offs| {
        for j in 0..len {
            f(i + j, offs);
            for k in 0..N {
                offs[k] += inner[k];
            }
        }
    });
}

/// Calls `f(offsets)` for every element of `shape`, in row-major order.
pub fn for_each<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
    mut f: impl FnMut([usize; N]),
) {
    let numel: usize = shape.iter().product();
    let (shape, strides) = coalesce(shape, strides);
    visit_range(&shape, &strides, offsets, 0, numel, |_, o| f(o));
}

/// Builds a vector of `n` values, `f(start, chunk)` writing every slot of `chunk` (the
/// positions `start..start + chunk.len()`). Chunks run in parallel for large `n`, and each
/// checks the calling thread's cancel token first (see [`crate::cancel`]).
pub fn fill<U: Send>(n: usize, f: impl Fn(usize, &mut [MaybeUninit<U>]) + Sync) -> Vec<U> {
    fill_weighted(n, 1, f)
}

/// [`fill`] for values that each cost about `weight` elements of work (a reduction's row
/// length): chunks hold about 16K elements of work, and the loop goes parallel when the
/// total work reaches [`PARALLEL_THRESHOLD`].
pub fn fill_weighted<U: Send>(
    n: usize,
    weight: usize,
    f: impl Fn(usize, &mut [MaybeUninit<U>]) + Sync,
) -> Vec<U> {
    let weight = weight.max(1);
    let chunk = (CHUNK / weight).max(1);
    let mut out: Vec<U> = Vec::with_capacity(n);
    let spare = &mut out.spare_capacity_mut()[..n];
    if n.saturating_mul(weight) < PARALLEL_THRESHOLD || n <= chunk {
        for (ci, slots) in spare.chunks_mut(chunk).enumerate() {
            Token::check_current();
            f(ci * chunk, slots);
        }
    } else {
        // Rayon's threads do not share this thread's token: they get a handle to it.
        let token = Token::current();
        spare
            .par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(ci, slots)| {
                token.check();
                f(ci * chunk, slots);
            });
    }
    // SAFETY: `f` writes every slot of every chunk (its contract), so all `n` slots are
    // initialized; a cancelled or panicking chunk unwinds past this line, and the vector is
    // then dropped with length 0.
    unsafe { out.set_len(n) };
    out
}

/// Builds a row-major vector with one value per element of `shape`, `f` receiving the storage
/// offsets of the N operands. Runs in parallel chunks for large shapes; the result does not
/// depend on the number of threads.
pub fn map<const N: usize, U: Send>(
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
    f: impl Fn([usize; N]) -> U + Sync,
) -> Vec<U> {
    map_weighted(shape, strides, offsets, 1, f)
}

/// [`map`] for values that each cost about `weight` elements of work (see [`fill_weighted`]).
pub fn map_weighted<const N: usize, U: Send>(
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
    weight: usize,
    f: impl Fn([usize; N]) -> U + Sync,
) -> Vec<U> {
    let numel: usize = shape.iter().product();
    let (shape, strides) = coalesce(shape, strides);
    fill_weighted(numel, weight, |start, chunk| {
        visit_range(
            &shape,
            &strides,
            offsets,
            start,
            start + chunk.len(),
            |i, o| {
                chunk[i].write(f(o));
            },
        );
    })
}

/// Builds a row-major vector with one value per element of `shape` a run at a time:
/// `f(out, offsets, steps)` writes every slot of `out`, a run of consecutive output positions
/// along the innermost (merged) dim, whose first elements are at `offsets` in the N operands
/// and whose next ones are `steps` further on. Kernels specialize the common steps (1 for a
/// contiguous operand, 0 for a broadcast one) into tight loops that vectorize. Runs in parallel
/// chunks for large shapes.
pub fn map_runs<const N: usize, U: Send>(
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
    f: impl Fn(&mut [MaybeUninit<U>], [usize; N], [usize; N]) + Sync,
) -> Vec<U> {
    let numel: usize = shape.iter().product();
    if strides.iter().all(|s| is_row_major(shape, s)) {
        // Every operand is one row-major run: no dims to merge or walk (and nothing to
        // allocate, which is most of a tiny op's kernel time).
        return fill(numel, |start, chunk| {
            f(chunk, offsets.map(|o| o + start), [1; N])
        });
    }
    let (shape, strides) = coalesce(shape, strides);
    let steps = inner_strides(&strides);
    fill(numel, |start, chunk| {
        visit_runs(
            &shape,
            &strides,
            offsets,
            start,
            start + chunk.len(),
            |i, len, offs| f(&mut chunk[i..i + len], offs, steps),
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposed_reads_in_logical_order() {
        // A 2x3 row-major matrix read as its 3x2 transpose.
        let data = [0, 1, 2, 3, 4, 5];
        let v = map([3, 2].as_slice(), [&[1, 3]], [0], |[o]| data[o]);
        assert_eq!(v, vec![0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn parallel_and_sequential_agree_on_broadcasts() {
        let shape = [70, 3, 300];
        let a: Vec<u32> = (0..70 * 300).collect();
        // a is [70, 1, 300] broadcast over dim 1.
        let v = map(&shape, [&[300, 0, 1]], [0], |[o]| a[o]);
        let mut w = Vec::new();
        for_each(&shape, [&[300, 0, 1]], [0], |[o]| w.push(a[o]));
        assert_eq!(v, w);
        assert_eq!(v[300], a[0]);
        assert_eq!(v[900], a[300]);
    }

    #[test]
    fn dense_operands_are_one_run() {
        // [3, 1, 4] row-major; the size-1 dim's stride is arbitrary, as views leave it.
        let data: Vec<u32> = (0..12).collect();
        let runs = std::sync::Mutex::new(Vec::new());
        let v = map_runs(&[3, 1, 4], [&[4, 99, 1]], [0], |out, [p], [step]| {
            runs.lock().unwrap().push((p, out.len(), step));
            for (i, o) in out.iter_mut().enumerate() {
                o.write(data[p + i * step]);
            }
        });
        assert_eq!(v, data);
        assert_eq!(*runs.lock().unwrap(), vec![(0, 12, 1)]);
        assert!(is_row_major(&[], &[]));
        // A transposed operand is not dense and is walked run by run.
        assert!(!is_row_major(&[4, 3], &[1, 4]));
        let t = map_runs(&[4, 3], [&[1, 4]], [0], |out, [p], [step]| {
            for (i, o) in out.iter_mut().enumerate() {
                o.write(data[p + i * step]);
            }
        });
        assert_eq!(t, vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
    }

    #[test]
    fn zero_dim_and_empty_shapes() {
        assert_eq!(map(&[], [&[]], [4], |[o]| o), vec![4]);
        assert!(map(&[0, 5], [&[5, 1]], [0], |[o]| o).is_empty());
    }
}

//! The loops around the micro-kernel: cache blocking, packing per block, and the split of the
//! work between threads.

use std::cell::Cell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::ops::Range;

use rayon::prelude::*;

use super::elem::Elem;
use super::kernel::{tile_rows, tile_rows_unpacked, TileOut, Unpacked, MR, NR};
use super::pack::{pack_a, pack_b, PackBuf, KC};
use super::{available, Job, MatRef};
use crate::cancel::Token;

/// Columns of `b` per packed block: `KC * NB` f32s (1.1 MiB) stay in L2 while every sliver of
/// `a` passes over them.
pub(super) const NB: usize = 768;
/// Rows of `a` per packed block, a multiple of [`MR`]; bounds the per-thread buffer.
pub(super) const MB: usize = 1032;
/// Products with fewer multiply-adds than this run on the calling thread.
const SERIAL_MACS: usize = 1 << 18;
/// In a batch, products with fewer multiply-adds than this are not split between threads.
const SMALL_PRODUCT_MACS: usize = 1 << 22;
/// The most elements of `b` (`k x n`) that are multiplied as they lie, unpacked: 128 KiB of
/// f32, which stays in L2 between slivers of rows without packing's contiguity.
const UNPACKED_B: usize = 1 << 15;

/// How a call reads its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// Blocks of both operands packed into the micro-kernel's order first: the way for
    /// products large enough that each packed value is read many times.
    Packed,
    /// Tiles computed straight from `a` and from `b` as it lies, or from a dense copy of each
    /// job's `b` when its rows are not contiguous (a transposed weight). When `b` is small,
    /// packing costs as much as the multiply-adds it feeds (the sft model's per-rank products
    /// are 512 x 64 x 16); the sums are the same bits either way.
    Unpacked,
}

impl Path {
    /// The path for a product of `b` (`k x n`), by the rule at [`Path::Unpacked`].
    fn for_product(n: usize, k: usize) -> Path {
        if k.saturating_mul(n) <= UNPACKED_B {
            Path::Unpacked
        } else {
            Path::Packed
        }
    }
}

/// Merges consecutive jobs that are one job split: the same `b`, and the rows of the second
/// following the first's in `a` (a batch of rows times one weight). Fewer, taller jobs pack or
/// copy `b` fewer times; each output row is computed as before.
fn coalesce(jobs: &[Job], a_row: usize) -> Vec<Job> {
    let mut merged: Vec<Job> = Vec::with_capacity(jobs.len());
    for &job in jobs {
        match merged.last_mut() {
            Some(last)
                if last.b_offset == job.b_offset
                    && last.a_offset + last.rows * a_row == job.a_offset =>
            {
                last.rows += job.rows;
            }
            _ => merged.push(job),
        }
    }
    merged
}

/// A dense row-major copy of each distinct `b` of the jobs (`k x n`, one after the other), and
/// the jobs pointing into it.
fn dense_b<S: Elem>(b: &MatRef<S>, (n, k): (usize, usize), jobs: &[Job]) -> (Vec<S>, Vec<Job>) {
    let mut dense = Vec::new();
    // Where each distinct b went: a batch can hold thousands of jobs.
    let mut copied: HashMap<usize, usize> = HashMap::new();
    let jobs = jobs
        .iter()
        .map(|&job| {
            if job.rows == 0 {
                // Reads nothing; its b need not exist.
                return job;
            }
            let at = match copied.get(&job.b_offset) {
                Some(&at) => at,
                None => {
                    let at = dense.len();
                    dense.resize(at + k * n, S::ZERO);
                    let src = b.at(job.b_offset);
                    // Read along whichever stride is contiguous.
                    if src.row == 1 {
                        for j in 0..n {
                            for p in 0..k {
                                dense[at + p * n + j] = src.data[src.offset + p + j * src.col];
                            }
                        }
                    } else {
                        for p in 0..k {
                            for j in 0..n {
                                dense[at + p * n + j] =
                                    src.data[src.offset + p * src.row + j * src.col];
                            }
                        }
                    }
                    copied.insert(job.b_offset, at);
                    at
                }
            };
            Job {
                b_offset: at,
                ..job
            }
        })
        .collect();
    (dense, jobs)
}

/// Computes every job's rows of `a` times its `b` into `out`: the jobs' results one after the
/// other, each `rows x n` and dense. `a` is `rows x k` and `b` is `k x n` per job; their
/// `offset`s are ignored in favour of the jobs'. With `parallel`, the work is spread over
/// rayon's threads. `out` may start uninitialized: on success every value has been written.
///
/// Errors when the CPU lacks AVX-512F or an operand does not cover its jobs (a caller's bug).
pub(crate) fn gemm<S: Elem, D: Elem>(
    a: MatRef<S>,
    b: MatRef<S>,
    (n, k): (usize, usize),
    jobs: &[Job],
    out: &mut [MaybeUninit<D>],
    parallel: bool,
) -> Result<(), String> {
    gemm_on(Path::for_product(n, k), a, b, (n, k), jobs, out, parallel)
}

/// [`gemm`] on the given path.
pub(super) fn gemm_on<S: Elem, D: Elem>(
    path: Path,
    a: MatRef<S>,
    b: MatRef<S>,
    (n, k): (usize, usize),
    jobs: &[Job],
    out: &mut [MaybeUninit<D>],
    parallel: bool,
) -> Result<(), String> {
    if !available() {
        return Err("the AVX-512 GEMM needs a CPU with AVX-512F".into());
    }
    let total_rows: usize = jobs.iter().map(|j| j.rows).sum();
    if total_rows.checked_mul(n) != Some(out.len()) {
        return Err(format!(
            "GEMM output holds {} values, not {total_rows} x {n}",
            out.len()
        ));
    }
    for job in jobs {
        let (ja, jb) = (a.at(job.a_offset), b.at(job.b_offset));
        // A job without rows reads nothing.
        if job.rows > 0 && !(ja.covers(job.rows, k) && jb.covers(k, n)) {
            return Err(format!(
                "GEMM operands do not cover the product {job:?}, n {n}, k {k}"
            ));
        }
    }
    if out.is_empty() {
        return Ok(());
    }
    if k == 0 {
        for value in out {
            value.write(D::ZERO);
        }
        return Ok(());
    }
    let jobs = coalesce(jobs, a.row);
    let dense;
    let (b, jobs) = if path == Path::Unpacked && b.col != 1 {
        let (copy, jobs) = dense_b(&b, (n, k), &jobs);
        dense = copy;
        let b = MatRef {
            data: &dense[..],
            offset: 0,
            row: n,
            col: 1,
        };
        (b, jobs)
    } else {
        (b, jobs)
    };
    // bf16 and f16 outputs keep f32 partial sums between k blocks; f32 outputs keep them in
    // place. The first k block writes every partial sum before any is read, so neither needs
    // initializing.
    let packed_partials = !D::IS_F32 && k > KC && path == Path::Packed;
    let mut scratch = Vec::<f32>::with_capacity(if packed_partials { out.len() } else { 0 });
    let out_ptr = out.as_mut_ptr().cast::<D>();
    let partial = if D::IS_F32 {
        out_ptr.cast::<f32>()
    } else {
        scratch.spare_capacity_mut().as_mut_ptr().cast::<f32>()
    };
    let threads = if parallel {
        rayon::current_num_threads()
    } else {
        1
    };
    let tasks = split(&jobs, n, k, threads);
    let shared = Shared {
        path,
        a,
        b,
        n,
        k,
        out: SendPtr(out_ptr),
        partial: SendPtr(partial),
        token: Token::current(),
    };
    let run = |task: &Task| {
        // SAFETY: the CPU has AVX-512F (checked above); every job's operands were checked to
        // cover it; `out` (and `scratch`, when used) hold every job's rows x n values, and the
        // tasks from `split` cover disjoint rectangles of them, so no two tasks write the same
        // element, and together all of them, so every output value is written.
        unsafe { shared.run(task) }
    };
    if tasks.len() == 1 {
        run(&tasks[0]);
    } else {
        tasks.par_iter().for_each(run);
    }
    Ok(())
}

/// [`gemm`] into a fresh vector: every job's `rows x n` values, one job after the other.
pub(crate) fn gemm_vec<S: Elem, D: Elem>(
    a: MatRef<S>,
    b: MatRef<S>,
    (n, k): (usize, usize),
    jobs: &[Job],
    parallel: bool,
) -> Result<Vec<D>, String> {
    let len = jobs.iter().map(|j| j.rows).sum::<usize>() * n;
    let mut out = Vec::with_capacity(len);
    gemm(
        a,
        b,
        (n, k),
        jobs,
        &mut out.spare_capacity_mut()[..len],
        parallel,
    )?;
    // SAFETY: `gemm` returned Ok, so it wrote all `len` values.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// A rectangle of one job's output: rows `rows` and columns `cols` of the product.
#[derive(Clone, Debug)]
struct Task {
    job: Job,
    /// The output row of the job's first row.
    first_row: usize,
    rows: Range<usize>,
    cols: Range<usize>,
}

/// Splits the jobs into tasks for `threads` threads: whole jobs when there are enough of them
/// or they are small, else each job in `threads` bands of rows (or of columns when the rows are
/// few or the product is much wider than tall).
fn split(jobs: &[Job], n: usize, k: usize, threads: usize) -> Vec<Task> {
    let macs = |rows: usize| rows.saturating_mul(n).saturating_mul(k);
    let total: usize = jobs.iter().map(|j| macs(j.rows)).sum();
    let largest = jobs.iter().map(|j| macs(j.rows)).max().unwrap_or(0);
    let whole_jobs = threads <= 1
        || total < SERIAL_MACS
        || (jobs.len() >= threads
            && (jobs.len().is_multiple_of(threads) || largest < SMALL_PRODUCT_MACS));
    let mut tasks = Vec::new();
    let mut first_row = 0;
    for &job in jobs {
        let whole = Task {
            job,
            first_row,
            rows: 0..job.rows,
            cols: 0..n,
        };
        first_row += job.rows;
        if whole_jobs {
            tasks.push(whole);
            continue;
        }
        let (row_slivers, col_slivers) = (job.rows.div_ceil(MR), n.div_ceil(NR));
        let by_rows = row_slivers >= threads && (job.rows * 4 >= n || col_slivers < threads);
        let (slivers, width, extent) = if by_rows {
            (row_slivers, MR, job.rows)
        } else if col_slivers >= threads {
            (col_slivers, NR, n)
        } else {
            tasks.push(whole);
            continue;
        };
        for part in 0..threads {
            let from = (slivers * part / threads * width).min(extent);
            let to = (slivers * (part + 1) / threads * width).min(extent);
            if from == to {
                continue;
            }
            let mut task = whole.clone();
            if by_rows {
                task.rows = from..to;
            } else {
                task.cols = from..to;
            }
            tasks.push(task);
        }
    }
    tasks
}

/// A pointer that tasks on other threads write through, each to its own elements.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);

// SAFETY: the pointer is only dereferenced by tasks that write disjoint elements (see `gemm`).
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

/// What every task of one call reads.
struct Shared<'a, S, D> {
    path: Path,
    a: MatRef<'a, S>,
    b: MatRef<'a, S>,
    n: usize,
    k: usize,
    out: SendPtr<D>,
    partial: SendPtr<f32>,
    token: Token,
}

/// The packing buffers of one thread: a block of `a` and a block of `b`.
#[derive(Default)]
struct Buffers {
    a: PackBuf,
    b: PackBuf,
}

thread_local! {
    static BUFFERS: Cell<Buffers> = Cell::new(Buffers::default());
}

impl<S: Elem, D: Elem> Shared<'_, S, D> {
    /// Runs one task with this thread's packing buffers.
    ///
    /// # Safety
    ///
    /// As for [`Shared::region`].
    unsafe fn run(&self, task: &Task) {
        if self.path == Path::Unpacked {
            // SAFETY: passed on from the caller; `b`'s rows are contiguous on this path.
            return unsafe { self.region_unpacked(task) };
        }
        // Taken rather than borrowed: nothing else on this thread can see them meanwhile, and
        // a cancelled task simply drops them.
        let mut buffers = BUFFERS.take();
        // SAFETY: passed on from the caller.
        unsafe { self.region(task, &mut buffers) };
        BUFFERS.set(buffers);
    }

    /// Computes the task's rectangle of the output, block by block.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F; `a` and `b` must cover the task's job; `out` (and
    /// `partial`, unless k fits one block) must be valid for the job's output rows x n, and no
    /// other thread may access the task's rectangle meanwhile.
    #[target_feature(enable = "avx512f")]
    unsafe fn region(&self, task: &Task, buffers: &mut Buffers) {
        let (n, k) = (self.n, self.k);
        let a = self.a.at(task.job.a_offset);
        let b = self.b.at(task.job.b_offset);
        for i0 in task.rows.clone().step_by(MB) {
            let i1 = (i0 + MB).min(task.rows.end);
            for p0 in (0..k).step_by(KC) {
                let p1 = (p0 + KC).min(k);
                let kc = p1 - p0;
                let a_pack = buffers.a.get((i1 - i0).div_ceil(MR) * MR * kc);
                // SAFETY: rows i0..i1 and columns p0..p1 are inside the job's a, which covers
                // rows x k; the buffer has the size `pack_a` needs.
                unsafe { pack_a(a_pack, a, i0..i1, p0..p1) };
                for j0 in task.cols.clone().step_by(NB) {
                    let j1 = (j0 + NB).min(task.cols.end);
                    let b_pack = buffers.b.get((j1 - j0).div_ceil(NR) * NR * kc);
                    // SAFETY: rows p0..p1 and columns j0..j1 are inside the job's b (k x n);
                    // the buffer is a `PackBuf`'s start, aligned and of the size needed.
                    unsafe { pack_b(b_pack, b, p0..p1, j0..j1) };
                    for (s, i) in (i0..i1).step_by(MR).enumerate() {
                        self.token.check();
                        let a_sliver = a_pack[s * MR * kc..].as_ptr();
                        for (t, j) in (j0..j1).step_by(NR).enumerate() {
                            let at = (task.first_row + i) * n + j;
                            let tile = TileOut {
                                // SAFETY: (first_row + i, j) is inside the output (rows of
                                // the job, columns < n), which the caller vouched for.
                                out: unsafe { self.out.0.add(at) },
                                partial: self.partial.0.wrapping_add(at),
                                ld: n,
                                cols: NR.min(j1 - j),
                                first: p0 == 0,
                                last: p1 == k,
                            };
                            // SAFETY: the slivers are packed above with kc steps; the tile's
                            // rows (<= i1) and columns (<= j1) are inside the task's
                            // rectangle, valid at `out` and `partial` per the caller.
                            unsafe {
                                tile_rows(
                                    MR.min(i1 - i),
                                    kc,
                                    a_sliver,
                                    b_pack[t * NR * kc..].as_ptr(),
                                    tile,
                                )
                            };
                        }
                    }
                }
            }
        }
    }

    /// Computes the task's rectangle of the output tile by tile, straight from the operands.
    ///
    /// # Safety
    ///
    /// As for [`Shared::region`], and `b`'s columns must be contiguous (`b.col == 1`).
    #[target_feature(enable = "avx512f")]
    unsafe fn region_unpacked(&self, task: &Task) {
        let (n, k) = (self.n, self.k);
        let a = self.a.at(task.job.a_offset);
        let b = self.b.at(task.job.b_offset);
        for i in task.rows.clone().step_by(MR) {
            self.token.check();
            for j in task.cols.clone().step_by(NR) {
                let at = (task.first_row + i) * n + j;
                let tile = TileOut {
                    // SAFETY: (first_row + i, j) is inside the output (rows of the job,
                    // columns < n), which the caller vouched for.
                    out: unsafe { self.out.0.add(at) },
                    partial: self.partial.0.wrapping_add(at),
                    ld: n,
                    cols: NR.min(task.cols.end - j),
                    first: true,
                    last: true,
                };
                let src = Unpacked {
                    a: a.data.as_ptr().wrapping_add(a.offset + i * a.row),
                    a_row: a.row,
                    a_col: a.col,
                    b: b.data.as_ptr().wrapping_add(b.offset + j),
                    b_row: b.row,
                };
                // SAFETY: the tile's rows (< task.rows.end) and columns (< task.cols.end) are
                // inside the job, whose operands cover rows x k and k x n (checked in
                // `gemm_on`, or a dense copy) with b's columns contiguous; the output is valid
                // there per the caller, and the kernel stores it once, with first and last.
                unsafe { tile_rows_unpacked(MR.min(task.rows.end - i), k, src, tile) };
            }
        }
    }
}

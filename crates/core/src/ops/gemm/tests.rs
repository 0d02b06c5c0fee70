//! The AVX-512 GEMM against a plain reference that accumulates in f64, on random shapes with
//! edge sizes around the tile and block sizes, transposed, strided and broadcast operands,
//! batches and row bands, and every pair of element types the matmul op uses.
//!
//! Tolerance: an f32 sum of k products, whatever its order, is within `k * 2^-24 * sum |a||b|`
//! of the exact sum (the classic `gamma_k` bound; each FMA or addition rounds once). A bf16 or
//! f16 output adds one rounding of the f32 sum: half a unit in the last place of the result,
//! plus half the smallest subnormal for f16.
//!
//! Every test runs the AVX-512 path; on a CPU without AVX-512F it prints that it is skipped and
//! returns.

use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use half::{bf16, f16};

use super::driver::{gemm, gemm_on, Path, MB, NB};
use super::kernel::{MR, NR};
use super::pack::KC;
use super::{available, gemm_vec, Elem, Job, MatRef};
use crate::cancel::{with_token, Cancelled};
use crate::testing::SplitMix64 as Rng;

/// Uniform in [-1, 1).
fn uniform(rng: &mut Rng) -> f32 {
    ((rng.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn skip() -> bool {
    if available() {
        return false;
    }
    eprintln!("skipped: this CPU lacks AVX-512F, so the AVX-512 GEMM cannot run");
    true
}

/// A test element type: how to make one from an f32 and its output rounding.
trait TestElem: Elem + Default + std::fmt::Debug {
    /// Unit roundoff of one rounding to this type (0 for f32, whose sums are the result).
    const UNIT: f64;
    /// Half the smallest positive subnormal (the absolute error floor of rounding).
    const FLOOR: f64;
    fn from_f32(v: f32) -> Self;
}

impl TestElem for f32 {
    const UNIT: f64 = 0.0;
    const FLOOR: f64 = 0.0;
    fn from_f32(v: f32) -> f32 {
        v
    }
}

impl TestElem for bf16 {
    const UNIT: f64 = 1.0 / 256.0;
    const FLOOR: f64 = 0.0;
    fn from_f32(v: f32) -> bf16 {
        bf16::from_f32(v)
    }
}

impl TestElem for f16 {
    const UNIT: f64 = 1.0 / 2048.0;
    const FLOOR: f64 = 1.0 / (1u64 << 25) as f64;
    fn from_f32(v: f32) -> f16 {
        f16::from_f32(v)
    }
}

/// How a `rows x cols` operand is laid out in its storage.
#[derive(Clone, Copy, Debug)]
enum Layout {
    RowMajor,
    /// A transposed view: columns are contiguous.
    ColumnMajor,
    /// Neither stride is 1, with gaps between rows and columns.
    Strided,
    /// Every row is the same (row stride 0), as a broadcast view makes it.
    BroadcastRows,
}

const LAYOUTS: [Layout; 4] = [
    Layout::RowMajor,
    Layout::ColumnMajor,
    Layout::Strided,
    Layout::BroadcastRows,
];

/// (row stride, column stride) for `layout`, with padding so rows or columns are not packed.
fn strides(layout: Layout, rows: usize, cols: usize, rng: &mut Rng) -> (usize, usize) {
    let pad = rng.below(3);
    match layout {
        Layout::RowMajor => (cols + pad, 1),
        Layout::ColumnMajor => (1, rows + pad),
        Layout::Strided => (2 * cols + 1 + pad, 2),
        Layout::BroadcastRows => (0, 1),
    }
}

/// Storage holding `count` matrices of `rows x cols` at the returned offsets (the last one
/// repeats the first when `count > 1`, as a broadcast batch dim does).
fn storage<S: TestElem>(
    (rows, cols): (usize, usize),
    (row, col): (usize, usize),
    count: usize,
    rng: &mut Rng,
) -> (Vec<S>, Vec<usize>) {
    let span = if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * row + (cols - 1) * col + 1
    };
    let mut offsets = Vec::new();
    let mut end = 0;
    for i in 0..count {
        if i > 0 && i == count - 1 {
            offsets.push(offsets[0]);
            continue;
        }
        let start = end + rng.below(5);
        offsets.push(start);
        end = start + span;
    }
    let data = (0..end + rng.below(4))
        .map(|_| S::from_f32(uniform(rng)))
        .collect();
    (data, offsets)
}

/// One call of [`gemm`] on random data, checked element by element against the reference.
struct Case {
    m: usize,
    n: usize,
    k: usize,
    layouts: (Layout, Layout),
    products: usize,
    /// Split each product into bands of rows, as the fused executor asks for them.
    bands: bool,
    parallel: bool,
}

impl Case {
    fn check<S: TestElem, D: TestElem>(&self, rng: &mut Rng) {
        let Case { m, n, k, .. } = *self;
        let (ars, acs) = strides(self.layouts.0, m, k, rng);
        let (brs, bcs) = strides(self.layouts.1, k, n, rng);
        let (a_data, a_offsets) = storage::<S>((m, k), (ars, acs), self.products, rng);
        let (b_data, b_offsets) = storage::<S>((k, n), (brs, bcs), self.products, rng);
        let a = MatRef {
            data: &a_data,
            offset: 0,
            row: ars,
            col: acs,
        };
        let b = MatRef {
            data: &b_data,
            offset: 0,
            row: brs,
            col: bcs,
        };
        // Jobs: whole products, or each product cut into bands of random heights.
        let mut jobs = Vec::new();
        let mut job_rows = Vec::new();
        for (&ao, &bo) in a_offsets.iter().zip(&b_offsets) {
            let mut r = 0;
            while r < m {
                let rows = if self.bands {
                    (1 + rng.below(m)).min(m - r)
                } else {
                    m
                };
                jobs.push(Job {
                    a_offset: ao + r * ars,
                    b_offset: bo,
                    rows,
                });
                job_rows.push((ao, bo, r));
                r += rows;
            }
        }
        let out: Vec<D> = gemm_vec(a, b, (n, k), &jobs, self.parallel).expect("valid operands");

        let mut at = 0;
        for (job, &(ao, bo, r0)) in jobs.iter().zip(&job_rows) {
            for i in 0..job.rows {
                for j in 0..n {
                    let (mut exact, mut magnitude) = (0.0f64, 0.0f64);
                    for p in 0..k {
                        let x = a_data[ao + (r0 + i) * ars + p * acs].to_f32() as f64;
                        let y = b_data[bo + p * brs + j * bcs].to_f32() as f64;
                        exact += x * y;
                        magnitude += (x * y).abs();
                    }
                    let sum_error = k as f64 * f32::EPSILON as f64 / 2.0 * magnitude;
                    let tolerance = D::UNIT * exact.abs() + (1.0 + D::UNIT) * sum_error + D::FLOOR;
                    let got = out[at + i * n + j].to_f32() as f64;
                    assert!(
                        (got - exact).abs() <= tolerance,
                        "{}x{}x{} {:?} products {} bands {} parallel {}: ({i}, {j}) of a job \
                         at row {r0} is {got}, expected {exact} within {tolerance}",
                        m,
                        n,
                        k,
                        self.layouts,
                        self.products,
                        self.bands,
                        self.parallel
                    );
                }
            }
            at += job.rows * n;
        }
    }
}

/// Sizes around the tile edges (MR = 12, NR = 32) and small primes.
const EDGE: [usize; 16] = [
    1, 2, 7, 11, 12, 13, 15, 16, 17, 31, 32, 33, 63, 65, 127, 129,
];
/// Depths around one k block (KC = 384), so sums also carry partials between blocks.
const DEPTHS: [usize; 9] = [1, 2, 7, 17, 64, 383, 384, 385, 800];

fn random_cases<S: TestElem, D: TestElem>(seed: u64, count: usize) {
    let mut rng = Rng(seed);
    for _ in 0..count {
        let case = Case {
            m: rng.pick(&EDGE),
            n: rng.pick(&EDGE),
            k: rng.pick(&DEPTHS),
            layouts: (LAYOUTS[rng.below(4)], LAYOUTS[rng.below(4)]),
            products: 1 + rng.below(3),
            bands: rng.below(4) == 0,
            parallel: rng.below(4) != 0,
        };
        case.check::<S, D>(&mut rng);
    }
}

#[test]
fn f32_matches_the_f64_reference_on_edge_shapes_and_layouts() {
    if skip() {
        return;
    }
    assert_eq!(
        (MR, NR, KC),
        (12, 32, 384),
        "the edge sizes above assume these tiles"
    );
    random_cases::<f32, f32>(1, 120);
}

#[test]
fn bf16_and_f16_read_as_f32_and_round_once() {
    if skip() {
        return;
    }
    random_cases::<bf16, bf16>(2, 60);
    random_cases::<f16, f16>(3, 60);
    // Mixed operands are converted to f32 by matmul, then rounded to the half output.
    random_cases::<f32, bf16>(4, 30);
    random_cases::<f32, f16>(5, 30);
}

#[test]
fn every_layout_pair_and_the_thread_splits() {
    if skip() {
        return;
    }
    let mut rng = Rng(6);
    for &la in &LAYOUTS {
        for &lb in &LAYOUTS {
            // Tall (split by rows), wide (split by columns), and past the row and column blocks.
            for (m, n, k) in [
                (257, 65, 40),
                (9, 801, 33),
                (MB + 5, 35, 9),
                (14, NB + 33, 21),
            ] {
                for (products, bands) in [(1, false), (2, true)] {
                    let case = Case {
                        m,
                        n,
                        k,
                        layouts: (la, lb),
                        products,
                        bands,
                        parallel: true,
                    };
                    case.check::<f32, f32>(&mut rng);
                }
            }
        }
    }
    // A batch of small products, one task each; and a large one split across threads with
    // half outputs and more than one k block.
    for (m, n, k, products) in [(128, 128, 64, 16), (300, 200, 2 * KC + 1, 1)] {
        let case = Case {
            m,
            n,
            k,
            layouts: (Layout::RowMajor, Layout::ColumnMajor),
            products,
            bands: false,
            parallel: true,
        };
        case.check::<f32, f32>(&mut rng);
        case.check::<bf16, bf16>(&mut rng);
    }
}

/// Both paths' outputs for one random product.
fn both_paths<S: TestElem, D: TestElem>(
    (m, n, k): (usize, usize, usize),
    layouts: (Layout, Layout),
    rng: &mut Rng,
) -> (Vec<D>, Vec<D>) {
    let (ars, acs) = strides(layouts.0, m, k, rng);
    let (brs, bcs) = strides(layouts.1, k, n, rng);
    let (a_data, a_offsets) = storage::<S>((m, k), (ars, acs), 2, rng);
    let (b_data, b_offsets) = storage::<S>((k, n), (brs, bcs), 2, rng);
    let matrix = |data, row, col| MatRef {
        data,
        offset: 0,
        row,
        col,
    };
    let (a, b) = (matrix(&a_data[..], ars, acs), matrix(&b_data[..], brs, bcs));
    // The second product repeats the first's operands, as a broadcast batch dim does.
    let jobs: Vec<Job> = a_offsets
        .iter()
        .zip(&b_offsets)
        .map(|(&a_offset, &b_offset)| Job {
            a_offset,
            b_offset,
            rows: m,
        })
        .collect();
    let run = |path| {
        let mut out = vec![MaybeUninit::<D>::uninit(); 2 * m * n];
        gemm_on(path, a, b, (n, k), &jobs, &mut out, m % 2 == 1).expect("valid operands");
        // SAFETY: `gemm_on` returned Ok, so it wrote every value.
        out.into_iter()
            .map(|v| unsafe { v.assume_init() })
            .collect::<Vec<D>>()
    };
    (run(Path::Packed), run(Path::Unpacked))
}

#[test]
fn the_unpacked_path_gives_the_packed_paths_bits() {
    if skip() {
        return;
    }
    let mut rng = Rng(8);
    for _ in 0..150 {
        let shape = (
            rng.pick(&EDGE) * (1 + rng.below(4)),
            rng.pick(&EDGE),
            rng.pick(&DEPTHS),
        );
        let layouts = (LAYOUTS[rng.below(4)], LAYOUTS[rng.below(4)]);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (packed, unpacked) = both_paths::<f32, f32>(shape, layouts, &mut rng);
        assert_eq!(bits(&packed), bits(&unpacked), "f32 {shape:?} {layouts:?}");
        let (packed, unpacked) = both_paths::<bf16, bf16>(shape, layouts, &mut rng);
        assert_eq!(packed, unpacked, "bf16 {shape:?} {layouts:?}");
        let (packed, unpacked) = both_paths::<f16, f32>(shape, layouts, &mut rng);
        let what = format!("f16 into f32 {shape:?} {layouts:?}");
        assert_eq!(bits(&packed), bits(&unpacked), "{what}");
    }
}

#[test]
fn empty_products_and_k_zero() {
    if skip() {
        return;
    }
    let data = [1.0f32; 4];
    let view = MatRef {
        data: &data,
        offset: 0,
        row: 1,
        col: 1,
    };
    let job = |rows| Job {
        a_offset: 0,
        b_offset: 0,
        rows,
    };
    let zeros: Vec<bf16> = gemm_vec(view, view, (3, 0), &[job(2)], true).expect("k = 0");
    assert!(zeros.len() == 6 && zeros.iter().all(|v| v.to_f32() == 0.0));
    let none: Vec<f32> = gemm_vec(view, view, (0, 3), &[job(2)], true).expect("n = 0");
    assert!(none.is_empty());
    let none: Vec<f32> = gemm_vec(view, view, (3, 3), &[job(0)], true).expect("m = 0");
    assert!(none.is_empty());
    // An operand that does not cover the product is an error, not a read out of bounds.
    assert!(gemm_vec::<f32, f32>(view, view, (3, 3), &[job(3)], true).is_err());
    let mut short = [MaybeUninit::<f32>::uninit(); 3];
    assert!(gemm(view, view, (2, 2), &[job(2)], &mut short, true).is_err());
}

#[test]
fn half_conversions_match_the_half_crate() {
    if skip() {
        return;
    }
    let mut rng = Rng(7);
    let specials = [
        0.0f32,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-40,
        65504.0,
        65520.0,
        6e-8,
        f32::from_bits(0x3f80_8000), // a bf16 tie, rounds to even (down)
        f32::from_bits(0x3f81_8000), // a bf16 tie, rounds to even (up)
        f32::from_bits(0x7f80_0001), // a signalling NaN
    ];
    let mut values: Vec<f32> = specials.to_vec();
    values.extend((0..100_000).map(|_| f32::from_bits(rng.next() as u32)));
    values.resize(values.len().next_multiple_of(16), 0.0);
    for chunk in values.chunks_exact(16) {
        let (mut b, mut h) = ([bf16::ZERO; 16], [f16::ZERO; 16]);
        // SAFETY: the CPU has AVX-512F (checked above); every buffer holds 16 elements.
        let (wide_b, wide_h) = unsafe {
            let v = f32::load16(chunk.as_ptr());
            bf16::store16(b.as_mut_ptr(), v, 0xffff);
            f16::store16(h.as_mut_ptr(), v, 0xffff);
            let (mut wb, mut wh) = ([0.0f32; 16], [0.0f32; 16]);
            f32::store16(wb.as_mut_ptr(), bf16::load16(b.as_ptr()), 0xffff);
            f32::store16(wh.as_mut_ptr(), f16::load16(h.as_ptr()), 0xffff);
            (wb, wh)
        };
        for (i, &x) in chunk.iter().enumerate() {
            let (eb, eh) = (bf16::from_f32(x), f16::from_f32(x));
            if x.is_nan() {
                assert!(
                    b[i].is_nan() && h[i].is_nan() && wide_b[i].is_nan(),
                    "{x:?}"
                );
                assert_eq!(
                    b[i].to_bits(),
                    eb.to_bits(),
                    "bf16 NaN from {:#x}",
                    x.to_bits()
                );
                continue;
            }
            assert_eq!(b[i].to_bits(), eb.to_bits(), "bf16 from {:#x}", x.to_bits());
            assert_eq!(h[i].to_bits(), eh.to_bits(), "f16 from {:#x}", x.to_bits());
            assert_eq!(wide_b[i].to_bits(), eb.to_f32().to_bits());
            assert_eq!(wide_h[i].to_bits(), eh.to_f32().to_bits());
        }
    }
    // A partial mask writes only the selected lanes.
    let mut out = [bf16::from_f32(9.0); 16];
    // SAFETY: as above.
    unsafe { bf16::store16(out.as_mut_ptr(), f32::load16([1.0f32; 16].as_ptr()), 0x0007) };
    assert_eq!(out.iter().filter(|v| v.to_f32() == 1.0).count(), 3);
    assert!(out[3..].iter().all(|v| v.to_f32() == 9.0));
}

#[test]
fn a_set_cancel_token_stops_the_product() {
    if skip() {
        return;
    }
    let data = vec![1.0f32; 256 * 256];
    let view = MatRef {
        data: &data,
        offset: 0,
        row: 256,
        col: 1,
    };
    let jobs = [Job {
        a_offset: 0,
        b_offset: 0,
        rows: 256,
    }];
    let cancelled = Arc::new(AtomicBool::new(true));
    let result = catch_unwind(AssertUnwindSafe(|| {
        with_token(cancelled, || {
            gemm_vec::<f32, f32>(view, view, (256, 256), &jobs, true)
        })
    }));
    let payload = result.expect_err("a set token unwinds");
    assert!(payload.is::<Cancelled>());
}

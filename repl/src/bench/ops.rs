//! Single eager ops through `Runtime::call`, the path a guest's op takes: matmul in f32 and
//! bf16 (square, the transformer MLP shapes, batched), elementwise ops and a cast on 4M f32,
//! and reductions and norms over the last dim of 4096 x 1024. Inputs are drawn before timing;
//! each timed call allocates its output, as an eager call does.

use std::sync::Arc;

use neuronlab_core::ops::Attrs;
use neuronlab_core::{DType, Runtime, Tensor};

use super::{measure, Case, Sample, Work};

/// Elements of the elementwise cases: 4M f32 (16 MiB), far beyond the caches.
const ELEMENTWISE_LEN: i64 = 4 << 20;
/// Rows and columns of the reduction and norm cases, reduced over the columns.
const ROWS: i64 = 4096;
const COLS: i64 = 1024;

fn randn(rt: &Runtime, shape: &[i64], dtype: DType, seed: i64) -> Result<Tensor, String> {
    rt.call1(
        "randn",
        &[],
        &Attrs::new()
            .with("shape", shape.to_vec())
            .with("seed", seed)
            .with("dtype", dtype),
    )
    .map_err(|e| e.to_string())
}

/// Times `op` on `inputs` (drawn by `make_inputs`) and credits each call with `work`.
fn op_case(
    id: String,
    description: String,
    group: &'static str,
    op: &'static str,
    attrs: Attrs,
    make_inputs: impl FnOnce(&Runtime) -> Result<Vec<Tensor>, String> + 'static,
    work: Work,
) -> Case {
    Case::new(id, description, group, move |rt: &Arc<Runtime>| {
        let inputs = make_inputs(rt)?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        // One untimed call, so a bad case reports its error instead of panicking in the loop.
        rt.call(op, &refs, &attrs).map_err(|e| e.to_string())?;
        let timing = measure(
            || {
                rt.call(op, &refs, &attrs).expect("the op ran before");
            },
            || rt.bus().clear(),
        );
        Ok(Sample::new(timing, work))
    })
}

/// `[batch..., m, k] @ [batch..., k, n]` in `dtype`.
fn matmul(
    dtype: DType,
    batch: Option<i64>,
    (m, k, n): (i64, i64, i64),
    id: String,
    what: &str,
) -> Case {
    let lead: Vec<i64> = batch.into_iter().collect();
    let a_shape = [&lead[..], &[m, k]].concat();
    let b_shape = [&lead[..], &[k, n]].concat();
    let description = format!("matmul {dtype} {a_shape:?} @ {b_shape:?} ({what})");
    let flop = 2.0 * (batch.unwrap_or(1) * m * n * k) as f64;
    op_case(
        id,
        description,
        "matmul",
        "matmul",
        Attrs::new(),
        move |rt| {
            Ok(vec![
                randn(rt, &a_shape, dtype, 1)?,
                randn(rt, &b_shape, dtype, 2)?,
            ])
        },
        Work::Flops(flop),
    )
}

fn matmul_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dtype in [DType::F32, DType::Bf16] {
        for n in [256, 1024, 2048] {
            cases.push(matmul(
                dtype,
                None,
                (n, n, n),
                format!("matmul_{dtype}_{n}"),
                "square",
            ));
        }
        cases.push(matmul(
            dtype,
            None,
            (512, 768, 3072),
            format!("matmul_{dtype}_512x768x3072"),
            "MxKxN: 512 tokens x d_model 768 -> d_ff 3072, a transformer MLP's up-projection",
        ));
        cases.push(matmul(
            dtype,
            None,
            (512, 3072, 768),
            format!("matmul_{dtype}_512x3072x768"),
            "MxKxN: the transpose shape, the MLP's down-projection 3072 -> 768",
        ));
        cases.push(matmul(
            dtype,
            Some(16),
            (128, 64, 128),
            format!("bmm_{dtype}_16x128x64x128"),
            "batch x M x K x N = 16 x 128 x 64 x 128, attention scores' shape",
        ));
    }
    cases
}

fn elementwise_cases() -> Vec<Case> {
    let len = ELEMENTWISE_LEN;
    let f32_bytes = 4.0 * len as f64;
    vec![
        op_case(
            "add_bcast_f32_4096x1024".into(),
            "add f32 [4096, 1024] + [1024] (4M elements, the row broadcast over every row)".into(),
            "elementwise",
            "add",
            Attrs::new(),
            |rt| {
                Ok(vec![
                    randn(rt, &[ROWS, COLS], DType::F32, 1)?,
                    randn(rt, &[COLS], DType::F32, 2)?,
                ])
            },
            Work::Bytes(2.0 * f32_bytes + 4.0 * COLS as f64),
        ),
        op_case(
            "exp_f32_4m".into(),
            format!("exp f32 [{len}]"),
            "elementwise",
            "exp",
            Attrs::new(),
            move |rt| Ok(vec![randn(rt, &[len], DType::F32, 1)?]),
            Work::Bytes(2.0 * f32_bytes),
        ),
        op_case(
            "gelu_tanh_f32_4m".into(),
            format!("gelu f32 [{len}], approximate='tanh'"),
            "elementwise",
            "gelu",
            Attrs::new().with("approximate", "tanh"),
            move |rt| Ok(vec![randn(rt, &[len], DType::F32, 1)?]),
            Work::Bytes(2.0 * f32_bytes),
        ),
        op_case(
            "cast_f32_bf16_4m".into(),
            format!("cast f32 [{len}] to bf16 (round to nearest even)"),
            "elementwise",
            "cast",
            Attrs::new().with("dtype", DType::Bf16),
            move |rt| Ok(vec![randn(rt, &[len], DType::F32, 1)?]),
            Work::Bytes(1.5 * f32_bytes),
        ),
    ]
}

fn reduction_cases() -> Vec<Case> {
    let shape = [ROWS, COLS];
    let bytes = 4.0 * (ROWS * COLS) as f64;
    let x = move |rt: &Runtime| randn(rt, &shape, DType::F32, 1);
    let weight = |rt: &Runtime| randn(rt, &[COLS], DType::F32, 2);
    let bias = |rt: &Runtime| randn(rt, &[COLS], DType::F32, 3);
    vec![
        op_case(
            "sum_lastdim_f32_4096x1024".into(),
            "sum f32 [4096, 1024] over the last dim".into(),
            "reduction",
            "sum",
            Attrs::new().with("dims", vec![-1i64]),
            move |rt| Ok(vec![x(rt)?]),
            Work::Bytes(bytes + 4.0 * ROWS as f64),
        ),
        op_case(
            "softmax_f32_4096x1024".into(),
            "softmax f32 [4096, 1024] over the last dim".into(),
            "reduction",
            "softmax",
            Attrs::new().with("dim", -1i64),
            move |rt| Ok(vec![x(rt)?]),
            Work::Bytes(2.0 * bytes),
        ),
        op_case(
            "layer_norm_f32_4096x1024".into(),
            "layer_norm f32 [4096, 1024] over the last dim, with weight and bias [1024], eps 1e-5"
                .into(),
            "reduction",
            "layer_norm",
            Attrs::new().with("eps", 1e-5),
            move |rt| Ok(vec![x(rt)?, weight(rt)?, bias(rt)?]),
            Work::Bytes(2.0 * bytes),
        ),
        op_case(
            "rms_norm_f32_4096x1024".into(),
            "rms_norm f32 [4096, 1024] over the last dim, with weight [1024], eps 1e-6".into(),
            "reduction",
            "rms_norm",
            Attrs::new().with("eps", 1e-6),
            move |rt| Ok(vec![x(rt)?, weight(rt)?]),
            Work::Bytes(2.0 * bytes),
        ),
    ]
}

/// The kernel cases, in the order they run.
pub fn cases() -> Vec<Case> {
    let mut cases = matmul_cases();
    cases.extend(elementwise_cases());
    cases.extend(reduction_cases());
    cases
}

//! grad-check: optimizer steps, an LR schedule, a transformer block's gradients and
//! optimizer input errors, printed for tests/python/test_training.py to recompute. Each entry
//! prints JSON lines (tensors as f64 lists in row-major order, exact for every float dtype).
//!
//! - `--entry optimizers`: SGD, Adam and AdamW in several configurations, f32 and bf16, 20
//!   steps each with gradients set by `set_grad` (some steps leave a parameter without one).
//! - `--entry schedule`: AdamW under a cosine schedule with warmup.
//! - `--entry transformer 32` (or `64`): a pre-norm transformer block's loss and gradients.
//! - `--entry bad_inputs`: optimizers over bad parameter lists, then a working step.

use neuronlab::optim::adamw_defaults;
use neuronlab::prelude::*;
use neuronlab::println;

/// The parameters every optimizer run updates: a 0-d one, a 2-D one and a 1-D one.
const SHAPES: [&[i64]; 3] = [&[], &[3, 4], &[5]];
/// Gradient scales per parameter; with the last, eps changes Adam's steps visibly.
const GRAD_SCALES: [f64; 3] = [1.0, 0.5, 1e-5];
const STEPS: u64 = 20;

/// Steps at which a parameter gets no gradient (torch then skips it and keeps its state).
fn has_grad(step: u64, param: usize) -> bool {
    !matches!((step, param), (1 | 12, 1) | (6, 2))
}

fn randn_scaled(shape: &[i64], seed: i64, scale: f64, dtype: DType) -> neuronlab::Result<Tensor> {
    let t = randn_with(shape, RandnOptions::new().seed(seed).dtype(dtype))?;
    t.mul(&full_with(&[], scale, FullOptions::new().dtype(dtype))?)
}

/// The tensor's values as a JSON list.
fn json(t: &Tensor) -> neuronlab::Result<String> {
    let values = no_grad(|| t.cast(DType::F64)?.to_vec::<f64>())?;
    let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    Ok(format!("[{}]", items.join(",")))
}

fn json_all(ts: &[&Tensor]) -> neuronlab::Result<String> {
    let items: Vec<String> = ts
        .iter()
        .map(|t| json(t))
        .collect::<neuronlab::Result<_>>()?;
    Ok(format!("[{}]", items.join(",")))
}

#[derive(Clone, Copy)]
enum Kind {
    Sgd(SGDConfig),
    Adam(AdamConfig),
    AdamW(AdamWConfig),
}

impl Kind {
    fn make<'a>(self, params: Vec<&'a Tensor>) -> neuronlab::Result<Box<dyn Optimizer + 'a>> {
        Ok(match self {
            Kind::Sgd(c) => Box::new(SGD::new(params, c)?),
            Kind::Adam(c) => Box::new(Adam::new(params, c)?),
            Kind::AdamW(c) => Box::new(AdamW::new(params, c)?),
        })
    }

    /// The settings as JSON, for the reference to read.
    fn config(self) -> String {
        match self {
            Kind::Sgd(c) => format!(
                r#"{{"optimizer":"SGD","lr":{:?},"momentum":{:?},"dampening":{:?},"weight_decay":{:?},"nesterov":{}}}"#,
                c.lr, c.momentum, c.dampening, c.weight_decay, c.nesterov
            ),
            Kind::Adam(c) | Kind::AdamW(c) => format!(
                r#"{{"optimizer":"{}","lr":{:?},"betas":[{:?},{:?}],"eps":{:?},"weight_decay":{:?}}}"#,
                if matches!(self, Kind::Adam(_)) {
                    "Adam"
                } else {
                    "AdamW"
                },
                c.lr,
                c.betas.0,
                c.betas.1,
                c.eps,
                c.weight_decay
            ),
        }
    }
}

/// Runs `kind` for [`STEPS`] steps on `dtype` parameters and prints one JSON line: the
/// settings, the initial parameters, and per step the learning rate used, the gradients
/// (`null` where none) and the parameters after the step.
fn run_case(
    name: &str,
    seed: i64,
    kind: Kind,
    dtype: DType,
    schedule: Option<(u64, u64)>,
) -> neuronlab::Result<()> {
    let params: Vec<Tensor> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, shape)| {
            randn_scaled(shape, 10_000 * seed + i as i64, 1.0, dtype)?.requires_grad()
        })
        .collect::<neuronlab::Result<_>>()?;
    let refs: Vec<&Tensor> = params.iter().collect();
    let init = json_all(&refs)?;
    let mut opt = kind.make(refs.clone())?;
    let mut scheduler = match schedule {
        Some((warmup, total)) => Some(LrScheduler::new(
            &mut *opt,
            cosine_schedule_with_warmup(warmup, total),
        )?),
        None => None,
    };
    let mut steps = Vec::new();
    for t in 1..=STEPS {
        let mut grads = Vec::new();
        for (i, p) in params.iter().enumerate() {
            if has_grad(t, i) {
                // The same seed for every dtype: bf16 gradients are the f32 ones rounded.
                let g = randn_scaled(
                    SHAPES[i],
                    10_000 * seed + 100 * t as i64 + i as i64,
                    GRAD_SCALES[i],
                    DType::F32,
                )?
                .cast(dtype)?;
                p.set_grad(Some(&g))?;
                grads.push(json(&g)?);
            } else {
                p.set_grad(None)?;
                grads.push("null".to_string());
            }
        }
        let lr = opt.lr();
        opt.step()?;
        if let Some(s) = scheduler.as_mut() {
            s.step(&mut *opt)?;
        }
        steps.push(format!(
            r#"{{"lr":{lr:?},"grads":[{}],"params":{}}}"#,
            grads.join(","),
            json_all(&refs)?
        ));
    }
    let schedule = match schedule {
        Some((warmup, total)) => format!(r#"{{"warmup":{warmup},"total":{total}}}"#),
        None => "null".to_string(),
    };
    println!(
        r#"{{"case":"{name}","dtype":"{dtype}","config":{},"schedule":{schedule},"shapes":{:?},"init":{init},"steps":[{}]}}"#,
        kind.config(),
        SHAPES,
        steps.join(",")
    );
    Ok(())
}

fn optimizer_cases() -> Vec<(&'static str, Kind)> {
    let sgd = SGDConfig {
        lr: 0.1,
        ..Default::default()
    };
    let adam = AdamConfig {
        lr: 0.05,
        ..Default::default()
    };
    vec![
        ("sgd", Kind::Sgd(sgd)),
        (
            "sgd_momentum",
            Kind::Sgd(SGDConfig {
                momentum: 0.9,
                ..sgd
            }),
        ),
        (
            "sgd_dampening",
            Kind::Sgd(SGDConfig {
                momentum: 0.9,
                dampening: 0.1,
                ..sgd
            }),
        ),
        (
            "sgd_nesterov",
            Kind::Sgd(SGDConfig {
                momentum: 0.9,
                nesterov: true,
                ..sgd
            }),
        ),
        (
            "sgd_weight_decay",
            Kind::Sgd(SGDConfig {
                momentum: 0.5,
                weight_decay: 0.1,
                ..sgd
            }),
        ),
        ("adam", Kind::Adam(adam)),
        (
            "adam_weight_decay",
            Kind::Adam(AdamConfig {
                weight_decay: 0.1,
                ..adam
            }),
        ),
        ("adamw_defaults", Kind::AdamW(adamw_defaults())),
        (
            "adamw_custom",
            Kind::AdamW(AdamWConfig {
                lr: 0.02,
                betas: (0.8, 0.99),
                eps: 1e-6,
                weight_decay: 0.05,
            }),
        ),
    ]
}

#[unsafe(export_name = "optimizers")]
extern "C" fn optimizers() {
    neuronlab::entry(|| -> neuronlab::Result<()> {
        for (seed, (name, kind)) in optimizer_cases().into_iter().enumerate() {
            for dtype in [DType::F32, DType::Bf16] {
                run_case(name, seed as i64 + 1, kind, dtype, None)?;
            }
        }
        Ok(())
    });
}

#[unsafe(export_name = "schedule")]
extern "C" fn schedule() {
    let config = AdamWConfig {
        lr: 0.05,
        weight_decay: 0.1,
        ..adamw_defaults()
    };
    neuronlab::entry(|| -> neuronlab::Result<()> {
        for dtype in [DType::F32, DType::Bf16] {
            run_case(
                "adamw_cosine",
                50,
                Kind::AdamW(config),
                dtype,
                Some((5, STEPS)),
            )?;
        }
        Ok(())
    });
}

const BATCH: i64 = 2;
const SEQ: i64 = 8;
const D_MODEL: i64 = 16;
const HEADS: i64 = 2;
const HIDDEN: i64 = 32;
const VOCAB: i64 = 11;

/// The block's weights, in the order they are printed and differentiated.
const WEIGHTS: [&str; 13] = [
    "norm1", "wq", "wk", "wv", "wo", "norm2_w", "norm2_b", "w1", "b1", "w2", "b2", "w_out", "x",
];

/// Pre-norm block: `x + attn(rms_norm(x))`, then `+ mlp(layer_norm(.))`, projected to
/// `VOCAB` logits; the loss is their mean cross-entropy against `targets`.
fn block_loss(t: &[Tensor], targets: &Tensor) -> neuronlab::Result<Tensor> {
    let [norm1, wq, wk, wv, wo, norm2_w, norm2_b, w1, b1, w2, b2, w_out, x] = t else {
        unreachable!("WEIGHTS has 13 names")
    };
    let dtype = x.dtype();
    let constant = |v: f64| full_with(&[], v, FullOptions::new().dtype(dtype));
    let head_dim = D_MODEL / HEADS;
    let heads = |h: &Tensor| {
        h.reshape(&[BATCH, SEQ, HEADS, head_dim])?
            .permute(&[0, 2, 1, 3])
    };

    let h = x.rms_norm_with(Some(norm1), RmsNormOptions::new().eps(1e-6))?;
    let (q, k, v) = (
        heads(&h.matmul(wq)?)?,
        heads(&h.matmul(wk)?)?,
        heads(&h.matmul(wv)?)?,
    );
    let scores = q
        .matmul(&k.transpose()?)?
        .mul(&constant(1.0 / (head_dim as f64).sqrt())?)?;
    let causal = ones(&[SEQ, SEQ])?.tril()?.gt(&full(&[], 0.0)?)?;
    let scores = causal.where_(&scores, &constant(f64::NEG_INFINITY)?)?;
    let attn = scores.softmax_with(SoftmaxOptions::new().dim(-1))?;
    let context = attn
        .matmul(&v)?
        .permute(&[0, 2, 1, 3])?
        .reshape(&[BATCH, SEQ, D_MODEL])?;
    let x1 = x.add(&context.matmul(wo)?)?;

    let h2 = x1.layer_norm_with(
        Some(norm2_w),
        Some(norm2_b),
        LayerNormOptions::new().eps(1e-5),
    )?;
    let mlp = h2.matmul(w1)?.add(b1)?.gelu()?.matmul(w2)?.add(b2)?;
    let out = x1.add(&mlp)?;
    let logits = out.matmul(w_out)?.reshape(&[BATCH * SEQ, VOCAB])?;
    logits.cross_entropy(targets)
}

/// `neuronlab run grad-check.wasm --entry transformer 32` (f32) or `64` (f64): prints the
/// inputs, the loss, the gradients of every weight and of `x` by `grad`, and how far
/// `backward`'s gradients are from those.
#[unsafe(export_name = "transformer")]
extern "C" fn transformer(bits: i32) {
    neuronlab::entry(|| -> neuronlab::Result<()> {
        let dtype = if bits == 64 { DType::F64 } else { DType::F32 };
        let shape = |name: &str| -> Vec<i64> {
            match name {
                "norm1" | "norm2_w" | "norm2_b" | "b2" => vec![D_MODEL],
                "wq" | "wk" | "wv" | "wo" => vec![D_MODEL, D_MODEL],
                "w1" => vec![D_MODEL, HIDDEN],
                "b1" => vec![HIDDEN],
                "w2" => vec![HIDDEN, D_MODEL],
                "w_out" => vec![D_MODEL, VOCAB],
                _ => vec![BATCH, SEQ, D_MODEL],
            }
        };
        let tensors: Vec<Tensor> = WEIGHTS
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let s = shape(name);
                let seed = 500 + i as i64;
                let t =
                    match *name {
                        // Norm gains near 1, biases small, matrices scaled by 1/sqrt(fan_in).
                        "norm1" | "norm2_w" => randn_scaled(&s, seed, 0.1, dtype)?
                            .add(&full_with(&[], 1.0, FullOptions::new().dtype(dtype))?)?,
                        "norm2_b" | "b1" | "b2" => randn_scaled(&s, seed, 0.1, dtype)?,
                        "x" => randn_scaled(&s, seed, 1.0, dtype)?,
                        _ => randn_scaled(&s, seed, 1.0 / (s[0] as f64).sqrt(), dtype)?,
                    };
                t.requires_grad()
            })
            .collect::<neuronlab::Result<_>>()?;
        let target_values: Vec<i64> = (0..BATCH * SEQ).map(|i| (7 * i + 3) % VOCAB).collect();
        let targets = from_slice(&target_values, &[BATCH * SEQ])?;

        let loss = block_loss(&tensors, &targets)?;
        let refs: Vec<&Tensor> = tensors.iter().collect();
        let grads = grad(&[&loss], &refs)?;

        // backward on a fresh graph must fill each leaf's .grad with the same values.
        block_loss(&tensors, &targets)?.backward()?;
        let mut backward_diff = 0.0f64;
        for (t, g) in tensors.iter().zip(&grads) {
            let filled = t.grad()?.expect("backward reaches every weight");
            let diff = no_grad(|| filled.sub(g)?.abs()?.max()?.cast(DType::F64)?.item::<f64>())?;
            backward_diff = backward_diff.max(diff);
        }

        let mut fields = Vec::new();
        for (name, (t, g)) in WEIGHTS.iter().zip(tensors.iter().zip(&grads)) {
            fields.push(format!(
                r#""{name}":{{"shape":{:?},"value":{},"grad":{}}}"#,
                t.shape(),
                json(t)?,
                json(g)?
            ));
        }
        println!(
            r#"{{"dtype":"{dtype}","targets":{target_values:?},"loss":{},"backward_vs_grad":{backward_diff:?},"tensors":{{{}}}}}"#,
            json(&loss)?,
            fields.join(",")
        );
        Ok(())
    });
}

/// Prints `label: <the error>` for a construction that must fail, or fails itself.
fn expect_error<T>(label: &str, result: neuronlab::Result<T>) -> neuronlab::Result<()> {
    match result {
        Ok(_) => Err(neuronlab::Error::new(
            ErrorKind::Invalid,
            format!("{label}: the optimizer accepted it"),
        )),
        Err(e) => {
            println!("{label}: {e}");
            Ok(())
        }
    }
}

#[unsafe(export_name = "bad_inputs")]
extern "C" fn bad_inputs() {
    neuronlab::entry(|| -> neuronlab::Result<()> {
        let w = randn_with(&[3], RandnOptions::new().seed(7))?.requires_grad()?;
        let frozen = randn_with(&[2], RandnOptions::new().seed(8))?;
        let before = json_all(&[&w, &frozen])?;
        expect_error(
            "SGD over no parameters",
            SGD::new(vec![], SGDConfig::default()),
        )?;
        expect_error(
            "AdamW over no parameters",
            AdamW::new(vec![], adamw_defaults()),
        )?;
        expect_error(
            "Adam over a tensor without requires_grad",
            Adam::new(vec![&w, &frozen], AdamConfig::default()),
        )?;
        expect_error(
            "SGD nesterov without momentum",
            SGD::new(
                vec![&w],
                SGDConfig {
                    nesterov: true,
                    ..Default::default()
                },
            ),
        )?;
        println!(
            "unchanged after the errors: {}",
            json_all(&[&w, &frozen])? == before
        );

        // The guest keeps going: the same leaf trains with a valid optimizer.
        let mut opt = SGD::new(
            vec![&w],
            SGDConfig {
                lr: 0.25,
                ..Default::default()
            },
        )?;
        w.square()?.sum()?.backward()?;
        let expected = no_grad(|| w.mul(&full(&[], 1.0 - 2.0 * 0.25)?))?;
        opt.step()?;
        println!(
            "step after the errors: {} (want {})",
            json(&w)?,
            json(&expected)?
        );
        Ok(())
    });
}

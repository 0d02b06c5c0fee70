//! sft: supervised fine-tuning of a tiny Llama on a task whose learning is checkable:
//! one-digit addition written as text (`3+4=7`), characters as tokens, the loss on the
//! answer only (TRL's completion-only loss).
//!
//! ```text
//! neuronlab run sft.wasm --nproc N [--dir-rw OUT] -- --tp T --fsdp F --steps S \
//!     [--packing wrapped|pad128|none] [--batch B] [--lr LR] [--seed K] [--save OUT/ckpt] \
//!     [--mixed-precision bf16] [--reshard-after-forward true|false] [--eager] \
//!     [--sequence-parallel] [--save-sharded OUT/state] [--resume OUT/state]
//! ```
//!
//! `N = T * F` ranks form a `[F, T]` mesh: tensor parallelism inside each `tp` group, FSDP
//! across them, each FSDP rank on its own rows of every batch. Batches are built as TRL's
//! collators build them:
//!
//! - `wrapped` (the default): the examples, each ending with eos, are concatenated and cut
//!   into sequences of 128 tokens, so every batch has one shape;
//! - `pad128`: each batch is padded to a multiple of 128 tokens (the pad positions ignored
//!   by the loss), one shape too;
//! - `none`: each batch is padded to its longest example, so the shape follows the data.
//!
//! `--mixed-precision bf16` is FSDP2's `MixedPrecisionPolicy(param_dtype=bf16,
//! reduce_dtype=f32)`: each forward gathers bf16 parameters and computes in bf16, gradients
//! are reduce-scattered in f32, and AdamW steps the f32 shards. It shards even on one rank, so
//! that run is the reference for the sharded ones.
//!
//! `--sequence-parallel` adds Megatron's sequence parallelism to `--tp`: between the blocks
//! each rank holds a chunk of the sequence, and TP's all-reduces become all-gathers and
//! reduce-scatters along it.
//!
//! `--eager` runs the one-rank step eagerly, as sharded steps run, instead of compiled.
//!
//! `--reshard-after-forward` is FSDP2's (true by default): each decoder layer's gathered
//! parameters are freed after its forward and gathered again for its backward; false keeps
//! them from forward to backward, one all-gather less per parameter and more memory.
//!
//! On one rank without mixed precision the step is compiled, and the compile count shows what
//! packing buys; sharded steps run eagerly (collectives are graph breaks). It prints `step N loss X`, the task
//! accuracy (greedy answers to all 100 sums) before and after, the compile counts, the
//! modeled step time (compute, exposed communication, overlap), tokens/s and model FLOPs utilisation, each
//! core's parameters, gradients and optimizer state in bytes, what each core held at its
//! peak by role (adding activations and collective buffers), and with
//! `--save` the consolidated model as a Hugging Face folder, and plots the loss curve.
//!
//! `--save-sharded` writes every rank's shards and optimizer state after the last step, and
//! `--resume` starts from such a state and trains on to `--steps` (the total), with the
//! losses the uninterrupted run has (see `state`).

mod state;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use neuronlab::dist::{self, Group, ReduceOp};
use neuronlab::memory::{self, MemoryRole};
use neuronlab::nn::{
    parallel, FullyShardOptions, LlamaConfig, LlamaForCausalLM, MixedPrecisionPolicy, Module,
};
use neuronlab::optim::{adamw_defaults, AdamWConfig, Optimizer};
use neuronlab::prelude::*;
use neuronlab::println;

const PAD: i64 = 0;
const BOS: i64 = 1;
const EOS: i64 = 2;
/// Positions the loss ignores (torch's `ignore_index`).
const IGNORE: i64 = -100;
const SEQ: usize = 128;

/// The model: small enough to train in seconds, its heads and sizes divisible by 4 ranks.
const CONFIG: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "vocab_size": 16, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0
}"#;

/// Characters as tokens: digits are 3..=12, `+` 13, `=` 14.
fn token(c: char) -> i64 {
    match c {
        '0'..='9' => 3 + (c as i64 - '0' as i64),
        '+' => 13,
        _ => 14,
    }
}

fn text(ids: &[i64]) -> String {
    ids.iter()
        .map(|&t| match t {
            3..=12 => char::from(b'0' + (t - 3) as u8),
            13 => '+',
            14 => '=',
            _ => '·',
        })
        .collect()
}

/// `a+b=c` as tokens, with bos and eos, and its labels: the answer and eos (the completion;
/// the prompt is `IGNORE`, as TRL's completion-only loss).
fn example(a: i64, b: i64) -> (Vec<i64>, Vec<i64>) {
    let mut ids = vec![BOS];
    ids.extend(format!("{a}+{b}=").chars().map(token));
    let prompt = ids.len();
    ids.extend(format!("{}", a + b).chars().map(token));
    ids.push(EOS);
    let labels = ids
        .iter()
        .enumerate()
        .map(|(i, &t)| if i < prompt { IGNORE } else { t })
        .collect();
    (ids, labels)
}

/// A seeded stream of random examples (SplitMix64).
struct Examples(u64);

impl Examples {
    fn next(&mut self) -> (Vec<i64>, Vec<i64>) {
        let mut draw = || {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % 10) as i64
        };
        let (a, b) = (draw(), draw());
        example(a, b)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Packing {
    Wrapped,
    Pad128,
    None,
}

impl Packing {
    /// The `--packing` value.
    fn name(self) -> &'static str {
        match self {
            Packing::Wrapped => "wrapped",
            Packing::Pad128 => "pad128",
            Packing::None => "none",
        }
    }
}

/// Builds batches of `rows` sequences: ids and labels (`IGNORE` where the loss skips).
struct Collator {
    examples: Examples,
    packing: Packing,
    /// Tokens (id, label) left over from the last wrapped sequence.
    carry: Vec<(i64, i64)>,
}

impl Collator {
    fn batch(&mut self, rows: usize) -> Result<(Tensor, Tensor)> {
        let (ids, labels, len) = match self.packing {
            Packing::Wrapped => {
                let (mut ids, mut labels) = (
                    Vec::with_capacity(rows * SEQ),
                    Vec::with_capacity(rows * SEQ),
                );
                for _ in 0..rows {
                    while self.carry.len() < SEQ {
                        let (i, l) = self.examples.next();
                        self.carry.extend(i.into_iter().zip(l));
                    }
                    for (i, l) in self.carry.drain(..SEQ) {
                        ids.push(i);
                        labels.push(l);
                    }
                }
                (ids, labels, SEQ)
            }
            Packing::Pad128 | Packing::None => {
                let batch: Vec<(Vec<i64>, Vec<i64>)> =
                    (0..rows).map(|_| self.examples.next()).collect();
                let longest = batch.iter().map(|(i, _)| i.len()).max().unwrap_or(1);
                let len = if self.packing == Packing::Pad128 {
                    longest.div_ceil(SEQ) * SEQ
                } else {
                    longest
                };
                let (mut ids, mut labels) = (Vec::new(), Vec::new());
                for (i, l) in &batch {
                    ids.extend(i.iter().copied().chain(std::iter::repeat(PAD)).take(len));
                    labels.extend(l.iter().copied().chain(std::iter::repeat(IGNORE)).take(len));
                }
                (ids, labels, len)
            }
        };
        let shape = [rows as i64, len as i64];
        Ok((from_slice(&ids, &shape)?, from_slice(&labels, &shape)?))
    }
}

/// The causal-LM loss of this rank's rows: position t predicts label t + 1, `IGNORE`
/// labels skipped, summed and times `scale` (a 0-d tensor: the FSDP group's size over the
/// labelled tokens of the whole batch). FSDP averages the ranks' gradients, so the average
/// of the ranks' losses is the whole batch's mean over its tokens, whatever each rank's
/// share of them (a mean of per-rank means would weigh a rank's tokens by how few it has).
/// `scale` is a tensor so a compiled step reads it at every call instead of baking one
/// batch's count into its graph.
fn loss(model: &LlamaForCausalLM, ids: &Tensor, labels: &Tensor, scale: &Tensor) -> Result<Tensor> {
    let (rows, len) = (ids.shape()[0], ids.shape()[1]);
    // `logits.float()`: a cast only when the model computes in another dtype.
    let logits = model.forward(ids)?;
    let logits = match logits.dtype() {
        DType::F32 => logits,
        _ => logits.cast(DType::F32)?,
    };
    let logits = logits
        .narrow(1, 0, len - 1)?
        .reshape(&[rows * (len - 1), 16])?;
    let targets = labels.narrow(1, 1, len - 1)?.reshape(&[rows * (len - 1)])?;
    let options = CrossEntropyOptions::new()
        .ignore_index(IGNORE)
        .reduction("sum");
    logits.cross_entropy_with(&targets, options)?.mul(scale)
}

/// The labels that count (not `IGNORE`) after the shift, over the whole batch.
fn labelled(labels: &Tensor) -> Result<i64> {
    let len = labels.shape()[1];
    let shifted = labels.narrow(1, 1, len - 1)?;
    shifted
        .ne(&full_with(
            &[],
            IGNORE as f64,
            FullOptions::new().dtype(DType::I64),
        )?)?
        .cast(DType::I64)?
        .sum()?
        .item::<i64>()
}

/// The fraction of the 100 sums `a+b=` the model answers exactly, greedily, in one batch.
fn accuracy(model: &LlamaForCausalLM) -> Result<f64> {
    no_grad(|| {
        let prompts: Vec<Vec<i64>> = (0..100)
            .map(|i| {
                let mut p = vec![BOS];
                p.extend(format!("{}+{}=", i / 10, i % 10).chars().map(token));
                p
            })
            .collect();
        let mut seqs = prompts.clone();
        for _ in 0..3 {
            let len = seqs[0].len();
            let flat: Vec<i64> = seqs.concat();
            let logits = model.forward(&from_slice(&flat, &[100, len as i64])?)?;
            let last = logits
                .narrow(1, len as i64 - 1, 1)?
                .argmax_with(ArgmaxOptions::new().dim(-1))?;
            for (s, t) in seqs.iter_mut().zip(last.to_vec::<i64>()?) {
                s.push(t);
            }
        }
        let right = (0..100)
            .filter(|&i| {
                let answer = &seqs[i][prompts[i].len()..];
                let expected: Vec<i64> = format!("{}", i / 10 + i % 10)
                    .chars()
                    .map(token)
                    .chain([EOS])
                    .collect();
                answer.starts_with(&expected)
            })
            .count();
        Ok(right as f64 / 100.0)
    })
}

struct Args {
    tp: usize,
    fsdp: usize,
    steps: usize,
    packing: Packing,
    batch: usize,
    lr: f64,
    seed: i64,
    save: Option<String>,
    /// Where to save every rank's training state after the last step.
    save_sharded: Option<String>,
    /// A sharded training state to start from.
    resume: Option<String>,
    /// FSDP's `param_dtype` (with `reduce_dtype` f32), `None` for f32 throughout.
    mixed_precision: Option<DType>,
    /// FSDP's `reshard_after_forward` for the decoder layers.
    reshard_after_forward: bool,
    /// Run the one-rank step eagerly instead of compiled.
    eager: bool,
    /// Megatron's sequence parallelism on top of the tensor parallelism.
    sequence_parallel: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        tp: 1,
        fsdp: 1,
        steps: 100,
        packing: Packing::Wrapped,
        batch: 8,
        lr: 3e-3,
        seed: 0,
        save: None,
        save_sharded: None,
        resume: None,
        mixed_precision: None,
        reshard_after_forward: true,
        eager: false,
        sequence_parallel: false,
    };
    let list = neuronlab::args();
    let mut it = list.iter();
    let bad = |m: String| {
        Error::new(
            ErrorKind::Invalid,
            format!("{m}\nusage: sft -- --tp T --fsdp F --steps S [--packing wrapped|pad128|none] [--batch B] [--lr LR] [--seed K] [--save OUT/ckpt] [--save-sharded OUT/state] [--resume OUT/state] [--mixed-precision bf16] [--reshard-after-forward true|false] [--eager] [--sequence-parallel]"),
        )
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--eager" => {
                a.eager = true;
                continue;
            }
            "--sequence-parallel" => {
                a.sequence_parallel = true;
                continue;
            }
            _ => {}
        }
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| bad(format!("{flag} needs a value")))
        };
        let parse_err = |v: &str| bad(format!("{flag}: `{v}` is not valid"));
        match flag.as_str() {
            "--tp" => {
                let v = value()?;
                a.tp = v.parse().map_err(|_| parse_err(&v))?
            }
            "--fsdp" => {
                let v = value()?;
                a.fsdp = v.parse().map_err(|_| parse_err(&v))?
            }
            "--steps" => {
                let v = value()?;
                a.steps = v.parse().map_err(|_| parse_err(&v))?
            }
            "--batch" => {
                let v = value()?;
                a.batch = v.parse().map_err(|_| parse_err(&v))?
            }
            "--lr" => {
                let v = value()?;
                a.lr = v.parse().map_err(|_| parse_err(&v))?
            }
            "--seed" => {
                let v = value()?;
                a.seed = v.parse().map_err(|_| parse_err(&v))?
            }
            "--save" => a.save = Some(value()?),
            "--save-sharded" => a.save_sharded = Some(value()?),
            "--resume" => a.resume = Some(value()?),
            "--mixed-precision" => {
                let v = value()?;
                a.mixed_precision = match v.as_str() {
                    "bf16" => Some(DType::Bf16),
                    "f16" => Some(DType::F16),
                    "f32" | "none" => None,
                    _ => return Err(parse_err(&v)),
                }
            }
            "--reshard-after-forward" => {
                let v = value()?;
                a.reshard_after_forward = v.parse().map_err(|_| parse_err(&v))?
            }
            "--packing" => {
                let v = value()?;
                a.packing = match v.as_str() {
                    "wrapped" => Packing::Wrapped,
                    "pad128" => Packing::Pad128,
                    "none" => Packing::None,
                    _ => return Err(parse_err(&v)),
                }
            }
            other => return Err(bad(format!("unknown argument `{other}`"))),
        }
    }
    if a.tp * a.fsdp != dist::world_size() as usize {
        return Err(bad(format!(
            "--tp {} --fsdp {} needs {} ranks, and this run has {}; give --nproc {}",
            a.tp,
            a.fsdp,
            a.tp * a.fsdp,
            dist::world_size(),
            a.tp * a.fsdp
        )));
    }
    if a.batch % a.fsdp != 0 {
        return Err(bad(format!(
            "--batch {} must be a multiple of --fsdp {}",
            a.batch, a.fsdp
        )));
    }
    Ok(a)
}

/// Model FLOPs of training on one token, as PaLM counts them (appendix B): 6 per parameter
/// that multiplies (2 forward, 4 backward) plus 12 per layer, head dim and context position for
/// attention's scores and values. The input embedding is a lookup, not a matmul; a tied one is
/// the LM head's matmul too.
fn flops_per_token(config: &LlamaConfig, parameters: i64) -> f64 {
    let embedding = match config.tie_word_embeddings {
        true => 0,
        false => config.vocab_size * config.hidden_size,
    };
    let attention = 12 * config.num_hidden_layers * config.num_attention_heads * config.head_dim;
    6.0 * (parameters - embedding) as f64 + (attention * SEQ as i64) as f64
}

/// This rank's modeled device time over the training steps (the loss, backward and optimizer
/// step; not the loss logging), the collectives' time and the part of it no compute
/// overlapped, and the tokens the steps trained on.
#[derive(Default)]
struct StepCost {
    device: Duration,
    collectives: Duration,
    exposed: Duration,
    tokens: usize,
}

/// The device clock, the collectives' time and their exposed part, now.
fn clocks() -> [Duration; 3] {
    [
        neuronlab::device_time(),
        neuronlab::collective_time(),
        neuronlab::exposed_collective_time(),
    ]
}

impl StepCost {
    fn add(&mut self, [device, collectives, exposed]: [Duration; 3], tokens: usize) {
        let [d, c, e] = clocks();
        self.device += d - device;
        self.collectives += c - collectives;
        self.exposed += e - exposed;
        self.tokens += tokens;
    }

    /// Prints the slowest rank's mean step, split into compute and exposed communication
    /// (with how much communication overlapped compute), and the modeled throughput and
    /// model FLOPs utilisation: a step takes as long as its slowest rank, and every rank's
    /// core counts towards the peak.
    fn report(&self, steps: usize, flops_per_token: f64, dtype: DType) -> Result<()> {
        let mine = from_slice(
            &[
                self.device.as_secs_f64(),
                self.collectives.as_secs_f64(),
                self.exposed.as_secs_f64(),
            ],
            &[1, 3],
        )?;
        let all = dist::all_gather(&mine, 0, &Group::world())?.to_vec::<f64>()?;
        let slowest = all
            .chunks(3)
            .max_by(|a, b| a[0].total_cmp(&b[0]))
            .expect("one rank at least");
        let per_step = |s: f64| s * 1e3 / steps.max(1) as f64;
        let device = slowest[0];
        let (step_ms, comm_ms, exposed_ms) =
            (per_step(device), per_step(slowest[1]), per_step(slowest[2]));
        let cores = dist::world_size() as f64;
        let peak = neuronlab::peak_flops(dtype) * cores;
        let tokens_per_s = self.tokens as f64 / device;
        let mfu = flops_per_token * tokens_per_s / peak;
        if dist::rank() == 0 {
            println!(
                "modeled step: {step_ms:.3} ms on the slowest rank = compute {:.3} ms + \
                 exposed communication {exposed_ms:.3} ms (communication {comm_ms:.3} ms, \
                 {:.3} ms of it overlapping compute)",
                step_ms - exposed_ms,
                comm_ms - exposed_ms
            );
            println!(
                "modeled throughput: {tokens_per_s:.0} tokens/s; MFU {:.4}% of {cores} core(s) at \
                 {:.1} TFLOPS each ({}, the dtype the model computes in)",
                mfu * 100.0,
                peak / cores / 1e12,
                dtype.name().to_uppercase()
            );
        }
        Ok(())
    }
}

/// What each rank holds of the training state, gathered to rank 0 and printed as a table:
/// parameters (this rank's leaves), their gradients and the optimizer's state, in bytes.
fn memory_table(model: &LlamaForCausalLM, opt: &dyn Optimizer) -> Result<()> {
    let params: i64 = model.parameters().iter().map(|p| p.nbytes()).sum();
    let mut grads = 0;
    for p in model.parameters() {
        grads += p.grad()?.map_or(0, |g| g.nbytes());
    }
    let mine = from_slice(&[params, grads, opt.state_bytes()], &[1, 3])?;
    let all = dist::all_gather(&mine, 0, &Group::world())?.to_vec::<i64>()?;
    if dist::rank() == 0 {
        println!("training state per core (bytes):");
        println!(
            "{:<10} {:>12} {:>12} {:>16}",
            "core", "parameters", "gradients", "optimizer state"
        );
        for (r, row) in all.chunks(3).enumerate() {
            println!(
                "{:<10} {:>12} {:>12} {:>16}",
                format!("neuron:{r}"),
                row[0],
                row[1],
                row[2]
            );
        }
    }
    Ok(())
}

/// What each core held at its peak during the training steps, by role (the host's accounting, ABI.md "Memory roles"):
/// the training state, the activations saved for backward and the collective buffers (FSDP's
/// gathered parameters, TP's reduced activations) live at that moment.
fn peak_table() -> Result<()> {
    let mine: Vec<i64> = MemoryRole::ALL
        .iter()
        .map(|&r| memory::at_peak(r))
        .collect::<Result<_>>()?;
    let n = mine.len();
    let all = dist::all_gather(&from_slice(&mine, &[1, n as i64])?, 0, &Group::world())?
        .to_vec::<i64>()?;
    if dist::rank() == 0 {
        println!("each core at its peak (bytes):");
        let mut header = format!("{:<10}", "core");
        for role in MemoryRole::ALL {
            header += &format!(" {:>18}", role.name());
        }
        println!("{header} {:>10}", "peak");
        for (r, row) in all.chunks(n).enumerate() {
            let mut line = format!("{:<10}", format!("neuron:{r}"));
            for bytes in row {
                line += &format!(" {bytes:>18}");
            }
            println!("{line} {:>10}", row.iter().sum::<i64>());
        }
    }
    Ok(())
}

fn run() -> Result<()> {
    let a = args()?;
    let mesh = DeviceMesh::new(&[a.fsdp, a.tp], &["fsdp", "tp"])?;
    let (tp, fsdp) = (Rc::new(mesh.group("tp")?), Rc::new(mesh.group("fsdp")?));
    let config = LlamaConfig::from_json(CONFIG)?;
    let mut model = LlamaForCausalLM::new(&config, DType::F32, a.seed)?;
    let flops_per_token = flops_per_token(&config, model.num_parameters());
    if a.tp > 1 {
        let options = parallel::TensorParallelOptions {
            sequence_parallel: a.sequence_parallel,
        };
        parallel::parallelize_with(&mut model, &tp, options)?;
    }
    // Under mixed precision even one FSDP rank shards (over itself), so the 1-rank run
    // computes in the same dtypes as the sharded ones it is compared with.
    if a.fsdp > 1 || a.mixed_precision.is_some() {
        let options = FullyShardOptions {
            mp_policy: MixedPrecisionPolicy {
                param_dtype: a.mixed_precision,
                reduce_dtype: a.mixed_precision.map(|_| DType::F32),
            },
            reshard_after_forward: a.reshard_after_forward,
        };
        parallel::fully_shard_with(&mut model, &fsdp, options)?;
    }
    println!(
        "model: {} parameters; mesh [fsdp {}, tp {}]",
        model.num_parameters(),
        a.fsdp,
        a.tp
    );
    let mut collator = Collator {
        examples: Examples(a.seed as u64 + 1),
        packing: a.packing,
        carry: Vec::new(),
    };
    let opt = RefCell::new(AdamW::new(
        model.parameters(),
        AdamWConfig {
            lr: a.lr,
            ..adamw_defaults()
        },
    )?);
    let settings = state::RunSettings(vec![
        ("mesh", format!("[fsdp {}, tp {}]", a.fsdp, a.tp)),
        ("batch", a.batch.to_string()),
        ("packing", a.packing.name().to_string()),
        ("seed", a.seed.to_string()),
        (
            "mixed_precision",
            a.mixed_precision.map_or("none", DType::name).to_string(),
        ),
    ]);
    let mut first = 1;
    if let Some(dir) = &a.resume {
        let saved = state::load(dir, &model, &mut *opt.borrow_mut(), &settings)?;
        if saved >= a.steps {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "--resume {dir}: the state is at step {saved}, so --steps {} leaves nothing \
                     to train; give --steps above {saved} (the total, as Trainer's max_steps)",
                    a.steps
                ),
            ));
        }
        // The batches the saved run trained on, drawn again so the stream continues.
        for _ in 0..saved {
            collator.batch(a.batch)?;
        }
        println!("resumed from {dir} at step {saved}");
        first = saved + 1;
    }
    println!("accuracy before: {:.2}", accuracy(&model)?);
    let rows = a.batch / a.fsdp;
    let position = mesh.coordinate("fsdp")?;
    // A step with collectives (more ranks, or FSDP's casting all-gathers) runs eagerly.
    let sharded = dist::world_size() > 1 || a.mixed_precision.is_some();
    let eager = sharded || a.eager;
    let step = compile_with(
        "sft_step",
        |batch: &[Tensor]| {
            let l = loss(&model, &batch[0], &batch[1], &batch[2])?;
            let mut opt = opt.borrow_mut();
            opt.zero_grad()?;
            l.backward()?;
            opt.step()?;
            Ok(vec![l.detach()?])
        },
        CompileOptions::new().input_names(&["input_ids", "labels", "loss_scale"]),
    )?;
    let mut shapes: Vec<Vec<i64>> = Vec::new();
    let mut curve: Vec<f32> = Vec::new();
    let mut cost = StepCost::default();
    // The peak of the training steps, not of the model's setup or the evaluation before.
    memory::reset_peak()?;
    for n in first..=a.steps {
        // Every rank draws the whole batch, so the FSDP ranks split one batch.
        let (ids, labels) = collator.batch(a.batch)?;
        let scale = full(&[], a.fsdp as f64 / labelled(&labels)? as f64)?;
        let (ids, labels) = (
            ids.narrow(0, (position * rows) as i64, rows as i64)?
                .contiguous()?,
            labels
                .narrow(0, (position * rows) as i64, rows as i64)?
                .contiguous()?,
        );
        if !shapes.contains(&ids.shape()) {
            shapes.push(ids.shape());
        }
        let started = clocks();
        let l = if eager {
            let l = loss(&model, &ids, &labels, &scale)?;
            let mut opt = opt.borrow_mut();
            opt.zero_grad()?;
            l.backward()?;
            opt.step()?;
            l.detach()?
        } else {
            step.call1(&[&ids, &labels, &scale])?
        };
        cost.add(started, a.batch * ids.shape()[1] as usize);
        // Averaging the logged loss over the FSDP ranks is not part of the step's cost.
        let l = match sharded {
            true => dist::all_reduce(&l, ReduceOp::Avg, &fsdp)?,
            false => l,
        };
        let value = l.item::<f32>()?;
        curve.push(value);
        println!("step {n} loss {value}");
    }
    let stats = step.stats()?;
    println!(
        "batch shapes: {}",
        shapes
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if sharded {
        let why = match dist::world_size() {
            1 => "FSDP's mixed precision on 1 rank".to_string(),
            n => format!("{n} ranks"),
        };
        println!("sft_step: eager ({why}: collectives are graph breaks)");
    } else if eager {
        println!("sft_step: eager (--eager)");
    } else {
        println!(
            "sft_step: {} calls, {} compile(s), {} cache hits",
            stats.calls, stats.compiles, stats.cache_hits
        );
    }
    cost.report(
        a.steps + 1 - first,
        flops_per_token,
        a.mixed_precision.unwrap_or(DType::F32),
    )?;
    peak_table()?;
    println!("accuracy after: {:.2}", accuracy(&model)?);
    memory_table(&model, &*opt.borrow())?;
    if dist::rank() == 0 {
        let steps: Vec<i64> = (first as i64..).take(curve.len()).collect();
        plot::line(&format!(
            "sft on [fsdp {}, tp {}]: loss per step",
            a.fsdp, a.tp
        ))
        .x_axis("step", "")
        .y_axis("cross entropy of the answer", "nats")
        .series_xy("loss", &steps, &curve)
        .show()?;
    }
    if let Some(dir) = &a.save_sharded {
        state::save(dir, &model, &*opt.borrow(), a.steps, &settings)?;
        println!(
            "saved the training state at step {} to {dir}: one file per rank",
            a.steps
        );
    }
    let (sample, _) = example(3, 4);
    println!("example: {}", text(&sample[1..sample.len() - 1]));
    if let Some(path) = a.save {
        let state = parallel::full_state_dict(&model)?;
        if dist::rank() == 0 {
            fs::create_dir(&path)?;
            fs::write_file(&format!("{path}/config.json"), CONFIG)?;
            let tensors: Vec<(&str, &Tensor)> =
                state.iter().map(|(n, t)| (n.as_str(), t)).collect();
            checkpoint::save(
                &format!("{path}/model.safetensors"),
                &tensors,
                &[("format", "pt")],
            )?;
            println!("saved {} tensors to {path}", tensors.len());
        }
    }
    Ok(())
}

neuronlab::main!(run);

//! model-check: a Llama from a checkpoint folder, for tests/python/test_models.py.
//!
//! ```text
//! neuronlab run model-check.wasm --dir MODEL --dir-rw OUT -- grads IDS OUT/grads.safetensors
//! neuronlab run model-check.wasm --dir MODEL --dir-rw OUT -- train IDS STEPS OUT/finetuned
//! neuronlab run model-check.wasm --nproc N --dir MODEL --dir-rw OUT -- \
//!     sharded IDS STEPS OUT/finetuned --tp T --fsdp F
//! ```
//!
//! IDS are sequences of one length, `1,2,3;4,5,6`: the batch.
//!
//! - `grads`: the causal-LM loss of the ids `1,2,...` (transformers' shifted cross entropy
//!   over f32 logits) and its gradient for every parameter, saved by parameter name with the
//!   loss as `loss`.
//! - `train`: `STEPS` AdamW steps on the same loss, eagerly and then as one compiled step,
//!   printing `eager step N loss X` and `compiled step N loss X`, then the compiled run's
//!   weights saved as a Hub folder (config.json and model.safetensors) at the last path.
//! - `sharded`: the eager steps on `N = T * F` ranks, tensor-parallel over `T` and FSDP over
//!   `F` (a `[F, T]` mesh), each FSDP rank on its rows of the batch, printing
//!   `sharded step N loss X`, then the consolidated weights saved by rank 0 (not when OUT is
//!   `-`, so a run's collectives are only its steps').

use std::rc::Rc;

use neuronlab::dist::{self, ReduceOp};
use neuronlab::nn::{parallel, LlamaForCausalLM, Module};
use neuronlab::optim::adamw_defaults;
use neuronlab::prelude::*;
use neuronlab::println;

fn model_folder() -> Result<String> {
    for grant in fs::list_dir("")? {
        let name = grant.trim_end_matches('/').to_string();
        if fs::list_dir(&name)?.iter().any(|f| f == "config.json") {
            return Ok(name);
        }
    }
    Err(Error::new(
        ErrorKind::Fs,
        "grant a model folder holding config.json with --dir",
    ))
}

/// Sequences of equal length, `1,2,3;4,5,6`, as a `[batch, seq]` tensor.
fn ids(text: &str) -> Result<Tensor> {
    let rows: Vec<Vec<i64>> = text
        .split(';')
        .map(|row| {
            row.split(',')
                .map(|t| {
                    t.parse()
                        .map_err(|_| Error::new(ErrorKind::Invalid, format!("bad id `{t}`")))
                })
                .collect::<Result<Vec<i64>>>()
        })
        .collect::<Result<_>>()?;
    let seq = rows[0].len();
    if rows.iter().any(|r| r.len() != seq) {
        return Err(Error::new(
            ErrorKind::Invalid,
            "the sequences must have one length",
        ));
    }
    let flat: Vec<i64> = rows.concat();
    from_slice(&flat, &[rows.len() as i64, seq as i64])
}

/// transformers' causal-LM loss: position t predicts token t + 1, the mean over every
/// predicted token of the batch.
fn loss(model: &LlamaForCausalLM, ids: &Tensor) -> Result<Tensor> {
    let (batch, seq) = (ids.shape()[0], ids.shape()[1]);
    let vocab = model.config.vocab_size;
    let logits = model.forward(ids)?.cast(DType::F32)?;
    let logits = logits
        .narrow(1, 0, seq - 1)?
        .reshape(&[batch * (seq - 1), vocab])?;
    let labels = ids.narrow(1, 1, seq - 1)?.reshape(&[batch * (seq - 1)])?;
    logits.cross_entropy(&labels)
}

fn grads(folder: &str, ids: &Tensor, out: &str) -> Result<()> {
    let model = LlamaForCausalLM::from_pretrained(folder)?;
    let l = loss(&model, ids)?;
    l.backward()?;
    let named = model.named_parameters();
    let mut grads = Vec::new();
    for (name, p) in &named {
        let g = p
            .grad()?
            .ok_or_else(|| Error::new(ErrorKind::Grad, format!("{name} got no gradient")))?;
        grads.push((name.clone(), g));
    }
    let loss_value = l.detach()?;
    let mut tensors: Vec<(&str, &Tensor)> = grads.iter().map(|(n, g)| (n.as_str(), g)).collect();
    tensors.push(("loss", &loss_value));
    checkpoint::save(out, &tensors, &[])?;
    println!("loss {}", l.item::<f32>()?);
    Ok(())
}

fn train(folder: &str, ids: &Tensor, steps: usize, out: &str) -> Result<()> {
    let config = || neuronlab::optim::AdamWConfig {
        lr: 1e-2,
        ..adamw_defaults()
    };
    let model = LlamaForCausalLM::from_pretrained(folder)?;
    let mut opt = AdamW::new(model.parameters(), config())?;
    for step in 1..=steps {
        let l = loss(&model, ids)?;
        opt.zero_grad()?;
        l.backward()?;
        opt.step()?;
        println!("eager step {step} loss {}", l.item::<f32>()?);
    }

    let model = LlamaForCausalLM::from_pretrained(folder)?;
    let mut opt = AdamW::new(model.parameters(), config())?;
    let compiled = compile_with(
        "finetune_step",
        |batch: &[Tensor]| {
            let l = loss(&model, &batch[0])?;
            opt.zero_grad()?;
            l.backward()?;
            opt.step()?;
            Ok(vec![l.detach()?])
        },
        CompileOptions::new().input_names(&["input_ids"]),
    )?;
    for step in 1..=steps {
        let l = compiled.call1(&[ids])?;
        println!("compiled step {step} loss {}", l.item::<f32>()?);
    }
    let s = compiled.stats()?;
    println!(
        "finetune_step: {} calls, {} compile(s), {} cache hits",
        s.calls, s.compiles, s.cache_hits
    );
    drop(compiled);

    let state = model.state_dict();
    save_folder(
        folder,
        out,
        &state
            .iter()
            .map(|(n, t)| (n.as_str(), *t))
            .collect::<Vec<_>>(),
    )
}

/// `tensors` as a Hugging Face folder at `out`: `folder`'s config.json and model.safetensors.
fn save_folder(folder: &str, out: &str, tensors: &[(&str, &Tensor)]) -> Result<()> {
    fs::create_dir(out)?;
    fs::write_file(
        &format!("{out}/config.json"),
        fs::read_file(&format!("{folder}/config.json"))?,
    )?;
    checkpoint::save(
        &format!("{out}/model.safetensors"),
        tensors,
        &[("format", "pt")],
    )?;
    println!("saved {} tensors to {out}", tensors.len());
    Ok(())
}

/// `STEPS` AdamW steps sharded over a `[fsdp, tp]` mesh of the world: tensor parallelism
/// inside each `tp` group, FSDP across them, each FSDP rank on its rows of the batch. Prints
/// `sharded step N loss X` (the mean over the FSDP ranks), then saves the consolidated model.
fn train_sharded(
    folder: &str,
    ids: &Tensor,
    steps: usize,
    out: &str,
    tp: usize,
    fsdp: usize,
) -> Result<()> {
    let mesh = DeviceMesh::new(&[fsdp, tp], &["fsdp", "tp"])?;
    let (tp_group, fsdp_group) = (Rc::new(mesh.group("tp")?), Rc::new(mesh.group("fsdp")?));
    let mut model = LlamaForCausalLM::from_pretrained(folder)?;
    if tp > 1 {
        parallel::parallelize(&mut model, &tp_group)?;
    }
    if fsdp > 1 {
        parallel::fully_shard(&mut model, &fsdp_group)?;
    }
    let batch = ids.shape()[0];
    if batch % fsdp as i64 != 0 {
        return Err(Error::new(
            ErrorKind::Invalid,
            "the batch must split evenly over the fsdp ranks",
        ));
    }
    let rows = batch / fsdp as i64;
    let mine = ids
        .narrow(0, mesh.coordinate("fsdp")? as i64 * rows, rows)?
        .contiguous()?;
    let config = neuronlab::optim::AdamWConfig {
        lr: 1e-2,
        ..adamw_defaults()
    };
    let mut opt = AdamW::new(model.parameters(), config)?;
    for step in 1..=steps {
        let l = loss(&model, &mine)?;
        opt.zero_grad()?;
        l.backward()?;
        opt.step()?;
        let global = dist::all_reduce(&l.detach()?, ReduceOp::Avg, &fsdp_group)?;
        println!("sharded step {step} loss {}", global.item::<f32>()?);
    }
    if out == "-" {
        return Ok(());
    }
    let state = parallel::full_state_dict(&model)?;
    if dist::rank() == 0 {
        save_folder(
            folder,
            out,
            &state
                .iter()
                .map(|(n, t)| (n.as_str(), t))
                .collect::<Vec<_>>(),
        )?;
    }
    Ok(())
}

fn run() -> Result<()> {
    let args = neuronlab::args();
    let folder = model_folder()?;
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let number = |text: &str| -> Result<usize> {
        text.parse()
            .map_err(|_| Error::new(ErrorKind::Invalid, format!("`{text}` is not a number")))
    };
    match words.as_slice() {
        ["grads", text, out] => grads(&folder, &ids(text)?, out),
        ["train", text, steps, out] => train(&folder, &ids(text)?, number(steps)?, out),
        ["sharded", text, steps, out, "--tp", tp, "--fsdp", fsdp] => train_sharded(
            &folder,
            &ids(text)?,
            number(steps)?,
            out,
            number(tp)?,
            number(fsdp)?,
        ),
        _ => Err(Error::new(
            ErrorKind::Invalid,
            "usage: -- grads IDS OUT | train IDS STEPS OUT | sharded IDS STEPS OUT --tp T --fsdp F",
        )),
    }
}

neuronlab::main!(run);

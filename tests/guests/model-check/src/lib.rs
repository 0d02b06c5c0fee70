//! model-check: a Llama from a checkpoint folder, for tests/python/test_models.py.
//!
//! ```text
//! neuronlab run model-check.wasm --dir MODEL --dir-rw OUT -- grads IDS OUT/grads.safetensors
//! neuronlab run model-check.wasm --dir MODEL --dir-rw OUT -- train IDS STEPS OUT/finetuned
//! ```
//!
//! - `grads`: the causal-LM loss of the ids `1,2,...` (transformers' shifted cross entropy
//!   over f32 logits) and its gradient for every parameter, saved by parameter name with the
//!   loss as `loss`.
//! - `train`: `STEPS` AdamW steps on the same loss, eagerly and then as one compiled step,
//!   printing `eager step N loss X` and `compiled step N loss X`, then the compiled run's
//!   weights saved as a Hub folder (config.json and model.safetensors) at the last path.

use neuronlab::nn::{LlamaForCausalLM, Module};
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

fn ids(text: &str) -> Result<Tensor> {
    let ids: Vec<i64> = text
        .split(',')
        .map(|t| {
            t.parse()
                .map_err(|_| Error::new(ErrorKind::Invalid, format!("bad id `{t}`")))
        })
        .collect::<Result<_>>()?;
    from_slice(&ids, &[1, ids.len() as i64])
}

/// transformers' causal-LM loss: position t predicts token t + 1.
fn loss(model: &LlamaForCausalLM, ids: &Tensor) -> Result<Tensor> {
    let seq = ids.shape()[1];
    let vocab = model.config.vocab_size;
    let logits = model.forward(ids)?.cast(DType::F32)?;
    let logits = logits.narrow(1, 0, seq - 1)?.reshape(&[seq - 1, vocab])?;
    let labels = ids.narrow(1, 1, seq - 1)?.reshape(&[seq - 1])?;
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

    fs::create_dir(out)?;
    fs::write_file(
        &format!("{out}/config.json"),
        fs::read_file(&format!("{folder}/config.json"))?,
    )?;
    let state = model.state_dict();
    let tensors: Vec<(&str, &Tensor)> = state.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    checkpoint::save(
        &format!("{out}/model.safetensors"),
        &tensors,
        &[("format", "pt")],
    )?;
    println!("saved {} tensors to {out}", tensors.len());
    Ok(())
}

fn run() -> Result<()> {
    let args = neuronlab::args();
    let folder = model_folder()?;
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["grads", text, out] => grads(&folder, &ids(text)?, out),
        ["train", text, steps, out] => {
            let steps = steps
                .parse()
                .map_err(|_| Error::new(ErrorKind::Invalid, "STEPS is a number"))?;
            train(&folder, &ids(text)?, steps, out)
        }
        _ => Err(Error::new(
            ErrorKind::Invalid,
            "usage: -- grads IDS OUT | train IDS STEPS OUT",
        )),
    }
}

neuronlab::main!(run);

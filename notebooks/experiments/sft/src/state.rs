//! The sharded training state, as `torch.distributed.checkpoint` saves it for FSDP: every
//! rank writes what it holds (its parameter shards and their optimizer state) and reads back
//! only that, so no rank ever holds the whole model to save or resume.
//!
//! A state folder has one standard safetensors file per rank,
//! `rank-{r:05}-of-{n:05}.safetensors`, holding `model.{name}` (the rank's shard of each
//! parameter, under its Hugging Face name) and `optim.{name}` (the optimizer's state, named
//! as torch's `Optimizer.state_dict()` flattens it), with the step and the run's settings in
//! its metadata. A resume needs the same mesh and data settings: shards are cut by the mesh,
//! and the data stream is replayed up to the saved step as Hugging Face's Trainer skips the
//! batches it already trained on.

use neuronlab::checkpoint;
use neuronlab::dist;
use neuronlab::nn::{LlamaForCausalLM, Module};
use neuronlab::optim::Optimizer;
use neuronlab::prelude::*;

/// The settings a resumed run must share with the saved one, as metadata pairs.
pub struct RunSettings(pub Vec<(&'static str, String)>);

/// This rank's file in the state folder `dir`.
fn rank_file(dir: &str) -> String {
    format!(
        "{dir}/rank-{:05}-of-{:05}.safetensors",
        dist::rank(),
        dist::world_size()
    )
}

/// The world size the state in `dir` was saved by, from its files' names.
fn saved_world(dir: &str) -> Option<usize> {
    fs::list_dir(dir).ok()?.iter().find_map(|name| {
        let rest = name.strip_prefix("rank-")?.strip_suffix(".safetensors")?;
        rest.split_once("-of-")?.1.parse().ok()
    })
}

/// Saves this rank's shards and optimizer state after `step` steps into `dir` (made if
/// needed; every rank writes its own file).
pub fn save(
    dir: &str,
    model: &LlamaForCausalLM,
    opt: &dyn Optimizer,
    step: usize,
    settings: &RunSettings,
) -> Result<()> {
    fs::create_dir(dir)?;
    let names: Vec<(String, &Tensor)> = model
        .named_parameters()
        .into_iter()
        .map(|(n, t)| (format!("model.{n}"), t))
        .chain(
            opt.named_state()
                .into_iter()
                .map(|(n, t)| (format!("optim.{n}"), t)),
        )
        .collect();
    let tensors: Vec<(&str, &Tensor)> = names.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let step = step.to_string();
    let mut metadata = vec![("format", "pt"), ("step", step.as_str())];
    metadata.extend(settings.0.iter().map(|(k, v)| (*k, v.as_str())));
    checkpoint::save(&rank_file(dir), &tensors, &metadata)?;
    dist::barrier(&dist::Group::world())
}

/// Loads this rank's state from `dir` into the model's shards and the optimizer, after
/// checking that it was saved by a run with the same `settings`; returns the saved step.
pub fn load(
    dir: &str,
    model: &LlamaForCausalLM,
    opt: &mut dyn Optimizer,
    settings: &RunSettings,
) -> Result<usize> {
    let path = rank_file(dir);
    let saved = checkpoint::load(&path).map_err(|e| {
        let hint = match saved_world(dir) {
            Some(n) if n != dist::world_size() as usize => format!(
                "the state was saved by {n} ranks and this run has {}: resume with the \
                 --nproc, --tp and --fsdp it was saved with",
                dist::world_size()
            ),
            _ => "a state folder has one file per rank, written by --save-sharded on a run \
                  with the same --tp and --fsdp"
                .to_string(),
        };
        Error::new(e.kind(), format!("--resume {dir}: {e}\n({hint})"))
    })?;
    for (key, value) in &settings.0 {
        let was = saved.metadata.get(*key).map_or("(none)", String::as_str);
        if was != value {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "--resume {dir}: the state was saved with {key} {was} and this run has \
                     {value}; resume with the settings it was saved with"
                ),
            ));
        }
    }
    let step = saved
        .metadata
        .get("step")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid,
                format!("--resume {dir}: {path} has no step in its metadata"),
            )
        })?;
    for (name, param) in model.named_parameters() {
        let key = format!("model.{name}");
        let Some(shard) = saved.get(&key) else {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!("--resume {dir}: {path} has no {key}"),
            ));
        };
        no_grad(|| param.set_data(shard))?;
    }
    let optim: Vec<(String, Tensor)> = saved
        .tensors
        .into_iter()
        .filter_map(|(n, t)| n.strip_prefix("optim.").map(|n| (n.to_string(), t)))
        .collect();
    opt.load_state_dict(&optim)?;
    Ok(step)
}

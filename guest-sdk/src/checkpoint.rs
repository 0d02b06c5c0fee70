//! Checkpoints in Hugging Face's safetensors format, in the folders the user granted (ABI.md,
//! "ckpt"): one `.safetensors` file, or a sharded folder with a
//! `model.safetensors.index.json`, as `transformers` writes them.
//!
//! [`load`] reads every tensor straight onto this guest's core, after checking the headers
//! and that the tensors fit the host cap and the core's HBM. [`save`] and [`save_sharded`]
//! write files that Python's `safetensors` reads bit for bit. Names are kept as given, and so
//! is the metadata (`__metadata__`).
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::checkpoint;
//!
//! let ckpt = checkpoint::load("models/tiny.safetensors")?;
//! let w = ckpt.get("layer.0.weight").expect("a weight");
//! checkpoint::save("out/step1.safetensors", &[("layer.0.weight", w)], &[("step", "1")])?;
//! checkpoint::save_sharded("out/step1", &[("layer.0.weight", w)], &[], 1 << 30)?;
//! ```

use std::collections::BTreeMap;

use crate::error::{Error, ErrorKind, Result};
use crate::sys;
use crate::tensor::Tensor;

/// A loaded checkpoint: its tensors by name and its metadata.
pub struct Checkpoint {
    /// The tensors, sorted by name.
    pub tensors: Vec<(String, Tensor)>,
    /// `__metadata__` of a file, or the `metadata` of a sharded folder's index.
    pub metadata: BTreeMap<String, String>,
}

impl Checkpoint {
    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| &self.tensors[i].1)
    }

    /// The tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(n, _)| n.as_str())
    }
}

/// The tensor names (sorted) and the metadata of the checkpoint at `path`, from its headers
/// alone.
#[track_caller]
pub fn info(path: &str) -> Result<(Vec<String>, BTreeMap<String, String>)> {
    let (names, pairs) = sys::ckpt_info(path)?;
    Ok((names, pairs_to_map(pairs)))
}

fn pairs_to_map(pairs: Vec<String>) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut it = pairs.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        map.insert(k, v);
    }
    map
}

/// Loads the checkpoint at `path` (a `.safetensors` file, a sharded folder or its index)
/// onto this guest's core.
///
/// # Errors
///
/// [`ErrorKind::Fs`] when the path is refused or the checkpoint is malformed (the message
/// names the file and the tensor), [`ErrorKind::Memory`] when it does not fit.
#[track_caller]
pub fn load(path: &str) -> Result<Checkpoint> {
    let (names, metadata) = info(path)?;
    let mut handles = vec![0u32; names.len()];
    let n = sys::ckpt_load(path, &mut handles)?;
    let tensors: Vec<Tensor> = handles[..n]
        .iter()
        .map(|&h| Tensor::from_handle(h))
        .collect();
    if n != names.len() {
        return Err(Error::new(
            ErrorKind::Fs,
            format!(
                "`{path}` changed while it was loaded ({} tensors, then {n})",
                names.len()
            ),
        ));
    }
    Ok(Checkpoint {
        tensors: names.into_iter().zip(tensors).collect(),
        metadata,
    })
}

/// The names and metadata encoded as `ckpt_save` takes them, and the handles.
fn request(tensors: &[(&str, &Tensor)], metadata: &[(&str, &str)]) -> (Vec<u8>, Vec<u32>) {
    let names: Vec<&str> = tensors.iter().map(|(n, _)| *n).collect();
    let pairs: Vec<&str> = metadata.iter().flat_map(|(k, v)| [*k, *v]).collect();
    let mut blob = Vec::new();
    sys::encode_strings(&names, &mut blob);
    sys::encode_strings(&pairs, &mut blob);
    (blob, tensors.iter().map(|(_, t)| t.handle()).collect())
}

/// Saves `tensors` (each name once) with `metadata` as one `.safetensors` file at `path`.
/// Needs a read-write grant.
#[track_caller]
pub fn save(path: &str, tensors: &[(&str, &Tensor)], metadata: &[(&str, &str)]) -> Result<()> {
    let (names, handles) = request(tensors, metadata);
    sys::ckpt_save(path, &names, &handles, 0).map(drop)
}

/// Saves `tensors` as a sharded folder at `path` (made if needed): shards of at most
/// `max_shard_bytes` each, in order (a larger tensor gets one of its own), and
/// `model.safetensors.index.json` with the metadata, `total_size` and the `weight_map`.
/// Returns the number of shards.
#[track_caller]
pub fn save_sharded(
    path: &str,
    tensors: &[(&str, &Tensor)],
    metadata: &[(&str, &str)],
    max_shard_bytes: u64,
) -> Result<usize> {
    if max_shard_bytes == 0 {
        return Err(Error::new(
            ErrorKind::Invalid,
            "a shard holds at least one byte: give max_shard_bytes > 0".to_string(),
        ));
    }
    let (names, handles) = request(tensors, metadata);
    sys::ckpt_save(path, &names, &handles, max_shard_bytes)
}

//! [`StateDict`]: a checkpoint's tensors by name, taken one by one as a model is built, with
//! errors that name the tensor, its expected shape and the file it came from.

use std::collections::BTreeMap;

use crate::checkpoint::{self, Checkpoint};
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::Tensor;

/// Tensors by state-dict name, from a checkpoint. [`take`](StateDict::take) removes one;
/// what is left at the end are the checkpoint's unexpected keys.
pub struct StateDict {
    tensors: BTreeMap<String, Tensor>,
    source: String,
}

impl StateDict {
    /// The tensors of the checkpoint at `path`: a `.safetensors` file, a folder holding
    /// `model.safetensors` or a sharded `model.safetensors.index.json`, or the index itself.
    #[track_caller]
    pub fn load(path: &str) -> Result<StateDict> {
        Ok(StateDict::from_checkpoint(checkpoint::load(path)?, path))
    }

    /// The tensors of a loaded checkpoint; `source` names it in errors.
    pub fn from_checkpoint(ckpt: Checkpoint, source: &str) -> StateDict {
        StateDict {
            tensors: ckpt.tensors.into_iter().collect(),
            source: source.to_string(),
        }
    }

    /// Removes and returns `name`, checking its shape.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] when the checkpoint has no tensor `name` or it has another shape.
    #[track_caller]
    pub fn take(&mut self, name: &str, shape: &[i64]) -> Result<Tensor> {
        self.take_optional(name, shape)?.ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid,
                format!(
                    "`{}` has no tensor `{name}` (expected shape {shape:?}){}",
                    self.source,
                    near_names(self.tensors.keys(), name)
                ),
            )
        })
    }

    /// Removes and returns `name` if the checkpoint has it, checking its shape.
    #[track_caller]
    pub fn take_optional(&mut self, name: &str, shape: &[i64]) -> Result<Option<Tensor>> {
        let Some(t) = self.tensors.remove(name) else {
            return Ok(None);
        };
        if t.shape() != shape {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "`{}`: tensor `{name}` has shape {:?}, but the config gives {shape:?}; \
                     check that config.json belongs to these weights",
                    self.source,
                    t.shape()
                ),
            ));
        }
        Ok(Some(t))
    }

    /// Drops every tensor whose name ends with `suffix` (buffers some checkpoints carry that
    /// the model computes itself, such as `rotary_emb.inv_freq`).
    pub fn discard_suffix(&mut self, suffix: &str) {
        self.tensors.retain(|name, _| !name.ends_with(suffix));
    }

    /// The names not taken yet.
    pub fn remaining(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }
}

/// Up to three names that share `name`'s last two dotted parts, as a hint.
fn near_names<'a>(names: impl Iterator<Item = &'a String>, name: &str) -> String {
    let tail: Vec<&str> = name.rsplit('.').take(2).collect();
    let near: Vec<&str> = names
        .filter(|n| {
            let t: Vec<&str> = n.rsplit('.').take(2).collect();
            t == tail
        })
        .take(3)
        .map(String::as_str)
        .collect();
    if near.is_empty() {
        String::new()
    } else {
        format!("; tensors of that kind it still holds: {}", near.join(", "))
    }
}

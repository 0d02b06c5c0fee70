//! Key/value caches for generation: [`KvCache::Dynamic`] grows by concatenation, so every
//! new token is a new shape; [`KvCache::Static`] is preallocated to `max_cache_len` and
//! written at the cache position, so decode keeps one shape (what Neuron needs to compile
//! once). Both give attention the same visible keys: a query at position `p` sees the keys
//! at positions `0..=p`.

use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::ops::{
    arange_with, cat_with, zeros_with, ArangeOptions, CatOptions, ClampOptions, IndexSelectOptions,
    ZerosOptions,
};
use crate::tensor::Tensor;

/// Which cache a generation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKind {
    /// Grows by one row per token.
    Dynamic,
    /// Preallocated; written in place at the cache position.
    Static,
}

impl CacheKind {
    /// `"dynamic"` or `"static"`.
    pub fn name(self) -> &'static str {
        match self {
            CacheKind::Dynamic => "dynamic",
            CacheKind::Static => "static",
        }
    }
}

/// The keys and values of every layer so far, `[batch, kv_heads, len, head_dim]` each.
pub enum KvCache {
    /// Each layer's keys and values, `None` before the first forward.
    Dynamic(Vec<Option<(Tensor, Tensor)>>),
    /// Each layer's keys and values, `max_cache_len` rows long; rows past the last written
    /// position hold stale or zero data that the causal mask hides.
    Static(Vec<(Tensor, Tensor)>),
}

impl KvCache {
    /// An empty dynamic cache for `layers` layers.
    pub fn dynamic(layers: usize) -> KvCache {
        KvCache::Dynamic((0..layers).map(|_| None).collect())
    }

    /// A zeroed static cache: `layers` layers of `[batch, kv_heads, max_cache_len, head_dim]`.
    #[track_caller]
    pub fn new_static(layers: usize, shape: [i64; 4], dtype: DType) -> Result<KvCache> {
        let zeros = || zeros_with(&shape, ZerosOptions::new().dtype(dtype));
        Ok(KvCache::Static(
            (0..layers)
                .map(|_| Ok((zeros()?, zeros()?)))
                .collect::<Result<_>>()?,
        ))
    }

    /// Which kind this is.
    pub fn kind(&self) -> CacheKind {
        match self {
            KvCache::Dynamic(_) => CacheKind::Dynamic,
            KvCache::Static(_) => CacheKind::Static,
        }
    }

    /// The cache's tensors, keys then values of each layer in order (none for a layer a
    /// dynamic cache has not seen): what a compiled step takes as inputs.
    pub fn tensors(&self) -> Vec<&Tensor> {
        match self {
            KvCache::Dynamic(layers) => layers.iter().flatten().flat_map(|(k, v)| [k, v]).collect(),
            KvCache::Static(layers) => layers.iter().flat_map(|(k, v)| [k, v]).collect(),
        }
    }

    /// A cache of `kind` for `layers` layers made of `tensors` as [`tensors`](KvCache::tensors)
    /// lists them (for a dynamic cache, none means empty).
    #[track_caller]
    pub fn from_tensors(kind: CacheKind, layers: usize, tensors: &[Tensor]) -> Result<KvCache> {
        if !(tensors.is_empty() && kind == CacheKind::Dynamic) && tensors.len() != 2 * layers {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "a {} cache of {layers} layers takes {} tensors, not {}",
                    kind.name(),
                    2 * layers,
                    tensors.len()
                ),
            ));
        }
        let pairs = || -> Result<Vec<(Tensor, Tensor)>> {
            tensors
                .chunks(2)
                .map(|kv| Ok((kv[0].try_clone()?, kv[1].try_clone()?)))
                .collect()
        };
        Ok(match kind {
            CacheKind::Static => KvCache::Static(pairs()?),
            CacheKind::Dynamic if tensors.is_empty() => KvCache::dynamic(layers),
            CacheKind::Dynamic => KvCache::Dynamic(pairs()?.into_iter().map(Some).collect()),
        })
    }

    /// The cache's tensors, taken out of it.
    pub fn into_tensors(self) -> Vec<Tensor> {
        match self {
            KvCache::Dynamic(layers) => layers
                .into_iter()
                .flatten()
                .flat_map(|(k, v)| [k, v])
                .collect(),
            KvCache::Static(layers) => layers.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        }
    }

    /// The number of key positions attention sees once `new` more tokens are written: the
    /// tokens so far for a dynamic cache, `max_cache_len` for a static one.
    pub fn key_len(&self, new: i64) -> i64 {
        match self {
            KvCache::Dynamic(layers) => match layers.first() {
                Some(Some((k, _))) => k.shape()[2] + new,
                _ => new,
            },
            KvCache::Static(layers) => layers.first().map_or(new, |(k, _)| k.shape()[2]),
        }
    }

    /// Writes `layer`'s new keys and values (`[batch, kv_heads, seq, head_dim]`, for positions
    /// `position..position + seq`) and returns all of its keys and values.
    #[track_caller]
    pub fn update(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
        position: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        match self {
            KvCache::Dynamic(layers) => {
                let entry = &mut layers[layer];
                let (k, v) = match entry.take() {
                    None => (k.try_clone()?, v.try_clone()?),
                    Some((pk, pv)) => {
                        let along = || CatOptions::new().dim(2);
                        (cat_with(&[&pk, k], along())?, cat_with(&[&pv, v], along())?)
                    }
                };
                *entry = Some((k.try_clone()?, v.try_clone()?));
                Ok((k, v))
            }
            KvCache::Static(layers) => {
                let (ck, cv) = &layers[layer];
                let nk = write_at(ck, k, position)?;
                let nv = write_at(cv, v, position)?;
                layers[layer] = (nk.try_clone()?, nv.try_clone()?);
                Ok((nk, nv))
            }
        }
    }
}

/// `cache` with rows `position..position + seq` (dim 2) replaced by `new`'s, by a mask over
/// the rows: the graph does not depend on the position's value, so it compiles once.
#[track_caller]
fn write_at(cache: &Tensor, new: &Tensor, position: &Tensor) -> Result<Tensor> {
    let len = cache.shape()[2];
    let seq = new.shape()[2];
    let rows = arange_with(len as f64, ArangeOptions::new().dtype(DType::I64))?;
    let offset = rows.sub(position)?;
    let written = offset
        .ge(&int(0)?)?
        .logical_and(&offset.lt(&int(seq)?)?)?
        .unsqueeze(-1)?;
    // One new row broadcasts over the cache; several are gathered to their rows.
    let source = if seq == 1 {
        new.try_clone()?
    } else {
        let index = offset.clamp_with(ClampOptions::new().min(0.0).max((seq - 1) as f64))?;
        new.index_select_with(&index, IndexSelectOptions::new().dim(2))?
    };
    written.where_(&source, cache)
}

/// A 0-d i64 tensor.
#[track_caller]
fn int(value: i64) -> Result<Tensor> {
    super::scalar(value as f64, DType::I64)
}

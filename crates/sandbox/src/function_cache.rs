//! Cranelift's incremental cache, kept in memory: compiled functions by the hash of their IR.
//!
//! Consecutive Rust cells link the same standard library and SDK functions around a few new
//! ones of their own, and compiling the whole module again was a third of a changed cell's
//! time to idle. With this store wasmtime compiles only the functions it has not seen; the
//! rest come out of the cache. Entries are kept for the process's life, up to
//! [`FunctionCache::CAPACITY`] bytes; past that, new functions are compiled and not stored.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use wasmtime::CacheStore;

/// Compiled function bodies by cache key, as wasmtime's [`CacheStore`].
#[derive(Debug, Default)]
pub(crate) struct FunctionCache {
    state: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl FunctionCache {
    /// The most bytes of keys and values kept.
    pub(crate) const CAPACITY: usize = 256 << 20;

    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many functions are stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().by_key.len()
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.lock().by_key.get(key).cloned().map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut entries = self.lock();
        let size = key.len() + value.len();
        if entries.bytes + size > Self::CAPACITY {
            return false;
        }
        if entries.by_key.insert(key.to_vec(), value).is_none() {
            entries.bytes += size;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use wasmtime::{Config, Engine, Module};

    use super::*;

    /// A module of twenty helper functions, the same in every call, and an exported `run`
    /// that returns `answer`.
    fn module_text(answer: i32) -> String {
        let helpers: String = (0..20)
            .map(|i| {
                format!(
                    "(func $h{i} (param i32) (result i32) \
                     local.get 0 i32.const {i} i32.add i32.const 3 i32.mul)"
                )
            })
            .collect();
        format!("(module {helpers} (func (export \"run\") (result i32) i32.const {answer}))")
    }

    #[test]
    fn a_changed_module_compiles_only_its_changed_functions() {
        let cache = Arc::new(FunctionCache::default());
        let mut config = Config::new();
        // Compiled in parallel, the second module now and then misses the cache for a few
        // unchanged helpers (6 extra entries in 1 to 2 of 30 runs; none in 60 serial runs):
        // harmless for a session, which only compiles them again, but not a count a test
        // can assert.
        config
            .enable_incremental_compilation(cache.clone())
            .unwrap()
            .parallel_compilation(false);
        let engine = Engine::new(&config).unwrap();
        Module::new(&engine, module_text(1)).unwrap();
        let after_first = cache.len();
        assert!(after_first >= 21, "stored {after_first} functions");
        // Only `run` differs: one new entry, the twenty helpers come from the cache.
        let module = Module::new(&engine, module_text(2)).unwrap();
        assert_eq!(cache.len(), after_first + 1);
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        assert_eq!(run.call(&mut store, ()).unwrap(), 2);
    }

    #[test]
    fn a_full_cache_stores_nothing_more_and_says_so() {
        let cache = FunctionCache::default();
        assert!(cache.insert(b"a", vec![0; 16]));
        assert!(!cache.insert(b"b", vec![0; FunctionCache::CAPACITY]));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(b"a").as_deref(), Some(&[0u8; 16][..]));
    }
}

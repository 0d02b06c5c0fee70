//! The on-disk cache of compiled modules, so a second load of the same module skips Cranelift.
//!
//! Key: blake3 of the module's bytes plus a hash of the engine's compatibility hash (wasmtime
//! version, target, settings). Entry: 32 bytes of blake3 over the payload, then the payload
//! from `Module::serialize`. The checksum is verified before the payload is handed to
//! wasmtime, so a corrupt or truncated entry is detected, reported, and rebuilt.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::{Engine, Module};

/// Where a module came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// Compiled with Cranelift now.
    Compiled,
    /// Loaded from the on-disk cache.
    DiskCache,
    /// Compiled now because the cached entry was corrupt (the reason says how).
    Recompiled(String),
}

/// Compiled modules on disk.
pub struct ModuleCache {
    dir: Option<PathBuf>,
    engine_key: String,
}

impl ModuleCache {
    /// A cache in `dir` (created on first store), or a disabled one for `None`.
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> ModuleCache {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        ModuleCache {
            dir,
            engine_key: format!("{:016x}", h.finish()),
        }
    }

    fn path(&self, wasm: &[u8]) -> Option<PathBuf> {
        let key = blake3::hash(wasm).to_hex();
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{}-{}.cwasm", &key[..32], self.engine_key)))
    }

    /// Loads the module compiled from `wasm` (binary), compiling and storing it on a miss.
    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> wasmtime::Result<(Module, ModuleSource)> {
        let Some(path) = self.path(wasm) else {
            return Ok((Module::from_binary(engine, wasm)?, ModuleSource::Compiled));
        };
        let mut source = ModuleSource::Compiled;
        if let Ok(bytes) = std::fs::read(&path) {
            match Self::verified_payload(&bytes) {
                // SAFETY: the payload is byte-for-byte what `Module::serialize` wrote for this
                // engine configuration (its checksum matches), which is what `deserialize`
                // requires.
                Ok(payload) => match unsafe { Module::deserialize(engine, payload) } {
                    Ok(m) => return Ok((m, ModuleSource::DiskCache)),
                    Err(e) => {
                        source = ModuleSource::Recompiled(format!("wasmtime refused it: {e}"))
                    }
                },
                Err(why) => source = ModuleSource::Recompiled(why),
            }
        }
        let module = Module::from_binary(engine, wasm)?;
        // A cache that cannot be written only costs a recompile next time.
        let _ = Self::store(&path, &module.serialize()?);
        Ok((module, source))
    }

    fn verified_payload(bytes: &[u8]) -> Result<&[u8], String> {
        if bytes.len() < 32 {
            return Err(format!("the entry is truncated ({} bytes)", bytes.len()));
        }
        let (sum, payload) = bytes.split_at(32);
        if blake3::hash(payload).as_bytes() != sum {
            return Err("the entry's checksum does not match its contents".into());
        }
        Ok(payload)
    }

    fn store(path: &Path, payload: &[u8]) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut bytes = blake3::hash(payload).as_bytes().to_vec();
        bytes.extend_from_slice(payload);
        // Write then rename, so a concurrent reader never sees half an entry.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, path)
    }
}

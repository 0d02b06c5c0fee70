//! The on-disk program cache: optimized programs under `cache_root()/programs`, so that a new
//! session, or another process, skips the passes for a graph an earlier one compiled, as the
//! Neuron compile cache does.
//!
//! - Key: blake3 over the graph's canonical hash (which covers the input signature: every
//!   input's dtype and shape), the compiler version ([`compiler_version`]) and the flags that
//!   change what `optimize` produces ([`FLAGS`]). The file is `<key in hex>.program`.
//! - Entry: 32 bytes of blake3 over the payload, then the payload: a little-endian `u64`
//!   length, that many bytes of JSON describing the program (ops by name, graphs, kernel plan,
//!   pass report), then the constants' raw elements (the private `serial` module has the rest).
//! - Writes go to a temp file of their own in the same directory, which is then renamed over
//!   the entry. A rename is atomic, so readers and concurrent writers (threads or processes)
//!   only ever see whole entries, and whichever rename comes last leaves a complete entry for
//!   the same key. Entries are not synced to disk: one torn by a crash fails its checksum.
//! - Reading checks the checksum, decodes and validates the payload, and checks that the
//!   program is for the graph asked for. An entry that fails is reported by the caller,
//!   recompiled and written again.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::program::Program;
use super::serial;

/// The version of the compiler's output. Bump it whenever the serialized form or a pass changes
/// what a graph compiles to, so that entries written by an older compiler are not used.
pub const COMPILER_FORMAT: u32 = 2;

/// Options that change what `optimize` produces, as `(name, value)` pairs, hashed into every
/// key so that programs compiled under different settings never share an entry. There are none
/// yet; an optimization option joins this list when it is added.
pub const FLAGS: &[(&str, &str)] = &[];

/// The compiler version keys include: the crate version and [`COMPILER_FORMAT`].
pub fn compiler_version() -> String {
    format!(
        "neuronlab-compile {} format {COMPILER_FORMAT}",
        env!("CARGO_PKG_VERSION")
    )
}

/// What a lookup found.
pub(crate) enum Lookup {
    /// A valid entry: the program.
    Hit(Box<Program>),
    /// No entry.
    Miss,
    /// An entry that cannot be used: unreadable, truncated, corrupt, or for another graph.
    Bad {
        /// The entry's file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// Optimized programs in one directory, for one compiler version.
pub(crate) struct DiskCache {
    dir: PathBuf,
    compiler: String,
}

/// Numbers temp files, so that no two writers of one process share one.
static TEMP_FILES: AtomicU64 = AtomicU64::new(0);

impl DiskCache {
    /// The cache in `dir` (created on the first store) for this build's compiler.
    pub(crate) fn new(dir: PathBuf) -> DiskCache {
        DiskCache::with_compiler(dir, compiler_version())
    }

    /// The cache in `dir` for programs of compiler version `compiler`.
    pub(crate) fn with_compiler(dir: PathBuf, compiler: String) -> DiskCache {
        DiskCache { dir, compiler }
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of the graph with canonical hash `graph`, in hex.
    fn key(&self, graph: &blake3::Hash) -> String {
        let mut h = blake3::Hasher::new();
        h.update(b"neuronlab program cache\0");
        h.update(graph.as_bytes());
        h.update(self.compiler.as_bytes());
        h.update(b"\0");
        for (name, value) in FLAGS {
            h.update(name.as_bytes());
            h.update(b"=");
            h.update(value.as_bytes());
            h.update(b"\0");
        }
        h.finalize().to_hex().to_string()
    }

    /// The entry of the graph with canonical hash `graph`.
    pub(crate) fn path(&self, graph: &blake3::Hash) -> PathBuf {
        self.dir.join(format!("{}.program", self.key(graph)))
    }

    /// The program compiled from the graph with canonical hash `graph`, if a valid entry holds
    /// it.
    pub(crate) fn load(&self, graph: &blake3::Hash) -> Lookup {
        let path = self.path(graph);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            // No entry, or no directory (a store reports why).
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Lookup::Miss
            }
            Err(e) => {
                return Lookup::Bad {
                    path,
                    reason: format!("it cannot be read: {e}"),
                }
            }
        };
        match Self::program(&bytes, graph) {
            Ok(program) => Lookup::Hit(Box::new(program)),
            Err(reason) => Lookup::Bad { path, reason },
        }
    }

    /// The program in entry `bytes`, checked to be for `graph`.
    fn program(bytes: &[u8], graph: &blake3::Hash) -> Result<Program, String> {
        let Some((sum, payload)) = bytes.split_first_chunk::<32>() else {
            return Err(format!("it is truncated ({} bytes)", bytes.len()));
        };
        if blake3::hash(payload).as_bytes() != sum {
            return Err("its checksum does not match its contents (truncated or corrupt)".into());
        }
        let program = serial::decode(payload)
            .map_err(|e| format!("it does not hold a valid program: {e}"))?;
        if program.before().canonical_hash() != *graph {
            return Err("it holds the program of another graph".into());
        }
        Ok(program)
    }

    /// Writes the entry of `program`, compiled from the graph with canonical hash `graph`,
    /// replacing any entry there. Returns the entry's path.
    pub(crate) fn store(&self, graph: &blake3::Hash, program: &Program) -> io::Result<PathBuf> {
        let key = self.key(graph);
        let path = self.dir.join(format!("{key}.program"));
        let payload = serial::encode(program);
        fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(
            ".{key}.{}.{}.tmp",
            std::process::id(),
            TEMP_FILES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            file.write_all(blake3::hash(&payload).as_bytes())?;
            file.write_all(&payload)?;
            drop(file);
            fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            // Best effort: the write already failed, and a stray temp file is only litter.
            let _ = fs::remove_file(&tmp);
        }
        written.map(|()| path)
    }
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;

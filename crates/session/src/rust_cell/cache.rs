//! The Rust cells a session has built, by everything their build read: running a cell again
//! (the same source, kept items, restored variables, SDK and toolchain) reuses its module
//! instead of building it again.

use std::collections::VecDeque;
use std::path::Path;
use std::time::UNIX_EPOCH;

use super::codegen::Generated;
use crate::convert::CellColumns;
use crate::toolchain::Toolchain;
use neuronlab_sandbox::GuestModule;

/// How many built cells a session keeps (compiled modules are a few MiB each).
const CAPACITY: usize = 16;

/// A cell's build, reusable while its key matches.
#[derive(Clone)]
pub(crate) struct BuiltCell {
    /// The module to run; `None` for a cell of items only, which runs nothing.
    pub(crate) module: Option<GuestModule>,
    /// The column shifts of its generated cell file.
    pub(crate) columns: CellColumns,
}

/// The builds of a session's latest cells, most recent last.
#[derive(Default)]
pub(crate) struct BuiltCells {
    entries: VecDeque<(blake3::Hash, BuiltCell)>,
}

impl BuiltCells {
    /// The build made from `key`, if the session still has it.
    pub(crate) fn get(&mut self, key: &blake3::Hash) -> Option<BuiltCell> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        let entry = self.entries.remove(at)?;
        self.entries.push_back(entry.clone());
        Some(entry.1)
    }

    /// Remembers the build made from `key`, forgetting the least recently used beyond
    /// [`CAPACITY`].
    pub(crate) fn insert(&mut self, key: blake3::Hash, built: BuiltCell) {
        self.entries.retain(|(k, _)| *k != key);
        self.entries.push_back((key, built));
        while self.entries.len() > CAPACITY {
            self.entries.pop_front();
        }
    }
}

/// What a cell's build depends on: the generated crate's files and its
/// [`build_inputs`].
pub(crate) fn key(generated: &Generated, inputs: &blake3::Hash) -> blake3::Hash {
    let mut hasher = blake3::Hasher::new();
    let mut field = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(generated.lib_rs.as_bytes());
    field(generated.cell_rs.as_bytes());
    for (path, text) in &generated.kept_files {
        field(path.as_bytes());
        field(text.as_bytes());
    }
    field(inputs.as_bytes());
    hasher.finalize()
}

/// What every cell's build depends on besides its own sources: the toolchain, and the SDK's
/// sources (by path, size and modification time, so an edited SDK rebuilds). While these
/// stay the same, so does the rustc command of a session's cell crate (see `direct`).
pub(crate) fn build_inputs(toolchain: &Toolchain, sdk_dir: &Path) -> blake3::Hash {
    let mut hasher = blake3::Hasher::new();
    let mut field = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(toolchain.describe().as_bytes());
    field(sdk_dir.as_os_str().as_encoded_bytes());
    for entry in ["Cargo.toml", "build.rs", "src"] {
        fingerprint(&sdk_dir.join(entry), &mut field);
    }
    hasher.finalize()
}

/// Feeds the path, size and modification time of `path` and, for a folder, of everything
/// under it (in name order) to `field`.
fn fingerprint(path: &Path, field: &mut dyn FnMut(&[u8])) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    field(path.as_os_str().as_encoded_bytes());
    if meta.is_dir() {
        let mut children: Vec<_> = std::fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        children.sort();
        for child in children {
            fingerprint(&child, field);
        }
        return;
    }
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    field(&meta.len().to_le_bytes());
    field(&modified.to_le_bytes());
}

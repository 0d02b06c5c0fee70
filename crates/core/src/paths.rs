//! Where neuronlab keeps files: the cache root and the user data folder, and every folder and
//! file under them, named once here.
//!
//! The cache root holds what can be rebuilt (compiled modules and programs, guest builds); the
//! data folder holds what a user would miss (histories). Everything else asks for its folder
//! by [`CacheDir`] or [`DataFile`] instead of joining names of its own.

use std::path::PathBuf;

/// The directory the caches live in: `NEURONLAB_CACHE_DIR`, else `$XDG_CACHE_HOME/neuronlab`,
/// else `~/.cache/neuronlab`, else a folder under the system temp dir.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("NEURONLAB_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("neuronlab");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache").join("neuronlab"),
        None => std::env::temp_dir().join("neuronlab-cache"),
    }
}

/// neuronlab's folder for user data that outlives a process (the REPL's and the kernel's
/// histories): `$XDG_DATA_HOME/neuronlab`, else `~/.local/share/neuronlab`; `None` when
/// neither base is an absolute path.
pub fn data_root() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base = absolute("XDG_DATA_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local").join("share")))?;
    Some(base.join("neuronlab"))
}

/// A folder under the [`cache_root`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheDir {
    /// Compiled WebAssembly modules, keyed by module and engine.
    Modules,
    /// Optimized programs, keyed by graph, compiler version and flags.
    Programs,
    /// The cargo target folder every session's Rust cells build into.
    CellTarget,
    /// One folder per live session, holding its cell crate.
    Sessions,
    /// The cargo target folder of `neuronlab build`.
    GuestTarget,
}

impl CacheDir {
    /// Every cache folder.
    pub const ALL: [CacheDir; 5] = [
        CacheDir::Modules,
        CacheDir::Programs,
        CacheDir::CellTarget,
        CacheDir::Sessions,
        CacheDir::GuestTarget,
    ];

    /// The folder's name under the cache root.
    pub fn name(self) -> &'static str {
        match self {
            CacheDir::Modules => "modules",
            CacheDir::Programs => "programs",
            CacheDir::CellTarget => "cell-target",
            CacheDir::Sessions => "sessions",
            CacheDir::GuestTarget => "guest-target",
        }
    }

    /// What the folder holds, as `%cache` describes it.
    pub fn describe(self) -> &'static str {
        match self {
            CacheDir::Modules => "compiled WebAssembly modules",
            CacheDir::Programs => "compiled programs",
            CacheDir::CellTarget => "Rust cell builds (the standard library and the SDK)",
            CacheDir::Sessions => "live sessions' cell crates",
            CacheDir::GuestTarget => "`neuronlab build` outputs",
        }
    }

    /// True for the caches `%cache clear` empties: what a user may want rebuilt. Cell builds
    /// take a minute to redo and live sessions still use theirs, so they stay.
    pub fn user_clearable(self) -> bool {
        matches!(self, CacheDir::Modules | CacheDir::Programs)
    }

    /// The folder under the current [`cache_root`].
    pub fn path(self) -> PathBuf {
        self.under(&cache_root())
    }

    /// The folder under `root`, a cache root given explicitly.
    pub fn under(self, root: &std::path::Path) -> PathBuf {
        root.join(self.name())
    }
}

/// A file in the [`data_root`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFile {
    /// The REPL's line history.
    ReplHistory,
    /// The Jupyter kernel's history, one JSON record per cell.
    KernelHistory,
}

impl DataFile {
    /// The file's name in the data folder.
    pub fn name(self) -> &'static str {
        match self {
            DataFile::ReplHistory => "history",
            DataFile::KernelHistory => "kernel-history.jsonl",
        }
    }

    /// The file's path, or `None` when there is no data folder (see [`data_root`]).
    pub fn path(self) -> Option<PathBuf> {
        data_root().map(|d| d.join(self.name()))
    }
}

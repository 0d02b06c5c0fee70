//! The guest toolchain: finding a compiler for `wasm32-unknown-unknown` and building guest
//! crates with it, plus the prebuilt experiment modules and their manifest of source hashes.
//!
//! Two routes, tried in order:
//! 1. rustup with the `wasm32-unknown-unknown` target installed: plain `cargo build`.
//! 2. Debian's `rustc-web`, `cargo-web`, `rust-web-src` and `lld`: `/usr/bin/cargo` with
//!    `-Zbuild-std=std,panic_abort` (the standard library is built from `rust-web-src`).
//!
//! When neither exists, the error names the rustup command and the Debian packages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The guest target triple.
pub const TARGET: &str = "wasm32-unknown-unknown";

/// The environment variable that picks a toolchain (`rustup`, `debian` or `none`).
pub const TOOLCHAIN_ENV: &str = "NEURONLAB_WASM_TOOLCHAIN";

/// The Debian packages that make route 2.
pub const DEBIAN_PACKAGES: &str = "rustc-web cargo-web rust-web-src lld";

/// How guests get built on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Toolchain {
    /// rustup's cargo with the wasm32 target's prebuilt standard library.
    Rustup {
        /// The cargo to run.
        cargo: PathBuf,
    },
    /// Debian's rust-web toolchain, building the standard library from source.
    DebianBuildStd {
        /// `/usr/bin/cargo`.
        cargo: PathBuf,
        /// `/usr/bin/rustc`.
        rustc: PathBuf,
    },
}

fn output_of(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

impl Toolchain {
    /// Finds a toolchain, or explains how to install one. `NEURONLAB_WASM_TOOLCHAIN` picks a
    /// route when both exist (`rustup` or `debian`), or `none` to build no Rust guests (what
    /// a machine without a toolchain sees).
    pub fn detect() -> Result<Toolchain, String> {
        let choice = std::env::var(TOOLCHAIN_ENV).unwrap_or_default();
        let (rustup, debian) = match choice.as_str() {
            "" => (true, true),
            "rustup" => (true, false),
            "debian" => (false, true),
            "none" => (false, false),
            other => {
                return Err(format!(
                    "{TOOLCHAIN_ENV}='{other}' is not a toolchain: use rustup, debian or none"
                ))
            }
        };
        if rustup {
            if let Some(t) = Toolchain::rustup() {
                return Ok(t);
            }
        }
        if debian {
            if let Some(t) = Toolchain::debian() {
                return Ok(t);
            }
        }
        Err(format!(
            "no toolchain for {TARGET} guests was found. Install one of:\n  \
             rustup target add {TARGET}\n  \
             apt-get install {DEBIAN_PACKAGES}   (Debian; builds the standard library from source)"
        ))
    }

    /// Route 1: the rustc on PATH has the wasm32 standard library.
    fn rustup() -> Option<Toolchain> {
        let cargo = on_path("cargo")?;
        let libdir = output_of(Command::new("rustc").args([
            "--print",
            "target-libdir",
            "--target",
            TARGET,
        ]))?;
        let has_std = std::fs::read_dir(&libdir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
        });
        has_std.then_some(Toolchain::Rustup { cargo })
    }

    /// Route 2: Debian's rust-web with the library sources and lld's wasm-ld.
    fn debian() -> Option<Toolchain> {
        let (cargo, rustc) = (
            PathBuf::from("/usr/bin/cargo"),
            PathBuf::from("/usr/bin/rustc"),
        );
        let sysroot = output_of(Command::new(&rustc).args(["--print", "sysroot"]))?;
        let has_src = Path::new(&sysroot)
            .join("lib/rustlib/src/rust/library/std/Cargo.toml")
            .is_file();
        (cargo.is_file() && has_src && on_path("wasm-ld").is_some())
            .then_some(Toolchain::DebianBuildStd { cargo, rustc })
    }

    /// The linker for Debian's route, found once per process (at the first build, so finding
    /// a toolchain stays quick). Debian's `wasm-ld` (LLD 14) loads libLLVM at every start,
    /// about 20 ms of each cell's build; the `rust-lld` of a rustup toolchain (a newer LLD,
    /// which links older LLVM's wasm objects) starts in a few, and linked a small cell in
    /// 26 ms against wasm-ld's 41. So a `rust-lld` under the sysroot of the `rustc` on PATH is
    /// preferred, and `wasm-ld` is the fallback.
    fn wasm_linker() -> &'static Path {
        static LINKER: OnceLock<PathBuf> = OnceLock::new();
        LINKER.get_or_init(|| {
            output_of(Command::new("rustc").args(["--print", "sysroot"]))
                .and_then(|sysroot| {
                    let rustlib = Path::new(&sysroot).join("lib/rustlib");
                    std::fs::read_dir(rustlib)
                        .ok()?
                        .flatten()
                        .map(|host| host.path().join("bin/rust-lld"))
                        .find(|lld| lld.is_file())
                })
                .unwrap_or_else(|| PathBuf::from("wasm-ld"))
        })
    }

    /// A one-line description, for progress messages.
    pub fn describe(&self) -> String {
        match self {
            Toolchain::Rustup { cargo } => {
                format!("{} with rustup's {TARGET} target", cargo.display())
            }
            Toolchain::DebianBuildStd { cargo, .. } => {
                format!("{} (Debian rust-web, -Zbuild-std)", cargo.display())
            }
        }
    }

    /// The `cargo build --release` command for the guest crate in `crate_dir`, building into
    /// `target_dir`; callers may add arguments (such as `--message-format`).
    pub fn build_command(&self, crate_dir: &Path, target_dir: &Path) -> Command {
        let mut cmd = match self {
            Toolchain::Rustup { cargo } => {
                let mut c = Command::new(cargo);
                c.args(["build", "--release", "--target", TARGET]);
                c
            }
            Toolchain::DebianBuildStd { cargo, rustc } => {
                let mut c = Command::new(cargo);
                c.args([
                    "build",
                    "--release",
                    "--target",
                    TARGET,
                    "-Zbuild-std=std,panic_abort",
                ])
                .env("RUSTC", rustc)
                .env("RUSTC_BOOTSTRAP", "1")
                // Encoded (one flag per \x1f-separated field), so a path with spaces stays one.
                .env(
                    "CARGO_ENCODED_RUSTFLAGS",
                    format!("-Clinker={}", Toolchain::wasm_linker().display()),
                );
                c
            }
        };
        cmd.current_dir(crate_dir)
            .env("CARGO_TARGET_DIR", target_dir)
            // A host toolchain's settings must not leak into the guest build.
            .env_remove("RUSTC_WRAPPER")
            .env_remove("CARGO_BUILD_TARGET");
        cmd
    }

    /// Builds the guest crate in `crate_dir` and returns the path of its `.wasm`, which stays
    /// in `target_dir`. Cargo's own progress goes to this process's stderr.
    pub fn build(&self, crate_dir: &Path, target_dir: &Path) -> Result<PathBuf, String> {
        let name = package_name(crate_dir)?;
        let status = self
            .build_command(crate_dir, target_dir)
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            return Err(format!(
                "building {} failed (cargo's errors are above)",
                crate_dir.display()
            ));
        }
        let wasm = wasm_path(target_dir, &name);
        if !wasm.is_file() {
            return Err(format!(
                "cargo succeeded but {} is missing: is the crate a `cdylib`? Add\n  [lib]\n  crate-type = [\"cdylib\"]",
                wasm.display()
            ));
        }
        Ok(wasm)
    }
}

/// Where `cargo build --release` puts the module of package `name`.
pub fn wasm_path(target_dir: &Path, name: &str) -> PathBuf {
    target_dir
        .join(TARGET)
        .join("release")
        .join(format!("{}.wasm", name.replace('-', "_")))
}

/// The `[package] name` of the crate in `crate_dir`.
pub fn package_name(crate_dir: &Path) -> Result<String, String> {
    let manifest = crate_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("{} is not a crate: {e}", manifest.display()))?;
    let mut in_package = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(value) = line
                .strip_prefix("name")
                .map(str::trim_start)
                .and_then(|r| r.strip_prefix('='))
            {
                return Ok(value.trim().trim_matches('"').to_string());
            }
        }
    }
    Err(format!("{} has no [package] name", manifest.display()))
}

/// The experiments' manifest: for each prebuilt module, the hash of the sources it was built
/// from, so a stale prebuilt module is caught.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Experiment name to its entry.
    pub experiments: BTreeMap<String, ManifestEntry>,
}

/// One prebuilt module.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// blake3 of the experiment's sources and the SDK's (see [`source_hash`]).
    pub sources: String,
    /// blake3 of the committed `.wasm`.
    pub wasm: String,
}

/// The file name of the manifest inside the experiments folder.
pub const MANIFEST: &str = "manifest.json";

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                collect_files(&path, out)?;
            }
        } else if name == "Cargo.toml" || name.ends_with(".rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// blake3 over the experiment crate's and the SDK's `Cargo.toml` and `.rs` files (paths
/// relative to their roots, then contents), so any source change that can change the module
/// changes the hash.
pub fn source_hash(experiment_dir: &Path, sdk_dir: &Path) -> Result<String, String> {
    let mut hasher = blake3::Hasher::new();
    for root in [experiment_dir, sdk_dir] {
        let mut files = Vec::new();
        collect_files(root, &mut files).map_err(|e| format!("{}: {e}", root.display()))?;
        files.sort();
        for f in files {
            let rel = f.strip_prefix(root).unwrap_or(&f);
            hasher.update(rel.to_string_lossy().as_bytes());
            hasher.update(&[0]);
            hasher.update(&std::fs::read(&f).map_err(|e| format!("{}: {e}", f.display()))?);
            hasher.update(&[0]);
        }
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// The experiment crates in `experiments_dir` (folders with a Cargo.toml), by name.
pub fn experiments(experiments_dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(experiments_dir)
        .map_err(|e| format!("{}: {e}", experiments_dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.join("Cargo.toml").is_file() {
            out.push((entry.file_name().to_string_lossy().to_string(), path));
        }
    }
    out.sort();
    Ok(out)
}

/// The prebuilt module of an experiment: `<dir>/<name>.wasm`.
pub fn prebuilt_path(name: &str, dir: &Path) -> PathBuf {
    dir.join(format!("{name}.wasm"))
}

/// Reads the manifest (an empty one when the file does not exist yet).
pub fn read_manifest(experiments_dir: &Path) -> Result<Manifest, String> {
    let path = experiments_dir.join(MANIFEST);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Manifest::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes the manifest.
pub fn write_manifest(experiments_dir: &Path, manifest: &Manifest) -> Result<(), String> {
    let path = experiments_dir.join(MANIFEST);
    let text = serde_json::to_string_pretty(manifest).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Problems with the prebuilt modules: a missing module or entry, a module that is not the
/// one recorded, or sources that changed since it was built.
pub fn stale_prebuilt(experiments_dir: &Path, sdk_dir: &Path) -> Result<Vec<String>, String> {
    let manifest = read_manifest(experiments_dir)?;
    let mut problems = Vec::new();
    for (name, dir) in experiments(experiments_dir)? {
        let Some(entry) = manifest.experiments.get(&name) else {
            problems.push(format!("{name}: not in {MANIFEST}"));
            continue;
        };
        let wasm = prebuilt_path(&name, &dir);
        match std::fs::read(&wasm) {
            Ok(bytes) if blake3::hash(&bytes).to_hex().as_str() != entry.wasm => {
                problems.push(format!(
                    "{name}: {} is not the module the manifest records",
                    wasm.display()
                ))
            }
            Err(_) => problems.push(format!("{name}: {} is missing", wasm.display())),
            Ok(_) => {}
        }
        if source_hash(&dir, sdk_dir)? != entry.sources {
            problems.push(format!(
                "{name}: its sources (or the SDK's) changed since it was built"
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_come_from_the_package_table() {
        let dir = std::env::temp_dir().join(format!("neuronlab-pkg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            "[workspace]\n\n[package]\nname = \"tp-mlp\"\nversion = \"0.1.0\"\n\n[dependencies]\nname = \"x\"\n",
        )
        .unwrap();
        assert_eq!(package_name(&dir).unwrap(), "tp-mlp");
        std::fs::remove_dir_all(&dir).ok();
    }
}

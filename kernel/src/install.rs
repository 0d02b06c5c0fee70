//! `neuronlab-kernel install` and `uninstall`: the kernelspec `neuronlab`, a folder with
//! `kernel.json` and two logos, in one of Jupyter's data folders:
//!
//! - `--user` (the default): `$JUPYTER_DATA_DIR/kernels`, else the user's Jupyter data folder
//!   (`$XDG_DATA_HOME/jupyter`, else `~/.local/share/jupyter`; `~/Library/Jupyter` on macOS,
//!   `%APPDATA%\jupyter` on Windows), as jupyter_core finds it;
//! - `--sys-prefix`: `sys.prefix` of the `python3` on `PATH`, `/share/jupyter/kernels`;
//! - `--prefix DIR`: `DIR/share/jupyter/kernels` (Jupyter finds it when `JUPYTER_PATH` names
//!   `DIR/share/jupyter`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::logo;

/// The kernelspec's name: `jupyter console --kernel neuronlab`.
pub const KERNEL_NAME: &str = "neuronlab";

/// The name front ends show.
pub const DISPLAY_NAME: &str = "neuronlab (Rust on simulated Trainium)";

/// Where a kernelspec goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The user's Jupyter data folder.
    User,
    /// The Python environment of the `python3` on `PATH`.
    SysPrefix,
    /// `DIR/share/jupyter`.
    Prefix(PathBuf),
}

/// The `kernels` folder of `place`.
pub fn kernels_dir(place: &Place) -> Result<PathBuf, String> {
    Ok(match place {
        Place::User => jupyter_data_dir()?.join("kernels"),
        Place::SysPrefix => python_prefix()?
            .join("share")
            .join("jupyter")
            .join("kernels"),
        Place::Prefix(dir) => absolute(dir)?.join("share").join("jupyter").join("kernels"),
    })
}

/// The user's Jupyter data folder, as jupyter_core's `jupyter_data_dir()` finds it.
pub fn jupyter_data_dir() -> Result<PathBuf, String> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var("JUPYTER_DATA_DIR") {
        return Ok(dir);
    }
    let home = || var("HOME").ok_or("HOME is not set: use --prefix DIR or set JUPYTER_DATA_DIR");
    if cfg!(target_os = "macos") {
        Ok(home()?.join("Library").join("Jupyter"))
    } else if cfg!(windows) {
        Ok(var("APPDATA")
            .ok_or("APPDATA is not set: use --prefix DIR or set JUPYTER_DATA_DIR")?
            .join("jupyter"))
    } else {
        let data = match var("XDG_DATA_HOME") {
            Some(dir) => dir,
            None => home()?.join(".local").join("share"),
        };
        Ok(data.join("jupyter"))
    }
}

/// `sys.prefix` of the `python3` (else `python`) on `PATH`.
fn python_prefix() -> Result<PathBuf, String> {
    for python in ["python3", "python"] {
        let Ok(out) = Command::new(python)
            .args(["-c", "import sys; print(sys.prefix)"])
            .output()
        else {
            continue;
        };
        let prefix = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !prefix.is_empty() {
            return Ok(PathBuf::from(prefix));
        }
    }
    Err("--sys-prefix needs python3 on PATH (to ask for sys.prefix)".into())
}

fn absolute(dir: &Path) -> Result<PathBuf, String> {
    std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// The kernelspec's `kernel.json` for the kernel binary at `exe`.
pub fn kernel_json(exe: &Path) -> Value {
    json!({
        "argv": [exe.to_string_lossy(), "--connection-file", "{connection_file}"],
        "display_name": DISPLAY_NAME,
        "language": "rust",
        "interrupt_mode": "message",
        "metadata": {"debugger": false},
    })
}

/// Writes the kernelspec for the binary at `exe` into `place`; returns its folder.
pub fn install(place: &Place, exe: &Path) -> Result<PathBuf, String> {
    let dir = kernels_dir(place)?.join(KERNEL_NAME);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(&kernel_json(exe)).unwrap_or_default();
    let files: [(&str, Vec<u8>); 3] = [
        ("kernel.json", format!("{json}\n").into_bytes()),
        ("logo-32x32.png", logo::png(32)),
        ("logo-64x64.png", logo::png(64)),
    ];
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::write(&path, bytes)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(dir)
}

/// Removes the kernelspec from `place`; returns its folder, or `None` if it was not there.
pub fn uninstall(place: &Place) -> Result<Option<PathBuf>, String> {
    let dir = kernels_dir(place)?.join(KERNEL_NAME);
    if !dir.join("kernel.json").is_file() {
        return Ok(None);
    }
    std::fs::remove_dir_all(&dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    Ok(Some(dir))
}

/// A note when Jupyter will not look in `place` unless told: a `--prefix` whose
/// `share/jupyter` is not on `JUPYTER_PATH`.
pub fn search_path_note(place: &Place) -> Option<String> {
    let Place::Prefix(dir) = place else {
        return None;
    };
    let data = absolute(dir).ok()?.join("share").join("jupyter");
    let on_path = std::env::var_os("JUPYTER_PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p == data));
    (!on_path).then(|| {
        format!(
            "note: Jupyter finds this kernel when JUPYTER_PATH includes {}",
            data.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_json_runs_this_binary_with_message_interrupts() {
        let json = kernel_json(Path::new("/opt/bin/neuronlab-kernel"));
        assert_eq!(
            json["argv"],
            json!([
                "/opt/bin/neuronlab-kernel",
                "--connection-file",
                "{connection_file}"
            ])
        );
        assert_eq!(json["language"], "rust");
        assert_eq!(json["interrupt_mode"], "message");
        assert_eq!(json["display_name"], DISPLAY_NAME);
    }

    #[test]
    fn install_and_uninstall_under_a_prefix() {
        let prefix =
            std::env::temp_dir().join(format!("neuronlab-kernel-install-{}", std::process::id()));
        let place = Place::Prefix(prefix.clone());
        let dir = install(&place, Path::new("/bin/true")).unwrap();
        assert_eq!(dir, prefix.join("share/jupyter/kernels/neuronlab"));
        let json: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("kernel.json")).unwrap())
                .unwrap();
        assert_eq!(json["argv"][0], "/bin/true");
        for logo in ["logo-32x32.png", "logo-64x64.png"] {
            assert!(std::fs::read(dir.join(logo))
                .unwrap()
                .starts_with(b"\x89PNG"));
        }
        assert_eq!(uninstall(&place).unwrap(), Some(dir.clone()));
        assert!(!dir.exists());
        assert_eq!(uninstall(&place).unwrap(), None);
        let _ = std::fs::remove_dir_all(&prefix);
    }
}

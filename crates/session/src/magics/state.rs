//! Magics that change the session: `%reset`, `%device`, `%cache`, `%dir`.

use std::path::{Path, PathBuf};

use super::super::{fail, new_runtime, CellError, Outcome, Output, Session};
use super::table::{count, Table};
use super::{usage_error, Argument};
use neuronlab_core::device::figures::INSTANCES;
use neuronlab_core::device::Topology;
use neuronlab_core::events::fmt::bytes;
use neuronlab_core::paths::{cache_root, CacheDir};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_sandbox::grants::Access;

/// The on-disk caches `%cache` manages. The root also holds the sessions' cell builds, which
/// `%cache` leaves alone.
fn caches() -> impl Iterator<Item = CacheDir> {
    CacheDir::ALL.into_iter().filter(|d| d.user_clearable())
}

/// `%cache [ls|clear]`.
pub fn cache(_s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let root = cache_root();
    match args {
        "" | "ls" => {
            let mut table = Table::new(&["cache", "files", "size", "folder"]).right(&[1, 2]);
            for cache in caches() {
                let dir = cache.under(&root);
                let files = files(&dir);
                let size = files.iter().map(|(_, len)| len).sum();
                table.push(vec![
                    cache.describe().to_string(),
                    files.len().to_string(),
                    bytes(size),
                    dir.display().to_string(),
                ]);
            }
            out(Output::Display(table.bundle("%cache clear empties them")));
            Outcome::Ok
        }
        "clear" => clear(&root, out),
        _ => usage_error(
            out,
            "cache",
            &format!("'{args}' is not a command: use ls or clear"),
        ),
    }
}

/// Removes the files of every cache under `root`.
fn clear(root: &Path, out: &mut dyn FnMut(Output)) -> Outcome {
    let mut removed = Vec::new();
    let mut failures = Vec::new();
    for cache in caches() {
        let (mut n, mut size) = (0, 0);
        for (path, len) in files(&cache.under(root)) {
            match std::fs::remove_file(&path) {
                Ok(()) => (n, size) = (n + 1, size + len),
                Err(e) => failures.push(format!("{}: {e}", path.display())),
            }
        }
        removed.push(format!("{n} {} ({})", cache.describe(), bytes(size)));
    }
    out(Output::Stdout(format!(
        "removed {} from {}; the session's cell builds stay\n",
        removed.join(" and "),
        root.display()
    )));
    match failures.first() {
        None => Outcome::Ok,
        Some(first) => fail(
            out,
            CellError {
                ename: "MagicError".into(),
                evalue: format!(
                    "%cache: could not remove {}; {first}",
                    count(failures.len(), "file")
                ),
                traceback: failures,
            },
        ),
    }
}

/// The files in `dir` with their sizes (none when it does not exist).
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let meta = e.metadata().ok().filter(|m| m.is_file())?;
            Some((e.path(), meta.len()))
        })
        .collect()
}

/// `%dir [PATH [--rw]]`: lists the granted folders, or grants one to the session's guests.
pub fn dir(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let words: Vec<&str> = args.split_whitespace().collect();
    let rw = words.contains(&"--rw");
    if let Some(option) = words.iter().find(|w| w.starts_with('-') && **w != "--rw") {
        return usage_error(
            out,
            "dir",
            &format!("unknown option {option}; the option is --rw"),
        );
    }
    // The rest is the path, spaces and all.
    let path = words
        .iter()
        .filter(|w| **w != "--rw")
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    if path.is_empty() {
        if rw {
            return usage_error(out, "dir", "give the folder to grant read-write");
        }
        let grants = s.shared.files.list();
        let mut table = Table::new(&["name", "access", "folder"]);
        for g in &grants {
            table.push(vec![
                g.name.clone(),
                g.access.name().to_string(),
                g.root.display().to_string(),
            ]);
        }
        let note = if grants.is_empty() {
            "no folder is granted: guests have no files; %dir PATH [--rw] grants one"
        } else {
            "guests address files as NAME/relative/path"
        };
        out(Output::Display(table.bundle(note)));
        return Outcome::Ok;
    }
    let access = if rw {
        Access::ReadWrite
    } else {
        Access::ReadOnly
    };
    match s.grant_folder(Path::new(&path), access) {
        Ok(g) => {
            out(Output::Stdout(format!(
                "granted {} as `{}` ({}): guests address its files as {}/relative/path\n",
                g.root.display(),
                g.name,
                g.access.name(),
                g.name
            )));
            Outcome::Ok
        }
        Err(e) => fail(out, CellError::new("MagicError", format!("%dir: {e}"))),
    }
}

/// `%reset`: forgets the variables, kept items, loaded modules, explanations and events.
pub fn reset(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    if !args.is_empty() {
        return usage_error(out, "reset", "takes no arguments");
    }
    let forgot = [
        count(s.shared.vars.len(), "variable"),
        count(s.kept.len(), "kept item"),
        count(s.modules.len(), "loaded module"),
        count(s.runtime.bus().events().len(), "event"),
    ];
    // Modules first: their instances hold handles to tensors too.
    s.clear_modules();
    s.shared.vars.clear();
    s.kept.clear();
    s.explanations.clear();
    s.runtime.bus().clear();
    for core in s.runtime.topology().cores() {
        // Every visible core is known to the runtime's memory and to autograd.
        let _ = s.runtime.memory().reset_peak(core);
        if let Ok(autograd) = s.runtime.autograd_bytes(core) {
            autograd.reset_peak();
        }
    }
    out(Output::Stdout(format!(
        "reset: forgot {}, {}, {} and {}; HBM and autograd peaks start again from what is in \
         use\n",
        forgot[0], forgot[1], forgot[2], forgot[3]
    )));
    Outcome::Ok
}

/// `%device [preset] [--lnc N]`: shows the simulated instance, or switches to another.
pub fn device(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    if args.is_empty() {
        out(Output::Stdout(format!(
            "{}\n",
            s.runtime.topology().report()
        )));
        return Outcome::Ok;
    }
    let topology = match requested_topology(s.runtime.topology(), args) {
        Ok(t) => t,
        Err(problem) => return usage_error(out, "device", &problem),
    };
    if &topology == s.runtime.topology() {
        out(Output::Stdout(format!(
            "already {topology}; nothing changed\n"
        )));
        return Outcome::Ok;
    }
    let dropped = [
        count(s.shared.vars.len(), "variable"),
        count(s.modules.len(), "loaded module"),
    ];
    s.clear_modules();
    s.shared.vars.clear();
    s.explanations.clear();
    let host_limit = s.runtime.memory().host_limit();
    s.runtime = new_runtime(
        RuntimeOptions {
            topology,
            host_limit,
        },
        &s.logs,
        &s.router,
    );
    out(Output::Stdout(format!(
        "switched to {}\ndropped {} and {}: their tensors lived on the old device (kept items \
         stay)\n",
        s.runtime.topology().report(),
        dropped[0],
        dropped[1]
    )));
    Outcome::Ok
}

/// The topology `%device` arguments ask for: a preset (default: the current instance) and an
/// optional `--lnc N`.
fn requested_topology(current: &Topology, args: &str) -> Result<Topology, String> {
    let (mut preset, mut lnc) = (None, None);
    let mut words = args.split_whitespace();
    while let Some(word) = words.next() {
        if let Some(rest) = word.strip_prefix("--lnc") {
            let value = match rest {
                "" => words.next(),
                rest => rest.strip_prefix('='),
            };
            match value.map(str::parse::<u32>) {
                _ if lnc.is_some() => return Err("--lnc is given twice".into()),
                Some(Ok(n)) => lnc = Some(n),
                _ => {
                    return Err("--lnc takes a number: the logical NeuronCore configuration".into())
                }
            }
        } else if word.starts_with('-') {
            return Err(format!("unknown option {word}; the option is --lnc N"));
        } else if preset.replace(word).is_some() {
            return Err(format!(
                "give one preset; the presets are {}",
                preset_names()
            ));
        }
    }
    let name = preset.unwrap_or(current.instance_name());
    Topology::preset(name, lnc).map_err(|e| e.to_string())
}

/// The instance presets, for messages.
fn preset_names() -> String {
    INSTANCES.map(|i| i.name).join(", ")
}

/// `%cache`'s first argument.
pub(super) fn cache_arguments(_: &Session, position: usize) -> Vec<Argument> {
    match position {
        0 => vec![
            Argument::new("ls", "list the caches"),
            Argument::new("clear", "empty the caches"),
        ],
        _ => Vec::new(),
    }
}

/// `%device`'s arguments: a preset, or `--lnc`.
pub(super) fn device_arguments(_: &Session, _: usize) -> Vec<Argument> {
    INSTANCES
        .iter()
        .map(|i| Argument::new(i.name, format!("{} x {}", i.chips, i.chip.generation)))
        .chain([Argument::new("--lnc", "logical NeuronCore configuration")])
        .collect()
}

/// `%help device`: the presets.
pub(super) fn presets() -> String {
    format!("presets: {}", preset_names())
}

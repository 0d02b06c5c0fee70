//! The `%` commands. [`MAGICS`] is the one table of their names, usage and help: `%help`,
//! completion and argument errors all read it.
//!
//! - this module: the table, dispatch, and the magics that run guests (`%load`, `%run`,
//!   `%%wat`, `%spmd`, `%time`);
//! - [`views`]: magics that show what happened (`%events`, `%recompiles`, `%explain`,
//!   `%vars`, `%mem`, `%timeline`, `%trace`);
//! - [`state`]: magics that change the session (`%reset`, `%device`, `%cache`);
//! - `table`, `timeline` and `timeline_svg`: the text and HTML tables, and the text and SVG
//!   timelines, they show.

pub mod state;
mod table;
mod timeline;
mod timeline_svg;
pub mod views;

use std::path::PathBuf;
use std::time::Instant;

use super::{fail, CellError, Outcome, Output, Session};

/// Whether a magic takes a line (`%name`), a cell (`%%name`), or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MagicKind {
    /// `%name args`.
    Line,
    /// `%%name args` and a body.
    Cell,
    /// Either.
    Both,
}

/// One magic's entry in the table.
#[derive(Clone, Copy, Debug)]
pub struct Magic {
    /// The name, without `%`.
    pub name: &'static str,
    /// Line, cell or both.
    pub kind: MagicKind,
    /// How to call it.
    pub usage: &'static str,
    /// What it does, in one or two sentences.
    pub help: &'static str,
}

/// Every magic, in the order `%help` lists them.
pub const MAGICS: &[Magic] = &[
    Magic {
        name: "help",
        kind: MagicKind::Line,
        usage: "%help [magic]",
        help: "Lists the magics, or explains one.",
    },
    Magic {
        name: "doc",
        kind: MagicKind::Line,
        usage: "%doc NAME",
        help: "The documentation of an op (schema, attributes, doc), a variable (type, shape, \
               dtype, device, bytes) or a %magic, in the notebook's pager.",
    },
    Magic {
        name: "load",
        kind: MagicKind::Line,
        usage: "%load FILE.wasm|FILE.wat",
        help: "Loads a WebAssembly module into the session; %run calls its exports.",
    },
    Magic {
        name: "run",
        kind: MagicKind::Line,
        usage: "%run [module.]export [args...]",
        help: "Calls an export of a loaded module (the last one loaded when no module is named), \
               with numeric arguments. The instance keeps its state between calls.",
    },
    Magic {
        name: "wat",
        kind: MagicKind::Cell,
        usage: "%%wat",
        help:
            "The cell is a WebAssembly text module: it is compiled at once, its `run` export (if \
               any) is called, and it stays loaded as wat<N> for %run.",
    },
    Magic {
        name: "spmd",
        kind: MagicKind::Both,
        usage: "%spmd N FILE.wasm [--all-ranks]   or   %%spmd N [--all-ranks] + Rust code",
        help: "Runs a module, or the Rust code of the cell, as N ranks (one per NeuronCore, as \
               torchrun), meeting in collectives. Only rank 0 prints unless --all-ranks.",
    },
    Magic {
        name: "events",
        kind: MagicKind::Line,
        usage: "%events [kind] [--last N]",
        help: "The events of the last cell as a table (kinds: op, memory, compile, cache_hit, \
               graph_break, recompile_limit, collective, guest_trap, log).",
    },
    Magic {
        name: "recompiles",
        kind: MagicKind::Line,
        usage: "%recompiles",
        help: "Every compile of the session with its reason: which guards failed.",
    },
    Magic {
        name: "explain",
        kind: MagicKind::Line,
        usage: "%explain [function]",
        help: "What the last cell's compiled functions became: versions, guards, graphs before \
               and after the passes, fused kernels.",
    },
    Magic {
        name: "cache",
        kind: MagicKind::Line,
        usage: "%cache [ls|clear]",
        help: "Lists (ls, the default) or empties (clear) the on-disk caches of compiled modules \
               and programs.",
    },
    Magic {
        name: "vars",
        kind: MagicKind::Line,
        usage: "%vars",
        help:
            "The session's variables: name, type, and for tensors shape, dtype, device and bytes.",
    },
    Magic {
        name: "reset",
        kind: MagicKind::Line,
        usage: "%reset",
        help: "Forgets the variables, kept items, loaded modules and events.",
    },
    Magic {
        name: "device",
        kind: MagicKind::Line,
        usage: "%device [preset] [--lnc N]",
        help: "Shows the simulated instance, or switches to another preset (trn2.48xlarge, \
               trn2.3xlarge, trn1.32xlarge, trn1.2xlarge); switching drops the session's tensors.",
    },
    Magic {
        name: "mem",
        kind: MagicKind::Line,
        usage: "%mem",
        help: "HBM in use and peak on each core that holds tensors, and the host memory cap.",
    },
    Magic {
        name: "time",
        kind: MagicKind::Both,
        usage: "%time CODE   or   %%time + Rust code",
        help:
            "Runs the code and prints its wall time (build and run) beside the modeled device time.",
    },
    Magic {
        name: "trace",
        kind: MagicKind::Line,
        usage: "%trace save FILE.json",
        help: "Writes the session's events as a Chrome trace (one track per core, host and \
               modeled), for Perfetto or chrome://tracing.",
    },
    Magic {
        name: "timeline",
        kind: MagicKind::Line,
        usage: "%timeline",
        help: "The last cell's modeled device timeline, one row per core (drawn as SVG in \
               notebooks).",
    },
];

/// The table entry of `name`.
pub fn find(name: &str) -> Option<&'static Magic> {
    MAGICS.iter().find(|m| m.name == name)
}

/// A magic's argument error: its usage, so the user sees how to call it.
pub(super) fn usage_error(out: &mut dyn FnMut(Output), name: &str, problem: &str) -> Outcome {
    let usage = find(name).map_or("", |m| m.usage);
    fail(
        out,
        CellError::new("MagicError", format!("%{name}: {problem}\nusage: {usage}")),
    )
}

impl Session {
    /// Runs magic `name` (a cell magic when `body` is given).
    pub(super) fn run_magic(
        &mut self,
        name: &str,
        args: &str,
        body: Option<&str>,
        out: &mut dyn FnMut(Output),
    ) -> Outcome {
        let Some(magic) = find(name) else {
            let close: Vec<String> = MAGICS
                .iter()
                .filter(|m| m.name.starts_with(name.get(..1).unwrap_or("")))
                .map(|m| format!("%{}", m.name))
                .collect();
            let hint = if close.is_empty() {
                String::new()
            } else {
                format!(" (did you mean {}?)", close.join(", "))
            };
            return fail(
                out,
                CellError::new(
                    "MagicError",
                    format!("%{name} is not a magic{hint}; %help lists them"),
                ),
            );
        };
        match (magic.kind, body.is_some()) {
            (MagicKind::Line, true) => {
                return usage_error(
                    out,
                    name,
                    "is a line magic: write it with one %, on its own line",
                )
            }
            (MagicKind::Cell, false) => {
                return usage_error(
                    out,
                    name,
                    "is a cell magic: start the cell with %% and put the body below",
                )
            }
            _ => {}
        }
        match (name, body) {
            ("help", _) => help(args, out),
            ("doc", _) => views::doc(self, args, out),
            ("load", _) => match args {
                "" => usage_error(out, name, "give the module's file"),
                path => self.load_module_file(path, out),
            },
            ("run", _) => {
                let mut words = args.split_whitespace();
                match words.next() {
                    None => usage_error(out, name, "give the export to call"),
                    Some(target) => {
                        let args: Vec<String> = words.map(str::to_string).collect();
                        self.run_export(target, &args, out)
                    }
                }
            }
            ("wat", Some(_)) if !args.is_empty() => usage_error(
                out,
                name,
                "takes no arguments: the module is the cell's body",
            ),
            ("wat", Some(body)) => self.run_wat_cell(body, out),
            ("spmd", body) => self.spmd(args, body, out),
            ("time", body) => self.time(args, body, out),
            ("events", _) => views::events(self, args, out),
            ("recompiles", _) => views::recompiles(self, args, out),
            ("explain", _) => views::explain(self, args, out),
            ("vars", _) => views::vars(self, args, out),
            ("mem", _) => views::mem(self, args, out),
            ("timeline", _) => views::timeline(self, args, out),
            ("trace", _) => views::trace(self, args, out),
            ("cache", _) => state::cache(self, args, out),
            ("reset", _) => state::reset(self, args, out),
            ("device", _) => state::device(self, args, out),
            _ => unreachable!("every magic of the table is dispatched"),
        }
    }

    fn spmd(&mut self, args: &str, body: Option<&str>, out: &mut dyn FnMut(Output)) -> Outcome {
        let mut words: Vec<&str> = args.split_whitespace().collect();
        let all_ranks = words.contains(&"--all-ranks");
        words.retain(|w| *w != "--all-ranks");
        let nproc = match words.first().map(|n| n.parse::<u32>()) {
            Some(Ok(n)) if n >= 1 => n,
            _ => {
                return usage_error(
                    out,
                    "spmd",
                    "give the number of ranks first, a whole number from 1",
                )
            }
        };
        let path = match (body, words.get(1..).unwrap_or(&[])) {
            (Some(code), []) => match self.build_rust_cell(code, out) {
                Ok(Some(wasm)) => wasm,
                Ok(None) => {
                    return usage_error(
                        out,
                        "spmd",
                        "the cell holds only items: there is nothing to run",
                    )
                }
                Err(outcome) => return outcome,
            },
            (None, [file]) => PathBuf::from(file),
            (None, []) => {
                return usage_error(
                    out,
                    "spmd",
                    "give the module to run, or use %%spmd with Rust code",
                )
            }
            _ => return usage_error(out, "spmd", "unexpected arguments"),
        };
        self.run_spmd(&path, nproc, all_ranks, out)
    }

    fn time(&mut self, args: &str, body: Option<&str>, out: &mut dyn FnMut(Output)) -> Outcome {
        if body.is_some() && !args.is_empty() {
            return usage_error(
                out,
                "time",
                "%%time takes no arguments: the code is the cell's body",
            );
        }
        let code = body.unwrap_or(args);
        if code.trim().is_empty() {
            return usage_error(out, "time", "give the code to time");
        }
        let first = self.runtime.bus().next_seq();
        let started = Instant::now();
        let outcome = self.run_rust_cell(code, out);
        let wall = started.elapsed();
        let summary =
            neuronlab_core::events::Summary::from_events(&self.runtime.bus().since(first));
        out(Output::Stdout(format!(
            "wall time {} (build and run) · modeled device time {}\n",
            neuronlab_core::events::fmt::duration(wall.as_secs_f64()),
            neuronlab_core::events::fmt::duration(summary.modeled_s),
        )));
        outcome
    }
}

fn help(args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let name = args.trim().trim_start_matches('%');
    if name.is_empty() {
        let width = MAGICS
            .iter()
            .map(|m| m.usage.len())
            .max()
            .unwrap_or(0)
            .min(40);
        let mut text = String::from("Cells are Rust (a function body), or magics:\n");
        for m in MAGICS {
            let first = m
                .help
                .split(". ")
                .next()
                .unwrap_or(m.help)
                .trim_end_matches('.');
            text.push_str(&format!(
                "  {:<width$}  {first}\n",
                m.usage.split("   or").next().unwrap_or(m.usage)
            ));
        }
        text.push_str("%help NAME explains one.\n");
        out(Output::Stdout(text));
        return Outcome::Ok;
    }
    match find(name) {
        Some(m) => {
            out(Output::Stdout(format!("{}\n\n{}\n", m.usage, m.help)));
            Outcome::Ok
        }
        None => fail(
            out,
            CellError::new(
                "MagicError",
                format!("%{name} is not a magic; %help lists them"),
            ),
        ),
    }
}

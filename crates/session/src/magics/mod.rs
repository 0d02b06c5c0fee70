//! The `%` commands. [`MAGICS`] is the one table of them: each entry holds a magic's name,
//! usage, help, handler and argument completer, and `%help`, dispatch, completion and
//! argument errors all read it. Adding a magic is adding one entry.
//!
//! - this module: the table, dispatch, and the magics that run guests (`%load`, `%run`,
//!   `%%wat`, `%spmd`, `%time`);
//! - [`views`]: magics that show what happened (`%events`, `%recompiles`, `%explain`,
//!   `%vars`, `%mem`, `%timeline`, `%trace`);
//! - [`state`]: magics that change the session (`%reset`, `%device`, `%cache`, `%dir`);
//! - `table`, `timeline` and `timeline_svg`: the text and HTML tables, and the text and SVG
//!   timelines, they show.

pub mod state;
mod table;
mod timeline;
mod timeline_svg;
pub mod views;

use std::path::Path;
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

/// How a magic runs, which is also whether it takes a line, a cell or both: a line magic gets
/// its argument text, a cell magic its arguments and its body, and one that is both gets the
/// body when it is written with `%%`.
#[derive(Clone, Copy)]
pub enum Handler {
    /// `%name args`.
    Line(fn(&mut Session, &str, Sink) -> Outcome),
    /// `%%name args` and a body.
    Cell(fn(&mut Session, &str, &str, Sink) -> Outcome),
    /// Either.
    Both(fn(&mut Session, &str, Option<&str>, Sink) -> Outcome),
}

/// Where a magic reports its outputs.
pub type Sink<'a> = &'a mut dyn FnMut(Output);

/// A candidate for a magic's argument, as completion offers it.
#[derive(Clone, Debug, PartialEq)]
pub struct Argument {
    /// The text to insert.
    pub text: String,
    /// What it is, shown beside it.
    pub detail: String,
}

impl Argument {
    fn new(text: impl Into<String>, detail: impl Into<String>) -> Argument {
        Argument {
            text: text.into(),
            detail: detail.into(),
        }
    }
}

/// The candidates for argument number `position` (0 for the first) of a magic.
pub type Completer = fn(&Session, usize) -> Vec<Argument>;

/// One magic: everything `%help`, dispatch, argument errors and completion know of it.
#[derive(Clone, Copy)]
pub struct Magic {
    /// The name, without `%`.
    pub name: &'static str,
    /// How to call it.
    pub usage: &'static str,
    /// What it does, in one or two sentences.
    pub help: &'static str,
    /// More that `%help NAME` shows, made when asked (lists that come from other tables).
    pub details: Option<fn() -> String>,
    /// Runs it.
    pub run: Handler,
    /// Completes its arguments.
    pub complete: Option<Completer>,
}

impl Magic {
    /// Line, cell or both, as its handler takes.
    pub fn kind(&self) -> MagicKind {
        match self.run {
            Handler::Line(_) => MagicKind::Line,
            Handler::Cell(_) => MagicKind::Cell,
            Handler::Both(_) => MagicKind::Both,
        }
    }
}

/// Every magic, in the order `%help` lists them.
pub const MAGICS: &[Magic] = &[
    Magic {
        name: "help",
        usage: "%help [magic]",
        help: "Lists the magics, or explains one.",
        details: None,
        run: Handler::Line(help),
        complete: Some(help_arguments),
    },
    Magic {
        name: "doc",
        usage: "%doc NAME",
        help: "The documentation of an op (schema, attributes, doc), a variable (type, shape, \
               dtype, device, bytes) or a %magic, in the notebook's pager.",
        details: None,
        run: Handler::Line(views::doc),
        complete: Some(views::doc_arguments),
    },
    Magic {
        name: "load",
        usage: "%load FILE.wasm|FILE.wat",
        help: "Loads a WebAssembly module into the session; %run calls its exports.",
        details: None,
        run: Handler::Line(load),
        complete: None,
    },
    Magic {
        name: "run",
        usage: "%run [module.]export [args...]",
        help: "Calls an export of a loaded module (the last one loaded when no module is named), \
               with numeric arguments. The instance keeps its state between calls.",
        details: None,
        run: Handler::Line(run),
        complete: Some(run_arguments),
    },
    Magic {
        name: "wat",
        usage: "%%wat",
        help:
            "The cell is a WebAssembly text module: it is compiled at once, its `run` export (if \
               any) is called, and it stays loaded as wat<N> for %run.",
        details: None,
        run: Handler::Cell(wat),
        complete: None,
    },
    Magic {
        name: "spmd",
        usage:
            "%spmd N FILE.wasm [--all-ranks] [-- ARGS]   or   %%spmd N [--all-ranks] + Rust code",
        help: "Runs a module, or the Rust code of the cell, as N ranks (one per NeuronCore, as \
               torchrun), meeting in collectives. Only rank 0 prints unless --all-ranks, which \
               shows what several ranks print alike once, as [ranks 0-3]. What follows -- \
               reaches every rank as neuronlab::args().",
        details: None,
        run: Handler::Both(Session::spmd),
        complete: None,
    },
    Magic {
        name: "events",
        usage: "%events [kind] [forward|backward] [--last N]",
        help: "The events of the last cell that published any, as a table, or those of one \
               kind; forward or backward picks the ops of that pass (the phase column); \
               --last N shows only the last N of them.",
        details: Some(views::event_kinds),
        run: Handler::Line(views::events),
        complete: Some(views::event_arguments),
    },
    Magic {
        name: "recompiles",
        usage: "%recompiles",
        help: "Every compile of the session with its reason: which guards failed.",
        details: None,
        run: Handler::Line(views::recompiles),
        complete: None,
    },
    Magic {
        name: "explain",
        usage: "%explain [function]",
        help: "What the last cell's compiled functions became: versions, guards, graphs before \
               and after the passes, fused kernels.",
        details: None,
        run: Handler::Line(views::explain),
        complete: Some(views::explain_arguments),
    },
    Magic {
        name: "cache",
        usage: "%cache [ls|clear]",
        help: "Lists (ls, the default) or empties (clear) the on-disk caches of compiled modules \
               and programs.",
        details: None,
        run: Handler::Line(state::cache),
        complete: Some(state::cache_arguments),
    },
    Magic {
        name: "vars",
        usage: "%vars",
        help:
            "The session's variables: name, type, and for tensors shape, dtype, device and bytes.",
        details: None,
        run: Handler::Line(views::vars),
        complete: None,
    },
    Magic {
        name: "reset",
        usage: "%reset",
        help: "Forgets the variables, kept items, loaded modules and events.",
        details: None,
        run: Handler::Line(state::reset),
        complete: None,
    },
    Magic {
        name: "device",
        usage: "%device [preset] [--lnc N]",
        help: "Shows the simulated instance, or switches to another preset; switching drops the \
               session's tensors.",
        details: Some(state::presets),
        run: Handler::Line(state::device),
        complete: Some(state::device_arguments),
    },
    Magic {
        name: "dir",
        usage: "%dir [PATH [--rw]]",
        help: "Grants the session's guests a folder, read-only or with --rw read-write; guests \
               address its files as NAME/relative/path, NAME being the folder's name. Without \
               a path, lists the granted folders.",
        details: None,
        run: Handler::Line(state::dir),
        complete: None,
    },
    Magic {
        name: "mem",
        usage: "%mem",
        help: "HBM in use and peak on each core that holds tensors, and the host memory cap; \
               then, under its own heading, the activations autograd saved for backward and \
               the gradients on each core that has held any.",
        details: None,
        run: Handler::Line(views::mem),
        complete: None,
    },
    Magic {
        name: "time",
        usage: "%time CODE   or   %%time + Rust code",
        help:
            "Runs the code and prints its wall time (build and run) beside the modeled device time.",
        details: None,
        run: Handler::Both(Session::time),
        complete: None,
    },
    Magic {
        name: "trace",
        usage: "%trace save FILE.json",
        help: "Writes the session's events as a Chrome trace (one track per core, host and \
               modeled), for Perfetto or chrome://tracing.",
        details: None,
        run: Handler::Line(views::trace),
        complete: Some(views::trace_arguments),
    },
    Magic {
        name: "timeline",
        usage: "%timeline [N | all]",
        help: "The modeled device timeline of the last cell that ran ops or collectives (or of \
               cell N, or of every cell), one row per core, drawn as SVG in notebooks.",
        details: None,
        run: Handler::Line(views::timeline),
        complete: None,
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
        match (magic.run, body) {
            (Handler::Line(run), None) => run(self, args, out),
            (Handler::Cell(run), Some(body)) => run(self, args, body, out),
            (Handler::Both(run), body) => run(self, args, body, out),
            (Handler::Line(_), Some(_)) => usage_error(
                out,
                name,
                "is a line magic: write it with one %, on its own line",
            ),
            (Handler::Cell(_), None) => usage_error(
                out,
                name,
                "is a cell magic: start the cell with %% and put the body below",
            ),
        }
    }

    /// `%spmd N FILE` and `%%spmd N`.
    fn spmd(&mut self, args: &str, body: Option<&str>, out: &mut dyn FnMut(Output)) -> Outcome {
        // What follows `--` reaches every rank's guest as `neuronlab::args()`.
        let (args, guest_args) = match args.split_once(" -- ") {
            Some((before, after)) => (
                before,
                after.split_whitespace().map(str::to_string).collect(),
            ),
            None => (args.strip_suffix(" --").unwrap_or(args), Vec::new()),
        };
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
        let module = match (body, words.get(1..).unwrap_or(&[])) {
            (Some(code), []) => match self.build_rust_cell(code, out) {
                Ok(Some(module)) => module,
                Ok(None) => {
                    return usage_error(
                        out,
                        "spmd",
                        "the cell holds only items: there is nothing to run",
                    )
                }
                Err(outcome) => return outcome,
            },
            (None, [file]) => match self.load_module(Path::new(file)) {
                Ok(module) => module,
                Err(e) => return fail(out, e),
            },
            (None, []) => {
                return usage_error(
                    out,
                    "spmd",
                    "give the module to run, or use %%spmd with Rust code",
                )
            }
            _ => return usage_error(out, "spmd", "unexpected arguments"),
        };
        self.run_spmd(&module, nproc, all_ranks, &guest_args, out)
    }

    /// `%time CODE` and `%%time`.
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
        let counted = neuronlab_core::events::SummaryWindow::open(self.runtime.bus());
        let started = Instant::now();
        let outcome = self.run_rust_cell(code, out);
        let wall = started.elapsed();
        let summary = counted.finish();
        out(Output::Stdout(format!(
            "wall time {} (build and run) · modeled device time {}\n",
            neuronlab_core::events::fmt::duration(wall.as_secs_f64()),
            neuronlab_core::events::fmt::duration(summary.modeled_s),
        )));
        outcome
    }
}

/// `%help [magic]`.
fn help(_: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
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
            let details = m.details.map_or(String::new(), |d| format!("\n{}\n", d()));
            out(Output::Stdout(format!(
                "{}\n\n{}\n{details}",
                m.usage, m.help
            )));
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

/// `%load FILE`.
fn load(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    match args {
        "" => usage_error(out, "load", "give the module's file"),
        path => s.load_module_file(path, out),
    }
}

/// `%run [module.]export [args...]`.
fn run(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let mut words = args.split_whitespace();
    match words.next() {
        None => usage_error(out, "run", "give the export to call"),
        Some(target) => {
            let args: Vec<String> = words.map(str::to_string).collect();
            s.run_export(target, &args, out)
        }
    }
}

/// `%%wat`.
fn wat(s: &mut Session, args: &str, body: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    if !args.is_empty() {
        return usage_error(
            out,
            "wat",
            "takes no arguments: the module is the cell's body",
        );
    }
    s.run_wat_cell(body, out)
}

/// `%help`'s argument: a magic.
fn help_arguments(_: &Session, position: usize) -> Vec<Argument> {
    match position {
        0 => MAGICS
            .iter()
            .map(|m| Argument::new(m.name, m.usage))
            .collect(),
        _ => Vec::new(),
    }
}

/// `%run`'s first argument: the loaded modules' exports with their parameter types.
fn run_arguments(s: &Session, position: usize) -> Vec<Argument> {
    if position != 0 {
        return Vec::new();
    }
    s.loaded_modules()
        .flat_map(|m| {
            m.exports.iter().map(|(export, params)| {
                let params: Vec<String> = params.iter().map(ToString::to_string).collect();
                Argument::new(
                    format!("{}.{export}", m.name),
                    format!("({})", params.join(", ")),
                )
            })
        })
        .collect()
}

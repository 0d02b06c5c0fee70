//! Magics that show what happened: `%events`, `%recompiles`, `%explain`, `%vars`, `%mem`,
//! `%timeline`, `%trace`. They read the event bus, the variables and the memory accounting,
//! and change nothing.

use std::path::Path;

use super::super::display::escape;
use super::super::{fail, CellError, CellEvents, MimeBundle, Outcome, Output, Session};
use super::table::{count, Table};
use super::{timeline as drawing, timeline_svg, usage_error, Argument, MAGICS};
use neuronlab_core::device::Role;
use neuronlab_core::events::fmt::{bytes, duration, duration_us};
use neuronlab_core::events::{
    save_chrome_trace, Event, EventKind, EventTag, LimitAction, Phase, TensorSig,
};
use neuronlab_core::ops::Registry;
use neuronlab_sandbox::var_store::Var;

/// Every event kind's tag, in the event table's order.
fn event_kind_names() -> Vec<&'static str> {
    EventTag::ALL.iter().map(|t| t.name()).collect()
}

/// The passes an op can belong to, with what `%events` says of each.
const PHASES: [(Phase, &str); 2] = [
    (
        Phase::Forward,
        "ops outside backward (the forward pass, optimizer steps)",
    ),
    (
        Phase::Backward,
        "ops that backward ran to compute gradients",
    ),
];

/// `%help events`: the kinds and what each records, and the phases of ops.
pub(super) fn event_kinds() -> String {
    let kinds: Vec<String> = EventTag::ALL
        .iter()
        .map(|t| format!("  {:<16} {}", t.name(), t.about()))
        .collect();
    let phases: Vec<String> = PHASES
        .iter()
        .map(|(p, about)| format!("  {:<16} {about}", p.name()))
        .collect();
    format!(
        "kinds:\n{}\nphases (of op events):\n{}",
        kinds.join("\n"),
        phases.join("\n")
    )
}

/// `%events`' arguments: a kind, a phase, or `--last`.
pub(super) fn event_arguments(_: &Session, _: usize) -> Vec<Argument> {
    EventTag::ALL
        .iter()
        .map(|t| Argument::new(t.name(), t.about()))
        .chain(
            PHASES
                .iter()
                .map(|(p, about)| Argument::new(p.name(), *about)),
        )
        .chain([Argument::new("--last", "the last N events")])
        .collect()
}

/// `%doc`'s argument: an op, a variable or a magic.
pub(super) fn doc_arguments(s: &Session, position: usize) -> Vec<Argument> {
    if position != 0 {
        return Vec::new();
    }
    let ops = Registry::global()
        .ops()
        .iter()
        .map(|op| Argument::new(op.name, "op"));
    let vars = s
        .shared
        .vars
        .snapshot()
        .into_iter()
        .map(|(name, var)| Argument::new(name, var.to_string()));
    let magics = MAGICS
        .iter()
        .map(|m| Argument::new(format!("%{}", m.name), m.usage));
    vars.chain(ops).chain(magics).collect()
}

/// `%explain`'s argument: a function the last cell compiled.
pub(super) fn explain_arguments(s: &Session, position: usize) -> Vec<Argument> {
    match position {
        0 => s
            .explanations
            .iter()
            .map(|(name, _)| Argument::new(name.clone(), "compiled function"))
            .collect(),
        _ => Vec::new(),
    }
}

/// `%trace`'s first argument.
pub(super) fn trace_arguments(_: &Session, position: usize) -> Vec<Argument> {
    match position {
        0 => vec![Argument::new("save", "save FILE.json")],
        _ => Vec::new(),
    }
}

/// `%doc NAME`: what inspecting `NAME` shows (an op, a variable, a magic), as a page.
pub fn doc(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let name = args.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return usage_error(out, "doc", "give one name: an op, a variable or a %magic");
    }
    match s.inspect(name, name.len()) {
        Some(page) => {
            out(Output::Page(page));
            Outcome::Ok
        }
        None => fail(
            out,
            CellError::new(
                "MagicError",
                format!(
                    "%doc: nothing is named `{name}`: not an op, a variable or a magic \
                     (%vars lists the variables, %help the magics, `neuronlab ops` the ops)"
                ),
            ),
        ),
    }
}

/// `%events [KIND] [forward|backward] [--last N]`: the events of the last cell, or the last
/// N, as a table.
pub fn events(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let EventFilter { kind, phase, last } = match event_filter(args) {
        Ok(filter) => filter,
        Err(problem) => return usage_error(out, "events", &problem),
    };
    let Some(which) = last_cell_with_events(s, false) else {
        out(Output::Stdout(
            "no cell has published events yet\n".to_string(),
        ));
        return Outcome::Ok;
    };
    let cell = cell_events(s, &which);
    let mut chosen: Vec<&Event> = cell
        .iter()
        .filter(|e| kind.is_none_or(|k| e.kind.tag() == k))
        .filter(|e| phase.is_none_or(|p| matches!(&e.kind, EventKind::Op(op) if op.phase == p)))
        .collect();
    // What was asked for, as a noun: `event`, or `backward op`.
    let noun = phase.map_or("event".to_string(), |p| format!("{} op", p.name()));
    if chosen.is_empty() {
        // A filter was given: without one, a cell that published events has some to show.
        let asked = match (kind, phase) {
            (Some(k), None) => format!("{k} event"),
            _ => noun,
        };
        out(Output::Stdout(format!(
            "cell [{}], the last that published events, published no {asked}s; it published {}\n",
            which.cell,
            kind_counts(&cell)
        )));
        return Outcome::Ok;
    }
    let total = chosen.len();
    chosen.drain(..total.saturating_sub(last.unwrap_or(total)));
    let mut table = Table::new(&[
        "seq", "kind", "phase", "core", "name", "host", "modeled", "details",
    ])
    .right(&[0, 5, 6]);
    for e in &chosen {
        table.push(event_row(e));
    }
    let of_kind = match (kind, phase) {
        (Some(k), None) => format!(" of kind {k}"),
        _ => String::new(),
    };
    let cell_no = which.cell;
    let note = match chosen.len() == total {
        true => format!("{}{of_kind} in cell [{cell_no}]", count(total, &noun)),
        false => format!(
            "the last {} of {total} {noun}s{of_kind} in cell [{cell_no}]",
            chosen.len()
        ),
    };
    out(Output::Display(table.bundle(&note)));
    Outcome::Ok
}

/// What `%events` shows of the cell's events.
struct EventFilter {
    /// Only events of this kind.
    kind: Option<&'static str>,
    /// Only ops of this phase.
    phase: Option<Phase>,
    /// Only the last this many.
    last: Option<usize>,
}

/// The kind, phase and `--last N` of `%events` arguments, or what is wrong with them.
fn event_filter(args: &str) -> Result<EventFilter, String> {
    let (mut kind, mut phase, mut last) = (None, None, None);
    let mut words = args.split_whitespace();
    while let Some(word) = words.next() {
        if let Some(rest) = word.strip_prefix("--last") {
            let value = match rest {
                "" => words.next(),
                rest => rest.strip_prefix('='),
            };
            match value.map(str::parse::<usize>) {
                _ if last.is_some() => return Err("--last is given twice".into()),
                Some(Ok(n)) if n > 0 => last = Some(n),
                _ => return Err("--last takes a number of events, 1 or more".into()),
            }
        } else if word.starts_with('-') {
            return Err(format!("unknown option {word}; the option is --last N"));
        } else if let Some((p, _)) = PHASES.iter().find(|(p, _)| p.name() == word) {
            if phase.is_some() {
                return Err(format!("give one phase, not also '{word}'"));
            }
            phase = Some(*p);
        } else if kind.is_some() {
            return Err(format!("give one event kind, not also '{word}'"));
        } else {
            // `ops` is read as `op`.
            let found = event_kind_names()
                .into_iter()
                .find(|k| word.strip_suffix('s').unwrap_or(word) == *k || word == *k);
            let Some(k) = found else {
                return Err(format!(
                    "'{word}' is not an event kind; the kinds are {}",
                    event_kind_names().join(", ")
                ));
            };
            kind = Some(k);
        }
    }
    if let (Some(k), Some(p)) = (kind, phase) {
        if k != EventTag::Op.name() {
            return Err(format!(
                "only op events have a phase: '{k}' events are never {}",
                p.name()
            ));
        }
    }
    Ok(EventFilter { kind, phase, last })
}

/// The events of the last cell, oldest first.
fn cell_events(s: &Session, cell: &CellEvents) -> Vec<Event> {
    let mut events = s.runtime.bus().since(cell.start);
    events.retain(|e| e.seq < cell.end);
    events
}

/// The last cell that published events (with `device_work`, that ran ops or collectives):
/// magic cells that only look, such as `%events` itself, publish none and are skipped.
fn last_cell_with_events(s: &Session, device_work: bool) -> Option<CellEvents> {
    s.cell_events
        .iter()
        .rev()
        .find(|c| c.device_work || !device_work)
        .copied()
}

/// How many events of each kind, and how many ops ran in backward: `3 op (1 backward),
/// 6 memory`.
fn kind_counts(events: &[Event]) -> String {
    let backward = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Op(op) if op.phase == Phase::Backward))
        .count();
    event_kind_names()
        .into_iter()
        .filter_map(
            |k| match events.iter().filter(|e| e.kind.tag() == k).count() {
                0 => None,
                n if k == EventTag::Op.name() && backward > 0 => {
                    Some(format!("{n} {k} ({backward} backward)"))
                }
                n => Some(format!("{n} {k}")),
            },
        )
        .collect::<Vec<_>>()
        .join(", ")
}

/// `seq, kind, phase, core, name, host, modeled, details` of one event.
// One arm per event kind: the columns of %events read in one place.
fn event_row(e: &Event) -> Vec<String> {
    let host = e.kind.host_us().map_or(String::new(), duration_us);
    let (name, modeled, details) = match &e.kind {
        EventKind::Op(op) => (
            op.name.to_string(),
            duration(op.modeled.total_s),
            format!(
                "{} -> {}, {}",
                sigs(&op.inputs),
                sigs(&op.outputs),
                op.modeled.bound
            ),
        ),
        EventKind::Memory(m) => (
            format!("{:?}", m.action).to_lowercase(),
            String::new(),
            format!(
                "{}, in use {}, peak {}",
                bytes(m.bytes),
                bytes(m.in_use),
                bytes(m.peak)
            ),
        ),
        EventKind::Compile(c) => (
            c.function.clone(),
            String::new(),
            format!(
                "{}: {}; graph {}, {} -> {} nodes, {}, cache {}",
                if c.recompile { "recompile" } else { "compile" },
                c.reason,
                c.graph,
                c.nodes_before,
                c.nodes_after,
                count(c.fused_kernels, "kernel"),
                c.cache
            ),
        ),
        EventKind::CacheHit { function, source } => (
            function.clone(),
            String::new(),
            format!("found in the {source} cache"),
        ),
        EventKind::GraphBreak {
            function,
            reason,
            op,
        } => (
            function.clone(),
            String::new(),
            format!("at {op}: {reason}"),
        ),
        EventKind::RecompileLimit {
            function,
            limit,
            action,
        } => (
            function.clone(),
            String::new(),
            format!(
                "reached its limit of {limit} recompiles; later calls {}",
                match action {
                    LimitAction::RunEager => "run eagerly",
                    LimitAction::Fail => "fail",
                }
            ),
        ),
        EventKind::Collective(c) => (
            c.op.clone(),
            duration_us(c.modeled_us),
            format!(
                "ranks {:?}{}, {} per rank",
                c.group,
                c.mesh_dim
                    .as_ref()
                    .map_or(String::new(), |d| format!(" (mesh dim {d})")),
                bytes(c.bytes)
            ),
        ),
        EventKind::GuestTrap { message } => (String::new(), String::new(), message.clone()),
        EventKind::Log {
            level,
            target,
            message,
        } => (target.clone(), String::new(), format!("{level}: {message}")),
    };
    let phase = match &e.kind {
        EventKind::Op(op) => op.phase.name(),
        _ => "",
    };
    vec![
        e.seq.to_string(),
        e.kind.tag().to_string(),
        phase.to_string(),
        e.core.to_string(),
        name,
        host,
        modeled,
        details.replace('\n', " "),
    ]
}

/// `f32[3], f32[3]`, or `()` for none.
fn sigs(sigs: &[TensorSig]) -> String {
    match sigs {
        [] => "()".to_string(),
        sigs => sigs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// `%recompiles`: every compile the session's events hold, with its reason.
pub fn recompiles(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    if !args.is_empty() {
        return usage_error(out, "recompiles", "takes no arguments");
    }
    let mut table = Table::new(&[
        "seq", "function", "compile", "reason", "graph", "cache", "host",
    ])
    .right(&[0, 6]);
    let (mut compiles, mut recompiles) = (0, 0);
    for e in s.runtime.bus().events() {
        if let EventKind::Compile(c) = &e.kind {
            compiles += 1;
            recompiles += usize::from(c.recompile);
            table.push(vec![
                e.seq.to_string(),
                c.function.clone(),
                if c.recompile { "recompile" } else { "first" }.to_string(),
                c.reason.clone(),
                c.graph.clone(),
                c.cache.to_string(),
                duration_us(c.host_compile_us),
            ]);
        }
    }
    if table.is_empty() {
        out(Output::Stdout(
            "nothing has compiled in this session (since its start or %reset); \
             neuronlab::compile(...) in a cell makes a compiled function\n"
                .to_string(),
        ));
        return Outcome::Ok;
    }
    let note = format!(
        "{}, {} of them recompiles",
        count(compiles, "compile"),
        recompiles
    );
    out(Output::Display(table.bundle(&note)));
    Outcome::Ok
}

/// `%explain [function]`: what the last cell's compiled functions became.
pub fn explain(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let words: Vec<&str> = args.split_whitespace().collect();
    if words.len() > 1 {
        return usage_error(out, "explain", "give at most one function");
    }
    if s.explanations.is_empty() {
        out(Output::Stdout(
            "the last cell compiled no functions; neuronlab::compile(...) in a cell makes one\n"
                .to_string(),
        ));
        return Outcome::Ok;
    }
    let chosen: Vec<&str> = s
        .explanations
        .iter()
        .filter(|(name, _)| words.first().is_none_or(|w| w == name))
        .map(|(_, text)| text.trim_end())
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = s.explanations.iter().map(|(n, _)| n.as_str()).collect();
        let problem = format!(
            "the last cell compiled no function '{args}'; it compiled {}",
            names.join(", ")
        );
        return usage_error(out, "explain", &problem);
    }
    out(Output::Stdout(format!("{}\n", chosen.join("\n\n"))));
    Outcome::Ok
}

/// What `%vars` (and inspection) say of a variable that stays local to its cell.
pub(crate) const LOCAL_NOTE: &str =
    "(stays in its cell: only tensors, numbers, bools and strings persist)";

/// `%vars`: the session's variables.
pub fn vars(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    if !args.is_empty() {
        return usage_error(out, "vars", "takes no arguments");
    }
    let vars = s.shared.vars.snapshot();
    if vars.is_empty() {
        out(Output::Stdout(
            "no variables yet: a top-level `let` in a Rust cell keeps its value for later cells\n"
                .to_string(),
        ));
        return Outcome::Ok;
    }
    let mut table =
        Table::new(&["name", "type", "shape", "dtype", "device", "bytes", "value"]).right(&[5]);
    let mut tensor_bytes = 0;
    for (name, var) in &vars {
        let none = String::new;
        let cells: [String; 5] = match var {
            Var::Tensor(t) => {
                tensor_bytes += t.nbytes() as u64;
                let (shape, dtype, device) = (format!("{:?}", t.shape()), t.dtype(), t.device());
                [
                    shape,
                    dtype.to_string(),
                    device.to_string(),
                    bytes(t.nbytes() as u64),
                    none(),
                ]
            }
            Var::Value { text, .. } => [none(), none(), none(), none(), shorten(text)],
            Var::Local { .. } => [none(), none(), none(), none(), LOCAL_NOTE.to_string()],
        };
        let mut row = vec![name.clone(), var.type_name().to_string()];
        row.extend(cells);
        table.push(row);
    }
    let note = format!(
        "{}, {} in tensors",
        count(vars.len(), "variable"),
        bytes(tensor_bytes)
    );
    out(Output::Display(table.bundle(&note)));
    Outcome::Ok
}

/// A value's text on one line, cut to a length a table can hold.
fn shorten(text: &str) -> String {
    const MAX: usize = 60;
    let line = text.replace('\n', "\\n");
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// `%mem`: HBM use of each core that has any, the host memory cap, and under a heading of its
/// own what autograd holds on each core that has held any.
pub fn mem(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    if !args.is_empty() {
        return usage_error(out, "mem", "takes no arguments");
    }
    let memory = s.runtime.memory();
    let mut table = Table::new(&["core", "in use", "peak", "HBM", "used", "allocations"])
        .right(&[1, 2, 3, 4, 5]);
    for core in s.runtime.topology().cores() {
        let Ok(stats) = memory.stats(core) else {
            continue;
        };
        if stats.in_use == 0 && stats.peak == 0 {
            continue;
        }
        table.push(vec![
            core.to_string(),
            bytes(stats.in_use),
            bytes(stats.peak),
            bytes(stats.capacity),
            format!(
                "{:.1}%",
                100.0 * stats.in_use as f64 / stats.capacity.max(1) as f64
            ),
            stats.allocations.to_string(),
        ]);
    }
    let host = format!(
        "host: {} in use of the {} host memory cap",
        bytes(memory.host_in_use()),
        bytes(memory.host_limit())
    );
    if table.is_empty() {
        out(Output::Stdout(format!(
            "no core has held a tensor yet\n{host}\n"
        )));
        return Outcome::Ok;
    }
    let mut bundle = table.bundle(&host);
    let sections = [
        (ROLES_HEADING, Some(roles_table(s))),
        (AUTOGRAD_HEADING, autograd_table(s)),
    ];
    for (heading, section) in sections {
        let Some(section) = section else { continue };
        let text = format!("{}\n\n{heading}\n{}", bundle.plain(), section.text());
        let html = format!(
            "{}\n<p><b>{}</b></p>\n{}",
            bundle.get("text/html").unwrap_or_default(),
            escape(heading),
            section.html()
        );
        bundle = MimeBundle::text(text).with("text/html", html);
    }
    out(Output::Display(bundle));
    Outcome::Ok
}

/// The heading of `%mem`'s per-role table.
const ROLES_HEADING: &str = "at each core's peak, by role (what the peak held)";

/// What each core that has held anything held at its peak, by role.
fn roles_table(s: &Session) -> Table {
    let mut columns = vec!["core"];
    columns.extend(Role::ALL.iter().map(|r| r.name()));
    let mut table = Table::new(&columns).right(&[1, 2, 3, 4, 5, 6]);
    let memory = s.runtime.memory();
    for core in s.runtime.topology().cores() {
        let Ok(stats) = memory.stats(core) else {
            continue;
        };
        if stats.peak == 0 {
            continue;
        }
        let mut row = vec![core.to_string()];
        row.extend(stats.at_peak.iter().map(|(_, b)| bytes(b)));
        table.push(row);
    }
    table
}

/// The heading of `%mem`'s autograd table.
const AUTOGRAD_HEADING: &str =
    "autograd (part of the HBM in use): activations saved for backward, gradients of leaves";

/// What autograd holds on each core that has held anything (a saved peak counts), or `None`
/// when none has: a session that trains nothing shows no empty heading.
fn autograd_table(s: &Session) -> Option<Table> {
    let mut table = Table::new(&["core", "saved", "saved peak", "saved tensors", "gradients"])
        .right(&[1, 2, 3, 4]);
    for core in s.runtime.topology().cores() {
        let Ok(used) = s.runtime.autograd_use(core) else {
            continue;
        };
        if used.saved_peak == 0 && used.grads == 0 {
            continue;
        }
        table.push(vec![
            core.to_string(),
            bytes(used.saved),
            bytes(used.saved_peak),
            used.saved_storages.to_string(),
            bytes(used.grads),
        ]);
    }
    (!table.is_empty()).then_some(table)
}

/// `%timeline [N | all]`: the modeled device timeline of the last cell that did device work,
/// of cell `N`, or of every event the session kept, as text and SVG.
pub fn timeline(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let (events, which) = match args.trim() {
        "" => match last_cell_with_events(s, true) {
            Some(c) => (
                cell_events(s, &c),
                format!("cell [{}], the last that did device work", c.cell),
            ),
            None => {
                out(Output::Stdout(
                    "no cell has done device work yet: no op or collective ran\n".into(),
                ));
                return Outcome::Ok;
            }
        },
        "all" => (s.runtime.bus().events(), "every cell".to_string()),
        n => match n.parse::<u32>() {
            Ok(n) => match s.cell_events.iter().find(|c| c.cell == n).copied() {
                Some(c) => (cell_events(s, &c), format!("cell [{n}]")),
                None => (Vec::new(), format!("cell [{n}]")),
            },
            Err(_) => {
                return usage_error(
                    out,
                    "timeline",
                    &format!("'{n}' is neither a cell number nor all"),
                )
            }
        },
    };
    match drawing::render(&events) {
        Some(text) => {
            let mut bundle = MimeBundle::text(format!("{which}: {text}"));
            if let Some(svg) = timeline_svg::render(&events) {
                bundle = bundle.with("image/svg+xml", svg);
            }
            out(Output::Display(bundle))
        }
        None => out(Output::Stdout(format!(
            "{which} did no device work: no op or collective with a modeled time\n"
        ))),
    }
    Outcome::Ok
}

/// `%trace save FILE`: the session's events as a Chrome trace.
pub fn trace(s: &mut Session, args: &str, out: &mut dyn FnMut(Output)) -> Outcome {
    let file = match args.split_once(char::is_whitespace) {
        Some(("save", file)) if !file.trim().is_empty() => file.trim(),
        _ if args == "save" => return usage_error(out, "trace", "give the file to write"),
        _ => return usage_error(out, "trace", "the only command is `save FILE`"),
    };
    let events = s.runtime.bus().events();
    let path = Path::new(file);
    if let Err(e) = save_chrome_trace(path, &events) {
        return fail(
            out,
            CellError::new("MagicError", format!("%trace: cannot write {file}: {e}")),
        );
    }
    let shown = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    out(Output::Stdout(format!(
        "wrote {} to {}: open it in Perfetto (ui.perfetto.dev) or chrome://tracing\n",
        count(events.len(), "event"),
        shown.display()
    )));
    Outcome::Ok
}

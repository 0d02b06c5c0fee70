//! The cell's event summary as a compact HTML block: one line per item, a muted label and
//! its values.
//!
//! ```text
//! ops        12 on neuron:0 · host 1.20 ms · modeled 340 µs · memory-bound 9, compute-bound 3
//! top        add 9× 270 µs (host 900 µs) · matmul 3× 70.0 µs (host 300 µs)
//! peak HBM   neuron:0 48.0 MiB
//! at the peak parameters 16.0 MiB · activations 24.0 MiB · other 8.00 MiB
//! compiles   3, 2 of them recompiles · first recompile: mlp: input 0 'x' shape changed: ...
//! collectives 2 · modeled 24.0 µs · all_reduce 2× 24.0 µs
//! ```
//!
//! The counts come from the [`Summary`]; what needs more than a count (each compile with its
//! reason, each graph break, each trap, the collectives per op) is read from the cell's events.
//! Above four cores, the peaks also show as a heatmap: a row of squares per chip, each core's
//! shade its peak against the highest, its value in the square's tooltip.

use std::collections::BTreeMap;

use super::{escape, FONT};
use neuronlab_core::device::{Bound, CoreId};
use neuronlab_core::events::fmt::{bytes, duration, duration_us};
use neuronlab_core::events::{CacheSource, CompileEvent, Event, EventKind, LimitAction, Summary};

/// The most graph breaks, limits or traps listed one by one; the rest are counted.
pub const MAX_LISTED: usize = 8;
/// Above this many cores, the peak-HBM line gives the spread instead of every core.
const MAX_CORES_LISTED: usize = 4;

const BLOCK: &str = "line-height:1.5;color:#555;border-left:3px solid #ddd;padding-left:8px";
const LABEL: &str = "color:#999;display:inline-block;min-width:7em";

/// `summary` of `events` (the events it was made from) as a self-contained HTML block, on an
/// instance with `cores_per_chip` cores to a chip.
pub fn summary_html(summary: &Summary, events: &[Event], cores_per_chip: u32) -> String {
    let mut lines: Vec<(&str, String)> = Vec::new();
    lines.push(("ops", ops_line(summary)));
    if !summary.top_ops.is_empty() {
        let top: Vec<String> = summary
            .top_ops
            .iter()
            .map(|op| {
                format!(
                    "{} {}× {} (host {})",
                    op.name,
                    op.count,
                    duration(op.modeled_s),
                    duration(op.host_s)
                )
            })
            .collect();
        lines.push(("top", top.join(" · ")));
    }
    if !summary.peak_hbm.is_empty() {
        lines.push(("peak HBM", peaks_line(summary)));
    }
    if let Some(roles) = summary.peak_roles_text() {
        lines.push(("at the peak", roles));
    }
    lines.extend(compiles_line(events));
    lines.extend(listed(events));
    if summary.cache_hits > 0 {
        lines.push(("cache hits", summary.cache_hits.to_string()));
    }
    if summary.collectives > 0 {
        lines.push(("collectives", collectives_line(summary, events)));
    }

    let mut html = format!("<div style=\"{FONT};{BLOCK}\">\n");
    for (label, text) in lines {
        html.push_str(&format!(
            "<div><span style=\"{LABEL}\">{}</span> {}</div>\n",
            escape(label),
            escape(&text)
        ));
        if label == "peak HBM" && summary.peak_hbm.len() > MAX_CORES_LISTED {
            html.push_str(&peaks_heatmap(&summary.peak_hbm, cores_per_chip));
        }
    }
    html.push_str("</div>");
    html
}

/// Each core's peak as a square shaded from pale (nothing) to deep blue (the highest peak),
/// one row per chip, with the core and its peak as the square's tooltip.
fn peaks_heatmap(peaks: &BTreeMap<CoreId, u64>, cores_per_chip: u32) -> String {
    let top = peaks.values().copied().max().unwrap_or(0).max(1) as f64;
    let per_chip = cores_per_chip.max(1);
    let mut chips: BTreeMap<u32, Vec<(CoreId, u64)>> = BTreeMap::new();
    for (&core, &peak) in peaks {
        chips
            .entry(core.0 / per_chip)
            .or_default()
            .push((core, peak));
    }
    let mut html = String::from("<div style=\"margin:2px 0 4px 7em\">\n");
    for (chip, cores) in chips {
        html.push_str(&format!(
            "<div style=\"display:flex;align-items:center;gap:2px;height:14px\">\
             <span style=\"{LABEL};min-width:4em;font-size:85%\">chip {chip}</span>"
        ));
        for (core, peak) in cores {
            let shade = peak as f64 / top;
            let channel = |pale: f64, deep: f64| (pale + (deep - pale) * shade).round() as u8;
            html.push_str(&format!(
                "<span title=\"{core} {}\" style=\"display:inline-block;width:12px;\
                 height:12px;background:rgb({},{},{})\"></span>",
                escape(&bytes(peak)),
                channel(232.0, 31.0),
                channel(238.0, 78.0),
                channel(247.0, 156.0),
            ));
        }
        html.push_str("</div>\n");
    }
    html.push_str("</div>\n");
    html
}

/// `12 on neuron:0 · host 1.20 ms · modeled 340 µs · memory-bound 9, compute-bound 3`.
fn ops_line(summary: &Summary) -> String {
    if summary.ops == 0 {
        return "none".to_string();
    }
    let cores = match (summary.cores.first(), summary.cores.len()) {
        (Some(core), 1) => core.to_string(),
        (_, n) => format!("{n} cores"),
    };
    // Most frequent bound first, as the text summary.
    let mut bounds: Vec<(&Bound, &u64)> = summary.bounds.iter().collect();
    bounds.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let bounds: Vec<String> = bounds.iter().map(|(b, n)| format!("{b} {n}")).collect();
    format!(
        "{} on {cores} · host {} · modeled {} · {}",
        summary.ops,
        duration(summary.host_s),
        duration(summary.modeled_s),
        bounds.join(", ")
    )
}

/// Each core's peak, or for many cores (an SPMD run) the spread: `32 cores · min 1.00 MiB
/// · median 1.00 MiB · max 1.50 MiB on neuron:0`.
fn peaks_line(summary: &Summary) -> String {
    let peaks = &summary.peak_hbm;
    if peaks.len() <= MAX_CORES_LISTED {
        let each: Vec<String> = peaks
            .iter()
            .map(|(core, &peak)| format!("{core} {}", bytes(peak)))
            .collect();
        return each.join(" · ");
    }
    let mut sorted: Vec<u64> = peaks.values().copied().collect();
    sorted.sort_unstable();
    // The first core with the highest peak.
    let (top_core, top) = summary.peak_core().expect("more than four cores");
    format!(
        "{} cores · min {} · median {} · max {} on {top_core}",
        peaks.len(),
        bytes(sorted[0]),
        bytes(sorted[sorted.len() / 2]),
        bytes(top)
    )
}

/// `mlp: new function · 12 → 4 nodes, 2 kernels · 800 µs`.
fn compile_text(c: &CompileEvent) -> String {
    let cache = match c.cache {
        CacheSource::Miss => String::new(),
        source => format!(" · from the {source} cache"),
    };
    format!(
        "{}: {} · {} → {} nodes, {} kernels · {}{cache}",
        c.function,
        c.reason,
        c.nodes_before,
        c.nodes_after,
        c.fused_kernels,
        duration_us(c.host_compile_us)
    )
}

/// The cell's compiles: one compile as itself; several as a count with the first recompile
/// (or the first compile), since `%recompiles` lists them all.
fn compiles_line(events: &[Event]) -> Option<(&'static str, String)> {
    let compiles: Vec<&CompileEvent> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Compile(c) => Some(c),
            _ => None,
        })
        .collect();
    let recompiles = compiles.iter().filter(|c| c.recompile).count();
    match compiles.as_slice() {
        [] => None,
        [one] => Some((
            if one.recompile {
                "recompile"
            } else {
                "compile"
            },
            compile_text(one),
        )),
        all => {
            let (which, first) = match all.iter().find(|c| c.recompile) {
                Some(first) => ("first recompile", first),
                None => ("first", &all[0]),
            };
            Some((
                "compiles",
                format!(
                    "{}, {recompiles} of them recompiles · {which}: {} (%recompiles lists them all)",
                    all.len(),
                    compile_text(first)
                ),
            ))
        }
    }
}

/// The line of an event listed one by one (graph breaks, recompile limits, traps).
fn event_line(event: &Event) -> Option<(&'static str, String)> {
    Some(match &event.kind {
        EventKind::GraphBreak {
            function,
            reason,
            op,
        } => ("graph break", format!("{function}: {reason} (at {op})")),
        EventKind::RecompileLimit {
            function,
            limit,
            action,
        } => (
            "limit",
            format!(
                "{function} reached its recompile limit {limit}: later calls {}",
                match action {
                    LimitAction::RunEager => "run eagerly",
                    LimitAction::Fail => "fail",
                }
            ),
        ),
        EventKind::GuestTrap { message } => ("trap", message.clone()),
        _ => return None,
    })
}

/// The lines of the events listed one by one, at most [`MAX_LISTED`] of each label, then a
/// count of the rest per label.
fn listed(events: &[Event]) -> Vec<(&'static str, String)> {
    let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
    let mut more: BTreeMap<&str, usize> = BTreeMap::new();
    let mut lines = Vec::new();
    for (label, text) in events.iter().filter_map(event_line) {
        let n = shown.entry(label).or_default();
        if *n < MAX_LISTED {
            *n += 1;
            lines.push((label, text));
        } else {
            *more.entry(label).or_default() += 1;
        }
    }
    for (label, n) in more {
        lines.push((label, format!("… and {n} more (%events lists them all)")));
    }
    lines
}

/// `3 · modeled 36.0 µs · all_reduce 2× 24.0 µs · all_gather 1× 12.0 µs`.
fn collectives_line(summary: &Summary, events: &[Event]) -> String {
    let mut per_op: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
    for event in events {
        if let EventKind::Collective(c) = &event.kind {
            let total = per_op.entry(&c.op).or_default();
            total.0 += 1;
            total.1 += c.modeled_us * 1e-6;
        }
    }
    let mut ranked: Vec<(&str, (u64, f64))> = per_op.into_iter().collect();
    ranked.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1).then(a.0.cmp(b.0)));
    let mut items = vec![
        summary.collectives.to_string(),
        format!("modeled {}", duration(summary.collective_modeled_s)),
    ];
    items.extend(
        ranked
            .into_iter()
            .map(|(op, (n, s))| format!("{op} {n}× {}", duration(s))),
    );
    items.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuronlab_core::device::{CoreId, ModeledTime};
    use neuronlab_core::events::{
        CollectiveEvent, CompileEvent, MemoryAction, MemoryEvent, OpEvent,
    };

    fn at(seq: u64, core: u32, kind: EventKind) -> Event {
        Event {
            seq,
            ts_us: 0.0,
            device_us: None,
            core: CoreId(core),
            kind,
        }
    }

    fn op(seq: u64, name: &str, modeled_us: f64, bound: Bound) -> Event {
        at(
            seq,
            0,
            EventKind::Op(OpEvent {
                name: name.to_string().into(),
                inputs: vec![],
                outputs: vec![],
                flops: 0.0,
                bytes: 0.0,
                host_us: 100.0,
                modeled: ModeledTime {
                    compute_s: 0.0,
                    memory_s: 0.0,
                    launch_s: 0.0,
                    total_s: modeled_us * 1e-6,
                    bound,
                },
                phase: Default::default(),
            }),
        )
    }

    fn compile(seq: u64, reason: &str, recompile: bool) -> Event {
        at(
            seq,
            0,
            EventKind::Compile(CompileEvent {
                function: "mlp".into(),
                reason: reason.into(),
                recompile,
                graph: "3f2a9c0d1e2b4f5a".into(),
                nodes_before: 12,
                nodes_after: 4,
                fused_kernels: 2,
                host_compile_us: 800.0,
                cache: CacheSource::Miss,
            }),
        )
    }

    #[test]
    fn lines_carry_ops_peaks_compile_reasons_and_collectives() {
        let mut events = vec![
            compile(0, "new function", false),
            compile(
                1,
                "input 0 'x' shape changed: expected [8, 128], got [8, 96]",
                true,
            ),
            op(2, "matmul", 60.0, Bound::Compute),
            op(3, "add", 10.0, Bound::Memory),
            at(
                4,
                1,
                EventKind::Memory(MemoryEvent {
                    action: MemoryAction::Alloc,
                    bytes: 4096,
                    in_use: 4096,
                    peak: 4096,
                }),
            ),
            at(
                5,
                0,
                EventKind::GuestTrap {
                    message: "unreachable <executed>".into(),
                },
            ),
        ];
        for (seq, op) in [(6, "all_reduce"), (7, "all_reduce"), (8, "all_gather")] {
            events.push(at(
                seq,
                0,
                EventKind::Collective(CollectiveEvent {
                    op: op.into(),
                    group: vec![0, 1],
                    mesh_dim: None,
                    bytes: 64,
                    host_us: 1.0,
                    modeled_us: 12.0,
                }),
            ));
        }
        let html = summary_html(&Summary::from_events(&events), &events, 4);
        let label = |l: &str| format!("<div><span style=\"{LABEL}\">{l}</span> ");
        assert!(
            html.starts_with("<div style=\"font-family:monospace"),
            "{html}"
        );
        assert!(
            html.contains(&format!(
                "{}2 on neuron:0 · host 200 µs · modeled 70.0 µs · compute-bound 1, memory-bound 1</div>",
                label("ops")
            )),
            "{html}"
        );
        assert!(
            html.contains("matmul 1× 60.0 µs (host 100 µs) · add 1× 10.0 µs (host 100 µs)"),
            "{html}"
        );
        assert!(html.contains(&format!("{}neuron:1 4.00 KiB</div>", label("peak HBM"))));
        assert!(
            html.contains(&format!(
                "{}2, 1 of them recompiles · first recompile: mlp: input 0 &#39;x&#39; shape \
                 changed: expected [8, 128], got [8, 96] · 12 → 4 nodes, 2 kernels · 800 µs \
                 (%recompiles lists them all)</div>",
                label("compiles")
            )),
            "{html}"
        );
        assert!(!html.contains("new function"), "{html}");
        assert!(html.contains("unreachable &lt;executed&gt;"), "{html}");
        assert!(
            html.contains(&format!(
                "{}3 · modeled 36.0 µs · all_reduce 2× 24.0 µs · all_gather 1× 12.0 µs</div>",
                label("collectives")
            )),
            "{html}"
        );
        assert_eq!(html.matches("<div").count(), html.matches("</div>").count());
    }

    #[test]
    fn one_compile_shows_whole_and_long_lists_are_cut_with_a_count() {
        let one = [compile(0, "new function", false)];
        let html = summary_html(&Summary::from_events(&one), &one, 4);
        assert!(
            html.contains("compile</span> mlp: new function · 12 → 4 nodes"),
            "{html}"
        );
        assert!(html.contains(">ops</span> none</div>"), "{html}");

        let traps: Vec<Event> = (0..11)
            .map(|i| {
                at(
                    i,
                    0,
                    EventKind::GuestTrap {
                        message: format!("trap {i}"),
                    },
                )
            })
            .collect();
        let html = summary_html(&Summary::from_events(&traps), &traps, 4);
        assert_eq!(html.matches(">trap</span> trap").count(), MAX_LISTED);
        assert!(
            html.contains("… and 3 more (%events lists them all)"),
            "{html}"
        );
    }

    #[test]
    fn many_cores_peaks_give_the_spread() {
        let events: Vec<Event> = (0..32u32)
            .map(|core| {
                let peak = if core == 5 { 3 << 20 } else { 1 << 20 };
                at(
                    u64::from(core),
                    core,
                    EventKind::Memory(MemoryEvent {
                        action: MemoryAction::Alloc,
                        bytes: peak,
                        in_use: peak,
                        peak,
                    }),
                )
            })
            .collect();
        let html = summary_html(&Summary::from_events(&events), &events, 4);
        assert!(
            html.contains(
                "peak HBM</span> 32 cores · min 1.00 MiB · median 1.00 MiB · max 3.00 MiB on \
                 neuron:5</div>"
            ),
            "{html}"
        );
        // The heatmap: 8 chips of 4 cores, the highest peak deepest, each core's in its tooltip.
        assert_eq!(html.matches(">chip ").count(), 8, "{html}");
        assert_eq!(html.matches("<span title=\"neuron:").count(), 32, "{html}");
        assert!(
            html.contains("title=\"neuron:5 3.00 MiB\" style=\"display:inline-block;width:12px;height:12px;background:rgb(31,78,156)\""),
            "{html}"
        );
        assert!(html.contains("title=\"neuron:6 1.00 MiB\""), "{html}");
        let four = &events[..4];
        let few = summary_html(&Summary::from_events(four), four, 4);
        assert!(
            !few.contains(">chip "),
            "four cores are listed, not drawn: {few}"
        );
    }
}

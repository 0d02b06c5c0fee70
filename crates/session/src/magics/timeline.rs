//! `%timeline` as text: each core's ops and collectives at their place on the core's modeled
//! device clock (as the Chrome trace's device track draws them), one row per core, with a
//! legend of the ops that take the most time. A core on which backward ran ops gets a second
//! row, `neuron:N backward`, that holds them at their place on the core's clock, so the
//! passes of a training step read apart; a core that ran collectives gets a row
//! `neuron:N collectives` for its communication stream, so what overlapped compute sits
//! under it and what was exposed under a gap in the core's row. The layout, the rows and the
//! ranking are shared with the SVG drawing ([`super::timeline_svg`]).

use std::collections::BTreeMap;

use neuronlab_core::device::CoreId;
use neuronlab_core::events::fmt::duration;
use neuronlab_core::events::{Event, EventKind, Phase};

/// Columns of a row.
pub const WIDTH: usize = 70;

/// The symbols of the ops with the most modeled time, in that order; other ops are `.`.
pub(super) const SYMBOLS: &[char] = &['A', 'B', 'C', 'D', 'E', 'F', 'G', 'H'];
pub(super) const OTHER: char = '.';

/// One op or collective on a core's modeled clock, in seconds.
pub(super) struct Slice {
    /// The op or collective.
    pub(super) name: String,
    /// When it starts, from the core's first work.
    pub(super) start: f64,
    /// When it ends.
    pub(super) end: f64,
    /// The pass that ran it (collectives count as forward).
    pub(super) phase: Phase,
}

/// One core's slices on its two streams, each in order and without overlap.
#[derive(Default)]
pub(super) struct Lane {
    /// Ops and fused kernels, of either phase.
    pub(super) compute: Vec<Slice>,
    /// Collectives.
    pub(super) collectives: Vec<Slice>,
}

/// Each core's slices, by core.
pub(super) type Lanes = BTreeMap<CoreId, Lane>;

/// What a row shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RowKind {
    /// The core's forward ops (and any of the other phase too short for a column of its own).
    Forward,
    /// The core's backward ops.
    Backward,
    /// The core's collectives.
    Collectives,
}

/// One row of a drawing: the slices of one phase or stream on one core.
pub(super) struct Row<'a> {
    /// `neuron:0`, `neuron:0 backward` or `neuron:0 collectives`.
    pub(super) label: String,
    /// What it shows.
    pub(super) kind: RowKind,
    /// The phase its slices have.
    pub(super) phase: Phase,
    /// Every slice of its stream, of either phase, in order.
    pub(super) slices: &'a [Slice],
}

impl Row<'_> {
    /// The slice a column from `start` to `end` (seconds) shows: the one at its middle when it
    /// is of this row's phase, else the row's slice with the most time in the column (none in
    /// a gap: a wait for a collective). So a step's backward shorter than a column still
    /// marks it, and a column holding both phases shows in both rows.
    pub(super) fn in_column(&self, start: f64, end: f64) -> Option<&Slice> {
        let middle = (start + end) / 2.0;
        let i = self.slices.partition_point(|s| s.end <= middle);
        match self.slices.get(i) {
            Some(s) if s.start <= middle && s.phase == self.phase => Some(s),
            None => None,
            Some(_) => {
                let time = |s: &Slice| s.end.min(end) - s.start.max(start);
                // Slices laid back to back carry rounding: a neighbour's last femtoseconds
                // in a column are not time in it.
                let least = (end - start) * 1e-6;
                let first = self.slices.partition_point(|s| s.end <= start);
                self.slices[first..]
                    .iter()
                    .take_while(|s| s.start < end)
                    .filter(|s| s.phase == self.phase && time(s) > least)
                    .max_by(|a, b| time(a).total_cmp(&time(b)))
            }
        }
    }

    /// Its slices, in order.
    pub(super) fn own(&self) -> impl Iterator<Item = &Slice> {
        self.slices.iter().filter(|s| s.phase == self.phase)
    }
}

/// The suffix of a backward row's label.
const BACKWARD: &str = " backward";
/// The suffix of a collectives row's label.
const COLLECTIVES: &str = " collectives";

/// The rows of `cores`, by core: each core's row, then its backward row if backward ran on
/// it, then its collectives row if it ran any.
pub(super) fn rows(cores: &Lanes) -> Vec<Row<'_>> {
    let mut rows = Vec::new();
    for (core, lane) in cores {
        let compute = &lane.compute;
        rows.push(Row {
            label: core.to_string(),
            kind: RowKind::Forward,
            phase: Phase::Forward,
            slices: compute,
        });
        if compute.iter().any(|s| s.phase == Phase::Backward) {
            rows.push(Row {
                label: format!("{core}{BACKWARD}"),
                kind: RowKind::Backward,
                phase: Phase::Backward,
                slices: compute,
            });
        }
        if !lane.collectives.is_empty() {
            rows.push(Row {
                label: format!("{core}{COLLECTIVES}"),
                kind: RowKind::Collectives,
                phase: Phase::Forward,
                slices: &lane.collectives,
            });
        }
    }
    rows
}

/// What the backward and collectives rows are, for the legend; empty when there are none.
pub(super) fn row_notes(rows: &[Row]) -> Vec<String> {
    let has = |kind| rows.iter().any(|r| r.kind == kind);
    let mut notes = Vec::new();
    if has(RowKind::Backward) {
        notes.push(format!(
            "neuron:N{BACKWARD}: the ops backward ran on that core (gradients), at their place \
             on its clock"
        ));
    }
    if has(RowKind::Collectives) {
        notes.push(format!(
            "neuron:N{COLLECTIVES}: its collectives, beside its compute; an op that reads one \
             waits for it, and the rest overlaps"
        ));
    }
    notes
}

/// One name's modeled time, in seconds, and how many slices it has.
pub(super) struct Ranked<'a> {
    /// The op or collective.
    pub(super) name: &'a str,
    /// Its total modeled time over every core.
    pub(super) time: f64,
    /// Its slices.
    pub(super) count: usize,
}

/// The timeline of `events`, or `None` when none of them did device work.
pub fn render(events: &[Event]) -> Option<String> {
    let cores = lay_out(events);
    let span = span(&cores);
    if span <= 0.0 {
        return None;
    }
    let ranked = rank(&cores);
    let symbol = |name: &str| {
        let rank = ranked.iter().position(|r| r.name == name);
        rank.and_then(|r| SYMBOLS.get(r)).copied().unwrap_or(OTHER)
    };

    let mut text = format!(
        "modeled device time {} (the busiest core; each column is {})\n",
        duration(span),
        duration(span / WIDTH as f64)
    );
    let rows = rows(&cores);
    let label_width = rows.iter().map(|r| r.label.len()).max().unwrap_or(0);
    for r in &rows {
        // A core's row ends where its work ends; the others give their slices' total.
        let time = match r.kind {
            RowKind::Forward => r.slices.last().map_or(0.0, |s| s.end),
            RowKind::Backward | RowKind::Collectives => r.own().map(|s| s.end - s.start).sum(),
        };
        text.push_str(&format!(
            "{:<label_width$} |{}| {}\n",
            r.label,
            row(r, span, &symbol),
            duration(time)
        ));
    }
    let all: f64 = ranked.iter().map(|r| r.time).sum();
    for (i, r) in ranked.iter().enumerate().take(SYMBOLS.len()) {
        text.push_str(&format!(
            "  {} {}: {} × {} total, {:.0}%\n",
            SYMBOLS[i],
            r.name,
            r.count,
            duration(r.time),
            100.0 * r.time / all
        ));
    }
    if let Some(rest) = ranked.get(SYMBOLS.len()..).filter(|r| !r.is_empty()) {
        let time: f64 = rest.iter().map(|r| r.time).sum();
        text.push_str(&format!(
            "  {OTHER} {} other ops: {} total, {:.0}%\n",
            rest.len(),
            duration(time),
            100.0 * time / all
        ));
    }
    for note in row_notes(&rows) {
        text.push_str(&format!(
            "  {note}; the time after the row is their total\n"
        ));
    }
    Some(text.trim_end().to_string())
}

/// The end of the busiest core's work, in seconds (0 when no core did any).
pub(super) fn span(cores: &Lanes) -> f64 {
    cores
        .values()
        .flat_map(|lane| [lane.compute.last(), lane.collectives.last()])
        .flatten()
        .map(|s| s.end)
        .fold(0.0, f64::max)
}

/// Modeled time and count per name, the largest first (ties by name, for stable output).
pub(super) fn rank(cores: &Lanes) -> Vec<Ranked<'_>> {
    let mut totals: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for slice in cores
        .values()
        .flat_map(|lane| lane.compute.iter().chain(&lane.collectives))
    {
        let total = totals.entry(&slice.name).or_default();
        total.0 += slice.end - slice.start;
        total.1 += 1;
    }
    let mut ranked: Vec<Ranked> = totals
        .into_iter()
        .map(|(name, (time, count))| Ranked { name, time, count })
        .collect();
    ranked.sort_by(|a, b| b.time.total_cmp(&a.time).then(a.name.cmp(b.name)));
    ranked
}

/// Each core's ops (those that cost device time) and collectives at their place on its
/// modeled clock, from the core's first work shown. An event without a place (recorded
/// before the clock gave one) goes where the clock would put it without waits: an op after
/// the previous op, a collective once that op and the previous collective are done.
pub(super) fn lay_out(events: &[Event]) -> Lanes {
    let mut cores: Lanes = BTreeMap::new();
    let mut origins: BTreeMap<CoreId, f64> = BTreeMap::new();
    for event in events {
        if let Some(us) = event.device_us {
            let origin = origins.entry(event.core).or_insert(us);
            *origin = origin.min(us);
        }
    }
    for event in events {
        let (name, seconds, phase, collective) = match &event.kind {
            EventKind::Op(op) if op.modeled.total_s > 0.0 => {
                (&*op.name, op.modeled.total_s, op.phase, false)
            }
            EventKind::Collective(c) if c.modeled_us > 0.0 => {
                (c.op.as_str(), c.modeled_us * 1e-6, Phase::Forward, true)
            }
            _ => continue,
        };
        let lane = cores.entry(event.core).or_default();
        let end = |slices: &[Slice]| slices.last().map_or(0.0, |s| s.end);
        let start = match event.device_us {
            Some(us) => (us - origins[&event.core]) * 1e-6,
            None if collective => end(&lane.compute).max(end(&lane.collectives)),
            None => end(&lane.compute),
        };
        let slices = if collective {
            &mut lane.collectives
        } else {
            &mut lane.compute
        };
        slices.push(Slice {
            name: name.to_string(),
            start,
            end: start + seconds,
            phase,
        });
    }
    cores
}

/// One row's columns, each showing [`Row::in_column`]; a row whose ops are all too short for
/// a column still shows its first, where it starts.
fn row(r: &Row, span: f64, symbol: &dyn Fn(&str) -> char) -> String {
    let width = span / WIDTH as f64;
    let mut row: Vec<char> = (0..WIDTH)
        .map(|col| {
            let start = col as f64 * width;
            r.in_column(start, start + width)
                .map_or(' ', |s| symbol(&s.name))
        })
        .collect();
    if row.iter().all(|&c| c == ' ') {
        if let Some(first) = r.own().next() {
            let col = ((first.start / span * WIDTH as f64) as usize).min(WIDTH - 1);
            row[col] = symbol(&first.name);
        }
    }
    row.into_iter().collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use neuronlab_core::device::{Bound, ModeledTime};
    use neuronlab_core::events::{CollectiveEvent, OpEvent};

    /// An op of `us` modeled microseconds on `core`.
    pub(in crate::magics) fn op(core: u32, name: &str, us: f64) -> Event {
        Event {
            seq: 0,
            ts_us: 0.0,
            device_us: None,
            core: CoreId(core),
            kind: EventKind::Op(OpEvent {
                name: name.to_string().into(),
                inputs: vec![],
                outputs: vec![],
                flops: 0.0,
                bytes: 0.0,
                host_us: 1.0,
                modeled: ModeledTime {
                    compute_s: 0.0,
                    memory_s: 0.0,
                    launch_s: 0.0,
                    total_s: us * 1e-6,
                    bound: Bound::Compute,
                },
                phase: Phase::Forward,
            }),
        }
    }

    /// An all-reduce of `us` modeled microseconds on `core`.
    pub(in crate::magics) fn collective(core: u32, us: f64) -> Event {
        Event {
            kind: EventKind::Collective(CollectiveEvent {
                op: "all_reduce".into(),
                group: vec![0, 1],
                mesh_dim: None,
                bytes: 64,
                host_us: 1.0,
                modeled_us: us,
            }),
            ..op(core, "all_reduce", 0.0)
        }
    }

    /// An op that backward ran, of `us` modeled microseconds on `core`.
    pub(in crate::magics) fn backward(core: u32, name: &str, us: f64) -> Event {
        let mut event = op(core, name, us);
        if let EventKind::Op(o) = &mut event.kind {
            o.phase = Phase::Backward;
        }
        event
    }

    #[test]
    fn rows_are_scaled_to_the_busiest_core() {
        let events = vec![
            op(0, "matmul", 60.0),
            op(0, "add", 10.0),
            op(0, "reshape", 0.0),
            collective(1, 35.0),
        ];
        let text = render(&events).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("modeled device time 70.0 µs"),
            "{text}"
        );
        assert_eq!(
            lines[1],
            format!(
                "neuron:0             |{}{}| 70.0 µs",
                "A".repeat(60),
                "C".repeat(10)
            )
        );
        // Core 1 only communicated: an empty compute row, and its collectives row.
        assert_eq!(
            lines[2],
            format!("neuron:1             |{}| 0 s", " ".repeat(70))
        );
        assert_eq!(
            lines[3],
            format!(
                "neuron:1 collectives |{}{}| 35.0 µs",
                "B".repeat(35),
                " ".repeat(35)
            )
        );
        assert_eq!(lines[4], "  A matmul: 1 × 60.0 µs total, 57%");
        assert_eq!(lines[5], "  B all_reduce: 1 × 35.0 µs total, 33%");
        assert!(render(&[op(0, "reshape", 0.0)]).is_none());
    }

    #[test]
    fn a_collective_sits_at_its_place_on_the_clock_under_the_compute_it_overlapped() {
        // The device clock's places (from 100 µs): matmul 100..140, the all-reduce issued at
        // 110 runs 110..130 beside it, and the add that reads it runs 140..150.
        let at = |mut e: Event, us: f64| {
            e.device_us = Some(us);
            e
        };
        let events = vec![
            at(op(0, "matmul", 40.0), 100.0),
            at(collective(0, 20.0), 110.0),
            at(op(0, "add", 10.0), 140.0),
        ];
        let text = render(&events).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("modeled device time 50.0 µs"),
            "{text}"
        );
        assert_eq!(
            lines[1],
            format!(
                "neuron:0             |{}{}| 50.0 µs",
                "A".repeat(56),
                "C".repeat(14)
            )
        );
        let comm = format!("{}{}{}", " ".repeat(14), "B".repeat(28), " ".repeat(28));
        assert_eq!(lines[2], format!("neuron:0 collectives |{comm}| 20.0 µs"));
        assert!(text.contains("neuron:N collectives: its collectives, beside its compute"));
    }

    #[test]
    fn ops_beyond_the_legend_are_dots_and_short_cores_still_show() {
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
        let mut events: Vec<Event> = names.iter().map(|n| op(0, n, 100.0)).collect();
        events.push(op(1, "k", 0.001));
        let text = render(&events).unwrap();
        assert!(
            text.contains("  . 3 other ops: 200 µs total, 20%"),
            "{text}"
        );
        let row1 = text.lines().nth(2).unwrap();
        assert!(row1.starts_with("neuron:1 |.  "), "{text}");
    }

    #[test]
    fn backward_ops_get_a_row_of_their_own_under_their_core() {
        let events = vec![
            op(0, "matmul", 30.0),
            op(0, "add", 10.0),
            backward(0, "matmul", 20.0),
            backward(0, "mul", 10.0),
            op(1, "add", 5.0),
        ];
        let text = render(&events).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            format!(
                "neuron:0          |{}{}{}| 70.0 µs",
                "A".repeat(30),
                "B".repeat(10),
                " ".repeat(30)
            ),
            "{text}"
        );
        assert_eq!(
            lines[2],
            format!(
                "neuron:0 backward |{}{}{}| 30.0 µs",
                " ".repeat(40),
                "A".repeat(20),
                "C".repeat(10)
            ),
            "{text}"
        );
        // A core on which backward ran nothing has one row.
        assert!(lines[3].starts_with("neuron:1          |BBBBB "), "{text}");
        assert!(!text.contains("neuron:1 backward"), "{text}");
        assert_eq!(lines[4], "  A matmul: 2 × 50.0 µs total, 67%");
        assert_eq!(
            lines.last().unwrap(),
            &"  neuron:N backward: the ops backward ran on that core (gradients), at their \
              place on its clock; the time after the row is their total"
        );
        // Without backward ops there is no such line.
        assert!(!render(&events[..2]).unwrap().contains("backward"));
    }

    #[test]
    fn a_backward_shorter_than_a_column_still_marks_its_columns() {
        // Ten steps of 7 columns: 66 µs forward, then 4 µs of backward inside the 7th column.
        let events: Vec<Event> = (0..10)
            .flat_map(|_| [op(0, "a", 66.0), backward(0, "b", 4.0)])
            .collect();
        let text = render(&events).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            format!("neuron:0          |{}| 700 µs", "A".repeat(70))
        );
        assert_eq!(
            lines[2],
            format!("neuron:0 backward |{}| 40.0 µs", "      B".repeat(10)),
            "{text}"
        );
    }
}

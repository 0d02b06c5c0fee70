//! The compact summary shown under a notebook cell.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::event::{Event, EventKind};
use super::fmt::{bytes, duration};
use crate::device::{Bound, CoreId, DeviceMemory, RoleBytes};

/// How many ops [`Summary::top_ops`] keeps.
pub const TOP_OPS: usize = 5;

/// Totals for one op name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpTotal {
    /// The op name.
    pub name: String,
    /// How many times it ran.
    pub count: u64,
    /// Total measured host time, seconds.
    pub host_s: f64,
    /// Total modeled device time, seconds.
    pub modeled_s: f64,
}

/// What a slice of the event stream (typically one cell's) amounts to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Eager ops run.
    pub ops: u64,
    /// Cores that ran them.
    pub cores: BTreeSet<CoreId>,
    /// Total measured host time of the ops, seconds.
    pub host_s: f64,
    /// Total modeled device time of the ops, seconds (summed over cores).
    pub modeled_s: f64,
    /// Ops per roofline bound.
    pub bounds: BTreeMap<Bound, u64>,
    /// Op names with the most modeled time, largest first, at most [`TOP_OPS`].
    pub top_ops: Vec<OpTotal>,
    /// Highest bytes in use per core seen in these events.
    pub peak_hbm: BTreeMap<CoreId, u64>,
    /// What the core with the highest peak held at it, by role, when these events made that
    /// core's recorded peak (see [`Summary::with_peak_roles`]).
    pub peak_roles: Option<RoleBytes>,
    /// Compiles, first-time and re-.
    pub compiles: u64,
    /// Compiles that were recompiles (a guard failed).
    pub recompiles: u64,
    /// Calls served from a compile cache.
    pub cache_hits: u64,
    /// Graph breaks.
    pub graph_breaks: u64,
    /// Functions that reached their recompile limit.
    pub recompile_limits: u64,
    /// Collectives run.
    pub collectives: u64,
    /// Their total modeled time, seconds.
    pub collective_modeled_s: f64,
    /// Guest traps.
    pub traps: u64,
}

impl Summary {
    /// The core with the highest peak in these events, and the peak; on ties, the first.
    pub fn peak_core(&self) -> Option<(CoreId, u64)> {
        self.peak_hbm
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(&core, &peak)| (core, peak))
    }

    /// Adds [`Summary::peak_roles`] from `memory`, whose per-role split is of each core's
    /// recorded peak: it is this summary's only when these events reached that peak (a
    /// later cell under a session's older, higher peak shows none).
    pub fn with_peak_roles(mut self, memory: &DeviceMemory) -> Summary {
        self.peak_roles = self.peak_core().and_then(|(core, peak)| {
            let stats = memory.stats(core).ok()?;
            (stats.peak == peak).then_some(stats.at_peak)
        });
        self
    }

    /// Sums up `events`.
    pub fn from_events(events: &[Event]) -> Summary {
        let mut builder = SummaryBuilder::default();
        events.iter().for_each(|e| builder.add(e));
        builder.summary()
    }

    fn cores_text(&self) -> String {
        match (self.cores.first(), self.cores.len()) {
            (Some(core), 1) => core.to_string(),
            (_, n) => format!("{n} cores"),
        }
    }

    /// The items of the third line: compiles, caches, breaks, collectives, traps.
    fn compile_items(&self) -> Vec<String> {
        let mut items = Vec::new();
        if self.compiles > 0 {
            let mut text = format!("compiles {}", self.compiles);
            if self.recompiles > 0 {
                text += &format!(" (recompiles {})", self.recompiles);
            }
            items.push(text);
        }
        let counts = [
            ("cache hits", self.cache_hits),
            ("graph breaks", self.graph_breaks),
            ("recompile limit reached", self.recompile_limits),
        ];
        for (label, n) in counts.into_iter().filter(|(_, n)| *n > 0) {
            items.push(format!("{label} {n}"));
        }
        if self.collectives > 0 {
            items.push(format!(
                "collectives {} (modeled {})",
                self.collectives,
                duration(self.collective_modeled_s)
            ));
        }
        if self.traps > 0 {
            items.push(format!("traps {}", self.traps));
        }
        items
    }

    /// `parameters 1.00 MiB · activations 3.00 MiB · ...`: the roles that held bytes at the
    /// peak.
    pub fn peak_roles_text(&self) -> Option<String> {
        let roles = self.peak_roles?;
        let parts: Vec<String> = roles
            .iter()
            .filter(|&(_, b)| b > 0)
            .map(|(role, b)| format!("{role} {}", bytes(b)))
            .collect();
        (!parts.is_empty()).then(|| parts.join(" · "))
    }
}

/// Up to three lines: ops and times; the top ops; compiles, caches and collectives.
/// For example:
///
/// ```text
/// 12 ops on neuron:0 · host 1.20 ms · modeled 340 µs (memory-bound 9, compute-bound 3) · peak HBM 48.0 MiB
/// top: matmul 3× 200 µs · add 5× 80.0 µs · exp 4× 60.0 µs
/// compiles 2 (recompiles 1) · cache hits 3
/// ```
/// A [`Summary`] built one event at a time: what the event bus keeps for each open
/// [`SummaryWindow`](super::SummaryWindow), so that a summary counts every event of its
/// window however many the bus's recorder keeps. It travels between processes (serde) and
/// merges, so a launch over MPI sums up every process's ranks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SummaryBuilder {
    /// Everything but the top ops (empty here) and the peak's roles (a session's, not these
    /// events').
    totals: Summary,
    /// Totals per op name, for the top ops.
    per_op: BTreeMap<String, OpTotal>,
}

impl SummaryBuilder {
    /// Counts one event.
    pub fn add(&mut self, event: &Event) {
        let t = &mut self.totals;
        match &event.kind {
            EventKind::Op(op) => {
                let (host_s, modeled_s) = (op.host_us * 1e-6, op.modeled.total_s);
                t.ops += 1;
                t.cores.insert(event.core);
                t.host_s += host_s;
                t.modeled_s += modeled_s;
                *t.bounds.entry(op.modeled.bound).or_default() += 1;
                // Looked up by &str: a name allocates once, at its first op.
                let total = match self.per_op.get_mut(op.name.as_ref()) {
                    Some(total) => total,
                    None => self
                        .per_op
                        .entry(op.name.to_string())
                        .or_insert_with(|| OpTotal {
                            name: op.name.to_string(),
                            count: 0,
                            host_s: 0.0,
                            modeled_s: 0.0,
                        }),
                };
                total.count += 1;
                total.host_s += host_s;
                total.modeled_s += modeled_s;
            }
            EventKind::Memory(m) => {
                // Peak within these events (a cell), not since the session started.
                let peak = t.peak_hbm.entry(event.core).or_default();
                *peak = (*peak).max(m.in_use);
            }
            EventKind::Compile(c) => {
                t.compiles += 1;
                t.recompiles += u64::from(c.recompile);
            }
            EventKind::CacheHit { .. } => t.cache_hits += 1,
            EventKind::GraphBreak { .. } => t.graph_breaks += 1,
            EventKind::RecompileLimit { .. } => t.recompile_limits += 1,
            EventKind::Collective(c) => {
                t.collectives += 1;
                t.collective_modeled_s += c.modeled_us * 1e-6;
            }
            EventKind::GuestTrap { .. } => t.traps += 1,
            EventKind::Log { .. } => {}
        }
    }

    /// Adds what `other` counted (another process's ranks, say): sums, and per core the
    /// higher peak.
    pub fn merge(&mut self, other: &SummaryBuilder) {
        let (t, o) = (&mut self.totals, &other.totals);
        t.ops += o.ops;
        t.cores.extend(&o.cores);
        t.host_s += o.host_s;
        t.modeled_s += o.modeled_s;
        for (bound, n) in &o.bounds {
            *t.bounds.entry(*bound).or_default() += n;
        }
        for (core, peak) in &o.peak_hbm {
            let mine = t.peak_hbm.entry(*core).or_default();
            *mine = (*mine).max(*peak);
        }
        t.compiles += o.compiles;
        t.recompiles += o.recompiles;
        t.cache_hits += o.cache_hits;
        t.graph_breaks += o.graph_breaks;
        t.recompile_limits += o.recompile_limits;
        t.collectives += o.collectives;
        t.collective_modeled_s += o.collective_modeled_s;
        t.traps += o.traps;
        for (name, theirs) in &other.per_op {
            let total = self.per_op.entry(name.clone()).or_insert_with(|| OpTotal {
                name: name.clone(),
                count: 0,
                host_s: 0.0,
                modeled_s: 0.0,
            });
            total.count += theirs.count;
            total.host_s += theirs.host_s;
            total.modeled_s += theirs.modeled_s;
        }
    }

    /// The summary of what was counted.
    pub fn summary(&self) -> Summary {
        let mut top: Vec<OpTotal> = self.per_op.values().cloned().collect();
        // Ties broken by name so the summary is stable across runs.
        top.sort_by(|a, b| {
            b.modeled_s
                .total_cmp(&a.modeled_s)
                .then_with(|| a.name.cmp(&b.name))
        });
        top.truncate(TOP_OPS);
        Summary {
            top_ops: top,
            ..self.totals.clone()
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = Vec::new();
        if self.ops > 0 {
            line.push(format!("{} ops on {}", self.ops, self.cores_text()));
            line.push(format!("host {}", duration(self.host_s)));
            // Most frequent bound first.
            let mut bounds: Vec<(&Bound, &u64)> = self.bounds.iter().collect();
            bounds.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
            let bounds: Vec<String> = bounds.iter().map(|(b, n)| format!("{b} {n}")).collect();
            line.push(format!(
                "modeled {} ({})",
                duration(self.modeled_s),
                bounds.join(", ")
            ));
        } else {
            line.push("no ops".to_string());
        }
        if let Some((core, peak)) = self.peak_core() {
            let mut text = format!("peak HBM {}", bytes(peak));
            if self.peak_hbm.len() > 1 {
                text += &format!(" on {core}");
            }
            line.push(text);
        }
        write!(f, "{}", line.join(" · "))?;
        if let Some(roles) = self.peak_roles_text() {
            write!(f, "\nat the peak: {roles}")?;
        }

        if !self.top_ops.is_empty() {
            let top: Vec<String> = self
                .top_ops
                .iter()
                .take(3)
                .map(|op| format!("{} {}× {}", op.name, op.count, duration(op.modeled_s)))
                .collect();
            write!(f, "\ntop: {}", top.join(" · "))?;
        }
        let items = self.compile_items();
        if !items.is_empty() {
            write!(f, "\n{}", items.join(" · "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::device::ModeledTime;
    use crate::events::Phase;
    use crate::events::{
        CacheSource, CollectiveEvent, CompileEvent, MemoryAction, MemoryEvent, OpEvent, TensorSig,
    };
    use crate::tensor::DType;

    pub(crate) fn op(
        seq: u64,
        core: u32,
        name: &str,
        host_us: f64,
        modeled_us: f64,
        bound: Bound,
    ) -> Event {
        let sig = TensorSig {
            shape: vec![8, 128],
            dtype: DType::F32,
        };
        Event {
            seq,
            ts_us: seq as f64 * 100.0,
            device_us: None,
            core: CoreId(core),
            kind: EventKind::Op(OpEvent {
                name: name.to_string().into(),
                inputs: vec![sig.clone(), sig.clone()],
                outputs: vec![sig],
                flops: 1024.0,
                bytes: 12288.0,
                host_us,
                modeled: ModeledTime {
                    compute_s: 0.0,
                    memory_s: 0.0,
                    launch_s: 0.0,
                    total_s: modeled_us * 1e-6,
                    bound,
                },
                phase: Phase::Forward,
            }),
        }
    }

    pub(crate) fn memory(seq: u64, core: u32, in_use: u64) -> Event {
        Event {
            seq,
            ts_us: seq as f64 * 100.0,
            device_us: None,
            core: CoreId(core),
            kind: EventKind::Memory(MemoryEvent {
                action: MemoryAction::Alloc,
                bytes: in_use,
                in_use,
                peak: in_use,
            }),
        }
    }

    pub(crate) fn compile(seq: u64, recompile: bool) -> Event {
        Event {
            seq,
            ts_us: seq as f64 * 100.0,
            device_us: None,
            core: CoreId(0),
            kind: EventKind::Compile(CompileEvent {
                function: "mlp".into(),
                reason: if recompile {
                    "recompile 2/8 of 'mlp': input 0 'x' shape changed: expected [8, 128], got [8, 96]".into()
                } else {
                    "new function".into()
                },
                recompile,
                graph: "3f2a9c0d1e2b4f5a".into(),
                nodes_before: 12,
                nodes_after: 4,
                fused_kernels: 2,
                host_compile_us: 800.0,
                cache: CacheSource::Miss,
            }),
        }
    }

    #[test]
    fn builders_merged_across_processes_sum_as_one_and_travel_as_json() {
        // Two processes: ops on their own cores, a peak each, one name in both.
        let mine = [
            op(0, 0, "add", 10.0, 3.0, Bound::Memory),
            memory(1, 0, 4 << 20),
            compile(2, false),
        ];
        let theirs = [
            op(0, 8, "add", 10.0, 3.0, Bound::Memory),
            op(1, 8, "matmul", 50.0, 9.0, Bound::Compute),
            memory(2, 8, 6 << 20),
        ];
        let mut builder = SummaryBuilder::default();
        mine.iter().for_each(|e| builder.add(e));
        let mut remote = SummaryBuilder::default();
        theirs.iter().for_each(|e| remote.add(e));
        let wire = serde_json::to_string(&remote).unwrap();
        builder.merge(&serde_json::from_str(&wire).unwrap());
        let all: Vec<Event> = mine.iter().chain(&theirs).cloned().collect();
        assert_eq!(builder.summary(), Summary::from_events(&all));
        let s = builder.summary();
        assert_eq!((s.ops, s.compiles, s.cores.len()), (3, 1, 2));
        assert_eq!(s.top_ops[0].name, "matmul");
        assert_eq!((s.top_ops[1].name.as_str(), s.top_ops[1].count), ("add", 2));
        assert_eq!(s.peak_hbm[&CoreId(8)], 6 << 20);
    }

    #[test]
    fn a_cell_on_one_core_reads_in_one_line() {
        let mut events = Vec::new();
        for i in 0..9 {
            events.push(op(i, 0, "add", 100.0, 30.0, Bound::Memory));
        }
        for i in 9..12 {
            events.push(op(i, 0, "matmul", 100.0, 23.333_333_333, Bound::Compute));
        }
        events.push(memory(12, 0, 48 << 20));
        events.push(memory(13, 0, 16 << 20));
        let s = Summary::from_events(&events);
        assert_eq!(s.ops, 12);
        assert!((s.host_s - 1.2e-3).abs() < 1e-12);
        assert!((s.modeled_s - 340e-6).abs() < 1e-12);
        assert_eq!(s.peak_hbm[&CoreId(0)], 48 << 20);
        assert_eq!(s.top_ops[0].name, "add");
        assert_eq!(
            (s.top_ops[1].name.as_str(), s.top_ops[1].count),
            ("matmul", 3)
        );
        assert_eq!(
            s.to_string(),
            "12 ops on neuron:0 · host 1.20 ms · modeled 340 µs (memory-bound 9, compute-bound 3) \
             · peak HBM 48.0 MiB\n\
             top: add 9× 270 µs · matmul 3× 70.0 µs"
        );
    }

    #[test]
    fn compiles_caches_and_collectives_get_a_line() {
        let mut events = vec![
            compile(0, false),
            compile(1, true),
            op(2, 0, "exp", 5.0, 10.0, Bound::Launch),
            op(3, 1, "exp", 5.0, 10.0, Bound::Launch),
            memory(4, 0, 1024),
            memory(5, 1, 4096),
        ];
        let at = |seq, kind| Event {
            seq,
            ts_us: 0.0,
            device_us: None,
            core: CoreId(0),
            kind,
        };
        events.push(at(
            6,
            EventKind::CacheHit {
                function: "mlp".into(),
                source: CacheSource::Memory,
            },
        ));
        events.push(at(
            7,
            EventKind::GraphBreak {
                function: "f".into(),
                reason: "item()".into(),
                op: "item".into(),
            },
        ));
        events.push(at(
            8,
            EventKind::Collective(CollectiveEvent {
                op: "all_reduce".into(),
                group: vec![0, 1],
                mesh_dim: None,
                bytes: 4096,
                host_us: 30.0,
                modeled_us: 12.0,
            }),
        ));
        let s = Summary::from_events(&events);
        assert_eq!(
            (
                s.compiles,
                s.recompiles,
                s.cache_hits,
                s.graph_breaks,
                s.collectives
            ),
            (2, 1, 1, 1, 1)
        );
        assert_eq!(
            s.to_string(),
            "2 ops on 2 cores · host 10.0 µs · modeled 20.0 µs (launch-bound 2) · peak HBM 4.00 KiB on neuron:1\n\
             top: exp 2× 20.0 µs\n\
             compiles 2 (recompiles 1) · cache hits 1 · graph breaks 1 · collectives 1 (modeled 12.0 µs)"
        );
    }

    #[test]
    fn nothing_happened() {
        assert_eq!(Summary::from_events(&[]).to_string(), "no ops");
    }
}

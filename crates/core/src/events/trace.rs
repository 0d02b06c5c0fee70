//! Chrome trace export (the JSON object format), which Perfetto and chrome://tracing open.
//!
//! Two processes, one thread (track) per core in each:
//! - pid 1, "host (measured)": ops, compiles and collectives at their measured host times,
//!   memory counters, and instants for cache hits, graph breaks, traps and logs;
//! - pid 2, "Trainium (modeled)": each core's ops at their place on its modeled device clock,
//!   and its collectives on a track of their own beside them (`neuron:N collectives`), as
//!   the clock overlaps them with compute: what the device timeline would look like.
//!
//! Ops that backward ran have the category `op,backward` (the others `op`) and every op has
//! `args.phase`, so a viewer can filter or search for the backward pass.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde_json::{json, Value};

use super::event::{Event, EventKind, Phase, TensorSig};
use crate::device::CoreId;

const HOST_PID: u32 = 1;
const DEVICE_PID: u32 = 2;

/// The Chrome trace of `events`: `{"traceEvents": [...], "displayTimeUnit": "ms"}`.
// One arm per event kind, each writing its slices: the trace format read in one place.
pub fn chrome_trace(events: &[Event]) -> Value {
    let cores: BTreeSet<CoreId> = events.iter().map(|e| e.core).collect();
    let communicating: BTreeSet<CoreId> = (events.iter())
        .filter(|e| matches!(e.kind, EventKind::Collective(_)))
        .map(|e| e.core)
        .collect();
    let mut out = metadata(&cores, &communicating);
    // Where the compute stream is done on each core, in µs: where an event the clock gave
    // no place goes.
    let mut device_clock: HashMap<CoreId, f64> = HashMap::new();
    let mut device_slice = |event: &Event, name: &str, cat: &str, dur: f64, args: Value| {
        let core = event.core;
        let clock = device_clock.entry(core).or_insert(0.0);
        let ts = event.device_us.unwrap_or(*clock);
        let tid = match event.kind {
            EventKind::Collective(_) => collectives_tid(core),
            _ => {
                *clock = ts + dur;
                core.0
            }
        };
        slice_on(DEVICE_PID, tid, name, cat, ts, dur, args)
    };

    for event in events {
        let (core, ts) = (event.core, event.ts_us);
        match &event.kind {
            EventKind::Op(op) => {
                let sigs = |s: &[TensorSig]| s.iter().map(|t| t.to_string()).collect::<Vec<_>>();
                let m = &op.modeled;
                let args = json!({
                    "inputs": sigs(&op.inputs),
                    "outputs": sigs(&op.outputs),
                    "flops": op.flops,
                    "bytes": op.bytes,
                    "host_us": op.host_us,
                    "modeled_us": m.total_s * 1e6,
                    "compute_us": m.compute_s * 1e6,
                    "memory_us": m.memory_s * 1e6,
                    "launch_us": m.launch_s * 1e6,
                    "bound": m.bound.to_string(),
                    "phase": op.phase.name(),
                });
                // Chrome trace categories are a comma-separated list: "op" still selects
                // every op, "backward" the backward pass.
                let cat = match op.phase {
                    Phase::Forward => "op",
                    Phase::Backward => "op,backward",
                };
                out.push(slice(
                    HOST_PID,
                    core,
                    &op.name,
                    cat,
                    ts,
                    op.host_us,
                    args.clone(),
                ));
                // Views do no device work: nothing to draw on the device.
                if m.total_s > 0.0 {
                    out.push(device_slice(event, &op.name, cat, m.total_s * 1e6, args));
                }
            }
            EventKind::Compile(c) => {
                let args = json!({
                    "reason": c.reason,
                    "recompile": c.recompile,
                    "graph": c.graph,
                    "nodes_before": c.nodes_before,
                    "nodes_after": c.nodes_after,
                    "fused_kernels": c.fused_kernels,
                    "cache": c.cache,
                });
                let name = format!("compile {}", c.function);
                out.push(slice(
                    HOST_PID,
                    core,
                    &name,
                    "compile",
                    ts,
                    c.host_compile_us,
                    args,
                ));
            }
            EventKind::Collective(c) => {
                let args = json!({
                    "group": c.group,
                    "mesh_dim": c.mesh_dim,
                    "bytes": c.bytes,
                    "host_us": c.host_us,
                    "modeled_us": c.modeled_us,
                });
                out.push(slice(
                    HOST_PID,
                    core,
                    &c.op,
                    "collective",
                    ts,
                    c.host_us,
                    args.clone(),
                ));
                out.push(device_slice(event, &c.op, "collective", c.modeled_us, args));
            }
            EventKind::Memory(m) => out.push(json!({
                "name": format!("HBM {core}"),
                "ph": "C",
                "ts": ts,
                "pid": HOST_PID,
                "tid": core.0,
                "args": {"in_use_bytes": m.in_use},
            })),
            EventKind::CacheHit { function, source } => out.push(instant(
                core,
                &format!("cache hit {function}"),
                ts,
                json!({"source": source}),
            )),
            EventKind::GraphBreak {
                function,
                reason,
                op,
            } => out.push(instant(
                core,
                &format!("graph break in {function}"),
                ts,
                json!({"reason": reason, "op": op}),
            )),
            EventKind::RecompileLimit {
                function,
                limit,
                action,
            } => out.push(instant(
                core,
                &format!("recompile limit {function}"),
                ts,
                json!({"limit": limit, "action": action}),
            )),
            EventKind::GuestTrap { message } => {
                out.push(instant(core, "guest trap", ts, json!({"message": message})));
            }
            EventKind::Log {
                level,
                target,
                message,
            } => out.push(instant(
                core,
                &format!("{level} {target}"),
                ts,
                json!({"message": message}),
            )),
        }
    }
    json!({"traceEvents": out, "displayTimeUnit": "ms"})
}

/// Writes [`chrome_trace`] of `events` to `path`.
pub fn save_chrome_trace(path: &Path, events: &[Event]) -> io::Result<()> {
    let mut file = BufWriter::new(File::create(path)?);
    serde_json::to_writer(&mut file, &chrome_trace(events))?;
    file.flush()
}

/// The device track of `core`'s collectives: after every core's own track.
fn collectives_tid(core: CoreId) -> u32 {
    COLLECTIVES_TID + core.0
}

/// Where the collectives' tracks start.
const COLLECTIVES_TID: u32 = 1 << 20;

/// Process and thread names, and their order in the viewer: each core's collectives track
/// (for the cores in `communicating`) right under its device track.
fn metadata(cores: &BTreeSet<CoreId>, communicating: &BTreeSet<CoreId>) -> Vec<Value> {
    let mut out = Vec::new();
    for (pid, name) in [
        (HOST_PID, "host (measured)"),
        (DEVICE_PID, "Trainium (modeled)"),
    ] {
        out.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}));
        out.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}));
        for core in cores {
            let mut tracks = vec![(core.0, core.to_string(), 2 * u64::from(core.0))];
            if pid == DEVICE_PID && communicating.contains(core) {
                let sort = 2 * u64::from(core.0) + 1;
                tracks.push((collectives_tid(*core), format!("{core} collectives"), sort));
            }
            for (tid, name, sort) in tracks {
                out.push(json!({
                    "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                    "args": {"name": name},
                }));
                out.push(json!({
                    "ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                    "args": {"sort_index": sort},
                }));
            }
        }
    }
    out
}

fn slice(pid: u32, core: CoreId, name: &str, cat: &str, ts: f64, dur: f64, args: Value) -> Value {
    slice_on(pid, core.0, name, cat, ts, dur, args)
}

fn slice_on(pid: u32, tid: u32, name: &str, cat: &str, ts: f64, dur: f64, args: Value) -> Value {
    json!({
        "name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur,
        "pid": pid, "tid": tid, "args": args,
    })
}

fn instant(core: CoreId, name: &str, ts: f64, args: Value) -> Value {
    json!({
        "name": name, "ph": "i", "s": "t", "ts": ts,
        "pid": HOST_PID, "tid": core.0, "args": args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Bound;
    use crate::events::summary::tests::{compile, memory, op};

    fn with_ph<'a>(trace: &'a Value, ph: &str) -> Vec<&'a Value> {
        trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == ph)
            .collect()
    }

    #[test]
    fn a_saved_trace_has_tracks_slices_and_counters() {
        let events = vec![
            compile(0, false),
            op(1, 0, "matmul", 50.0, 22.0, Bound::Compute),
            op(2, 0, "add", 20.0, 80.0, Bound::Memory),
            op(3, 1, "add", 20.0, 80.0, Bound::Memory),
            op(4, 1, "reshape", 1.0, 0.0, Bound::None),
            memory(5, 1, 4096),
            Event {
                seq: 6,
                ts_us: 650.0,
                device_us: None,
                core: CoreId(1),
                kind: EventKind::GraphBreak {
                    function: "f".into(),
                    reason: "item()".into(),
                    op: "item".into(),
                },
            },
        ];
        let path =
            std::env::temp_dir().join(format!("neuronlab-trace-{}.json", std::process::id()));
        save_chrome_trace(&path, &events).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let trace: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(trace["displayTimeUnit"], "ms");

        // Two processes, each with a track per core.
        let names: Vec<(u64, Option<u64>, &str)> = with_ph(&trace, "M")
            .into_iter()
            .filter(|m| m["name"] == "process_name" || m["name"] == "thread_name")
            .map(|m| {
                (
                    m["pid"].as_u64().unwrap(),
                    m["tid"].as_u64(),
                    m["args"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                (1, None, "host (measured)"),
                (1, Some(0), "neuron:0"),
                (1, Some(1), "neuron:1"),
                (2, None, "Trainium (modeled)"),
                (2, Some(0), "neuron:0"),
                (2, Some(1), "neuron:1"),
            ]
        );

        let slices: Vec<(u64, u64, &str, f64, f64)> = with_ph(&trace, "X")
            .into_iter()
            .map(|s| {
                (
                    s["pid"].as_u64().unwrap(),
                    s["tid"].as_u64().unwrap(),
                    s["name"].as_str().unwrap(),
                    s["ts"].as_f64().unwrap(),
                    s["dur"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            slices,
            [
                (1, 0, "compile mlp", 0.0, 800.0),
                (1, 0, "matmul", 100.0, 50.0),
                // Modeled: without the clock's places, one after another from zero.
                (2, 0, "matmul", 0.0, 22.0),
                (1, 0, "add", 200.0, 20.0),
                (2, 0, "add", 22.0, 80.0),
                (1, 1, "add", 300.0, 20.0),
                (2, 1, "add", 0.0, 80.0),
                // The view has no device slice.
                (1, 1, "reshape", 400.0, 1.0),
            ]
        );
        let matmul = &with_ph(&trace, "X")[1];
        assert_eq!(matmul["args"]["inputs"][0], "f32[8, 128]");
        assert_eq!(matmul["args"]["bound"], "compute-bound");

        let counters = with_ph(&trace, "C");
        assert_eq!(counters.len(), 1);
        assert_eq!(
            (
                counters[0]["name"].as_str(),
                counters[0]["args"]["in_use_bytes"].as_u64()
            ),
            (Some("HBM neuron:1"), Some(4096))
        );
        let instants = with_ph(&trace, "i");
        assert_eq!(instants.len(), 1);
        assert_eq!(instants[0]["name"], "graph break in f");
        assert_eq!(
            (instants[0]["tid"].as_u64(), instants[0]["ts"].as_f64()),
            (Some(1), Some(650.0))
        );
    }

    #[test]
    fn backward_ops_carry_their_category_and_phase_on_both_tracks() {
        let mut grad = op(2, 0, "mul", 5.0, 7.0, Bound::Memory);
        if let EventKind::Op(o) = &mut grad.kind {
            o.phase = Phase::Backward;
        }
        let trace = chrome_trace(&[op(1, 0, "mul", 5.0, 7.0, Bound::Memory), grad]);
        let ops: Vec<(u64, &str, &str)> = with_ph(&trace, "X")
            .into_iter()
            .map(|s| {
                (
                    s["pid"].as_u64().unwrap(),
                    s["cat"].as_str().unwrap(),
                    s["args"]["phase"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            ops,
            [
                (1, "op", "forward"),
                (2, "op", "forward"),
                (1, "op,backward", "backward"),
                (2, "op,backward", "backward"),
            ]
        );
    }
}

//! Terminal logs by topic, as `TORCH_LOGS`: `NEURONLAB_LOGS=recompiles,graph_breaks` prints
//! each matching event as one line while it happens. [`TOPICS`] is the one table of topics:
//! parsing and the events each selects read it.

use super::event::{CacheSource, Event, EventKind, LogLevel, MemoryAction};
use super::fmt::{bytes, duration, duration_us};

/// One `NEURONLAB_LOGS` topic: its name, what it prints, and which events it selects.
pub struct Topic {
    /// The name `NEURONLAB_LOGS` takes.
    pub name: &'static str,
    /// What it prints, in a few words.
    pub shows: &'static str,
    selects: fn(&EventKind) -> bool,
}

fn log_of(kind: &EventKind, topic: &str) -> bool {
    matches!(kind, EventKind::Log { target, .. } if target == topic)
}

/// Every topic.
pub const TOPICS: &[Topic] = &[
    Topic {
        name: "ops",
        shows: "every op: outputs, host and modeled time",
        selects: |k| matches!(k, EventKind::Op(_)),
    },
    Topic {
        name: "memory",
        shows: "every allocation and free, with the core's use and peak",
        selects: |k| matches!(k, EventKind::Memory(_)),
    },
    Topic {
        name: "compiles",
        shows: "every compile, with its reason and what the passes made of it",
        selects: |k| matches!(k, EventKind::Compile(_)),
    },
    Topic {
        name: "recompiles",
        shows: "recompiles with the guards that failed, and reached recompile limits",
        selects: |k| match k {
            EventKind::Compile(c) => c.recompile,
            EventKind::RecompileLimit { .. } => true,
            _ => log_of(k, "recompiles"),
        },
    },
    Topic {
        name: "graph_breaks",
        shows: "graph breaks, with the read that caused them",
        selects: |k| matches!(k, EventKind::GraphBreak { .. }),
    },
    Topic {
        name: "guards",
        shows: "the guards of each compiled version",
        selects: |k| log_of(k, "guards"),
    },
    Topic {
        name: "cache",
        shows: "compiled functions run from a cache, and cache warnings",
        selects: |k| matches!(k, EventKind::CacheHit { .. }) || log_of(k, "cache"),
    },
    Topic {
        name: "collectives",
        shows: "every collective: group, bytes, host and modeled time",
        selects: |k| matches!(k, EventKind::Collective(_)),
    },
    Topic {
        name: "traps",
        shows: "guests that trapped",
        selects: |k| matches!(k, EventKind::GuestTrap { .. }),
    },
    Topic {
        name: "logs",
        shows: "every log line of the runtime",
        selects: |k| matches!(k, EventKind::Log { .. }),
    },
    Topic {
        name: "all",
        shows: "everything above",
        selects: |_| true,
    },
];

/// Which topics to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogFilter {
    topics: Vec<&'static str>,
}

impl LogFilter {
    /// Parses a comma-separated topic list (`recompiles,graph_breaks`, or `all`).
    pub fn parse(spec: &str) -> Result<LogFilter, String> {
        let mut topics = Vec::new();
        for name in spec.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match TOPICS.iter().find(|t| t.name == name) {
                Some(topic) => topics.push(topic.name),
                None => {
                    let names: Vec<&str> = TOPICS.iter().map(|t| t.name).collect();
                    return Err(format!(
                        "NEURONLAB_LOGS: unknown topic '{name}'; topics are {}",
                        names.join(", ")
                    ));
                }
            }
        }
        Ok(LogFilter { topics })
    }

    /// The filter `NEURONLAB_LOGS` asks for (empty when unset).
    pub fn from_env() -> Result<LogFilter, String> {
        match std::env::var("NEURONLAB_LOGS") {
            Ok(spec) => LogFilter::parse(&spec),
            Err(_) => Ok(LogFilter::default()),
        }
    }

    /// The log line for `event`, when a selected topic selects it or it is a warning:
    /// warnings print whatever the topics are, as Python's warnings do.
    pub fn line(&self, event: &Event) -> Option<String> {
        let warning = matches!(
            event.kind,
            EventKind::Log {
                level: LogLevel::Warn,
                ..
            }
        );
        let selected = warning
            || TOPICS
                .iter()
                .filter(|t| self.topics.contains(&t.name))
                .any(|t| (t.selects)(&event.kind));
        selected.then(|| line(event))
    }
}

/// One event as a log line, headed by its topic in brackets.
fn line(event: &Event) -> String {
    let core = event.core;
    match &event.kind {
        EventKind::Op(op) => format!(
            "[ops] {core} {} -> {}: host {}, modeled {} ({})",
            op.name,
            op.outputs
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            duration_us(op.host_us),
            duration(op.modeled.total_s),
            op.modeled.bound
        ),
        EventKind::Memory(m) => format!(
            "[memory] {core} {} {}: {} in use, peak {}",
            if m.action == MemoryAction::Alloc {
                "alloc"
            } else {
                "free"
            },
            bytes(m.bytes),
            bytes(m.in_use),
            bytes(m.peak)
        ),
        EventKind::Compile(c) => {
            let how = match c.cache {
                CacheSource::Miss => {
                    format!("compiled in {} (host)", duration_us(c.host_compile_us))
                }
                CacheSource::Memory => "found in the session's cache".to_string(),
                CacheSource::Disk => "loaded from the disk cache".to_string(),
            };
            format!(
                "[{}] {}: graph {}, {} ops -> {} after passes, {} kernel(s), {how}",
                if c.recompile {
                    "recompiles"
                } else {
                    "compiles"
                },
                c.reason,
                c.graph,
                c.nodes_before,
                c.nodes_after,
                c.fused_kernels,
            )
        }
        EventKind::CacheHit { function, source } => {
            format!("[cache] hit for '{function}' ({source})")
        }
        EventKind::GraphBreak {
            function,
            reason,
            op,
        } => format!("[graph_breaks] in '{function}': {reason} (produced by {op})"),
        EventKind::RecompileLimit {
            function,
            limit,
            action,
        } => format!("[recompiles] '{function}' reached its recompile limit ({limit}); {action}"),
        EventKind::Collective(c) => format!(
            "[collectives] {core} {} over {}{:?}: {}, host {}, modeled {}",
            c.op,
            c.mesh_dim
                .as_deref()
                .map_or(String::new(), |d| format!("{d} ")),
            c.group,
            bytes(c.bytes),
            duration_us(c.host_us),
            duration_us(c.modeled_us)
        ),
        EventKind::GuestTrap { message } => format!("[traps] {message}"),
        EventKind::Log {
            level,
            target,
            message,
        } => format!("[{target}] {level}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::CoreId;

    #[test]
    fn topics_are_checked() {
        assert!(LogFilter::parse("recompiles, graph_breaks").is_ok());
        let e = LogFilter::parse("recompile").unwrap_err();
        assert!(
            e.contains("unknown topic 'recompile'") && e.contains("recompiles"),
            "{e}"
        );
        assert_eq!(LogFilter::parse("").unwrap(), LogFilter::default());
    }

    #[test]
    fn warnings_print_without_a_topic() {
        let event = |level| Event {
            seq: 0,
            ts_us: 0.0,
            device_us: None,
            core: CoreId(0),
            kind: EventKind::Log {
                level,
                target: "recompiles".into(),
                message: "m".into(),
            },
        };
        let none = LogFilter::default();
        assert_eq!(
            none.line(&event(LogLevel::Warn)).as_deref(),
            Some("[recompiles] warn: m")
        );
        assert_eq!(none.line(&event(LogLevel::Info)), None);
    }
}

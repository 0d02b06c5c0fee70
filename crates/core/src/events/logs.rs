//! Terminal logs by topic, as `TORCH_LOGS`: `NEURONLAB_LOGS=recompiles,graph_breaks` prints
//! each matching event as one line while it happens.

use super::event::{CacheSource, Event, EventKind, MemoryAction};
use super::fmt::{bytes, duration, duration_us};

/// The topics `NEURONLAB_LOGS` accepts.
pub const TOPICS: &[&str] = &[
    "ops",
    "memory",
    "compiles",
    "recompiles",
    "graph_breaks",
    "guards",
    "cache",
    "collectives",
    "traps",
    "logs",
    "all",
];

/// Which topics to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogFilter {
    topics: Vec<String>,
}

impl LogFilter {
    /// Parses a comma-separated topic list (`recompiles,graph_breaks`, or `all`).
    pub fn parse(spec: &str) -> Result<LogFilter, String> {
        let topics: Vec<String> = spec
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        if let Some(bad) = topics.iter().find(|t| !TOPICS.contains(&t.as_str())) {
            return Err(format!(
                "NEURONLAB_LOGS: unknown topic '{bad}'; topics are {}",
                TOPICS.join(", ")
            ));
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

    /// True when no topic is selected.
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    fn wants(&self, topic: &str) -> bool {
        self.topics.iter().any(|t| t == topic || t == "all")
    }

    /// The log line for `event`, when its topic is selected.
    pub fn line(&self, event: &Event) -> Option<String> {
        let core = event.core;
        let text = match &event.kind {
            EventKind::Op(op) if self.wants("ops") => format!(
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
            EventKind::Memory(m) if self.wants("memory") => format!(
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
            EventKind::Compile(c)
                if self.wants("compiles") || (c.recompile && self.wants("recompiles")) =>
            {
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
            EventKind::CacheHit { function, source } if self.wants("cache") => {
                format!("[cache] hit for '{function}' ({source})")
            }
            EventKind::GraphBreak {
                function,
                reason,
                op,
            } if self.wants("graph_breaks") => {
                format!("[graph_breaks] in '{function}': {reason} (produced by {op})")
            }
            EventKind::RecompileLimit {
                function, limit, ..
            } if self.wants("recompiles") => {
                format!("[recompiles] '{function}' reached its recompile limit ({limit}); later calls run eagerly")
            }
            EventKind::Collective(c) if self.wants("collectives") => format!(
                "[collectives] {} {} over {}{:?}: {}, host {}, modeled {}",
                event.core,
                c.op,
                c.mesh_dim
                    .as_deref()
                    .map_or(String::new(), |d| format!("{d} ")),
                c.group,
                bytes(c.bytes),
                duration_us(c.host_us),
                duration_us(c.modeled_us)
            ),
            EventKind::GuestTrap { message } if self.wants("traps") => format!("[traps] {message}"),
            EventKind::Log {
                level,
                target,
                message,
            } if self.wants("logs") || self.wants(target) => {
                format!("[{target}] {level}: {message}")
            }
            _ => return None,
        };
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_are_checked() {
        assert!(LogFilter::parse("recompiles, graph_breaks").is_ok());
        let e = LogFilter::parse("recompile").unwrap_err();
        assert!(
            e.contains("unknown topic 'recompile'") && e.contains("recompiles"),
            "{e}"
        );
        assert!(LogFilter::parse("").unwrap().is_empty());
    }
}

//! The event types. Every kind is declared here, so views are written once against the full
//! set.
//!
//! Serialized flat, with the kind as a tag: `{"seq": 3, "ts_us": 12.5, "core": 0,
//! "kind": "op", "name": "matmul", ...}`.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::device::{CoreId, ModeledTime};
use crate::tensor::{DType, TensorMeta};

/// One thing that happened, stamped by the [`super::EventBus`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the bus's stream, from 0, without gaps.
    pub seq: u64,
    /// When it started, in microseconds since the bus was created.
    pub ts_us: f64,
    /// For an op or collective that costs device time: when it starts on its core's modeled
    /// device clock, microseconds (ops one after another, collectives beside them; see
    /// [`EventBus::device_us`](super::EventBus::device_us)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_us: Option<f64>,
    /// The core it happened on (for session-wide events, the session's current core).
    pub core: CoreId,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What an event reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// An eager op ran.
    Op(OpEvent),
    /// Device memory was reserved or given back.
    Memory(MemoryEvent),
    /// A function or lazy graph was traced and compiled.
    Compile(CompileEvent),
    /// A compiled function's signature was found in a cache; the guest was not entered.
    CacheHit {
        /// The compiled function.
        function: String,
        /// Which cache answered.
        source: CacheSource,
    },
    /// Tracing stopped because the guest needed a traced tensor's data.
    GraphBreak {
        /// The function being traced.
        function: String,
        /// Why, in words (e.g. "to_vec() reads tensor data").
        reason: String,
        /// The op or call that broke the graph.
        op: String,
    },
    /// A function reached its recompile limit.
    RecompileLimit {
        /// The function.
        function: String,
        /// The limit that was reached.
        limit: u32,
        /// What happens to later calls.
        action: LimitAction,
    },
    /// A collective ran across a group of ranks.
    Collective(CollectiveEvent),
    /// The guest trapped (panic, out-of-bounds access, interrupt...).
    GuestTrap {
        /// The trap as the sandbox reports it.
        message: String,
    },
    /// A log line from the runtime.
    Log {
        /// Severity.
        level: LogLevel,
        /// The subsystem, as `NEURONLAB_LOGS` names it (e.g. "recompiles").
        target: String,
        /// The message.
        message: String,
    },
}

/// Declares [`EventTag`] from one list of `Variant => "tag": "what it records"` rows, so the
/// kinds, their serialized tags and their descriptions are written once.
macro_rules! event_tags {
    ($($variant:ident => $tag:literal: $about:literal,)*) => {
        /// The kind of an event without its payload: what `%events` filters by, completion
        /// offers, and serialized events carry as `kind`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum EventTag {
            $(
                #[doc = $about]
                $variant,
            )*
        }

        impl EventTag {
            /// Every kind, in this order.
            pub const ALL: &'static [EventTag] = &[$(EventTag::$variant),*];

            /// The tag as serialized (`op`, `cache_hit`, ...).
            pub fn name(self) -> &'static str {
                match self {
                    $(EventTag::$variant => $tag,)*
                }
            }

            /// What events of this kind record, in a few words.
            pub fn about(self) -> &'static str {
                match self {
                    $(EventTag::$variant => $about,)*
                }
            }

            /// The kind whose tag is `name`.
            pub fn from_name(name: &str) -> Option<EventTag> {
                EventTag::ALL.iter().copied().find(|t| t.name() == name)
            }
        }
    };
}

event_tags! {
    Op => "op": "an eager op or a compiled kernel ran",
    Memory => "memory": "device memory was reserved or given back",
    Compile => "compile": "a function or lazy graph was compiled, or found compiled",
    CacheHit => "cache_hit": "a compiled function ran from its cache",
    GraphBreak => "graph_break": "tracing stopped at a data read",
    RecompileLimit => "recompile_limit": "a function reached its recompile limit",
    Collective => "collective": "a collective ran across ranks",
    GuestTrap => "guest_trap": "a guest trapped",
    Log => "log": "a log line of the runtime",
}

impl EventKind {
    /// The tag of this kind, as serialized: `op`, `memory`, `compile`, ...
    pub fn tag(&self) -> &'static str {
        self.event_tag().name()
    }

    /// The kind without its payload.
    pub fn event_tag(&self) -> EventTag {
        match self {
            EventKind::Op(_) => EventTag::Op,
            EventKind::Memory(_) => EventTag::Memory,
            EventKind::Compile(_) => EventTag::Compile,
            EventKind::CacheHit { .. } => EventTag::CacheHit,
            EventKind::GraphBreak { .. } => EventTag::GraphBreak,
            EventKind::RecompileLimit { .. } => EventTag::RecompileLimit,
            EventKind::Collective(_) => EventTag::Collective,
            EventKind::GuestTrap { .. } => EventTag::GuestTrap,
            EventKind::Log { .. } => EventTag::Log,
        }
    }

    /// Measured host duration in microseconds, for kinds that span time (op, compile,
    /// collective); `None` for instants.
    pub fn host_us(&self) -> Option<f64> {
        match self {
            EventKind::Op(op) => Some(op.host_us),
            EventKind::Compile(c) => Some(c.host_compile_us),
            EventKind::Collective(c) => Some(c.host_us),
            _ => None,
        }
    }

    /// Modeled device duration in microseconds, for the kinds the device runs (op, which
    /// includes fused kernels, and collective); `None` for the others.
    pub fn modeled_us(&self) -> Option<f64> {
        match self {
            EventKind::Op(op) => Some(op.modeled.total_s * 1e6),
            EventKind::Collective(c) => Some(c.modeled_us),
            _ => None,
        }
    }
}

/// The dtype and shape of a tensor, as an op saw it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorSig {
    /// The shape (empty for a scalar).
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: DType,
}

impl From<TensorMeta> for TensorSig {
    fn from(m: TensorMeta) -> TensorSig {
        TensorSig {
            shape: m.shape,
            dtype: m.dtype,
        }
    }
}

impl fmt::Display for TensorSig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// An eager op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpEvent {
    /// The registry name (`matmul`, `add`, ...), or a fused kernel's name. Borrowed for
    /// registry ops, so publishing one allocates no name.
    pub name: Cow<'static, str>,
    /// Its inputs.
    pub inputs: Vec<TensorSig>,
    /// Its outputs.
    pub outputs: Vec<TensorSig>,
    /// Useful floating-point operations.
    pub flops: f64,
    /// Bytes read plus bytes written.
    pub bytes: f64,
    /// Measured host wall time, microseconds.
    pub host_us: f64,
    /// Modeled device time.
    pub modeled: ModeledTime,
    /// Which pass of a training step ran it.
    #[serde(default)]
    pub phase: Phase,
}

/// The pass of a training step an op belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The forward computation (everything outside backward).
    #[default]
    Forward,
    /// Computing gradients.
    Backward,
}

impl Phase {
    /// The phase of ops this thread runs now.
    pub fn current() -> Phase {
        if crate::autograd::in_backward() {
            Phase::Backward
        } else {
            Phase::Forward
        }
    }

    /// Its name in listings.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
        }
    }
}

/// Whether memory was reserved or given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryAction {
    /// Reserved.
    Alloc,
    /// Given back.
    Free,
}

/// A change in a core's device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryEvent {
    /// Reserved or given back.
    pub action: MemoryAction,
    /// Bytes of this change.
    pub bytes: u64,
    /// Bytes in use on the core after it.
    pub in_use: u64,
    /// The core's peak since its last reset, after it.
    pub peak: u64,
}

/// Where a compiled executable came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheSource {
    /// Not cached: compiled now.
    Miss,
    /// The session's in-memory cache.
    Memory,
    /// The on-disk cache (`NEURONLAB_CACHE_DIR`).
    Disk,
}

impl fmt::Display for CacheSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CacheSource::Miss => "miss",
            CacheSource::Memory => "memory",
            CacheSource::Disk => "disk",
        })
    }
}

/// A trace and compile of a function or lazy graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileEvent {
    /// The function (or `lazy graph <hash>`).
    pub function: String,
    /// Why it compiled: `new function`, or the guard that failed.
    pub reason: String,
    /// True when a compiled version already existed and a guard failed.
    pub recompile: bool,
    /// The compiled graph's id: the first 16 hex digits of its canonical hash.
    pub graph: String,
    /// Graph nodes before the passes.
    pub nodes_before: usize,
    /// Graph nodes after the passes.
    pub nodes_after: usize,
    /// Kernels after fusion.
    pub fused_kernels: usize,
    /// Measured host time to trace, optimize and compile, microseconds.
    pub host_compile_us: f64,
    /// Whether the executable was compiled now or loaded from a cache.
    pub cache: CacheSource,
}

/// What happens once a function reaches its recompile limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitAction {
    /// Later calls run eagerly (the default, as torch.compile).
    RunEager,
    /// Later calls fail (`fail_on_recompile`).
    Fail,
}

impl fmt::Display for LimitAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitAction::RunEager => "later calls run eagerly",
            LimitAction::Fail => "later calls fail (fail_on_recompile)",
        })
    }
}

/// A collective across ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveEvent {
    /// `all_reduce`, `all_gather`, ...
    pub op: String,
    /// The ranks taking part.
    pub group: Vec<u32>,
    /// The mesh dimension the group spans, when it came from a device mesh.
    pub mesh_dim: Option<String>,
    /// Bytes each rank contributes.
    pub bytes: u64,
    /// Measured host time, microseconds.
    pub host_us: f64,
    /// Modeled device time, microseconds.
    pub modeled_us: f64,
}

/// Severity of a [`EventKind::Log`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Something is likely wrong.
    Warn,
    /// Progress worth knowing.
    Info,
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Bound;

    #[test]
    fn tensor_sigs_read_like_shapes() {
        let sig = TensorSig {
            shape: vec![8, 128],
            dtype: DType::F32,
        };
        assert_eq!(sig.to_string(), "f32[8, 128]");
        assert_eq!(
            TensorSig {
                shape: vec![],
                dtype: DType::Bf16
            }
            .to_string(),
            "bf16[]"
        );
    }

    #[test]
    fn events_serialize_flat_with_a_kind_tag() {
        let op = Event {
            seq: 3,
            ts_us: 12.5,
            device_us: None,
            core: CoreId(1),
            kind: EventKind::Op(OpEvent {
                name: "relu".into(),
                inputs: vec![TensorSig {
                    shape: vec![4],
                    dtype: DType::F32,
                }],
                outputs: vec![TensorSig {
                    shape: vec![4],
                    dtype: DType::F32,
                }],
                flops: 4.0,
                bytes: 32.0,
                host_us: 1.5,
                modeled: ModeledTime {
                    compute_s: 0.0,
                    memory_s: 0.0,
                    launch_s: 1e-5,
                    total_s: 1e-5,
                    bound: Bound::Launch,
                },
                phase: Phase::Forward,
            }),
        };
        let json = serde_json::to_value(&op).unwrap();
        assert_eq!(json["kind"], "op");
        assert_eq!(json["core"], 1);
        assert_eq!(json["name"], "relu");
        assert_eq!(json["inputs"][0]["dtype"], "f32");
        assert_eq!(json["modeled"]["bound"], "launch");
        assert_eq!(serde_json::from_value::<Event>(json).unwrap(), op);

        let hit = Event {
            seq: 4,
            ts_us: 20.0,
            device_us: None,
            core: CoreId(0),
            kind: EventKind::CacheHit {
                function: "mlp".into(),
                source: CacheSource::Disk,
            },
        };
        let text = serde_json::to_string(&hit).unwrap();
        assert_eq!(
            text,
            r#"{"seq":4,"ts_us":20.0,"core":0,"kind":"cache_hit","function":"mlp","source":"disk"}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), hit);
        assert_eq!(hit.kind.tag(), "cache_hit");
    }

    #[test]
    fn every_tag_is_its_kinds_serialized_name() {
        // Serde names a variant in snake_case; the tag table must say the same.
        let snake = |name: &str| {
            name.chars()
                .enumerate()
                .fold(String::new(), |mut s, (i, c)| {
                    if c.is_ascii_uppercase() && i > 0 {
                        s.push('_');
                    }
                    s.push(c.to_ascii_lowercase());
                    s
                })
        };
        for tag in EventTag::ALL {
            assert_eq!(snake(&format!("{tag:?}")), tag.name());
            assert_eq!(EventTag::from_name(tag.name()), Some(*tag));
            assert!(!tag.about().is_empty());
        }
        assert_eq!(EventTag::from_name("nope"), None);
    }
}

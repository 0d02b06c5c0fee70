//! The bus's record of recent events, kept encoded.
//!
//! A 32-rank run publishes hundreds of thousands of events. Kept as `Event`s, every one was an
//! allocation of its own, plus one per signature list and shape, about 700 bytes for an op;
//! each was allocated on one rank's thread and freed, once the ring pushed it out, on whichever
//! thread published then. Encoded with postcard (about 100 bytes for an op), the record is a
//! queue of byte chunks that are reused as the oldest events leave, and an event is decoded
//! only when a view reads it back.

use std::collections::VecDeque;

use super::event::{Event, EventKind, EventTag};
use crate::device::CoreId;

/// Bytes a chunk holds before the next event starts another (a larger event gets a chunk of
/// its own, as large as it needs).
const CHUNK_BYTES: usize = 64 * 1024;
/// The most bytes an event's header `(seq, ts_us, device_us, core)` takes: varints of at
/// most 10 and 5 bytes, and two f64s, one optional.
const HEADER_MOST: usize = 10 + 8 + 9 + 5;

/// Appends `kind`'s encoding to `out`: its tag's position in [`EventTag::ALL`], then its
/// payload. The bus encodes before it takes its lock, into a buffer each publishing thread
/// keeps, so the lock covers only a copy and no encoding moves an inline buffer about (a
/// quarter of a tiny op's host time went to such moves). On an error `out` is as it was.
pub(super) fn encode_kind(kind: &EventKind, out: &mut Vec<u8>) -> postcard::Result<()> {
    let tag = kind.event_tag();
    let position = EventTag::ALL.iter().position(|&t| t == tag).unwrap_or(0) as u8;
    let start = out.len();
    let written = match kind {
        EventKind::Op(op) => encode(&(position, op), out),
        EventKind::Memory(memory) => encode(&(position, memory), out),
        EventKind::Compile(compile) => encode(&(position, compile), out),
        EventKind::CacheHit { function, source } => encode(&(position, function, source), out),
        EventKind::GraphBreak {
            function,
            reason,
            op,
        } => encode(&(position, function, reason, op), out),
        EventKind::RecompileLimit {
            function,
            limit,
            action,
        } => encode(&(position, function, limit, action), out),
        EventKind::Collective(collective) => encode(&(position, collective), out),
        EventKind::GuestTrap { message } => encode(&(position, message), out),
        EventKind::Log {
            level,
            target,
            message,
        } => encode(&(position, level, target, message), out),
    };
    if written.is_err() {
        out.truncate(start);
    }
    written
}

/// `value` encoded with postcard at the end of `out`.
fn encode(value: &impl serde::Serialize, out: &mut Vec<u8>) -> postcard::Result<()> {
    postcard::serialize_with_flavor(value, Appending(out))
}

/// A postcard output that appends to a vector a slice at a time (postcard's generic `Extend`
/// output sends every byte and varint through an iterator).
struct Appending<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Appending<'_> {
    type Output = ();

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Decodes what [`encode_kind`] wrote.
fn decode_kind(bytes: &[u8]) -> postcard::Result<EventKind> {
    let (position, payload): (u8, &[u8]) = postcard::take_from_bytes(bytes)?;
    let tag = EventTag::ALL
        .get(position as usize)
        .ok_or(postcard::Error::DeserializeBadEnum)?;
    Ok(match tag {
        EventTag::Op => EventKind::Op(postcard::from_bytes(payload)?),
        EventTag::Memory => EventKind::Memory(postcard::from_bytes(payload)?),
        EventTag::Compile => EventKind::Compile(postcard::from_bytes(payload)?),
        EventTag::CacheHit => {
            let (function, source) = postcard::from_bytes(payload)?;
            EventKind::CacheHit { function, source }
        }
        EventTag::GraphBreak => {
            let (function, reason, op) = postcard::from_bytes(payload)?;
            EventKind::GraphBreak {
                function,
                reason,
                op,
            }
        }
        EventTag::RecompileLimit => {
            let (function, limit, action) = postcard::from_bytes(payload)?;
            EventKind::RecompileLimit {
                function,
                limit,
                action,
            }
        }
        EventTag::Collective => EventKind::Collective(postcard::from_bytes(payload)?),
        EventTag::GuestTrap => EventKind::GuestTrap {
            message: postcard::from_bytes(payload)?,
        },
        EventTag::Log => {
            let (level, target, message) = postcard::from_bytes(payload)?;
            EventKind::Log {
                level,
                target,
                message,
            }
        }
    })
}

/// A run of encoded events, each `(seq, ts_us, device_us, core)` and then its kind.
#[derive(Default)]
struct Chunk {
    bytes: Vec<u8>,
    /// Where each event ends in `bytes`.
    ends: Vec<usize>,
    /// How many events at the front the ring has pushed out.
    evicted: usize,
}

impl Chunk {
    fn live(&self) -> usize {
        self.ends.len() - self.evicted
    }

    /// The `i`th event kept, from the oldest; `None` if it does not decode.
    fn decode(&self, i: usize) -> Option<Event> {
        let index = self.evicted + i;
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        let bytes = &self.bytes[start..self.ends[index]];
        let ((seq, ts_us, device_us, core), kind): ((u64, f64, Option<f64>, CoreId), &[u8]) =
            postcard::take_from_bytes(bytes).ok()?;
        Some(Event {
            seq,
            ts_us,
            device_us,
            core,
            kind: decode_kind(kind).ok()?,
        })
    }
}

/// The recorded events, oldest first. They are the last [`EventRing::len`] the bus stamped:
/// the bus keeps each event as it stamps it, under the same lock, and forgets only from the
/// front, so their `seq`s run without gaps up to the bus's last.
#[derive(Default)]
pub(super) struct EventRing {
    chunks: VecDeque<Chunk>,
    len: usize,
    /// A chunk the ring emptied, kept for the next one it starts.
    spare: Option<Chunk>,
}

impl EventRing {
    /// How many events it holds.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Appends `event`, whose kind's encoding is `kind` (from [`encode_kind`]). A header
    /// that does not encode (it cannot: it is numbers) leaves the ring as it was and returns
    /// false.
    pub(super) fn push(&mut self, event: &Event, kind: &[u8]) -> bool {
        let header = (event.seq, event.ts_us, event.device_us, event.core);
        let size = HEADER_MOST + kind.len();
        let fits = self
            .chunks
            .back()
            .is_some_and(|c| c.bytes.is_empty() || c.bytes.len() + size <= CHUNK_BYTES);
        if !fits {
            let chunk = self.spare.take().unwrap_or_else(|| Chunk {
                bytes: Vec::with_capacity(CHUNK_BYTES),
                ..Chunk::default()
            });
            self.chunks.push_back(chunk);
        }
        let chunk = self.chunks.back_mut().expect("a chunk was just ensured");
        let start = chunk.bytes.len();
        if postcard::serialize_with_flavor(&header, Appending(&mut chunk.bytes)).is_err() {
            chunk.bytes.truncate(start);
            return false;
        }
        chunk.bytes.extend_from_slice(kind);
        chunk.ends.push(chunk.bytes.len());
        self.len += 1;
        true
    }

    /// Forgets the oldest `n` events (all of them if it holds fewer).
    pub(super) fn evict(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                return;
            };
            let gone = n.min(front.live());
            front.evicted += gone;
            self.len -= gone;
            n -= gone;
            if front.live() == 0 {
                let emptied = self.chunks.pop_front().expect("the front chunk exists");
                self.recycle(emptied);
            }
        }
    }

    /// Forgets every event.
    pub(super) fn clear(&mut self) {
        while let Some(chunk) = self.chunks.pop_front() {
            self.recycle(chunk);
        }
        self.len = 0;
    }

    fn recycle(&mut self, mut chunk: Chunk) {
        // Only a chunk of the usual size is worth keeping; a large event's goes.
        if self.spare.is_none() && chunk.bytes.capacity() <= CHUNK_BYTES {
            chunk.bytes.clear();
            chunk.ends.clear();
            chunk.evicted = 0;
            self.spare = Some(chunk);
        }
    }

    /// The events after the oldest `skip`, decoded, oldest first.
    pub(super) fn decode_from(&self, mut skip: usize) -> Vec<Event> {
        let mut events = Vec::with_capacity(self.len.saturating_sub(skip));
        for chunk in &self.chunks {
            let live = chunk.live();
            if skip >= live {
                skip -= live;
                continue;
            }
            events.extend((skip..live).filter_map(|i| chunk.decode(i)));
            skip = 0;
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Bound, ModeledTime};
    use crate::events::{
        CacheSource, CollectiveEvent, CompileEvent, LimitAction, LogLevel, MemoryAction,
        MemoryEvent, OpEvent, Phase, TensorSig,
    };
    use crate::tensor::DType;

    /// `kind` as the bus hands it to the ring.
    fn encoded(kind: &EventKind) -> Vec<u8> {
        let mut out = Vec::new();
        encode_kind(kind, &mut out).unwrap();
        out
    }

    /// One event of every kind, with fields that differ from their defaults.
    fn one_of_each() -> Vec<EventKind> {
        let kinds = vec![
            EventKind::Op(OpEvent {
                name: "matmul".into(),
                inputs: vec![
                    TensorSig {
                        shape: vec![4, 128, 64],
                        dtype: DType::F32,
                    },
                    TensorSig {
                        shape: vec![],
                        dtype: DType::Bf16,
                    },
                ],
                outputs: vec![TensorSig {
                    shape: vec![4, 128, 16],
                    dtype: DType::F16,
                }],
                flops: 1.5e9,
                bytes: 3.25e5,
                host_us: 12.125,
                modeled: ModeledTime {
                    compute_s: 1e-6,
                    memory_s: 2e-6,
                    launch_s: 1e-5,
                    total_s: 1.3e-5,
                    bound: Bound::Launch,
                },
                phase: Phase::Backward,
            }),
            EventKind::Memory(MemoryEvent {
                action: MemoryAction::Free,
                bytes: 1 << 40,
                in_use: 7,
                peak: u64::MAX,
            }),
            EventKind::Compile(CompileEvent {
                function: "mlp".into(),
                reason: "guard failed: x.shape[0] == 8".into(),
                recompile: true,
                graph: "0123456789abcdef".into(),
                nodes_before: 12,
                nodes_after: 5,
                fused_kernels: 2,
                host_compile_us: 1234.5,
                cache: CacheSource::Disk,
            }),
            EventKind::CacheHit {
                function: "f".into(),
                source: CacheSource::Memory,
            },
            EventKind::GraphBreak {
                function: "g".into(),
                reason: "to_vec() reads tensor data".into(),
                op: "to_vec".into(),
            },
            EventKind::RecompileLimit {
                function: "h".into(),
                limit: 8,
                action: LimitAction::Fail,
            },
            EventKind::Collective(CollectiveEvent {
                op: "all_gather".into(),
                group: vec![0, 4, 8, 12],
                mesh_dim: Some("fsdp".into()),
                bytes: 4096,
                host_us: 3.5,
                modeled_us: f64::MIN_POSITIVE,
            }),
            EventKind::GuestTrap {
                message: "wasm trap: out of bounds memory access".into(),
            },
            EventKind::Log {
                level: LogLevel::Warn,
                target: "recompiles".into(),
                message: "ünïcode and a\nnewline".into(),
            },
        ];
        let tags: Vec<EventTag> = kinds.iter().map(EventKind::event_tag).collect();
        assert_eq!(tags, EventTag::ALL, "one event of every kind, in order");
        kinds
    }

    fn event(seq: u64, kind: EventKind) -> Event {
        Event {
            seq,
            ts_us: seq as f64 * 0.1,
            device_us: seq.is_multiple_of(2).then_some(seq as f64 * 1e-3),
            core: CoreId(seq as u32 % 5),
            kind,
        }
    }

    #[test]
    fn every_kind_of_event_reads_back_as_it_was_kept() {
        let mut ring = EventRing::default();
        let events: Vec<Event> = one_of_each()
            .into_iter()
            .enumerate()
            .map(|(i, kind)| event(i as u64, kind))
            .collect();
        for e in &events {
            assert!(ring.push(e, &encoded(&e.kind)));
        }
        assert_eq!(ring.len(), events.len());
        assert_eq!(ring.decode_from(0), events);
        assert_eq!(ring.decode_from(7), events[7..]);
        assert!(ring.decode_from(events.len()).is_empty());
    }

    #[test]
    fn the_ring_spans_chunks_and_forgets_from_the_front() {
        let mut ring = EventRing::default();
        let log = |i: u64| EventKind::Log {
            level: LogLevel::Info,
            target: "test".into(),
            // A few events are larger than a chunk.
            message: if i % 1000 == 999 {
                "x".repeat(CHUNK_BYTES + 1)
            } else {
                i.to_string()
            },
        };
        for i in 0..5000 {
            let e = event(i, log(i));
            ring.push(&e, &encoded(&e.kind));
        }
        assert!(ring.chunks.len() > 5, "{} chunks", ring.chunks.len());
        ring.evict(1234);
        assert_eq!(ring.len(), 5000 - 1234);
        let kept = ring.decode_from(0);
        assert_eq!(kept.len(), 5000 - 1234);
        for (e, seq) in kept.iter().zip(1234..) {
            assert_eq!(*e, event(seq, log(seq)));
        }
        assert_eq!(ring.decode_from(4000 - 1234)[0].seq, 4000);
        ring.evict(usize::MAX);
        assert_eq!((ring.len(), ring.chunks.len()), (0, 0));
        let e = event(9, log(9));
        ring.push(&e, &encoded(&e.kind));
        assert_eq!(ring.decode_from(0), [e]);
        ring.clear();
        assert!(ring.decode_from(0).is_empty());
    }
}

//! Ranks in other processes: what a [`World`](super::World) spread over several processes
//! sends them, and the transport it goes through.
//!
//! A world of `P` processes with `T` ranks each has global rank `process * T + thread`, as
//! torchrun's node rank and local rank make one. Inside a process ranks meet through shared
//! memory as always; a rank's arrival at a meeting is also sent to every other process that
//! hosts a member of the group, and each process computes the meeting's outcome itself from
//! the same arrivals in the same group order, so every process gets the bit-identical result
//! a one-process run gets (no MPI reduction is used: MPI leaves the order of a reduction to
//! the implementation).
//!
//! Messages are plain bytes ([`Message::encode`]); the transport only delivers them in order
//! between each pair of processes. An arrival's input elements end its encoding, so a
//! transport may send them apart from the head that precedes them ([`Outgoing`]) and hand
//! them back with it ([`Message::decode_parts`]). The MPI transport is `super::mpi` (feature `mpi`).

use std::borrow::Cow;
use std::sync::Arc;

use neuronlab_core::tensor::{Buffer, Tensor};
use neuronlab_core::DType;

use super::combine::ReduceOp;
use super::comm::{dense, Call};

/// A transport between the processes of one world.
pub trait Peers: Send + Sync {
    /// How many processes the world spans.
    fn processes(&self) -> u32;
    /// This process's index, from 0.
    fn process(&self) -> u32;
    /// Sends `bytes` to process `to`; returns once they are on their way.
    fn send(&self, to: u32, bytes: Vec<u8>) -> Result<(), String>;
    /// Sends `message`, whose elements a transport may send apart from its head, straight
    /// from the tensor's memory; by default the whole message as bytes ([`Outgoing::into_bytes`]).
    fn send_outgoing(&self, to: u32, message: Outgoing) -> Result<(), String> {
        self.send(to, message.into_bytes())
    }
    /// Has `deliver` called with every message another process sends this one (also those
    /// that came before), in order per sender, until the transport is shut down: on a thread
    /// of the transport's, or on one that calls [`Peers::poll`].
    fn listen(&self, deliver: Arc<dyn Fn(u32, Message) + Send + Sync>);
    /// Hands over, on the calling thread, a message that has come, if the transport can and
    /// no other thread is doing so; true when it handed one over. A rank that waits only for
    /// other processes calls it instead of sleeping, so an arrival reaches it without waking
    /// another thread. A transport whose own thread delivers everything need not.
    fn poll(&self) -> bool {
        false
    }
    /// How long process `process` has said nothing (heartbeats count), when the transport
    /// knows; a launcher waiting for a process's report gives up on one silent for longer
    /// than the collective timeout.
    fn silent_for(&self, _process: u32) -> Option<std::time::Duration> {
        None
    }
}

/// The processes of a launch, as a launcher passes them around.
#[derive(Clone)]
pub struct Processes(pub Arc<dyn Peers>);

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {} of {}", self.0.process(), self.0.processes())
    }
}

/// A rank's input to a collective, as it travels: dense little-endian data.
#[derive(Clone, Debug)]
pub struct WireTensor {
    /// Its dtype.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its elements, dense, in row-major order.
    pub buffer: Buffer,
}

impl PartialEq for WireTensor {
    fn eq(&self, other: &WireTensor) -> bool {
        (self.dtype, &self.shape, self.buffer.to_le_bytes())
            == (other.dtype, &other.shape, other.buffer.to_le_bytes())
    }
}

/// A message on its way out: its head, and the input's elements that end it, kept apart so
/// a transport can send them from the tensor's own memory. The head followed by the
/// elements' bytes is the message's encoding ([`Message::decode`]).
#[derive(Clone)]
pub struct Outgoing {
    /// The encoding up to the elements.
    pub head: Vec<u8>,
    /// The elements, shared by the sends to each process.
    pub elements: Option<Arc<WireElements>>,
}

impl From<Vec<u8>> for Outgoing {
    fn from(bytes: Vec<u8>) -> Outgoing {
        Outgoing {
            head: bytes,
            elements: None,
        }
    }
}

impl Outgoing {
    /// The whole message as one run of bytes (a copy of the elements, when there are any).
    pub fn into_bytes(self) -> Vec<u8> {
        let mut bytes = self.head;
        if let Some(elements) = &self.elements {
            bytes.extend_from_slice(elements.bytes());
        }
        bytes
    }

    /// The bytes the elements take (0 without any).
    pub fn elements_len(&self) -> usize {
        self.elements.as_ref().map_or(0, |e| e.bytes().len())
    }
}

/// A collective's input elements as their little-endian bytes: the tensor itself when its
/// storage holds exactly its elements in order (a storage never changes once made), or a
/// dense copy of them.
pub struct WireElements(Buffered);

enum Buffered {
    Tensor(Tensor),
    Copy(Buffer),
}

impl WireElements {
    /// `t`'s elements, when their memory is their little-endian bytes (not bool, not a
    /// big-endian host); `None` otherwise, and the message then carries them inline.
    fn of(t: &Tensor) -> Option<WireElements> {
        t.storage_buffer().le_bytes()?;
        Some(WireElements(match dense(t) {
            Cow::Borrowed(_) => Buffered::Tensor(t.clone()),
            Cow::Owned(copy) => Buffered::Copy(copy),
        }))
    }

    /// The elements' bytes.
    pub fn bytes(&self) -> &[u8] {
        let buffer = match &self.0 {
            Buffered::Tensor(t) => t.storage_buffer(),
            Buffered::Copy(b) => b,
        };
        buffer.le_bytes().expect("checked in `of`")
    }
}

/// What processes tell each other.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A rank arrived at the `seq`-th collective of `group`.
    Arrival {
        /// The group's ranks, in ring order.
        group: Vec<u32>,
        /// Which of the group's collectives, from 1.
        seq: u64,
        /// The rank that arrived.
        rank: u32,
        /// Its call.
        call: WireCallBox,
        /// What is wrong with the call on its own, when something is.
        invalid: Option<String>,
        /// Its input (none for a barrier).
        input: Option<WireTensor>,
    },
    /// A rank's guest ended: `finished`, or `stopped with an error (...)`.
    Departed {
        /// The rank.
        rank: u32,
        /// How.
        how: String,
    },
    /// Anything else, for the launcher (rank output, results): bytes it encodes itself.
    Launcher(Vec<u8>),
}

/// A call inside a [`Message`], opaque outside this crate.
#[derive(Clone, Debug, PartialEq)]
pub struct WireCallBox(pub(crate) Call);

impl Message {
    /// An [`Message::Arrival`] of `input` on its way out: its elements apart from the head
    /// where they can be sent from the tensor's memory, inline otherwise.
    pub(crate) fn arrival(
        key: (&[u32], u64),
        rank: u32,
        call: &Call,
        invalid: Option<&str>,
        input: Option<&Tensor>,
    ) -> Outgoing {
        let Some(t) = input else {
            return Message::arrival_head(key, rank, call, invalid, None, 0).into();
        };
        let bytes = t.numel() * t.dtype().size();
        let input = Some((t.dtype(), t.shape(), bytes));
        match WireElements::of(t) {
            Some(elements) => Outgoing {
                head: Message::arrival_head(key, rank, call, invalid, input, 0),
                elements: Some(Arc::new(elements)),
            },
            None => {
                let mut head = Message::arrival_head(key, rank, call, invalid, input, bytes);
                dense(t).append_le_bytes(&mut head);
                head.into()
            }
        }
    }

    /// An arrival's encoding up to its input's elements (of `input`'s byte length), with room
    /// for `room` more bytes.
    fn arrival_head(
        key: (&[u32], u64),
        rank: u32,
        call: &Call,
        invalid: Option<&str>,
        input: Option<(DType, &[usize], usize)>,
        room: usize,
    ) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(room + 256));
        w.u8(0);
        w.u32s(key.0);
        w.u64(key.1);
        w.u32(rank);
        w.call(call);
        w.option_str(invalid);
        match input {
            None => w.u8(0),
            Some((dtype, shape, bytes)) => {
                w.u8(1);
                w.u32(dtype.code());
                w.u64s(shape);
                w.u64(bytes as u64);
            }
        }
        w.0
    }

    /// The message as bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        match self {
            Message::Arrival {
                group,
                seq,
                rank,
                call,
                invalid,
                input,
            } => {
                let len = input
                    .as_ref()
                    .map_or(0, |t| t.buffer.len() * t.dtype.size());
                let mut bytes = Message::arrival_head(
                    (group, *seq),
                    *rank,
                    &call.0,
                    invalid.as_deref(),
                    input.as_ref().map(|t| (t.dtype, t.shape.as_slice(), len)),
                    len,
                );
                if let Some(t) = input {
                    t.buffer.append_le_bytes(&mut bytes);
                }
                return bytes;
            }
            Message::Departed { rank, how } => {
                w.u8(1);
                w.u32(*rank);
                w.str(how);
            }
            Message::Launcher(bytes) => {
                w.u8(2);
                w.bytes(bytes);
            }
        }
        w.0
    }

    /// The message `bytes` encode, or why they do not.
    pub fn decode(bytes: &[u8]) -> Result<Message, String> {
        Message::decode_parts(bytes, None)
    }

    /// The dtype and byte length of the input elements that end the arrival whose encoding
    /// up to them is `head`: what a transport that received the elements apart must make
    /// room for. `None` for a message without elements.
    pub fn elements_after(head: &[u8]) -> Result<Option<(DType, usize)>, String> {
        let mut r = Reader(head);
        if r.u8()? != 0 {
            return Ok(None);
        }
        let arrival = ArrivalHead::read(&mut r)?;
        match r.0.is_empty() {
            true => Ok(arrival.input.map(|(dtype, _, len)| (dtype, len))),
            false => Err("bytes after the head of an arrival".into()),
        }
    }

    /// The message whose encoding is `head` followed by the elements in `elements` (received
    /// apart, see [`Message::elements_after`]), or by their bytes inline when `None`.
    pub fn decode_parts(head: &[u8], elements: Option<Buffer>) -> Result<Message, String> {
        let mut r = Reader(head);
        let message = match r.u8()? {
            0 => {
                let a = ArrivalHead::read(&mut r)?;
                let input = match (a.input, elements) {
                    (None, None) => None,
                    (None, Some(_)) => return Err("elements for an arrival without input".into()),
                    (Some((dtype, shape, len)), elements) => {
                        let buffer = match elements {
                            None => Buffer::from_le_bytes(dtype, r.take(len)?)
                                .ok_or("tensor data that does not fit its dtype")?,
                            Some(b) if b.dtype() == dtype && b.len() * dtype.size() == len => b,
                            Some(b) => {
                                return Err(format!(
                                    "elements of {} x {} where the head says {len} bytes of \
                                     {dtype}",
                                    b.len(),
                                    b.dtype()
                                ))
                            }
                        };
                        Some(WireTensor {
                            dtype,
                            shape,
                            buffer,
                        })
                    }
                };
                Message::Arrival {
                    group: a.group,
                    seq: a.seq,
                    rank: a.rank,
                    call: WireCallBox(a.call),
                    invalid: a.invalid,
                    input,
                }
            }
            1 => Message::Departed {
                rank: r.u32()?,
                how: r.str()?,
            },
            2 => Message::Launcher(r.bytes()?.to_vec()),
            tag => return Err(format!("unknown message kind {tag}")),
        };
        match r.0.is_empty() {
            true => Ok(message),
            false => Err("bytes after the message".into()),
        }
    }
}

/// An arrival's fields before its input's elements.
struct ArrivalHead {
    group: Vec<u32>,
    seq: u64,
    rank: u32,
    call: Call,
    invalid: Option<String>,
    /// The input's dtype, shape and elements' byte length.
    input: Option<(DType, Vec<usize>, usize)>,
}

impl ArrivalHead {
    fn read(r: &mut Reader<'_>) -> Result<ArrivalHead, String> {
        Ok(ArrivalHead {
            group: r.u32s()?,
            seq: r.u64()?,
            rank: r.u32()?,
            call: r.call()?,
            invalid: r.option_str()?,
            input: match r.u8()? {
                0 => None,
                _ => {
                    let dtype = DType::from_code(r.u32()?).ok_or("an unknown dtype code")?;
                    let shape = r.u64s()?;
                    let len = usize::try_from(r.u64()?).map_err(|_| "a length too large")?;
                    Some((dtype, shape, len))
                }
            },
        })
    }
}

/// Little-endian fields, lengths as u64.
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// One byte.
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    /// A u32.
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A u64.
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Bytes, after their length.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
    }
    /// A string.
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    /// A string or nothing.
    pub fn option_str(&mut self, v: Option<&str>) {
        match v {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
    fn u32s(&mut self, v: &[u32]) {
        self.u64(v.len() as u64);
        v.iter().for_each(|&x| self.u32(x));
    }
    fn u64s(&mut self, v: &[usize]) {
        self.u64(v.len() as u64);
        v.iter().for_each(|&x| self.u64(x as u64));
    }
    fn call(&mut self, call: &Call) {
        let (tag, a, b) = match *call {
            Call::AllReduce(op) => (0, op as u64, 0),
            Call::AllGather { dim } => (1, dim as u64, 0),
            Call::ReduceScatter { op, dim } => (2, op as u64, dim as u64),
            Call::AllToAll {
                split_dim,
                concat_dim,
            } => (3, split_dim as u64, concat_dim as u64),
            Call::Broadcast { src } => (4, src as u64, 0),
            Call::Barrier => (5, 0, 0),
        };
        self.u8(tag);
        self.u64(a);
        self.u64(b);
    }
}

/// Reads what a [`Writer`] wrote.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("a message cut short".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    /// One byte.
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    /// A u32.
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    /// A u64.
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// Bytes after their length.
    pub fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = usize::try_from(self.u64()?).map_err(|_| "a length too large")?;
        self.take(n)
    }
    /// A string.
    pub fn str(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "text that is not UTF-8".into())
    }
    /// A string or nothing.
    pub fn option_str(&mut self) -> Result<Option<String>, String> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.str().map(Some),
        }
    }
    fn count(&mut self, each: usize) -> Result<usize, String> {
        let n = usize::try_from(self.u64()?).map_err(|_| "a count too large")?;
        match n.checked_mul(each) {
            Some(bytes) if bytes <= self.0.len() => Ok(n),
            _ => Err("a message cut short".into()),
        }
    }
    fn u32s(&mut self) -> Result<Vec<u32>, String> {
        let n = self.count(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
    fn u64s(&mut self) -> Result<Vec<usize>, String> {
        let n = self.count(8)?;
        (0..n)
            .map(|_| usize::try_from(self.u64()?).map_err(|_| "a dim too large".to_string()))
            .collect()
    }
    fn call(&mut self) -> Result<Call, String> {
        let (tag, a, b) = (self.u8()?, self.u64()?, self.u64()?);
        let op = |code: u64| {
            u32::try_from(code)
                .ok()
                .and_then(|c| ReduceOp::ALL.into_iter().find(|op| *op as u32 == c))
                .ok_or_else(|| format!("unknown reduce op {code}"))
        };
        let dim = |v: u64| usize::try_from(v).map_err(|_| "a dim too large".to_string());
        Ok(match tag {
            0 => Call::AllReduce(op(a)?),
            1 => Call::AllGather { dim: dim(a)? },
            2 => Call::ReduceScatter {
                op: op(a)?,
                dim: dim(b)?,
            },
            3 => Call::AllToAll {
                split_dim: dim(a)?,
                concat_dim: dim(b)?,
            },
            4 => Call::Broadcast {
                src: u32::try_from(a).map_err(|_| "a rank too large")?,
            },
            5 => Call::Barrier,
            t => return Err(format!("unknown collective {t}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_survive_the_trip() {
        let messages = [
            Message::Arrival {
                group: vec![3, 1, 2],
                seq: 7,
                rank: 1,
                call: WireCallBox(Call::ReduceScatter {
                    op: ReduceOp::Avg,
                    dim: 1,
                }),
                invalid: Some("dim 4 is out of range".into()),
                input: Some(WireTensor {
                    dtype: DType::Bf16,
                    shape: vec![2, 2],
                    buffer: Buffer::from_le_bytes(DType::Bf16, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap(),
                }),
            },
            Message::Arrival {
                group: vec![0, 1],
                seq: 1,
                rank: 0,
                call: WireCallBox(Call::Barrier),
                invalid: None,
                input: None,
            },
            Message::Departed {
                rank: 5,
                how: "finished".into(),
            },
            Message::Launcher(vec![9, 8, 7]),
        ];
        for m in messages {
            let bytes = m.encode();
            assert_eq!(Message::decode(&bytes), Ok(m.clone()));
            assert!(
                Message::decode(&bytes[..bytes.len() - 1]).is_err(),
                "{m:?} cut short"
            );
        }
        assert!(Message::decode(&[9]).is_err());
    }

    /// An arrival's head and its elements received apart decode to the arrival its whole
    /// encoding decodes to; elements that do not fit the head are an error.
    #[test]
    fn elements_apart_make_the_same_arrival() {
        let values: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
        let buffer = Buffer::F32(values);
        let elements = buffer.le_bytes().unwrap().to_vec();
        let whole = Message::Arrival {
            group: vec![0, 1],
            seq: 3,
            rank: 1,
            call: WireCallBox(Call::AllGather { dim: 0 }),
            invalid: None,
            input: Some(WireTensor {
                dtype: DType::F32,
                shape: vec![2, 3],
                buffer: buffer.clone(),
            }),
        };
        let bytes = whole.encode();
        let head = &bytes[..bytes.len() - elements.len()];
        assert_eq!(
            Message::elements_after(head),
            Ok(Some((DType::F32, elements.len())))
        );
        assert_eq!(Message::decode_parts(head, Some(buffer)), Ok(whole));
        let short = Buffer::F32(vec![0.0; 5]);
        assert!(Message::decode_parts(head, Some(short)).is_err());
        let other_dtype = Buffer::I32(vec![0; 6]);
        assert!(Message::decode_parts(head, Some(other_dtype)).is_err());
        let departed = Message::Departed {
            rank: 0,
            how: "finished".into(),
        };
        assert_eq!(Message::elements_after(&departed.encode()), Ok(None));
    }
}

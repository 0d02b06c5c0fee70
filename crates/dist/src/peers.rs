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
//! between each pair of processes. The MPI transport is `super::mpi` (feature `mpi`).

use std::sync::Arc;

use neuronlab_core::tensor::Buffer;
use neuronlab_core::DType;

use super::combine::ReduceOp;
use super::comm::Call;

/// A transport between the processes of one world.
pub trait Peers: Send + Sync {
    /// How many processes the world spans.
    fn processes(&self) -> u32;
    /// This process's index, from 0.
    fn process(&self) -> u32;
    /// Sends `bytes` to process `to`; returns once they are on their way.
    fn send(&self, to: u32, bytes: Vec<u8>) -> Result<(), String>;
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
    /// The bytes of an [`Message::Arrival`], written straight from the input's buffer (no
    /// copy of the elements but the one into the message).
    pub(crate) fn arrival_bytes(
        key: (&[u32], u64),
        rank: u32,
        call: &Call,
        invalid: Option<&str>,
        input: Option<(DType, &[usize], &Buffer)>,
    ) -> Vec<u8> {
        // Sized once: the header is small beside the elements, which then need no regrowth.
        let elements = input.map_or(0, |(dtype, _, buffer)| buffer.len() * dtype.size());
        let mut w = Writer(Vec::with_capacity(elements + 256));
        w.u8(0);
        w.u32s(key.0);
        w.u64(key.1);
        w.u32(rank);
        w.call(call);
        w.option_str(invalid);
        match input {
            None => w.u8(0),
            Some((dtype, shape, buffer)) => {
                w.u8(1);
                w.u32(dtype.code());
                w.u64s(shape);
                w.u64((buffer.len() * dtype.size()) as u64);
                buffer.append_le_bytes(&mut w.0);
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
                return Message::arrival_bytes(
                    (group, *seq),
                    *rank,
                    &call.0,
                    invalid.as_deref(),
                    input
                        .as_ref()
                        .map(|t| (t.dtype, t.shape.as_slice(), &t.buffer)),
                )
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
        let mut r = Reader(bytes);
        let message = match r.u8()? {
            0 => Message::Arrival {
                group: r.u32s()?,
                seq: r.u64()?,
                rank: r.u32()?,
                call: WireCallBox(r.call()?),
                invalid: r.option_str()?,
                input: match r.u8()? {
                    0 => None,
                    _ => {
                        let dtype = DType::from_code(r.u32()?).ok_or("an unknown dtype code")?;
                        let shape = r.u64s()?;
                        let buffer = Buffer::from_le_bytes(dtype, r.bytes()?)
                            .ok_or("tensor data that does not fit its dtype")?;
                        Some(WireTensor {
                            dtype,
                            shape,
                            buffer,
                        })
                    }
                },
            },
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
}

//! The host state of one guest instance and the helpers every import uses: statuses, checked
//! access to guest memory, and handles.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;
use wasmtime::{Caller, Extern, StoreLimits};

use crate::compile_state::CompileState;
use crate::guest_error::Reported;
use crate::guest_output::OutputSink;
use crate::handles::HandleTable;
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::{tokenizer_not_a_tensor, GuestValue};
use crate::Shared;
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::tensor::{Tensor, TensorMeta};
use neuronlab_core::Runtime;
use neuronlab_dist::RankComm;

/// Most inputs one op call may pass.
pub(crate) const MAX_INPUTS: usize = 4096;

/// The host state of one guest instance.
pub struct GuestState {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) core: CoreId,
    pub(crate) handles: HandleTable<GuestValue>,
    pub(crate) compile: CompileState,
    pub(crate) last_error: String,
    /// The code of the last error an import returned in the current call.
    pub(crate) error_in_call: Option<ErrorCode>,
    pub(crate) output: OutputSink,
    pub(crate) limits: StoreLimits,
    pub(crate) interrupt: Arc<AtomicBool>,
    pub(crate) comm: RankComm,
    /// What every guest of the session shares: its variables and compiled programs.
    pub(crate) shared: Shared,
    /// Grad mode (`grad_set_enabled`): whether this guest's ops record for autograd.
    pub(crate) grad_enabled: bool,
    pub(crate) call_started: Instant,
    /// Whether the guest printed to stderr in the current call (a trap's note says so).
    pub(crate) wrote_stderr: bool,
    /// What the guest said stopped it (`fail`) in the current call.
    pub(crate) reported: Option<Box<Reported>>,
    pub(crate) started: Instant,
    /// The core's device clock (`EventBus::device_us`) when the instance started.
    pub(crate) device_started_us: f64,
    /// The collectives' modeled time on the core (`EventBus::collective_us`) then.
    pub(crate) collective_started_us: f64,
    /// The exposed part of the clock (`EventBus::exposed_collective_us`) then.
    pub(crate) exposed_started_us: f64,
    /// The guest's exported memory, found on the first access (a lookup by name costs more
    /// than a small op).
    memory: Option<wasmtime::Memory>,
}

impl GuestState {
    /// State for a new instance that is rank `comm` of its world, creating tensors on the
    /// rank's core, sharing the session's variables and programs.
    pub(crate) fn new(
        mut comm: RankComm,
        shared: Shared,
        output: OutputSink,
        limits: StoreLimits,
        interrupt: Arc<AtomicBool>,
    ) -> GuestState {
        comm.set_cancel_flag(interrupt.clone());
        // Distinct salts make a handle from one instance stale in another; a random start
        // per process means the first instance's handles differ from run to run too.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        static BASE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        let base = *BASE.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish() as u32
        });
        let salt = base.wrapping_add(NEXT.fetch_add(0x9e7, Ordering::Relaxed));
        let runtime = comm.runtime().clone();
        let device_started_us = runtime.bus().device_us(comm.core());
        let collective_started_us = runtime.bus().collective_us(comm.core());
        let exposed_started_us = runtime.bus().exposed_collective_us(comm.core());
        GuestState {
            runtime,
            core: comm.core(),
            handles: HandleTable::new(salt),
            compile: CompileState::default(),
            last_error: String::new(),
            error_in_call: None,
            output,
            limits,
            interrupt,
            comm,
            shared,
            grad_enabled: true,
            call_started: Instant::now(),
            wrote_stderr: false,
            reported: None,
            started: Instant::now(),
            device_started_us,
            exposed_started_us,
            collective_started_us,
            memory: None,
        }
    }
}

pub(crate) type Ctx<'a> = Caller<'a, GuestState>;

/// Converts an import's result to the i32 the guest sees, recording the error message.
pub(crate) fn status(caller: &mut Ctx, r: HostResult<i32>) -> i32 {
    match r {
        Ok(v) => v,
        Err(Fail(code, message)) => {
            caller.data_mut().last_error = message;
            caller.data_mut().error_in_call = Some(code);
            code as i32
        }
    }
}

/// Like [`status`] for imports that return an i64.
pub(crate) fn status64(caller: &mut Ctx, r: HostResult<i64>) -> i64 {
    match r {
        Ok(v) => v,
        Err(Fail(code, message)) => {
            caller.data_mut().last_error = message;
            caller.data_mut().error_in_call = Some(code);
            code as i64
        }
    }
}

/// The byte range `ptr..ptr+len` of guest memory, checked.
pub(crate) fn range(mem_len: usize, ptr: i32, len: i32) -> HostResult<std::ops::Range<usize>> {
    let bad = || {
        Fail(
            ErrorCode::Bounds,
            format!("the range (ptr {ptr}, len {len}) lies outside guest memory ({mem_len} bytes)"),
        )
    };
    if ptr < 0 || len < 0 {
        return Err(bad());
    }
    let (start, len) = (ptr as usize, len as usize);
    let end = start.checked_add(len).ok_or_else(bad)?;
    if end > mem_len {
        return Err(bad());
    }
    Ok(start..end)
}

pub(crate) fn memory(caller: &mut Ctx) -> HostResult<wasmtime::Memory> {
    if let Some(m) = caller.data().memory {
        return Ok(m);
    }
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => {
            caller.data_mut().memory = Some(m);
            Ok(m)
        }
        _ => Err(Fail(
            ErrorCode::Invalid,
            "the guest does not export its linear memory as `memory`".into(),
        )),
    }
}

pub(crate) fn read(caller: &mut Ctx, ptr: i32, len: i32) -> HostResult<Vec<u8>> {
    let mem = memory(caller)?;
    let data = mem.data(&*caller);
    Ok(data[range(data.len(), ptr, len)?].to_vec())
}

pub(crate) fn read_str(caller: &mut Ctx, ptr: i32, len: i32, what: &str) -> HostResult<String> {
    String::from_utf8(read(caller, ptr, len)?)
        .map_err(|_| Fail(ErrorCode::Invalid, format!("{what} is not valid UTF-8")))
}

pub(crate) fn write(caller: &mut Ctx, ptr: i32, bytes: &[u8]) -> HostResult<()> {
    let mem = memory(caller)?;
    let data = mem.data_mut(&mut *caller);
    let r = range(data.len(), ptr, bytes.len() as i32)?;
    data[r].copy_from_slice(bytes);
    Ok(())
}

/// Copies up to `cap` bytes of `bytes` to `ptr` and returns the full length.
pub(crate) fn write_capped(caller: &mut Ctx, ptr: i32, cap: i32, bytes: &[u8]) -> HostResult<i32> {
    if cap < 0 {
        return Err(Fail(ErrorCode::Bounds, format!("negative capacity {cap}")));
    }
    let n = bytes.len().min(cap as usize);
    write(caller, ptr, &bytes[..n])?;
    i32::try_from(bytes.len())
        .map_err(|_| Fail(ErrorCode::Invalid, "the result is larger than 2 GiB".into()))
}

/// A string list as ABI.md's conventions encode it: a `u32` count, then each string as a
/// `u32` byte length and its UTF-8 bytes.
pub(crate) fn encode_strings<S: AsRef<str>>(strings: &[S]) -> Vec<u8> {
    let mut out = (strings.len() as u32).to_le_bytes().to_vec();
    for s in strings {
        let s = s.as_ref().as_bytes();
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s);
    }
    out
}

/// Decodes a string list (see [`encode_strings`]) at the start of `bytes`: the strings and
/// the bytes after the list.
pub(crate) fn decode_strings<'a>(
    bytes: &'a [u8],
    what: &str,
) -> HostResult<(Vec<String>, &'a [u8])> {
    let bad = |why: &str| {
        Fail(
            ErrorCode::Invalid,
            format!("{what} are not a string list ({why}; see ABI.md, Conventions)"),
        )
    };
    let mut rest = bytes;
    let word = |rest: &mut &[u8]| -> HostResult<usize> {
        let (head, tail) = rest.split_at_checked(4).ok_or_else(|| bad("cut short"))?;
        *rest = tail;
        Ok(u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize)
    };
    let count = word(&mut rest)?;
    // No allocation by the count: each string takes at least 4 bytes of the list.
    let mut out = Vec::new();
    for _ in 0..count {
        let len = word(&mut rest)?;
        let (s, tail) = rest.split_at_checked(len).ok_or_else(|| bad("cut short"))?;
        out.push(String::from_utf8(s.to_vec()).map_err(|_| bad("a string is not UTF-8"))?);
        rest = tail;
    }
    Ok((out, rest))
}

/// The value behind a handle.
pub(crate) fn value(caller: &Ctx, h: i32) -> HostResult<GuestValue> {
    Ok(caller.data().handles.get(h as u32)?.clone())
}

/// The shape and dtype behind a handle, real or traced.
pub(crate) fn meta(caller: &Ctx, h: i32) -> HostResult<TensorMeta> {
    match value(caller, h)? {
        GuestValue::Eager(t) => Ok(t.meta()),
        GuestValue::Traced(v) => caller.data().compile.meta(v).ok_or_else(|| {
            Fail(
                ErrorCode::Handle,
                format!("handle {h:#x} outlived its recording"),
            )
        }),
        GuestValue::Gone(why) => Err(Fail(ErrorCode::Handle, why)),
        GuestValue::Dist(d) => Err(d.not_a_tensor()),
        GuestValue::Tokenizer(_) => Err(tokenizer_not_a_tensor()),
    }
}

/// A real tensor to hand to the guest as a new handle.
pub(crate) fn insert(caller: &mut Ctx, t: Tensor) -> HostResult<i32> {
    Ok(caller.data_mut().handles.insert(GuestValue::Eager(t))? as i32)
}

pub(crate) fn check_interrupt(caller: &Ctx) -> HostResult<()> {
    if caller.data().interrupt.load(Ordering::SeqCst) {
        return Err(Fail(ErrorCode::Cancelled, "interrupted".into()));
    }
    Ok(())
}

pub(crate) fn check_n_inputs(n: i32) -> HostResult<()> {
    if n < 0 || n as usize > MAX_INPUTS {
        return Err(Fail(
            ErrorCode::Invalid,
            format!("n_inputs {n} is outside 0..={MAX_INPUTS}"),
        ));
    }
    Ok(())
}

/// The values behind `n` handles (`u32`s) at `ptr`.
pub(crate) fn read_handles(caller: &mut Ctx, ptr: i32, n: i32) -> HostResult<Vec<GuestValue>> {
    check_n_inputs(n)?;
    let raw = read(caller, ptr, n * 4)?;
    raw.chunks_exact(4)
        .map(|c| {
            value(
                caller,
                u32::from_le_bytes(c.try_into().expect("4 bytes")) as i32,
            )
        })
        .collect()
}

/// Gives the guest new handles to `values`, written as `u32`s at `ptr`; returns their count.
/// Nothing is issued unless every handle is written, so nothing leaks that the guest cannot
/// learn about.
pub(crate) fn write_new_handles(
    caller: &mut Ctx,
    values: impl IntoIterator<Item = GuestValue, IntoIter: ExactSizeIterator>,
    ptr: i32,
) -> HostResult<i32> {
    let values = values.into_iter();
    let n = values.len();
    let mem = memory(caller)?;
    let (data, state) = mem.data_and_store_mut(&mut *caller);
    let len = i32::try_from(n * 4).unwrap_or(i32::MAX);
    let out = range(data.len(), ptr, len)?;
    let out = &mut data[out];
    let mut issued = SmallVec::<[u32; 4]>::new();
    for (v, slot) in values.zip(out.chunks_exact_mut(4)) {
        match state.handles.insert(v) {
            Ok(h) => {
                slot.copy_from_slice(&h.to_le_bytes());
                issued.push(h);
            }
            Err(e) => {
                for h in issued {
                    let _ = state.handles.remove(h);
                }
                return Err(e.into());
            }
        }
    }
    Ok(n as i32)
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn ranges_are_checked_with_overflow() {
        assert_eq!(range(100, 10, 20).ok(), Some(10..30));
        assert!(range(100, 90, 20).is_err());
        assert!(range(100, -1, 1).is_err());
        assert!(range(100, 1, -1).is_err());
        assert!(range(usize::MAX, i32::MAX, i32::MAX).is_ok());
        assert!(range(100, 100, 0).is_ok());
    }
}

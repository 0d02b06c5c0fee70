//! The host side of the guest ABI (guest-sdk/ABI.md): the `neuronlab` imports.
//!
//! Every import returns a status and never traps: guest pointers are bounds-checked (with
//! overflow), handles are validated, and failures set the message `last_error` returns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;
use wasmtime::{Caller, Extern, Linker, StoreLimits};

use super::attrs;
use super::handles::{HandleError, HandleTable};
use super::output::{GuestOutput, OutputSink};
use super::tracing::{self, before_data_read, GuestValue, Tracing};
use crate::device::topology::CoreId;
use crate::dist::RankComm;
use crate::ops::{OpId, Registry};
use crate::tensor::{
    checked_numel, format_tensor, Buffer, DType, FormatOptions, Tensor, TensorMeta,
};
use crate::vars::VarStore;
use crate::{Error, Runtime};

/// The import module every guest import comes from.
pub const MODULE: &str = "neuronlab";

/// Every import this host provides (the sys, tensor, op, compile, dist and vars groups of ABI
/// 1.3).
pub const IMPORTS: &[&str] = &[
    "last_error",
    "print",
    "display",
    "clock_ns",
    "tensor_create",
    "tensor_dtype",
    "tensor_rank",
    "tensor_shape",
    "tensor_numel",
    "tensor_nbytes",
    "tensor_read",
    "tensor_format",
    "tensor_display",
    "tensor_device",
    "tensor_clone",
    "tensor_drop",
    "op_lookup",
    "op_call",
    "compile_fn",
    "compile_call",
    "compile_arg",
    "compile_result",
    "compile_explain",
    "compile_stats",
    "lazy_begin",
    "lazy_sync",
    "lazy_end",
    "dist_rank",
    "dist_world_size",
    "dist_new_group",
    "dist_group_size",
    "dist_group_rank",
    "dist_collective",
    "dist_barrier",
    "dist_mesh_new",
    "dist_mesh_group",
    "dist_mesh_coord",
    "dist_distribute",
    "dist_from_local",
    "dist_redistribute",
    "dist_full_tensor",
    "dist_to_local",
    "dist_describe",
    "var_set_tensor",
    "var_get_tensor",
    "var_set_value",
    "var_get_value",
];

/// The ABI's error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ErrorCode {
    /// A bad argument.
    Invalid = -1,
    /// A bad handle.
    Handle = -2,
    /// A pointer range outside guest memory.
    Bounds = -3,
    /// The op rejected its operands or attributes.
    Op = -4,
    /// A memory quota or limit.
    Memory = -5,
    /// No such op.
    UnknownOp = -6,
    /// Interrupted.
    Cancelled = -7,
    /// The output buffer is too small.
    TooSmall = -8,
    /// Known but not available here.
    Unavailable = -9,
    /// A collective failed across ranks.
    Collective = -10,
}

/// Most dims a tensor created by a guest may have.
const MAX_RANK: usize = 64;
/// Most inputs one op call may pass.
const MAX_INPUTS: usize = 4096;

/// A failed import: the code the guest sees and the message `last_error` gives.
pub(super) struct Fail(pub(super) ErrorCode, pub(super) String);

pub(super) type HostResult<T> = Result<T, Fail>;

impl From<HandleError> for Fail {
    fn from(e: HandleError) -> Fail {
        Fail(ErrorCode::Handle, e.to_string())
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let code = match &e {
            Error::Op { .. } => ErrorCode::Op,
            Error::OpOutOfMemory { .. } | Error::Memory(_) => ErrorCode::Memory,
            Error::UnknownOp(_) => ErrorCode::UnknownOp,
            Error::Cancelled(_) => ErrorCode::Cancelled,
            Error::Collective(_) => ErrorCode::Collective,
            Error::Invalid(_) | Error::Topology(_) => ErrorCode::Invalid,
        };
        Fail(code, e.to_string())
    }
}

/// The host state of one guest instance.
pub struct GuestState {
    pub(super) runtime: Arc<Runtime>,
    pub(super) core: CoreId,
    pub(super) handles: HandleTable<GuestValue>,
    pub(super) tracing: Tracing,
    pub(super) last_error: String,
    pub(super) output: OutputSink,
    pub(super) limits: StoreLimits,
    pub(super) interrupt: Arc<AtomicBool>,
    pub(super) comm: RankComm,
    /// The session's variables, shared by every guest of the session.
    pub(super) vars: Arc<VarStore>,
    pub(super) call_started: Instant,
    started: Instant,
    /// The guest's exported memory, found on the first access (a lookup by name costs more
    /// than a small op).
    memory: Option<wasmtime::Memory>,
}

impl GuestState {
    /// State for a new instance that is rank `comm` of its world, creating tensors on the
    /// rank's core, with the session's variables `vars`.
    pub(super) fn new(
        mut comm: RankComm,
        vars: Arc<VarStore>,
        output: OutputSink,
        limits: StoreLimits,
        interrupt: Arc<AtomicBool>,
    ) -> GuestState {
        comm.set_cancel_flag(interrupt.clone());
        // Distinct salts make a handle from one instance stale in another.
        static SALT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0x5a3);
        let salt = SALT.fetch_add(0x9e7, Ordering::Relaxed);
        GuestState {
            runtime: comm.runtime().clone(),
            core: comm.core(),
            handles: HandleTable::new(salt),
            tracing: Tracing::default(),
            last_error: String::new(),
            output,
            limits,
            interrupt,
            comm,
            vars,
            call_started: Instant::now(),
            started: Instant::now(),
            memory: None,
        }
    }
}

pub(super) type Ctx<'a> = Caller<'a, GuestState>;

/// Converts an import's result to the i32 the guest sees, recording the error message.
pub(super) fn status(caller: &mut Ctx, r: HostResult<i32>) -> i32 {
    match r {
        Ok(v) => v,
        Err(Fail(code, message)) => {
            caller.data_mut().last_error = message;
            code as i32
        }
    }
}

/// Like [`status`] for imports that return an i64.
fn status64(caller: &mut Ctx, r: HostResult<i64>) -> i64 {
    match r {
        Ok(v) => v,
        Err(Fail(code, message)) => {
            caller.data_mut().last_error = message;
            code as i64
        }
    }
}

/// The byte range `ptr..ptr+len` of guest memory, checked.
fn range(mem_len: usize, ptr: i32, len: i32) -> HostResult<std::ops::Range<usize>> {
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

fn memory(caller: &mut Ctx) -> HostResult<wasmtime::Memory> {
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

pub(super) fn read(caller: &mut Ctx, ptr: i32, len: i32) -> HostResult<Vec<u8>> {
    let mem = memory(caller)?;
    let data = mem.data(&*caller);
    Ok(data[range(data.len(), ptr, len)?].to_vec())
}

pub(super) fn read_str(caller: &mut Ctx, ptr: i32, len: i32, what: &str) -> HostResult<String> {
    String::from_utf8(read(caller, ptr, len)?)
        .map_err(|_| Fail(ErrorCode::Invalid, format!("{what} is not valid UTF-8")))
}

pub(super) fn write(caller: &mut Ctx, ptr: i32, bytes: &[u8]) -> HostResult<()> {
    let mem = memory(caller)?;
    let data = mem.data_mut(&mut *caller);
    let r = range(data.len(), ptr, bytes.len() as i32)?;
    data[r].copy_from_slice(bytes);
    Ok(())
}

/// Copies up to `cap` bytes of `bytes` to `ptr` and returns the full length.
pub(super) fn write_capped(caller: &mut Ctx, ptr: i32, cap: i32, bytes: &[u8]) -> HostResult<i32> {
    if cap < 0 {
        return Err(Fail(ErrorCode::Bounds, format!("negative capacity {cap}")));
    }
    let n = bytes.len().min(cap as usize);
    write(caller, ptr, &bytes[..n])?;
    i32::try_from(bytes.len())
        .map_err(|_| Fail(ErrorCode::Invalid, "the result is larger than 2 GiB".into()))
}

/// The value behind a handle.
pub(super) fn value(caller: &Ctx, h: i32) -> HostResult<GuestValue> {
    Ok(caller.data().handles.get(h as u32)?.clone())
}

/// The shape and dtype behind a handle, real or traced.
fn meta(caller: &Ctx, h: i32) -> HostResult<TensorMeta> {
    match value(caller, h)? {
        GuestValue::Eager(t) => Ok(t.meta()),
        GuestValue::Traced(v) => caller.data().tracing.meta(v).ok_or_else(|| {
            Fail(
                ErrorCode::Handle,
                format!("handle {h:#x} outlived its recording"),
            )
        }),
        GuestValue::Gone(why) => Err(Fail(ErrorCode::Handle, why)),
        GuestValue::Dist(d) => Err(d.not_a_tensor()),
    }
}

/// A real tensor to hand to the guest as a new handle.
pub(super) fn insert(caller: &mut Ctx, t: Tensor) -> HostResult<i32> {
    Ok(caller.data_mut().handles.insert(GuestValue::Eager(t))? as i32)
}

fn check_interrupt(caller: &Ctx) -> HostResult<()> {
    if caller.data().interrupt.load(Ordering::SeqCst) {
        return Err(Fail(ErrorCode::Cancelled, "interrupted".into()));
    }
    Ok(())
}

fn tensor_create(
    caller: &mut Ctx,
    dtype: i32,
    shape_ptr: i32,
    rank: i32,
    data_ptr: i32,
    data_len: i32,
) -> HostResult<i32> {
    check_interrupt(caller)?;
    let dtype = u32::try_from(dtype)
        .ok()
        .and_then(DType::from_code)
        .ok_or_else(|| {
            Fail(
                ErrorCode::Invalid,
                format!("{dtype} is not a dtype code (0..=7, see ABI.md)"),
            )
        })?;
    if rank < 0 || rank as usize > MAX_RANK {
        return Err(Fail(
            ErrorCode::Invalid,
            format!("rank {rank} is outside 0..={MAX_RANK}"),
        ));
    }
    let raw = read(caller, shape_ptr, rank * 8)?;
    let dims: Vec<i64> = raw
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    if let Some(d) = dims.iter().find(|&&d| d < 0) {
        return Err(Fail(
            ErrorCode::Invalid,
            format!("shape {dims:?} has a negative dim {d}"),
        ));
    }
    let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let nbytes = checked_numel(&shape)
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| Fail(ErrorCode::Invalid, format!("shape {shape:?} is too large")))?;
    if data_len < 0 || data_len as usize != nbytes {
        return Err(Fail(
            ErrorCode::Invalid,
            format!(
                "a {dtype} tensor of shape {shape:?} needs {nbytes} bytes of data, got {data_len}"
            ),
        ));
    }
    let bytes = read(caller, data_ptr, data_len)?;
    let buffer =
        Buffer::from_le_bytes(dtype, &bytes).expect("length checked against the dtype size");
    let state = caller.data();
    let t = state.runtime.tensor_on(state.core, buffer, &shape)?;
    insert(caller, t)
}

/// The arguments of `op_call`, as the guest passed them.
struct OpCall {
    id: i32,
    inputs_ptr: i32,
    n_inputs: i32,
    attrs_ptr: i32,
    attrs_len: i32,
    outputs_ptr: i32,
    max_outputs: i32,
}

fn op_call(caller: &mut Ctx, args: OpCall) -> HostResult<i32> {
    let OpCall {
        id,
        inputs_ptr,
        n_inputs,
        attrs_ptr,
        attrs_len,
        outputs_ptr,
        max_outputs,
    } = args;
    check_interrupt(caller)?;
    let def = u32::try_from(id)
        .ok()
        .and_then(|i| Registry::global().get(OpId(i)))
        .ok_or_else(|| {
            Fail(
                ErrorCode::UnknownOp,
                format!("no op has id {id}; look ops up with op_lookup"),
            )
        })?;
    if def.outputs.len() > max_outputs.max(0) as usize {
        return Err(Fail(
            ErrorCode::TooSmall,
            format!(
                "{} has {} output(s) but max_outputs is {max_outputs}",
                def.name,
                def.outputs.len()
            ),
        ));
    }
    if caller.data().tracing.recording() {
        let inputs = read_handles(caller, inputs_ptr, n_inputs)?;
        let attrs = attrs::decode(&read(caller, attrs_ptr, attrs_len)?)
            .map_err(|e| Fail(ErrorCode::Invalid, format!("{}: {e}", def.name)))?;
        let outputs = caller
            .data_mut()
            .tracing
            .record(OpId(id as u32), &inputs, &attrs)?;
        return write_new_handles(caller, outputs, outputs_ptr);
    }
    // The eager path borrows the input tensors from the handle table, straight from the
    // handles in guest memory: a tiny op should cost little more than its kernel.
    check_n_inputs(n_inputs)?;
    let mem = memory(caller)?;
    let outputs = {
        let (data, state) = mem.data_and_store_mut(&mut *caller);
        let state = &*state;
        let handles = &data[range(data.len(), inputs_ptr, n_inputs * 4)?];
        let attrs = attrs::decode(&data[range(data.len(), attrs_ptr, attrs_len)?])
            .map_err(|e| Fail(ErrorCode::Invalid, format!("{}: {e}", def.name)))?;
        // A plain loop: collecting through `Result` costs a tiny op more than the lookups.
        let mut inputs = SmallVec::<[&Tensor; 4]>::new();
        for c in handles.chunks_exact(4) {
            let h = u32::from_le_bytes(c.try_into().expect("4 bytes"));
            inputs.push(state.handles.get(h)?.as_eager()?);
        }
        state.runtime.call_on(def, &inputs, &attrs, state.core)?
    };
    write_new_handles(
        caller,
        outputs.into_iter().map(GuestValue::Eager),
        outputs_ptr,
    )
}

fn check_n_inputs(n: i32) -> HostResult<()> {
    if n < 0 || n as usize > MAX_INPUTS {
        return Err(Fail(
            ErrorCode::Invalid,
            format!("n_inputs {n} is outside 0..={MAX_INPUTS}"),
        ));
    }
    Ok(())
}

/// The values behind `n` handles (`u32`s) at `ptr`.
pub(super) fn read_handles(caller: &mut Ctx, ptr: i32, n: i32) -> HostResult<Vec<GuestValue>> {
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
pub(super) fn write_new_handles(
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

/// Defines every import of [`IMPORTS`] on `linker`.
pub fn define(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "last_error", |mut c: Ctx, ptr: i32, cap: i32| {
        let msg = c.data().last_error.clone();
        let r = write_capped(&mut c, ptr, cap, msg.as_bytes());
        status(&mut c, r)
    })?;
    linker.func_wrap(
        MODULE,
        "print",
        |mut c: Ctx, stream: i32, ptr: i32, len: i32| {
            let r = (|| {
                let text = String::from_utf8_lossy(&read(&mut c, ptr, len)?).into_owned();
                let out = match stream {
                    1 => GuestOutput::Stdout(text),
                    2 => GuestOutput::Stderr(text),
                    s => {
                        return Err(Fail(
                            ErrorCode::Invalid,
                            format!("stream {s} is neither 1 (stdout) nor 2 (stderr)"),
                        ))
                    }
                };
                (c.data_mut().output)(out);
                Ok(0)
            })();
            status(&mut c, r)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "display",
        |mut c: Ctx, mime_ptr: i32, mime_len: i32, data_ptr: i32, data_len: i32| {
            let r = (|| {
                let mime = read_str(&mut c, mime_ptr, mime_len, "the MIME type")?;
                let data = read(&mut c, data_ptr, data_len)?;
                let output = GuestOutput::from_display(mime, data)
                    .map_err(|e| Fail(ErrorCode::Invalid, e))?;
                (c.data_mut().output)(output);
                Ok(0)
            })();
            status(&mut c, r)
        },
    )?;
    linker.func_wrap(MODULE, "clock_ns", |c: Ctx| {
        c.data().started.elapsed().as_nanos() as i64
    })?;
    linker.func_wrap(
        MODULE,
        "tensor_create",
        |mut c: Ctx, dtype: i32, shape_ptr: i32, rank: i32, data_ptr: i32, data_len: i32| {
            let r = tensor_create(&mut c, dtype, shape_ptr, rank, data_ptr, data_len);
            status(&mut c, r)
        },
    )?;
    linker.func_wrap(MODULE, "tensor_dtype", |mut c: Ctx, h: i32| {
        let r = meta(&c, h).map(|m| m.dtype.code() as i32);
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "tensor_rank", |mut c: Ctx, h: i32| {
        let r = meta(&c, h).map(|m| m.shape.len() as i32);
        status(&mut c, r)
    })?;
    linker.func_wrap(
        MODULE,
        "tensor_shape",
        |mut c: Ctx, h: i32, ptr: i32, cap: i32| {
            let r = (|| {
                let m = meta(&c, h)?;
                if cap < 0 {
                    return Err(Fail(ErrorCode::Bounds, format!("negative capacity {cap}")));
                }
                let dims: Vec<u8> = m
                    .shape
                    .iter()
                    .take(cap as usize)
                    .flat_map(|&d| (d as i64).to_le_bytes())
                    .collect();
                write(&mut c, ptr, &dims)?;
                Ok(m.shape.len() as i32)
            })();
            status(&mut c, r)
        },
    )?;
    linker.func_wrap(MODULE, "tensor_numel", |mut c: Ctx, h: i32| {
        let r = meta(&c, h).map(|m| m.numel() as i64);
        status64(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "tensor_nbytes", |mut c: Ctx, h: i32| {
        let r = meta(&c, h).map(|m| m.nbytes() as i64);
        status64(&mut c, r)
    })?;
    linker.func_wrap(
        MODULE,
        "tensor_read",
        |mut c: Ctx, h: i32, ptr: i32, len: i32| {
            let r = (|| {
                let needed = meta(&c, h)?.nbytes();
                if (len.max(0) as usize) < needed {
                    return Err(Fail(
                        ErrorCode::TooSmall,
                        format!("the tensor has {needed} bytes but the buffer holds {len}"),
                    ));
                }
                let t = before_data_read(&mut c, h, "tensor_read (to_vec, item)")?;
                let bytes = t.to_buffer().to_le_bytes();
                write(&mut c, ptr, &bytes)?;
                Ok(bytes.len() as i32)
            })();
            status(&mut c, r)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "tensor_format",
        |mut c: Ctx, h: i32, ptr: i32, cap: i32| {
            let r = (|| {
                let t = before_data_read(&mut c, h, "tensor_format (printing)")?;
                let text = format_tensor(&t, &FormatOptions::default());
                write_capped(&mut c, ptr, cap, text.as_bytes())
            })();
            status(&mut c, r)
        },
    )?;
    linker.func_wrap(MODULE, "tensor_display", |mut c: Ctx, h: i32| {
        let r = before_data_read(&mut c, h, "tensor_display").map(|t| {
            (c.data_mut().output)(GuestOutput::Tensor(t));
            0
        });
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "tensor_device", |mut c: Ctx, h: i32| {
        let core = c.data().core.0 as i32;
        let r = value(&c, h).map(|v| match v {
            GuestValue::Eager(t) => t.device().0 as i32,
            _ => core,
        });
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "tensor_clone", |mut c: Ctx, h: i32| {
        let r = value(&c, h).and_then(|v| Ok(c.data_mut().handles.insert(v)? as i32));
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "tensor_drop", |mut c: Ctx, h: i32| {
        let r = c
            .data_mut()
            .handles
            .remove(h as u32)
            .map(|_| 0)
            .map_err(Fail::from);
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "op_lookup", |mut c: Ctx, ptr: i32, len: i32| {
        let r = (|| {
            let name = read_str(&mut c, ptr, len, "the op name")?;
            Registry::global()
                .lookup(&name)
                .map(|(id, _)| id.0 as i32)
                .map_err(|e| Fail(ErrorCode::UnknownOp, e))
        })();
        status(&mut c, r)
    })?;
    linker.func_wrap(
        MODULE,
        "op_call",
        |mut c: Ctx,
         id: i32,
         inputs_ptr: i32,
         n_inputs: i32,
         attrs_ptr: i32,
         attrs_len: i32,
         outputs_ptr: i32,
         max_outputs: i32| {
            let args = OpCall {
                id,
                inputs_ptr,
                n_inputs,
                attrs_ptr,
                attrs_len,
                outputs_ptr,
                max_outputs,
            };
            let r = op_call(&mut c, args);
            status(&mut c, r)
        },
    )?;
    define_compile(linker)?;
    super::dist::define(linker)?;
    super::vars::define(linker)
}

/// The compile group: compiled functions through the trampoline, and lazy mode.
fn define_compile(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        MODULE,
        "compile_fn",
        |mut c: Ctx,
         fn_index: i32,
         name_ptr: i32,
         name_len: i32,
         attrs_ptr: i32,
         attrs_len: i32| {
            let r = tracing::compile_fn(&mut c, fn_index, name_ptr, name_len, attrs_ptr, attrs_len);
            status(&mut c, r)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "compile_call",
        |mut c: Ctx, f: i32, inputs_ptr: i32, n_inputs: i32, outputs_ptr: i32, max_outputs: i32| {
            // A trap inside the traced guest function passes through as a trap.
            let r =
                tracing::compile_call(&mut c, f, inputs_ptr, n_inputs, outputs_ptr, max_outputs)?;
            Ok(status(&mut c, r))
        },
    )?;
    linker.func_wrap(MODULE, "compile_arg", |mut c: Ctx, i: i32| {
        let r = tracing::compile_arg(&mut c, i);
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "compile_result", |mut c: Ctx, h: i32| {
        let r = tracing::compile_result(&mut c, h);
        status(&mut c, r)
    })?;
    linker.func_wrap(
        MODULE,
        "compile_explain",
        |mut c: Ctx, f: i32, ptr: i32, cap: i32| {
            let r = tracing::compile_explain(&mut c, f, ptr, cap);
            status(&mut c, r)
        },
    )?;
    linker.func_wrap(MODULE, "compile_stats", |mut c: Ctx, f: i32, ptr: i32| {
        let r = tracing::compile_stats(&mut c, f, ptr);
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "lazy_begin", |mut c: Ctx| {
        let r = tracing::lazy_begin(&mut c);
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "lazy_sync", |mut c: Ctx| {
        let r = tracing::lazy_sync(&mut c);
        status(&mut c, r)
    })?;
    linker.func_wrap(MODULE, "lazy_end", |mut c: Ctx| {
        let r = tracing::lazy_end(&mut c);
        status(&mut c, r)
    })?;
    Ok(())
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

//! The `neuronlab` imports of ABI.md (the sys, tensor, op, compile, dist, vars, grad, fs, ckpt
//! and tok groups) and thin safe wrappers over them. Every `unsafe` block of the crate is in
//! this module.
//!
//! The wrappers pass Rust slices as `(ptr, len)` pairs, turn negative statuses into
//! [`Error`]s carrying the host's message, and follow the ABI's two-step protocol for
//! variable-size results (ask the size, then pass a buffer that large).

use crate::error::{Error, ErrorKind, Result};

mod ffi {
    // Pointers and `usize`-free integer types match the ABI's `i32` parameters on wasm32;
    // handles are `u32` values passed as `i32`.
    #[link(wasm_import_module = "neuronlab")]
    extern "C" {
        pub fn last_error(ptr: *mut u8, cap: i32) -> i32;
        pub fn print(stream: i32, ptr: *const u8, len: i32) -> i32;
        pub fn display(
            mime_ptr: *const u8,
            mime_len: i32,
            data_ptr: *const u8,
            data_len: i32,
        ) -> i32;
        pub fn clock_ns() -> i64;
        pub fn args(ptr: *mut u8, cap: i32) -> i32;
        pub fn device_time_ns() -> i64;
        pub fn fail(
            name_ptr: *const u8,
            name_len: i32,
            msg_ptr: *const u8,
            msg_len: i32,
            at_ptr: *const u8,
            at_len: i32,
        ) -> i32;
        pub fn collective_time_ns() -> i64;
        pub fn peak_flops(dtype: i32) -> i64;
        pub fn collective_exposed_ns() -> i64;
        pub fn memory_at_peak(role: i32) -> i64;
        pub fn memory_reset_peak() -> i32;

        pub fn tensor_create(
            dtype: i32,
            shape_ptr: *const i64,
            rank: i32,
            data_ptr: *const u8,
            data_len: i32,
        ) -> i32;
        pub fn tensor_dtype(h: u32) -> i32;
        pub fn tensor_rank(h: u32) -> i32;
        pub fn tensor_shape(h: u32, out_ptr: *mut i64, cap: i32) -> i32;
        pub fn tensor_numel(h: u32) -> i64;
        pub fn tensor_nbytes(h: u32) -> i64;
        pub fn tensor_read(h: u32, ptr: *mut u8, len: i32) -> i32;
        pub fn tensor_format(h: u32, ptr: *mut u8, cap: i32) -> i32;
        pub fn tensor_display(h: u32) -> i32;
        pub fn tensor_device(h: u32) -> i32;
        pub fn tensor_clone(h: u32) -> i32;
        pub fn tensor_drop(h: u32) -> i32;
        pub fn tensor_set_memory_role(h: u32, role: i32) -> i32;

        pub fn op_lookup(name_ptr: *const u8, name_len: i32) -> i32;
        pub fn op_call(
            id: i32,
            inputs_ptr: *const u32,
            n_inputs: i32,
            attrs_ptr: *const u8,
            attrs_len: i32,
            outputs_ptr: *mut u32,
            max_outputs: i32,
        ) -> i32;

        pub fn compile_fn(
            fn_index: i32,
            name_ptr: *const u8,
            name_len: i32,
            attrs_ptr: *const u8,
            attrs_len: i32,
        ) -> i32;
        pub fn compile_call(
            f: i32,
            inputs_ptr: *const u32,
            n_inputs: i32,
            outputs_ptr: *mut u32,
            max_outputs: i32,
        ) -> i32;
        pub fn compile_arg(i: i32) -> i32;
        pub fn compile_result(h: u32) -> i32;
        pub fn compile_explain(f: i32, ptr: *mut u8, cap: i32) -> i32;
        pub fn compile_stats(f: i32, out_ptr: *mut i64) -> i32;
        pub fn lazy_begin() -> i32;
        pub fn lazy_sync() -> i32;
        pub fn lazy_end() -> i32;

        pub fn dist_rank() -> i32;
        pub fn dist_world_size() -> i32;
        pub fn dist_new_group(ranks_ptr: *const u32, n: i32) -> i32;
        pub fn dist_group_size(group: u32) -> i32;
        pub fn dist_group_rank(group: u32) -> i32;
        pub fn dist_collective(
            op_ptr: *const u8,
            op_len: i32,
            group: u32,
            h: u32,
            attrs_ptr: *const u8,
            attrs_len: i32,
        ) -> i32;
        pub fn dist_barrier(group: u32) -> i32;
        pub fn dist_mesh_new(
            shape_ptr: *const i64,
            ndim: i32,
            names_ptr: *const u8,
            names_len: i32,
        ) -> i32;
        pub fn dist_mesh_group(mesh: u32, name_ptr: *const u8, name_len: i32) -> i32;
        pub fn dist_mesh_coord(mesh: u32, name_ptr: *const u8, name_len: i32) -> i32;
        pub fn dist_distribute(
            mesh: u32,
            h: u32,
            placements_ptr: *const u8,
            placements_len: i32,
        ) -> i32;
        pub fn dist_from_local(
            mesh: u32,
            h: u32,
            placements_ptr: *const u8,
            placements_len: i32,
        ) -> i32;
        pub fn dist_redistribute(dt: u32, placements_ptr: *const u8, placements_len: i32) -> i32;
        pub fn dist_full_tensor(dt: u32) -> i32;
        pub fn dist_to_local(dt: u32) -> i32;
        pub fn dist_describe(h: u32, ptr: *mut u8, cap: i32) -> i32;

        pub fn var_set_tensor(name_ptr: *const u8, name_len: i32, h: u32) -> i32;
        pub fn var_get_tensor(name_ptr: *const u8, name_len: i32) -> i32;
        pub fn var_set_value(
            name_ptr: *const u8,
            name_len: i32,
            kind: i32,
            ptr: *const u8,
            len: i32,
        ) -> i32;
        pub fn var_get_value(name_ptr: *const u8, name_len: i32, ptr: *mut u8, cap: i32) -> i32;

        pub fn grad_requires(h: u32) -> i32;
        pub fn grad_is_required(h: u32) -> i32;
        pub fn grad_backward(h: u32, grad_h: u32, retain_graph: i32) -> i32;
        pub fn grad_get(h: u32) -> i32;
        pub fn grad_set(h: u32, grad_h: u32) -> i32;
        pub fn grad_detach(h: u32) -> i32;
        pub fn grad_set_enabled(enabled: i32) -> i32;
        pub fn grad_compute(
            outputs_ptr: *const u32,
            n_outputs: i32,
            grads_ptr: *const u32,
            inputs_ptr: *const u32,
            n_inputs: i32,
            results_ptr: *mut u32,
            retain_graph: i32,
        ) -> i32;
        pub fn grad_assign(h: u32, data_h: u32) -> i32;

        pub fn fs_size(path_ptr: *const u8, path_len: i32) -> i64;
        pub fn fs_read(
            path_ptr: *const u8,
            path_len: i32,
            offset: i64,
            ptr: *mut u8,
            len: i32,
        ) -> i32;
        pub fn fs_write(
            path_ptr: *const u8,
            path_len: i32,
            data_ptr: *const u8,
            data_len: i32,
            append: i32,
        ) -> i32;
        pub fn fs_list(path_ptr: *const u8, path_len: i32, ptr: *mut u8, cap: i32) -> i32;
        pub fn fs_mkdir(path_ptr: *const u8, path_len: i32) -> i32;

        pub fn ckpt_info(path_ptr: *const u8, path_len: i32, ptr: *mut u8, cap: i32) -> i32;
        pub fn ckpt_load(
            path_ptr: *const u8,
            path_len: i32,
            handles_ptr: *mut u32,
            max: i32,
        ) -> i32;
        pub fn ckpt_save(
            path_ptr: *const u8,
            path_len: i32,
            names_ptr: *const u8,
            names_len: i32,
            handles_ptr: *const u32,
            n: i32,
            shard_bytes: i64,
        ) -> i32;

        pub fn tok_load(path_ptr: *const u8, path_len: i32) -> i32;
        pub fn tok_encode(
            t: u32,
            text_ptr: *const u8,
            text_len: i32,
            add_special_tokens: i32,
            ids_ptr: *mut i64,
            cap: i32,
        ) -> i32;
        pub fn tok_decode(
            t: u32,
            ids_ptr: *const i64,
            n_ids: i32,
            skip_special_tokens: i32,
            ptr: *mut u8,
            cap: i32,
        ) -> i32;
        pub fn tok_token_to_id(
            t: u32,
            token_ptr: *const u8,
            token_len: i32,
            id_ptr: *mut i64,
        ) -> i32;
        pub fn tok_vocab_size(t: u32) -> i32;
        pub fn tok_free(t: u32) -> i32;
    }
}

/// The `stream` argument of `print`.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    /// The cell's standard output.
    Stdout = 1,
    /// The cell's standard error.
    Stderr = 2,
}

/// A status as a result: `>= 0` is success, a negative value an error code.
#[track_caller]
fn check(status: i32) -> Result<i32> {
    if status >= 0 {
        Ok(status)
    } else {
        Err(host_error(status))
    }
}

#[track_caller]
fn check64(status: i64) -> Result<i64> {
    // Error codes are small negative numbers, so they fit an i32.
    if status >= 0 {
        Ok(status)
    } else {
        Err(host_error(i32::try_from(status).unwrap_or(i32::MIN)))
    }
}

/// A slice length as the ABI's `i32`.
#[track_caller]
fn abi_len(len: usize, what: &str) -> Result<i32> {
    i32::try_from(len).map_err(|_| {
        Error::new(
            ErrorKind::Invalid,
            format!("{what} has {len} elements, more than an ABI length (i32) can hold"),
        )
    })
}

/// Reads a variable-size byte result: asks its size with an empty buffer, then reads it.
/// Returns the raw negative status on failure.
#[track_caller]
fn read_bytes(mut read: impl FnMut(*mut u8, i32) -> i32) -> std::result::Result<Vec<u8>, i32> {
    let mut buf = Vec::new();
    loop {
        // `buf.len()` fits an i32: it is a length the host returned as one.
        let len = read(buf.as_mut_ptr(), buf.len() as i32);
        if len < 0 {
            return Err(len);
        }
        let len = len as usize;
        if len <= buf.len() {
            buf.truncate(len);
            return Ok(buf);
        }
        buf.resize(len, 0);
    }
}

/// The error for a negative status, with the host's message.
#[track_caller]
fn host_error(status: i32) -> Error {
    Error::new(ErrorKind::from_code(status), last_error())
}

/// The host's message for the most recent error.
fn last_error() -> String {
    // SAFETY: the host writes at most `cap` bytes at `ptr`, which `read_bytes` owns.
    match read_bytes(|ptr, cap| unsafe { ffi::last_error(ptr, cap) }) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(status) => format!("(no message: last_error returned {status})"),
    }
}

/// Writes text to the cell's stdout or stderr.
#[track_caller]
pub(crate) fn print(stream: Stream, text: &str) -> Result<()> {
    let len = abi_len(text.len(), "the text")?;
    // SAFETY: the host reads `len` bytes at `ptr`, which `text` owns.
    check(unsafe { ffi::print(stream as i32, text.as_ptr(), len) }).map(drop)
}

/// Tells the host what the guest is about to stop with (the caller traps next).
pub(crate) fn fail(name: &str, message: &str, at: &str) -> Result<()> {
    let name_len = abi_len(name.len(), "the failure's name")?;
    let message_len = abi_len(message.len(), "the failure's message")?;
    let at_len = abi_len(at.len(), "the failure's location")?;
    // SAFETY: the host reads each range, which `name`, `message` and `at` own.
    let status = unsafe {
        ffi::fail(
            name.as_ptr(),
            name_len,
            message.as_ptr(),
            message_len,
            at.as_ptr(),
            at_len,
        )
    };
    check(status).map(drop)
}

/// Shows rich output of a MIME type.
#[track_caller]
pub(crate) fn display(mime: &str, data: &[u8]) -> Result<()> {
    let mime_len = abi_len(mime.len(), "the MIME type")?;
    let data_len = abi_len(data.len(), "the data")?;
    // SAFETY: the host reads each range, which `mime` and `data` own.
    check(unsafe { ffi::display(mime.as_ptr(), mime_len, data.as_ptr(), data_len) }).map(drop)
}

/// Nanoseconds of host monotonic time since the instance started.
pub(crate) fn clock_ns() -> i64 {
    // SAFETY: no memory is passed.
    unsafe { ffi::clock_ns() }
}

/// Nanoseconds of modeled device time run on the guest's core since the instance started.
pub(crate) fn device_time_ns() -> i64 {
    // SAFETY: no memory is passed.
    unsafe { ffi::device_time_ns() }
}

/// The part of [`device_time_ns`] spent in collectives, nanoseconds.
pub(crate) fn collective_time_ns() -> i64 {
    // SAFETY: no memory is passed.
    unsafe { ffi::collective_time_ns() }
}

/// One NeuronCore's peak TensorEngine FLOP/s for a dtype code, or a negative error code.
pub(crate) fn peak_flops(dtype: i32) -> i64 {
    // SAFETY: no memory is passed.
    unsafe { ffi::peak_flops(dtype) }
}

/// The part of [`device_time_ns`] that is communication overlapping no compute.
pub(crate) fn collective_exposed_ns() -> i64 {
    // SAFETY: no memory is passed.
    unsafe { ffi::collective_exposed_ns() }
}

/// Bytes of a memory role on the guest's core at its peak.
#[track_caller]
pub(crate) fn memory_at_peak(role: i32) -> Result<i64> {
    // SAFETY: no memory is passed.
    check64(unsafe { ffi::memory_at_peak(role) })
}

/// Starts the core's peak again from what it holds now.
#[track_caller]
pub(crate) fn memory_reset_peak() -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::memory_reset_peak() }).map(drop)
}

/// Counts a tensor's storage as a memory role.
#[track_caller]
pub(crate) fn tensor_set_memory_role(h: u32, role: i32) -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tensor_set_memory_role(h, role) }).map(drop)
}

/// A new tensor from dense row-major little-endian data; returns its handle.
#[track_caller]
pub(crate) fn tensor_create(dtype: i32, shape: &[i64], data: &[u8]) -> Result<u32> {
    let rank = abi_len(shape.len(), "the shape")?;
    let data_len = abi_len(data.len(), "the data")?;
    // SAFETY: the host reads `rank` i64s at the shape pointer and `data_len` bytes at the
    // data pointer, which the slices own.
    let h =
        check(unsafe { ffi::tensor_create(dtype, shape.as_ptr(), rank, data.as_ptr(), data_len) })?;
    Ok(h as u32)
}

/// The dtype code of a tensor.
#[track_caller]
pub(crate) fn tensor_dtype(h: u32) -> Result<i32> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tensor_dtype(h) })
}

/// The number of dims of a tensor.
#[track_caller]
pub(crate) fn tensor_rank(h: u32) -> Result<usize> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tensor_rank(h) }).map(|r| r as usize)
}

/// The shape of a tensor.
#[track_caller]
pub(crate) fn tensor_shape(h: u32) -> Result<Vec<i64>> {
    // Most tensors have few dims: one call usually suffices.
    let mut dims = vec![0i64; 8];
    loop {
        let cap = abi_len(dims.len(), "the shape buffer")?;
        // SAFETY: the host writes at most `cap` i64s at the pointer, which `dims` owns.
        let rank = check(unsafe { ffi::tensor_shape(h, dims.as_mut_ptr(), cap) })? as usize;
        if rank <= dims.len() {
            dims.truncate(rank);
            return Ok(dims);
        }
        dims.resize(rank, 0);
    }
}

/// The number of elements of a tensor.
#[track_caller]
pub(crate) fn tensor_numel(h: u32) -> Result<i64> {
    // SAFETY: no memory is passed.
    check64(unsafe { ffi::tensor_numel(h) })
}

/// The size of a tensor's dense data in bytes.
#[track_caller]
pub(crate) fn tensor_nbytes(h: u32) -> Result<i64> {
    // SAFETY: no memory is passed.
    check64(unsafe { ffi::tensor_nbytes(h) })
}

/// A tensor's dense row-major little-endian data.
#[track_caller]
pub(crate) fn tensor_read(h: u32) -> Result<Vec<u8>> {
    let nbytes = tensor_nbytes(h)?;
    let len = usize::try_from(nbytes)
        .ok()
        .filter(|&n| i32::try_from(n).is_ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Memory,
                format!("the tensor holds {nbytes} bytes, more than a wasm32 guest can read"),
            )
        })?;
    let mut data = vec![0u8; len];
    // SAFETY: the host writes at most `len` bytes at the pointer, which `data` owns.
    let written = check(unsafe { ffi::tensor_read(h, data.as_mut_ptr(), len as i32) })?;
    data.truncate(written as usize);
    Ok(data)
}

/// A tensor's numpy-style text, in full.
#[track_caller]
pub(crate) fn tensor_format(h: u32) -> Result<String> {
    // SAFETY: the host writes at most `cap` bytes at `ptr`, which `read_bytes` owns.
    read_bytes(|ptr, cap| unsafe { ffi::tensor_format(h, ptr, cap) })
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(host_error)
}

/// Shows a tensor richly.
#[track_caller]
pub(crate) fn tensor_display(h: u32) -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tensor_display(h) }).map(drop)
}

/// The core a tensor lives on.
#[track_caller]
pub(crate) fn tensor_device(h: u32) -> Result<u32> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tensor_device(h) }).map(|d| d as u32)
}

/// A new handle to the same tensor.
#[track_caller]
pub(crate) fn tensor_clone(h: u32) -> Result<u32> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tensor_clone(h) }).map(|h| h as u32)
}

/// Frees a handle.
#[track_caller]
pub(crate) fn tensor_drop(h: u32) -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tensor_drop(h) }).map(drop)
}

/// An op's id by name.
#[track_caller]
pub(crate) fn op_lookup(name: &str) -> Result<i32> {
    let len = abi_len(name.len(), "the op name")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `name` owns.
    check(unsafe { ffi::op_lookup(name.as_ptr(), len) })
}

/// Runs an op: writes the output handles to `outputs` and returns how many there are.
#[track_caller]
pub(crate) fn op_call(id: i32, inputs: &[u32], attrs: &[u8], outputs: &mut [u32]) -> Result<usize> {
    let n_inputs = abi_len(inputs.len(), "the inputs")?;
    let attrs_len = abi_len(attrs.len(), "the attributes")?;
    let max_outputs = abi_len(outputs.len(), "the outputs")?;
    // SAFETY: the host reads `n_inputs` u32s and `attrs_len` bytes, and writes at most
    // `max_outputs` u32s, all within the slices passed.
    let n = check(unsafe {
        ffi::op_call(
            id,
            inputs.as_ptr(),
            n_inputs,
            attrs.as_ptr(),
            attrs_len,
            outputs.as_mut_ptr(),
            max_outputs,
        )
    })?;
    Ok(n as usize)
}

#[track_caller]
pub(crate) fn compile_fn(fn_index: i32, name: &str, attrs: &[u8]) -> Result<i32> {
    // SAFETY: both slices are valid for their lengths during the call.
    check(unsafe {
        ffi::compile_fn(
            fn_index,
            name.as_ptr(),
            name.len() as i32,
            attrs.as_ptr(),
            attrs.len() as i32,
        )
    })
}

#[track_caller]
pub(crate) fn compile_call(f: i32, inputs: &[u32], outputs: &mut [u32]) -> Result<usize> {
    // SAFETY: `inputs` is readable and `outputs` writable for their lengths during the call.
    check(unsafe {
        ffi::compile_call(
            f,
            inputs.as_ptr(),
            inputs.len() as i32,
            outputs.as_mut_ptr(),
            outputs.len() as i32,
        )
    })
    .map(|n| n as usize)
}

#[track_caller]
pub(crate) fn compile_arg(i: i32) -> Result<u32> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::compile_arg(i) }).map(|h| h as u32)
}

#[track_caller]
pub(crate) fn compile_result(h: u32) -> Result<()> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::compile_result(h) }).map(|_| ())
}

#[track_caller]
pub(crate) fn compile_explain(f: i32) -> Result<String> {
    // SAFETY: a null pointer with capacity 0 asks only for the length.
    let len = check(unsafe { ffi::compile_explain(f, std::ptr::null_mut(), 0) })?;
    let mut buf = vec![0u8; len as usize];
    // SAFETY: `buf` is writable for `len` bytes.
    check(unsafe { ffi::compile_explain(f, buf.as_mut_ptr(), len) })?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[track_caller]
pub(crate) fn compile_stats(f: i32) -> Result<[i64; 4]> {
    let mut out = [0i64; 4];
    // SAFETY: `out` is writable for the four `i64`s the import writes.
    check(unsafe { ffi::compile_stats(f, out.as_mut_ptr()) })?;
    Ok(out)
}

#[track_caller]
pub(crate) fn lazy_begin() -> Result<()> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::lazy_begin() }).map(|_| ())
}

#[track_caller]
pub(crate) fn lazy_sync() -> Result<()> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::lazy_sync() }).map(|_| ())
}

#[track_caller]
pub(crate) fn lazy_end() -> Result<()> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::lazy_end() }).map(|_| ())
}

/// This instance's rank in the world.
#[track_caller]
pub(crate) fn dist_rank() -> Result<u32> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::dist_rank() }).map(|r| r as u32)
}

/// The number of ranks in the world.
#[track_caller]
pub(crate) fn dist_world_size() -> Result<u32> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::dist_world_size() }).map(|n| n as u32)
}

/// A new group of the given global ranks, in ring order; returns its handle.
#[track_caller]
pub(crate) fn dist_new_group(ranks: &[u32]) -> Result<u32> {
    let n = abi_len(ranks.len(), "the rank list")?;
    // SAFETY: the host reads `n` u32s at the pointer, which `ranks` owns.
    check(unsafe { ffi::dist_new_group(ranks.as_ptr(), n) }).map(|h| h as u32)
}

/// The number of ranks in a group.
#[track_caller]
pub(crate) fn dist_group_size(group: u32) -> Result<usize> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::dist_group_size(group) }).map(|n| n as usize)
}

/// This rank's position in a group.
#[track_caller]
pub(crate) fn dist_group_rank(group: u32) -> Result<usize> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::dist_group_rank(group) }).map(|r| r as usize)
}

/// Runs the collective `op` on tensor `h` over `group`; returns the result's handle.
#[track_caller]
pub(crate) fn dist_collective(op: &str, group: u32, h: u32, attrs: &[u8]) -> Result<u32> {
    let op_len = abi_len(op.len(), "the collective's name")?;
    let attrs_len = abi_len(attrs.len(), "the attributes")?;
    // SAFETY: the host reads `op_len` bytes and `attrs_len` bytes, which `op` and `attrs` own.
    check(unsafe { ffi::dist_collective(op.as_ptr(), op_len, group, h, attrs.as_ptr(), attrs_len) })
        .map(|h| h as u32)
}

/// Waits until every rank of `group` has reached the barrier.
#[track_caller]
pub(crate) fn dist_barrier(group: u32) -> Result<()> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::dist_barrier(group) }).map(drop)
}

/// A new device mesh of `shape` with comma-separated dim `names`; returns its handle.
#[track_caller]
pub(crate) fn dist_mesh_new(shape: &[i64], names: &str) -> Result<u32> {
    let ndim = abi_len(shape.len(), "the mesh shape")?;
    let names_len = abi_len(names.len(), "the mesh dim names")?;
    // SAFETY: the host reads `ndim` i64s and `names_len` bytes, which `shape` and `names` own.
    check(unsafe { ffi::dist_mesh_new(shape.as_ptr(), ndim, names.as_ptr(), names_len) })
        .map(|h| h as u32)
}

/// This rank's group along the mesh dim `name`; returns its handle.
#[track_caller]
pub(crate) fn dist_mesh_group(mesh: u32, name: &str) -> Result<u32> {
    let len = abi_len(name.len(), "the mesh dim name")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `name` owns.
    check(unsafe { ffi::dist_mesh_group(mesh, name.as_ptr(), len) }).map(|h| h as u32)
}

/// This rank's coordinate along the mesh dim `name`.
#[track_caller]
pub(crate) fn dist_mesh_coord(mesh: u32, name: &str) -> Result<usize> {
    let len = abi_len(name.len(), "the mesh dim name")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `name` owns.
    check(unsafe { ffi::dist_mesh_coord(mesh, name.as_ptr(), len) }).map(|c| c as usize)
}

/// Distributes the whole tensor `h` over `mesh` with `placements`; returns the distributed
/// tensor's handle.
#[track_caller]
pub(crate) fn dist_distribute(mesh: u32, h: u32, placements: &str) -> Result<u32> {
    let len = abi_len(placements.len(), "the placements")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `placements` owns.
    check(unsafe { ffi::dist_distribute(mesh, h, placements.as_ptr(), len) }).map(|h| h as u32)
}

/// Wraps this rank's local tensor `h` as a distributed tensor over `mesh` with `placements`;
/// returns its handle.
#[track_caller]
pub(crate) fn dist_from_local(mesh: u32, h: u32, placements: &str) -> Result<u32> {
    let len = abi_len(placements.len(), "the placements")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `placements` owns.
    check(unsafe { ffi::dist_from_local(mesh, h, placements.as_ptr(), len) }).map(|h| h as u32)
}

/// A new distributed tensor with the target `placements`; returns its handle.
#[track_caller]
pub(crate) fn dist_redistribute(dt: u32, placements: &str) -> Result<u32> {
    let len = abi_len(placements.len(), "the placements")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `placements` owns.
    check(unsafe { ffi::dist_redistribute(dt, placements.as_ptr(), len) }).map(|h| h as u32)
}

/// The whole (replicated) tensor of a distributed tensor; returns its handle.
#[track_caller]
pub(crate) fn dist_full_tensor(dt: u32) -> Result<u32> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::dist_full_tensor(dt) }).map(|h| h as u32)
}

/// This rank's local shard of a distributed tensor; returns its handle.
#[track_caller]
pub(crate) fn dist_to_local(dt: u32) -> Result<u32> {
    // SAFETY: a scalar-only import.
    check(unsafe { ffi::dist_to_local(dt) }).map(|h| h as u32)
}

/// The one-line description of a group, mesh or distributed tensor, in full.
#[track_caller]
pub(crate) fn dist_describe(h: u32) -> Result<String> {
    // SAFETY: the host writes at most `cap` bytes at `ptr`, which `read_bytes` owns.
    read_bytes(|ptr, cap| unsafe { ffi::dist_describe(h, ptr, cap) })
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(host_error)
}

/// Makes the session variable `name` refer to tensor `h` (the handle stays the guest's).
#[track_caller]
pub(crate) fn var_set_tensor(name: &str, h: u32) -> Result<()> {
    let len = abi_len(name.len(), "the variable name")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `name` owns.
    check(unsafe { ffi::var_set_tensor(name.as_ptr(), len, h) }).map(drop)
}

/// A new handle to the tensor of the session variable `name`.
#[track_caller]
pub(crate) fn var_get_tensor(name: &str) -> Result<u32> {
    let len = abi_len(name.len(), "the variable name")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `name` owns.
    check(unsafe { ffi::var_get_tensor(name.as_ptr(), len) }).map(|h| h as u32)
}

/// Sets the session variable `name` to a value of `kind` (1: a plain value with the payload
/// `<type>\n<text>`; 0: a value local to its cell, with its type name as the payload).
#[track_caller]
pub(crate) fn var_set_value(name: &str, kind: i32, payload: &str) -> Result<()> {
    let name_len = abi_len(name.len(), "the variable name")?;
    let len = abi_len(payload.len(), "the value")?;
    // SAFETY: the host reads `name_len` bytes and `len` bytes, which `name` and `payload` own.
    check(unsafe { ffi::var_set_value(name.as_ptr(), name_len, kind, payload.as_ptr(), len) })
        .map(drop)
}

/// The payload `<type>\n<text>` of the plain session variable `name`, in full.
#[track_caller]
pub(crate) fn var_get_value(name: &str) -> Result<String> {
    let name_len = abi_len(name.len(), "the variable name")?;
    // SAFETY: the host reads `name_len` bytes at the name pointer, which `name` owns, and
    // writes at most `cap` bytes at `ptr`, which `read_bytes` owns.
    read_bytes(|ptr, cap| unsafe { ffi::var_get_value(name.as_ptr(), name_len, ptr, cap) })
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(host_error)
}

/// Marks the tensor behind `h` as a leaf that requires a gradient.
#[track_caller]
pub(crate) fn grad_requires(h: u32) -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::grad_requires(h) }).map(drop)
}

/// True when the tensor requires a gradient.
#[track_caller]
pub(crate) fn grad_is_required(h: u32) -> Result<bool> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::grad_is_required(h) }).map(|r| r != 0)
}

/// Backward from `h`, with its gradient `grad_h` (0: implicitly 1).
#[track_caller]
pub(crate) fn grad_backward(h: u32, grad_h: u32, retain_graph: bool) -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::grad_backward(h, grad_h, retain_graph as i32) }).map(drop)
}

/// The leaf's gradient handle, if it has one.
#[track_caller]
pub(crate) fn grad_get(h: u32) -> Result<Option<u32>> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::grad_get(h) }).map(|g| (g != 0).then_some(g as u32))
}

/// Sets the leaf's gradient (0: clears it).
#[track_caller]
pub(crate) fn grad_set(h: u32, grad_h: u32) -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::grad_set(h, grad_h) }).map(drop)
}

/// A new handle to the same data outside the graph.
#[track_caller]
pub(crate) fn grad_detach(h: u32) -> Result<u32> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::grad_detach(h) }).map(|g| g as u32)
}

/// Sets grad mode; returns the previous one.
pub(crate) fn grad_set_enabled(enabled: bool) -> bool {
    // SAFETY: no memory is passed; the import cannot fail.
    unsafe { ffi::grad_set_enabled(enabled as i32) != 0 }
}

/// The gradients of `outputs` (with `grads`, 0 for implicit) with respect to `inputs`.
#[track_caller]
pub(crate) fn grad_compute(
    outputs: &[u32],
    grads: &[u32],
    inputs: &[u32],
    retain_graph: bool,
) -> Result<Vec<u32>> {
    let n_outputs = abi_len(outputs.len(), "the outputs")?;
    let n_inputs = abi_len(inputs.len(), "the inputs")?;
    let mut results = vec![0u32; inputs.len()];
    // SAFETY: the host reads `n_outputs` handles at each of the first two pointers and
    // `n_inputs` at the third, and writes `n_inputs` handles to `results`; the slices own
    // that memory (`grads` has one entry per output).
    check(unsafe {
        ffi::grad_compute(
            outputs.as_ptr(),
            n_outputs,
            grads.as_ptr(),
            inputs.as_ptr(),
            n_inputs,
            results.as_mut_ptr(),
            retain_graph as i32,
        )
    })?;
    Ok(results)
}

/// Replaces `h`'s data with `data_h`'s, keeping its leaf.
#[track_caller]
pub(crate) fn grad_assign(h: u32, data_h: u32) -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::grad_assign(h, data_h) }).map(drop)
}

/// A string list as ABI.md encodes it, at the start of `bytes`: a `u32` count, then each
/// string as a `u32` length and its UTF-8 bytes. Returns the strings and the bytes after.
#[track_caller]
pub(crate) fn decode_strings<'a>(bytes: &'a [u8], what: &str) -> Result<(Vec<String>, &'a [u8])> {
    let bad = || {
        Error::new(
            ErrorKind::Invalid,
            format!("{what}: the host's string list is malformed"),
        )
    };
    let mut rest = bytes;
    let mut take = |n: usize| -> Result<&[u8]> {
        if rest.len() < n {
            return Err(bad());
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?);
    let strings = (0..count)
        .map(|_| {
            let len = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?) as usize;
            String::from_utf8(take(len)?.to_vec()).map_err(|_| bad())
        })
        .collect::<Result<Vec<String>>>()?;
    Ok((strings, rest))
}

/// The size in bytes of the file at the guest path `path`.
#[track_caller]
pub(crate) fn fs_size(path: &str) -> Result<u64> {
    let len = abi_len(path.len(), "the path")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `path` owns.
    check64(unsafe { ffi::fs_size(path.as_ptr(), len) }).map(|n| n as u64)
}

/// Reads up to `buf.len()` bytes of the file from byte `offset` into `buf`; how many it read.
#[track_caller]
pub(crate) fn fs_read(path: &str, offset: u64, buf: &mut [u8]) -> Result<usize> {
    let len = abi_len(path.len(), "the path")?;
    let cap = abi_len(buf.len(), "the buffer")?;
    let offset = i64::try_from(offset)
        .map_err(|_| Error::new(ErrorKind::Invalid, format!("offset {offset} is too large")))?;
    // SAFETY: the host reads `len` bytes of `path` and writes at most `cap` bytes into `buf`.
    check(unsafe { ffi::fs_read(path.as_ptr(), len, offset, buf.as_mut_ptr(), cap) })
        .map(|n| n as usize)
}

/// Writes `data` to the file, replacing its contents or after them (`append`).
#[track_caller]
pub(crate) fn fs_write(path: &str, data: &[u8], append: bool) -> Result<()> {
    let len = abi_len(path.len(), "the path")?;
    let data_len = abi_len(data.len(), "the data")?;
    // SAFETY: the host reads each range, which `path` and `data` own.
    check(unsafe { ffi::fs_write(path.as_ptr(), len, data.as_ptr(), data_len, append as i32) })
        .map(drop)
}

/// The entries of the folder at `path` (the grants for the empty path).
#[track_caller]
pub(crate) fn fs_list(path: &str) -> Result<Vec<String>> {
    let len = abi_len(path.len(), "the path")?;
    // SAFETY: the host reads `len` bytes of `path` and writes at most `cap` bytes at `ptr`,
    // which `read_bytes` owns.
    let bytes = read_bytes(|ptr, cap| unsafe { ffi::fs_list(path.as_ptr(), len, ptr, cap) })
        .map_err(host_error)?;
    decode_strings(&bytes, "fs_list").map(|(names, _)| names)
}

/// Makes the folder at `path`.
#[track_caller]
pub(crate) fn fs_mkdir(path: &str) -> Result<()> {
    let len = abi_len(path.len(), "the path")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `path` owns.
    check(unsafe { ffi::fs_mkdir(path.as_ptr(), len) }).map(drop)
}

/// The run's arguments: what follows `--` on `neuronlab run`.
#[track_caller]
pub(crate) fn args() -> Result<Vec<String>> {
    // SAFETY: the host writes at most `cap` bytes at `ptr`, which `read_bytes` owns.
    let bytes = read_bytes(|ptr, cap| unsafe { ffi::args(ptr, cap) }).map_err(host_error)?;
    decode_strings(&bytes, "args").map(|(args, _)| args)
}

/// A string list as ABI.md encodes it.
pub(crate) fn encode_strings<S: AsRef<str>>(strings: &[S], out: &mut Vec<u8>) {
    out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
    for s in strings {
        let s = s.as_ref().as_bytes();
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s);
    }
}

/// The tensor names and the metadata (key, value, ...) of the checkpoint at `path`.
#[track_caller]
pub(crate) fn ckpt_info(path: &str) -> Result<(Vec<String>, Vec<String>)> {
    let len = abi_len(path.len(), "the path")?;
    // SAFETY: the host reads `len` bytes of `path` and writes at most `cap` bytes at `ptr`,
    // which `read_bytes` owns.
    let bytes = read_bytes(|ptr, cap| unsafe { ffi::ckpt_info(path.as_ptr(), len, ptr, cap) })
        .map_err(host_error)?;
    let (names, rest) = decode_strings(&bytes, "ckpt_info")?;
    let (metadata, _) = decode_strings(rest, "ckpt_info")?;
    Ok((names, metadata))
}

/// Loads the checkpoint at `path` into `handles` (at least as many as it holds); returns
/// how many it wrote.
#[track_caller]
pub(crate) fn ckpt_load(path: &str, handles: &mut [u32]) -> Result<usize> {
    let len = abi_len(path.len(), "the path")?;
    let max = abi_len(handles.len(), "the handle buffer")?;
    // SAFETY: the host reads `len` bytes of `path` and writes at most `max` u32s into
    // `handles`.
    check(unsafe { ffi::ckpt_load(path.as_ptr(), len, handles.as_mut_ptr(), max) })
        .map(|n| n as usize)
}

/// Saves the tensors `handles`, named by the encoded `names` (names, then metadata pairs);
/// returns the number of files written.
#[track_caller]
pub(crate) fn ckpt_save(
    path: &str,
    names: &[u8],
    handles: &[u32],
    shard_bytes: u64,
) -> Result<usize> {
    let len = abi_len(path.len(), "the path")?;
    let names_len = abi_len(names.len(), "the names")?;
    let n = abi_len(handles.len(), "the tensors")?;
    let shard_bytes = i64::try_from(shard_bytes).unwrap_or(i64::MAX);
    // SAFETY: the host reads each range, which `path`, `names` and `handles` own.
    check(unsafe {
        ffi::ckpt_save(
            path.as_ptr(),
            len,
            names.as_ptr(),
            names_len,
            handles.as_ptr(),
            n,
            shard_bytes,
        )
    })
    .map(|n| n as usize)
}

/// A tokenizer handle for the `tokenizer.json` at the guest path `path`.
#[track_caller]
pub(crate) fn tok_load(path: &str) -> Result<u32> {
    let len = abi_len(path.len(), "the path")?;
    // SAFETY: the host reads `len` bytes at the pointer, which `path` owns.
    check(unsafe { ffi::tok_load(path.as_ptr(), len) }).map(|h| h as u32)
}

/// The ids `text` encodes to.
#[track_caller]
pub(crate) fn tok_encode(t: u32, text: &str, add_special_tokens: bool) -> Result<Vec<i64>> {
    let len = abi_len(text.len(), "the text")?;
    // Text mostly encodes to fewer ids than half its bytes; else a second call, with room for
    // every id, encodes it again.
    let mut ids = vec![0i64; text.len() / 2 + 16];
    loop {
        let cap = abi_len(ids.len(), "the id buffer")?;
        // SAFETY: the host reads `len` bytes of `text` and writes at most `cap` i64s into
        // `ids`.
        let n = check(unsafe {
            ffi::tok_encode(
                t,
                text.as_ptr(),
                len,
                add_special_tokens as i32,
                ids.as_mut_ptr(),
                cap,
            )
        })? as usize;
        if n <= ids.len() {
            ids.truncate(n);
            return Ok(ids);
        }
        ids.resize(n, 0);
    }
}

/// The text `ids` decode to.
#[track_caller]
pub(crate) fn tok_decode(t: u32, ids: &[i64], skip_special_tokens: bool) -> Result<String> {
    let n = abi_len(ids.len(), "the ids")?;
    // SAFETY: the host reads `n` i64s of `ids` and writes at most `cap` bytes at `ptr`, which
    // `read_bytes` owns.
    let bytes = read_bytes(|ptr, cap| unsafe {
        ffi::tok_decode(t, ids.as_ptr(), n, skip_special_tokens as i32, ptr, cap)
    })
    .map_err(host_error)?;
    String::from_utf8(bytes).map_err(|_| {
        Error::new(
            ErrorKind::Invalid,
            "tok_decode: the host's text is not UTF-8".to_string(),
        )
    })
}

/// The id of `token`, if the vocabulary has it.
#[track_caller]
pub(crate) fn tok_token_to_id(t: u32, token: &str) -> Result<Option<i64>> {
    let len = abi_len(token.len(), "the token")?;
    let mut id = 0i64;
    // SAFETY: the host reads `len` bytes of `token` and writes one i64 at `&mut id`.
    let found = check(unsafe { ffi::tok_token_to_id(t, token.as_ptr(), len, &mut id) })?;
    Ok((found == 1).then_some(id))
}

/// The vocabulary's size, added tokens included.
#[track_caller]
pub(crate) fn tok_vocab_size(t: u32) -> Result<usize> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tok_vocab_size(t) }).map(|n| n as usize)
}

/// Frees a tokenizer handle.
#[track_caller]
pub(crate) fn tok_free(t: u32) -> Result<()> {
    // SAFETY: no memory is passed.
    check(unsafe { ffi::tok_free(t) }).map(drop)
}

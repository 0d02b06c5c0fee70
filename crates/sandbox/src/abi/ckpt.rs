//! The `ckpt` group of imports (ABI.md "ckpt"): safetensors checkpoints in the granted
//! folders, loaded straight onto the guest's core and saved from its tensors, through
//! [`crate::checkpoint`]. Paths are checked against the grants as the fs group's are,
//! including the shards an index names.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::compile::before_data_read;
use super::context::{
    check_interrupt, check_n_inputs, decode_strings, encode_strings, memory, range, read, read_str,
    status, write_capped, write_new_handles, Ctx,
};
use super::table::{imports, Import};
use crate::checkpoint::{self, CheckpointError, Contents, FailureKind};
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;

/// The ckpt group, in ABI.md's order.
pub(crate) const CKPT: &[Import] = imports! { Ckpt;
    fn ckpt_info(c, path_ptr: i32, path_len: i32, ptr: i32, cap: i32) -> i32 {
        let r = info(&mut c, path_ptr, path_len, ptr, cap);
        status(&mut c, r)
    }
    fn ckpt_load(c, path_ptr: i32, path_len: i32, handles_ptr: i32, max: i32) -> i32 {
        let r = load(&mut c, path_ptr, path_len, handles_ptr, max);
        status(&mut c, r)
    }
    fn ckpt_save(
        c, path_ptr: i32, path_len: i32, names_ptr: i32, names_len: i32, handles_ptr: i32,
        n: i32, shard_bytes: i64
    ) -> i32 {
        let r = save(&mut c, path_ptr, path_len, names_ptr, names_len, handles_ptr, n, shard_bytes);
        status(&mut c, r)
    }
};

impl From<CheckpointError> for Fail {
    fn from(e: CheckpointError) -> Fail {
        let code = match e.kind {
            FailureKind::File => ErrorCode::Fs,
            FailureKind::Memory => ErrorCode::Memory,
            FailureKind::Invalid => ErrorCode::Invalid,
            FailureKind::Cancelled => ErrorCode::Cancelled,
        };
        Fail(code, e.message)
    }
}

/// The checkpoint at the guest path `(ptr, len)`, its headers read and checked.
fn inspect(c: &mut Ctx, ptr: i32, len: i32) -> HostResult<Contents> {
    check_interrupt(c)?;
    let path = read_str(c, ptr, len, "the path")?;
    let files = c.data().shared.files.clone();
    Ok(checkpoint::inspect(&path, &|p, need| {
        files.resolve(p, need)
    })?)
}

fn info(c: &mut Ctx, path_ptr: i32, path_len: i32, ptr: i32, cap: i32) -> HostResult<i32> {
    let contents = inspect(c, path_ptr, path_len)?;
    let names: Vec<&str> = contents.names().collect();
    let metadata: Vec<&str> = contents
        .metadata()
        .iter()
        .flat_map(|(k, v)| [k.as_str(), v.as_str()])
        .collect();
    let mut out = encode_strings(&names);
    out.extend(encode_strings(&metadata));
    write_capped(c, ptr, cap, &out)
}

fn load(c: &mut Ctx, path_ptr: i32, path_len: i32, handles_ptr: i32, max: i32) -> HostResult<i32> {
    let contents = inspect(c, path_ptr, path_len)?;
    let n = contents.names().count();
    if max < 0 || (max as usize) < n {
        return Err(Fail(
            ErrorCode::TooSmall,
            format!(
                "the checkpoint holds {n} tensors but the handle buffer holds {max}; nothing \
                 was loaded (ckpt_info lists them)"
            ),
        ));
    }
    // Checked before anything is read, so a bad buffer costs no load.
    let mem_len = memory(c)?.data_size(&*c);
    range(
        mem_len,
        handles_ptr,
        i32::try_from(n * 4).unwrap_or(i32::MAX),
    )?;
    let state = c.data();
    let interrupt = state.interrupt.clone();
    let tensors = contents.load(&state.runtime, state.core, &|| {
        interrupt.load(Ordering::SeqCst)
    })?;
    write_new_handles(
        c,
        tensors.into_iter().map(|(_, t)| GuestValue::Eager(t)),
        handles_ptr,
    )
}

#[allow(clippy::too_many_arguments)]
fn save(
    c: &mut Ctx,
    path_ptr: i32,
    path_len: i32,
    names_ptr: i32,
    names_len: i32,
    handles_ptr: i32,
    n: i32,
    shard_bytes: i64,
) -> HostResult<i32> {
    check_interrupt(c)?;
    let path = read_str(c, path_ptr, path_len, "the path")?;
    check_n_inputs(n)?;
    let shard_bytes = match shard_bytes {
        0 => None,
        s if s > 0 => Some(s as u64),
        s => {
            return Err(Fail(
                ErrorCode::Invalid,
                format!("shard_bytes {s} is negative: 0 saves one file, more a sharded folder"),
            ))
        }
    };
    let blob = read(c, names_ptr, names_len)?;
    let (names, rest) = decode_strings(&blob, "the tensor names")?;
    let (pairs, rest) = decode_strings(rest, "the metadata")?;
    if names.len() != n as usize || pairs.len() % 2 != 0 || !rest.is_empty() {
        return Err(Fail(
            ErrorCode::Invalid,
            format!(
                "the names hold {} names and {} metadata strings{}; they must be {n} names, \
                 then key-value pairs",
                names.len(),
                pairs.len(),
                if rest.is_empty() {
                    ""
                } else {
                    " and more bytes"
                }
            ),
        ));
    }
    let metadata: BTreeMap<String, String> = pairs
        .chunks_exact(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    let raw = read(c, handles_ptr, n * 4)?;
    let mut tensors = Vec::with_capacity(names.len());
    for (name, h) in names.into_iter().zip(raw.chunks_exact(4)) {
        let h = u32::from_le_bytes(h.try_into().expect("4 bytes")) as i32;
        tensors.push((
            name,
            before_data_read(c, h, "ckpt_save (saving a checkpoint)")?,
        ));
    }
    let files = c.data().shared.files.clone();
    let written = checkpoint::save(
        &path,
        &|p, need| files.resolve(p, need),
        &tensors,
        &metadata,
        shard_bytes,
    )?;
    Ok(written as i32)
}

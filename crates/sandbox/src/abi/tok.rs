//! The `tok` group of imports (ABI.md "tok"): Hugging Face tokenizers, run on the host by the
//! `tokenizers` crate, loaded from a `tokenizer.json` in a granted folder.
//!
//! The file's path goes through the grants as the fs group's paths do. A tokenizer is a
//! guest handle, numbered with tensor handles and checked like them; using one where a tensor
//! is expected, or a tensor where a tokenizer is, is `ERR_HANDLE` naming both kinds. Calls
//! into the library run under [`guarded`], so a panic in it on a strange file is an error
//! and not a trap.

use std::io::Read;
use std::sync::Arc;

use tokenizers::Tokenizer;

use super::context::{check_interrupt, read, read_str, status, value, write, write_capped, Ctx};
use super::fs::{fs_error, io_error, resolve};
use super::table::{imports, Import};
use crate::grants::Need;
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;
use neuronlab_core::device::host::HOST_MEM_LIMIT_VAR;
use neuronlab_core::events::fmt::{bytes, bytes_exact};
use neuronlab_core::runtime::guarded;

/// The largest `tokenizer.json` `tok_load` reads: the largest published ones (a vocabulary of
/// 262,144 tokens) are about 35 MB.
const MAX_FILE_BYTES: u64 = 100 << 20;

/// The most text one `tok_encode` takes: encoding keeps tens of bytes per token on the host.
const MAX_TEXT_BYTES: usize = 16 << 20;

/// The most ids one `tok_decode` takes.
const MAX_IDS: usize = 4 << 20;

/// The tok group, in ABI.md's order.
pub(crate) const TOK: &[Import] = imports! { Tok;
    fn tok_load(c, path_ptr: i32, path_len: i32) -> i32 {
        let r = load(&mut c, path_ptr, path_len);
        status(&mut c, r)
    }
    fn tok_encode(
        c, t: i32, text_ptr: i32, text_len: i32, add_special_tokens: i32, ids_ptr: i32, cap: i32
    ) -> i32 {
        let r = encode(&mut c, t, text_ptr, text_len, add_special_tokens, ids_ptr, cap);
        status(&mut c, r)
    }
    fn tok_decode(
        c, t: i32, ids_ptr: i32, n_ids: i32, skip_special_tokens: i32, ptr: i32, cap: i32
    ) -> i32 {
        let r = decode(&mut c, t, ids_ptr, n_ids, skip_special_tokens, ptr, cap);
        status(&mut c, r)
    }
    fn tok_token_to_id(c, t: i32, token_ptr: i32, token_len: i32, id_ptr: i32) -> i32 {
        let r = token_to_id(&mut c, t, token_ptr, token_len, id_ptr);
        status(&mut c, r)
    }
    fn tok_vocab_size(c, t: i32) -> i32 {
        let r = tokenizer(&c, t).map(|tok| {
            i32::try_from(tok.get_vocab_size(true)).unwrap_or(i32::MAX)
        });
        status(&mut c, r)
    }
    fn tok_free(c, t: i32) -> i32 {
        let r = tokenizer(&c, t).and_then(|_| {
            c.data_mut().handles.remove(t as u32)?;
            Ok(0)
        });
        status(&mut c, r)
    }
};

/// The tokenizer behind handle `t`, or why the handle is not one.
fn tokenizer(c: &Ctx, t: i32) -> HostResult<Arc<Tokenizer>> {
    let kind = match value(c, t) {
        Ok(GuestValue::Tokenizer(tok)) => return Ok(tok),
        Ok(GuestValue::Eager(_) | GuestValue::Traced(_)) => "a tensor",
        Ok(GuestValue::Dist(d)) => d.kind(),
        Ok(GuestValue::Gone(why)) => return Err(Fail(ErrorCode::Handle, why)),
        Err(Fail(code, message)) => {
            return Err(Fail(
                code,
                format!("{message}; a tokenizer handle comes from tok_load"),
            ))
        }
    };
    Err(Fail(
        ErrorCode::Handle,
        format!("the handle is {kind}, not a tokenizer; tok_load loads one"),
    ))
}

/// A flag argument: 0 or 1.
fn flag(v: i32, what: &str) -> HostResult<bool> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Fail(
            ErrorCode::Invalid,
            format!("{what} is {v}: pass 0 or 1"),
        )),
    }
}

fn load(c: &mut Ctx, path_ptr: i32, path_len: i32) -> HostResult<i32> {
    let (path, host) = resolve(c, path_ptr, path_len, Need::Read)?;
    if host.is_dir() {
        return Err(fs_error(format!(
            "`{path}` is a folder; name its `tokenizer.json` (`{}/tokenizer.json`)",
            path.trim_end_matches('/')
        )));
    }
    let file = std::fs::File::open(&host).map_err(|e| io_error("open", &path, e))?;
    let len = file
        .metadata()
        .map_err(|e| io_error("read", &path, e))?
        .len();
    let too_large = |why: String| {
        Fail(
            ErrorCode::Memory,
            format!(
                "`{path}` holds {}, {why}; nothing was read",
                bytes_exact(len)
            ),
        )
    };
    if len > MAX_FILE_BYTES {
        return Err(too_large(format!(
            "more than the {} a tokenizer file may have (the largest published \
             tokenizer.json files are about 35 MB)",
            bytes_exact(MAX_FILE_BYTES)
        )));
    }
    let memory = c.data().runtime.memory();
    let host_free = memory.host_limit().saturating_sub(memory.host_in_use());
    if len > host_free {
        return Err(too_large(format!(
            "more than the {} left of the {} host limit; free tensors, or raise \
             {HOST_MEM_LIMIT_VAR}",
            bytes(host_free),
            bytes(memory.host_limit())
        )));
    }
    // At most one byte past the cap, should the file grow between the check and the read.
    let mut json = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(|e| io_error("read", &path, e))?;
    check_interrupt(c)?;
    let parsed = guarded("tok_load", || Tokenizer::from_bytes(&json))?;
    let tok = parsed.map_err(|e| {
        fs_error(format!(
            "`{path}` is not a valid tokenizer.json: {e}; use the `tokenizer.json` of a Hugging \
             Face model folder, or one saved by Python's `tokenizer.save(path)`"
        ))
    })?;
    Ok(c.data_mut()
        .handles
        .insert(GuestValue::Tokenizer(Arc::new(tok)))? as i32)
}

fn encode(
    c: &mut Ctx,
    t: i32,
    text_ptr: i32,
    text_len: i32,
    add_special_tokens: i32,
    ids_ptr: i32,
    cap: i32,
) -> HostResult<i32> {
    check_interrupt(c)?;
    let tok = tokenizer(c, t)?;
    let add_special_tokens = flag(add_special_tokens, "add_special_tokens")?;
    if cap < 0 {
        return Err(Fail(ErrorCode::Bounds, format!("negative capacity {cap}")));
    }
    if usize::try_from(text_len).is_ok_and(|n| n > MAX_TEXT_BYTES) {
        return Err(Fail(
            ErrorCode::Memory,
            format!(
                "the text holds {} bytes, more than the {} one tok_encode takes; encode it in \
                 pieces (at line or document boundaries)",
                text_len,
                bytes(MAX_TEXT_BYTES as u64)
            ),
        ));
    }
    let text = read_str(c, text_ptr, text_len, "the text")?;
    let encoding = guarded("tok_encode", || {
        tok.encode_fast(text.as_str(), add_special_tokens)
    })?
    .map_err(|e| Fail(ErrorCode::Invalid, format!("cannot encode the text: {e}")))?;
    let ids = encoding.get_ids();
    let n = i32::try_from(ids.len()).map_err(|_| {
        Fail(
            ErrorCode::Invalid,
            "the text encodes to too many ids".into(),
        )
    })?;
    let out: Vec<u8> = ids[..ids.len().min(cap as usize)]
        .iter()
        .flat_map(|&id| i64::from(id).to_le_bytes())
        .collect();
    write(c, ids_ptr, &out)?;
    Ok(n)
}

fn decode(
    c: &mut Ctx,
    t: i32,
    ids_ptr: i32,
    n_ids: i32,
    skip_special_tokens: i32,
    ptr: i32,
    cap: i32,
) -> HostResult<i32> {
    check_interrupt(c)?;
    let tok = tokenizer(c, t)?;
    let skip_special_tokens = flag(skip_special_tokens, "skip_special_tokens")?;
    if n_ids < 0 || n_ids as usize > MAX_IDS {
        return Err(Fail(
            ErrorCode::Invalid,
            format!("n_ids {n_ids} is outside 0..={MAX_IDS}; decode longer sequences in pieces"),
        ));
    }
    let raw = read(c, ids_ptr, n_ids * 8)?;
    let vocab = tok.get_vocab_size(true);
    let mut ids = Vec::with_capacity(n_ids as usize);
    for (i, b) in raw.chunks_exact(8).enumerate() {
        let id = i64::from_le_bytes(b.try_into().expect("8 bytes"));
        match u32::try_from(id)
            .ok()
            .filter(|&id| tok.id_to_token(id).is_some())
        {
            Some(id) => ids.push(id),
            None => {
                return Err(Fail(
                    ErrorCode::Invalid,
                    format!(
                        "id {id} (at {i}) is not in the tokenizer's vocabulary of {vocab} \
                         tokens; decode only ids its encode or token_to_id gave"
                    ),
                ))
            }
        }
    }
    let text = guarded("tok_decode", || tok.decode(&ids, skip_special_tokens))?
        .map_err(|e| Fail(ErrorCode::Invalid, format!("cannot decode the ids: {e}")))?;
    write_capped(c, ptr, cap, text.as_bytes())
}

fn token_to_id(
    c: &mut Ctx,
    t: i32,
    token_ptr: i32,
    token_len: i32,
    id_ptr: i32,
) -> HostResult<i32> {
    let tok = tokenizer(c, t)?;
    let token = read_str(c, token_ptr, token_len, "the token")?;
    match tok.token_to_id(&token) {
        Some(id) => {
            write(c, id_ptr, &i64::from(id).to_le_bytes())?;
            Ok(1)
        }
        None => Ok(0),
    }
}

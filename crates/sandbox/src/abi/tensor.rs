//! The `tensor` group of imports (ABI.md "tensor"): creating tensors from guest data, their
//! shapes and dtypes, reading and printing them, and their handles.

use neuronlab_core::device::Role;
use neuronlab_core::tensor::{checked_numel, format_tensor, Buffer, DType, FormatOptions};

use super::compile::before_data_read;
use super::context::{
    check_interrupt, insert, meta, read, status, status64, value, write, write_capped, Ctx,
};
use super::table::{imports, Import};
use crate::guest_output::GuestOutput;
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;

/// Most dims a tensor created by a guest may have.
const MAX_RANK: usize = 64;

/// The tensor group, in ABI.md's order.
pub(crate) const TENSOR: &[Import] = imports! { Tensor;
    fn tensor_create(c, dtype: i32, shape_ptr: i32, rank: i32, data_ptr: i32, data_len: i32) -> i32 {
        let r = tensor_create(&mut c, dtype, shape_ptr, rank, data_ptr, data_len);
        status(&mut c, r)
    }
    fn tensor_dtype(c, h: i32) -> i32 {
        let r = meta(&c, h).map(|m| m.dtype.code() as i32);
        status(&mut c, r)
    }
    fn tensor_rank(c, h: i32) -> i32 {
        let r = meta(&c, h).map(|m| m.shape.len() as i32);
        status(&mut c, r)
    }
    fn tensor_shape(c, h: i32, ptr: i32, cap: i32) -> i32 {
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
    }
    fn tensor_numel(c, h: i32) -> i64 {
        let r = meta(&c, h).map(|m| m.numel() as i64);
        status64(&mut c, r)
    }
    fn tensor_nbytes(c, h: i32) -> i64 {
        let r = meta(&c, h).map(|m| m.nbytes() as i64);
        status64(&mut c, r)
    }
    fn tensor_read(c, h: i32, ptr: i32, len: i32) -> i32 {
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
    }
    fn tensor_format(c, h: i32, ptr: i32, cap: i32) -> i32 {
        let r = (|| {
            let t = before_data_read(&mut c, h, "tensor_format (printing)")?;
            let text = format_tensor(&t, &FormatOptions::default());
            write_capped(&mut c, ptr, cap, text.as_bytes())
        })();
        status(&mut c, r)
    }
    fn tensor_display(c, h: i32) -> i32 {
        let r = before_data_read(&mut c, h, "tensor_display").map(|t| {
            (c.data_mut().output)(GuestOutput::Tensor(t));
            0
        });
        status(&mut c, r)
    }
    fn tensor_device(c, h: i32) -> i32 {
        let core = c.data().core.0 as i32;
        let r = value(&c, h).map(|v| match v {
            GuestValue::Eager(t) => t.device().0 as i32,
            _ => core,
        });
        status(&mut c, r)
    }
    fn tensor_clone(c, h: i32) -> i32 {
        let r = value(&c, h).and_then(|v| Ok(c.data_mut().handles.insert(v)? as i32));
        status(&mut c, r)
    }
    fn tensor_drop(c, h: i32) -> i32 {
        let r = c
            .data_mut()
            .handles
            .remove(h as u32)
            .map(|_| 0)
            .map_err(Fail::from);
        status(&mut c, r)
    }
    #[since(1, 10)]
    fn tensor_set_memory_role(c, h: i32, role: i32) -> i32 {
        let r = memory_role(role).and_then(|role| {
            let t = before_data_read(&mut c, h, "tensor_set_memory_role")?;
            t.set_memory_role(role);
            Ok(0)
        });
        status(&mut c, r)
    }
};

/// The memory role with ABI code `code`.
pub(crate) fn memory_role(code: i32) -> HostResult<Role> {
    u8::try_from(code)
        .ok()
        .and_then(Role::from_code)
        .ok_or_else(|| {
            Fail(
                ErrorCode::Invalid,
                format!("{code} is not a memory role code (0..=5, see ABI.md \"Memory roles\")"),
            )
        })
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

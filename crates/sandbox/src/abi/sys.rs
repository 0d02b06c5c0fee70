//! The `sys` group of imports (ABI.md "sys"): the last error, output, displays, the host
//! clock, the run's arguments, the core's modeled device clock (and its collective part), the
//! core's peak matmul throughput, and the failure a guest reports before it traps.

use super::context::{encode_strings, read, read_str, status, status64, write_capped, Ctx};
use super::table::{imports, Import};
use crate::guest_error::Reported;
use crate::guest_output::GuestOutput;
use crate::status::{ErrorCode, Fail};
use neuronlab_core::DType;

/// The sys group, in ABI.md's order.
pub(crate) const SYS: &[Import] = imports! { Sys;
    fn last_error(c, ptr: i32, cap: i32) -> i32 {
        let msg = c.data().last_error.clone();
        let r = write_capped(&mut c, ptr, cap, msg.as_bytes());
        status(&mut c, r)
    }
    fn print(c, stream: i32, ptr: i32, len: i32) -> i32 {
        let r = (|| {
            let text = read_str(&mut c, ptr, len, "the printed text")?;
            let out = match stream {
                1 => GuestOutput::Stdout(text),
                2 => {
                    c.data_mut().wrote_stderr = true;
                    GuestOutput::Stderr(text)
                }
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
    }
    fn display(c, mime_ptr: i32, mime_len: i32, data_ptr: i32, data_len: i32) -> i32 {
        let r = (|| {
            let mime = read_str(&mut c, mime_ptr, mime_len, "the MIME type")?;
            let data = read(&mut c, data_ptr, data_len)?;
            let output = GuestOutput::from_display(mime, data)
                .map_err(|e| Fail(ErrorCode::Invalid, e))?;
            (c.data_mut().output)(output);
            Ok(0)
        })();
        status(&mut c, r)
    }
    fn clock_ns(c) -> i64 {
        c.data().started.elapsed().as_nanos() as i64
    }
    #[since(1, 5)]
    fn args(c, ptr: i32, cap: i32) -> i32 {
        let list = encode_strings(&c.data().shared.args);
        let r = write_capped(&mut c, ptr, cap, &list);
        status(&mut c, r)
    }
    #[since(1, 6)]
    fn device_time_ns(c) -> i64 {
        let state = c.data();
        let us = state.runtime.bus().device_us(state.core) - state.device_started_us;
        (us * 1e3).round().max(0.0) as i64
    }
    #[since(1, 7)]
    fn fail(c, name_ptr: i32, name_len: i32, msg_ptr: i32, msg_len: i32, at_ptr: i32, at_len: i32) -> i32 {
        let r = (|| {
            let name = read_str(&mut c, name_ptr, name_len, "the failure's name")?;
            if name.is_empty()
                || name.len() > MAX_FAILURE_NAME
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(Fail(
                    ErrorCode::Invalid,
                    format!(
                        "a failure's name is 1 to {MAX_FAILURE_NAME} ASCII letters, digits or \
                         underscores, like `Panic` or `OpError`"
                    ),
                ));
            }
            let message = capped_text(&mut c, msg_ptr, msg_len, "the failure's message")?;
            let location = capped_text(&mut c, at_ptr, at_len, "the failure's location")?;
            c.data_mut().reported = Some(Box::new(Reported {
                name,
                message,
                location: (!location.is_empty()).then_some(location),
            }));
            Ok(0)
        })();
        status(&mut c, r)
    }
    #[since(1, 8)]
    fn collective_time_ns(c) -> i64 {
        let state = c.data();
        let us = state.runtime.bus().collective_us(state.core) - state.collective_started_us;
        (us * 1e3).round().max(0.0) as i64
    }
    #[since(1, 8)]
    fn peak_flops(c, dtype: i32) -> i64 {
        let r = u32::try_from(dtype)
            .ok()
            .and_then(DType::from_code)
            .map(|d| c.data().runtime.topology().tensor_flops(d).round() as i64)
            .ok_or_else(|| {
                Fail(
                    ErrorCode::Invalid,
                    format!("{dtype} is not a dtype code (0..=7, see ABI.md)"),
                )
            });
        status64(&mut c, r)
    }
    #[since(1, 10)]
    fn collective_exposed_ns(c) -> i64 {
        let state = c.data();
        let us = state.runtime.bus().exposed_collective_us(state.core) - state.exposed_started_us;
        (us * 1e3).round().max(0.0) as i64
    }
    #[since(1, 10)]
    fn memory_at_peak(c, role: i32) -> i64 {
        let r = super::tensor::memory_role(role).and_then(|role| {
            let state = c.data();
            let stats = state.runtime.memory().stats(state.core).map_err(|e| {
                Fail(ErrorCode::Invalid, e.to_string())
            })?;
            Ok(stats.at_peak[role] as i64)
        });
        status64(&mut c, r)
    }
    #[since(1, 10)]
    fn memory_reset_peak(c) -> i32 {
        let state = c.data();
        let r = state
            .runtime
            .memory()
            .reset_peak(state.core)
            .map(|()| 0)
            .map_err(|e| Fail(ErrorCode::Invalid, e.to_string()));
        status(&mut c, r)
    }
};

/// The longest failure name `fail` takes, in bytes.
const MAX_FAILURE_NAME: usize = 64;
/// The most of a failure's message or location `fail` keeps, in bytes.
const MAX_FAILURE_TEXT: usize = 64 << 10;

/// Guest text cut to [`MAX_FAILURE_TEXT`] bytes at a character boundary: a failure report
/// must not be a way to make the host hold a guest's whole memory.
fn capped_text(c: &mut Ctx, ptr: i32, len: i32, what: &str) -> crate::status::HostResult<String> {
    // A negative length stays as given, for `read` to refuse.
    let kept = len.min(MAX_FAILURE_TEXT as i32);
    let bytes = read(c, ptr, kept)?;
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) if kept < len => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
        Err(_) => {
            return Err(Fail(
                ErrorCode::Invalid,
                format!("{what} is not valid UTF-8"),
            ));
        }
    };
    Ok(text)
}

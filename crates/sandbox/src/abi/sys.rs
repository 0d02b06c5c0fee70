//! The `sys` group of imports (ABI.md "sys"): the last error, output, displays, the host
//! clock, the run's arguments and the core's modeled device clock.

use super::context::{encode_strings, read, read_str, status, write_capped};
use super::table::{imports, Import};
use crate::guest_output::GuestOutput;
use crate::status::{ErrorCode, Fail};

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
};

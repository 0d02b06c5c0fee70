//! The `vars` group of imports (ABI.md "vars"): session variables in the guest's
//! [`VarStore`], which every guest of the session shares.
//!
//! A tensor variable holds the tensor behind the guest's handle (the handle stays the
//! guest's); reading it back gives a new handle to the same tensor. A traced handle (inside
//! lazy mode or a compiled function) is made real first, as any data read is. Plain values
//! travel as `<type>\n<text>`; locals as their type name only.

use super::compile::before_data_read;
use super::context::{insert, read_str, status, write_capped, Ctx};
use super::table::{imports, Import};
use crate::status::{ErrorCode, Fail, HostResult};
use crate::var_store::check_name;

/// The vars group, in ABI.md's order.
pub(crate) const VARS: &[Import] = imports! { Vars;
    fn var_set_tensor(c, name_ptr: i32, name_len: i32, h: i32) -> i32 {
        let r = set_tensor(&mut c, name_ptr, name_len, h);
        status(&mut c, r)
    }
    fn var_get_tensor(c, name_ptr: i32, name_len: i32) -> i32 {
        let r = get_tensor(&mut c, name_ptr, name_len);
        status(&mut c, r)
    }
    fn var_set_value(c, name_ptr: i32, name_len: i32, kind: i32, ptr: i32, len: i32) -> i32 {
        let r = set_value(&mut c, name_ptr, name_len, kind, ptr, len);
        status(&mut c, r)
    }
    fn var_get_value(c, name_ptr: i32, name_len: i32, ptr: i32, cap: i32) -> i32 {
        let r = get_value(&mut c, name_ptr, name_len, ptr, cap);
        status(&mut c, r)
    }
};

/// The variable name at `(ptr, len)`, checked to be a Rust identifier.
fn name(c: &mut Ctx, ptr: i32, len: i32) -> HostResult<String> {
    let name = read_str(c, ptr, len, "the variable name")?;
    check_name(&name)?;
    Ok(name)
}

fn set_tensor(c: &mut Ctx, name_ptr: i32, name_len: i32, h: i32) -> HostResult<i32> {
    let name = name(c, name_ptr, name_len)?;
    let t = before_data_read(c, h, "var_set_tensor (keeping a session variable)")?;
    c.data().shared.vars.set_tensor(&name, t)?;
    Ok(0)
}

fn get_tensor(c: &mut Ctx, name_ptr: i32, name_len: i32) -> HostResult<i32> {
    let name = name(c, name_ptr, name_len)?;
    let t = c.data().shared.vars.get_tensor(&name)?;
    insert(c, t)
}

fn set_value(
    c: &mut Ctx,
    name_ptr: i32,
    name_len: i32,
    kind: i32,
    ptr: i32,
    len: i32,
) -> HostResult<i32> {
    let name = name(c, name_ptr, name_len)?;
    let payload = read_str(c, ptr, len, "the variable's payload")?;
    let vars = &c.data().shared.vars;
    match kind {
        0 => vars.set_local(&name, &payload)?,
        1 => {
            let (ty, text) = payload.split_once('\n').ok_or_else(|| {
                Fail(
                    ErrorCode::Invalid,
                    format!(
                        "the payload of the value `{name}` is {payload:?}; a plain value's \
                         payload is `<type>\\n<text>`"
                    ),
                )
            })?;
            vars.set_value(&name, ty, text)?;
        }
        k => {
            return Err(Fail(
                ErrorCode::Invalid,
                format!(
                    "{k} is not a kind of value: 1 is a plain value (`<type>\\n<text>`), 0 a \
                     value local to its cell (its type name)"
                ),
            ))
        }
    }
    Ok(0)
}

fn get_value(c: &mut Ctx, name_ptr: i32, name_len: i32, ptr: i32, cap: i32) -> HostResult<i32> {
    let name = name(c, name_ptr, name_len)?;
    let (ty, text) = c.data().shared.vars.get_value(&name)?;
    write_capped(c, ptr, cap, format!("{ty}\n{text}").as_bytes())
}

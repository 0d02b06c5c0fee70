//! The `op` group of imports (ABI.md "op"): looking ops up in the registry and calling them,
//! eagerly or into the active recording.

use smallvec::SmallVec;

use super::context::{
    check_interrupt, check_n_inputs, memory, range, read, read_handles, read_str, status,
    write_new_handles, Ctx,
};
use super::table::{imports, Import};
use crate::attr_codec;
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;
use neuronlab_core::autograd;
use neuronlab_core::ops::{OpId, Registry};
use neuronlab_core::tensor::Tensor;

/// The op group, in ABI.md's order.
pub(crate) const OP: &[Import] = imports! { Op;
    fn op_lookup(c, ptr: i32, len: i32) -> i32 {
        let r = (|| {
            let name = read_str(&mut c, ptr, len, "the op name")?;
            Registry::global()
                .lookup(&name)
                .map(|(id, _)| id.0 as i32)
                .map_err(|e| Fail(ErrorCode::UnknownOp, e))
        })();
        status(&mut c, r)
    }
    fn op_call(c, id: i32, inputs_ptr: i32, n_inputs: i32, attrs_ptr: i32, attrs_len: i32, outputs_ptr: i32, max_outputs: i32) -> i32 {
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
    }
};

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
    if caller.data().compile.recording() {
        let inputs = read_handles(caller, inputs_ptr, n_inputs)?;
        let state = caller.data();
        let lazy_with_grad = !state.compile.traces_grad()
            && state.grad_enabled
            && inputs
                .iter()
                .any(|v| matches!(v, GuestValue::Eager(t) if t.requires_grad()));
        if lazy_with_grad {
            return Err(Fail(
                ErrorCode::Grad,
                format!(
                    "{}: lazy mode does not trace gradients, and an input requires one; run \
                     the training step in a compiled function or eagerly, or this op under \
                     no_grad",
                    def.name
                ),
            ));
        }
        let attrs = attr_codec::decode(&read(caller, attrs_ptr, attrs_len)?)
            .map_err(|e| Fail(ErrorCode::Invalid, format!("{}: {e}", def.name)))?;
        let state = caller.data_mut();
        let outputs = state.compile.record(
            &state.runtime,
            OpId(id as u32),
            &inputs,
            &attrs,
            state.grad_enabled,
        )?;
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
        let attrs = attr_codec::decode(&data[range(data.len(), attrs_ptr, attrs_len)?])
            .map_err(|e| Fail(ErrorCode::Invalid, format!("{}: {e}", def.name)))?;
        // A plain loop: collecting through `Result` costs a tiny op more than the lookups.
        let mut inputs = SmallVec::<[&Tensor; 4]>::new();
        for c in handles.chunks_exact(4) {
            let h = u32::from_le_bytes(c.try_into().expect("4 bytes"));
            inputs.push(state.handles.get(h)?.as_eager()?);
        }
        autograd::set_grad_enabled(state.grad_enabled);
        state.runtime.call_on(def, &inputs, &attrs, state.core)?
    };
    write_new_handles(
        caller,
        outputs.into_iter().map(GuestValue::Eager),
        outputs_ptr,
    )
}

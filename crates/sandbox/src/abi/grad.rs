//! The `grad` group of imports (ABI.md "grad"): marking leaves, backward, reading and
//! clearing gradients, detaching, grad mode, the functional gradient, and the in-place data
//! update optimizers make.
//!
//! A traced handle (inside lazy mode or a compiled function) is made real first, as any data
//! read is: compile does not record backward yet.

use neuronlab_core::autograd;
use neuronlab_core::tensor::Tensor;

use super::compile::before_data_read;
use super::context::{check_n_inputs, insert, read, status, write_new_handles, Ctx};
use super::table::{imports, Import};
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;

/// The grad group, in ABI.md's order.
pub(crate) const GRAD: &[Import] = imports! { Grad;
    fn grad_requires(c, h: i32) -> i32 {
        let r = (|| {
            let t = before_data_read(&mut c, h, "grad_requires")?;
            let leaf = autograd::requires_grad(&c.data().runtime, &t)?;
            replace(&mut c, h, leaf)
        })();
        status(&mut c, r)
    }
    fn grad_is_required(c, h: i32) -> i32 {
        let r = eager(&mut c, h).map(|t| t.requires_grad() as i32);
        status(&mut c, r)
    }
    fn grad_backward(c, h: i32, grad_h: i32, retain_graph: i32) -> i32 {
        let r = (|| {
            let root = eager(&mut c, h)?;
            let given = optional(&mut c, grad_h)?;
            let rt = c.data().runtime.clone();
            autograd::backward(&rt, &[root], &[given], retain_graph != 0)?;
            Ok(0)
        })();
        status(&mut c, r)
    }
    fn grad_get(c, h: i32) -> i32 {
        let r = (|| {
            let t = eager(&mut c, h)?;
            match t.leaf().and_then(|leaf| leaf.grad()) {
                Some(g) => insert(&mut c, g),
                None => Ok(0),
            }
        })();
        status(&mut c, r)
    }
    fn grad_set(c, h: i32, grad_h: i32) -> i32 {
        let r = (|| {
            let t = eager(&mut c, h)?;
            let g = optional(&mut c, grad_h)?;
            autograd::set_grad(&t, g)?;
            Ok(0)
        })();
        status(&mut c, r)
    }
    fn grad_detach(c, h: i32) -> i32 {
        let r = (|| {
            let t = eager(&mut c, h)?;
            insert(&mut c, t.detach())
        })();
        status(&mut c, r)
    }
    fn grad_set_enabled(c, enabled: i32) -> i32 {
        let state = c.data_mut();
        let previous = state.grad_enabled;
        state.grad_enabled = enabled != 0;
        previous as i32
    }
    fn grad_compute(c, outputs_ptr: i32, n_outputs: i32, grads_ptr: i32, inputs_ptr: i32, n_inputs: i32, results_ptr: i32, retain_graph: i32) -> i32 {
        let r = compute(&mut c, [outputs_ptr, n_outputs, grads_ptr, inputs_ptr, n_inputs, results_ptr], retain_graph != 0);
        status(&mut c, r)
    }
    fn grad_assign(c, h: i32, data_h: i32) -> i32 {
        let r = (|| {
            let param = eager(&mut c, h)?;
            let data = eager(&mut c, data_h)?;
            let updated = autograd::replace_data(&param, &data)?;
            replace(&mut c, h, updated)
        })();
        status(&mut c, r)
    }
};

/// The real tensor behind `h`.
fn eager(c: &mut Ctx, h: i32) -> HostResult<Tensor> {
    before_data_read(c, h, "a grad import")
}

/// The tensor behind `h`, or none for handle 0.
fn optional(c: &mut Ctx, h: i32) -> HostResult<Option<Tensor>> {
    if h == 0 {
        return Ok(None);
    }
    eager(c, h).map(Some)
}

/// Makes handle `h` refer to `t` (the guest's handle stays valid).
fn replace(c: &mut Ctx, h: i32, t: Tensor) -> HostResult<i32> {
    *c.data_mut().handles.get_mut(h as u32)? = GuestValue::Eager(t);
    Ok(0)
}

/// `n` handles at `ptr` as real tensors (0 allowed where `zero_ok`: "no gradient").
fn tensors(c: &mut Ctx, ptr: i32, n: i32, zero_ok: bool) -> HostResult<Vec<Option<Tensor>>> {
    check_n_inputs(n)?;
    let raw = read(c, ptr, n * 4)?;
    raw.chunks_exact(4)
        .map(|b| {
            let h = i32::from_le_bytes(b.try_into().expect("4 bytes"));
            match (h, zero_ok) {
                (0, true) => Ok(None),
                _ => eager(c, h).map(Some),
            }
        })
        .collect()
}

/// `grad_compute`: the gradients of the outputs with respect to the inputs, as new handles.
fn compute(c: &mut Ctx, args: [i32; 6], retain_graph: bool) -> HostResult<i32> {
    let [outputs_ptr, n_outputs, grads_ptr, inputs_ptr, n_inputs, results_ptr] = args;
    let outputs: Vec<Tensor> = tensors(c, outputs_ptr, n_outputs, false)?
        .into_iter()
        .flatten()
        .collect();
    let grads = tensors(c, grads_ptr, n_outputs, true)?;
    let inputs: Vec<Tensor> = tensors(c, inputs_ptr, n_inputs, false)?
        .into_iter()
        .flatten()
        .collect();
    if outputs.is_empty() {
        return Err(Fail(
            ErrorCode::Invalid,
            "grad_compute needs at least one output".into(),
        ));
    }
    let rt = c.data().runtime.clone();
    let results = autograd::grad(&rt, &outputs, &grads, &inputs, retain_graph)?;
    write_new_handles(c, results.into_iter().map(GuestValue::Eager), results_ptr)
}

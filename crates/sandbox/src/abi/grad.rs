//! The `grad` group of imports (ABI.md "grad"): marking leaves, backward, reading and
//! clearing gradients, detaching, grad mode, the functional gradient, and the in-place data
//! update optimizers make.
//!
//! Inside a compiled function being traced, each import acts on the trace instead
//! ([`GradTrace`]): backward is appended to the graph, gradients and `set_data` become updates
//! the program makes after each run. In lazy mode a traced handle is made real first, as any
//! data read is.

use neuronlab_compile::graph::ValueId;
use neuronlab_compile::recorder::Recorder;
use neuronlab_core::autograd;
use neuronlab_core::tensor::{Tensor, TensorMeta};

use super::compile::before_data_read;
use super::context::{check_n_inputs, insert, read, status, write_new_handles, Ctx};
use super::table::{imports, Import};
use crate::grad_trace::GradTrace;
use crate::handles::HandleTable;
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;

/// The grad group, in ABI.md's order.
pub(crate) const GRAD: &[Import] = imports! { Grad;
    fn grad_requires(c, h: i32) -> i32 {
        let r = (|| {
            if c.data().compile.traces_grad() {
                return Err(Fail(
                    ErrorCode::Grad,
                    "requires_grad inside a compiled function: mark the parameters before \
                     calling it (a trace cannot make new leaves)"
                        .into(),
                ));
            }
            let t = before_data_read(&mut c, h, "grad_requires")?;
            let leaf = autograd::requires_grad(&c.data().runtime, &t)?;
            replace(&mut c, h, leaf)
        })();
        status(&mut c, r)
    }
    fn grad_is_required(c, h: i32) -> i32 {
        let r = (|| {
            if let Some(required) = in_trace(&mut c, |t| {
                let v = t.value(h)?;
                Ok(match v {
                    GuestValue::Traced(id) => t.grad.requires(id),
                    other => other.as_eager()?.requires_grad(),
                })
            }) {
                return required.map(i32::from);
            }
            eager(&mut c, h).map(|t| t.requires_grad() as i32)
        })();
        status(&mut c, r)
    }
    fn grad_backward(c, h: i32, grad_h: i32, retain_graph: i32) -> i32 {
        let r = (|| {
            if let Some(done) = in_trace(&mut c, |t| {
                let root = t.id(h)?;
                let seed = t.optional_id(grad_h)?;
                t.grad
                    .backward(t.recorder, &[root], &[seed], retain_graph != 0)
            }) {
                return done.map(|()| 0);
            }
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
            if let Some(found) = in_trace(&mut c, |t| {
                let v = t.value(h)?;
                Ok(match t.grad.slot_of(&v) {
                    Some(slot) => t.grad.grad(t.recorder, slot),
                    None => None,
                })
            }) {
                return match found? {
                    Some(v) => traced_handle(&mut c, v),
                    None => Ok(0),
                };
            }
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
            if let Some(done) = in_trace(&mut c, |t| {
                let v = t.value(h)?;
                let Some(slot) = t.grad.slot_of(&v) else {
                    return Err(not_a_leaf());
                };
                let g = t.optional_id(grad_h)?;
                if let Some(g) = g {
                    let (leaf, got) = (t.meta_of(&v)?, t.recorder.graph().meta(g).clone());
                    if leaf != got {
                        return Err(Fail(
                            ErrorCode::Grad,
                            format!("a gradient must match its leaf: {got} for a leaf {leaf}"),
                        ));
                    }
                }
                t.grad.set_grad(slot, g);
                Ok(())
            }) {
                return done.map(|()| 0);
            }
            let t = eager(&mut c, h)?;
            let g = optional(&mut c, grad_h)?;
            autograd::set_grad(&t, g)?;
            Ok(0)
        })();
        status(&mut c, r)
    }
    fn grad_detach(c, h: i32) -> i32 {
        let r = (|| {
            if let Some(alias) = in_trace(&mut c, |t| {
                let v = t.id(h)?;
                t.grad.detach(t.recorder, v)
            }) {
                return traced_handle(&mut c, alias?);
            }
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
            if let Some(done) = in_trace(&mut c, |t| {
                let current = t.value(h)?;
                if let GuestValue::Gone(_) | GuestValue::Dist(_) | GuestValue::Tokenizer(_) = current {
                    current.as_eager()?;
                }
                let data = t.id(data_h)?;
                let updated = t.grad.assign(t.recorder, h as u32, &current, data)?;
                *t.handles.get_mut(h as u32)? = updated;
                Ok(())
            }) {
                return done.map(|()| 0);
            }
            let param = eager(&mut c, h)?;
            let data = eager(&mut c, data_h)?;
            let updated = autograd::replace_data(&param, &data)?;
            replace(&mut c, h, updated)
        })();
        status(&mut c, r)
    }
};

/// What an import inside a function trace works with: the recording, its gradient state and
/// the guest's handles.
struct InTrace<'a> {
    recorder: &'a mut Recorder,
    grad: &'a mut GradTrace,
    handles: &'a mut HandleTable<GuestValue>,
}

impl InTrace<'_> {
    fn value(&self, h: i32) -> HostResult<GuestValue> {
        Ok(self.handles.get(h as u32)?.clone())
    }

    /// The trace's value for handle `h` (a real tensor is bound, as `op_call` binds it).
    fn id(&mut self, h: i32) -> HostResult<ValueId> {
        match self.value(h)? {
            GuestValue::Traced(v) => Ok(v),
            GuestValue::Eager(t) => Ok(self.grad.bind(self.recorder, &t)),
            other => Err(other
                .as_eager()
                .expect_err("only eager and traced values are tensors")),
        }
    }

    /// [`InTrace::id`], or none for handle 0.
    fn optional_id(&mut self, h: i32) -> HostResult<Option<ValueId>> {
        if h == 0 {
            return Ok(None);
        }
        self.id(h).map(Some)
    }

    fn meta_of(&self, v: &GuestValue) -> HostResult<TensorMeta> {
        match v {
            GuestValue::Traced(id) => Ok(self.recorder.graph().meta(*id).clone()),
            other => Ok(other.as_eager()?.meta()),
        }
    }
}

/// Runs `f` on the function trace when one is active; `None` outside one (eagerly, or in lazy
/// mode).
fn in_trace<R>(
    c: &mut Ctx,
    f: impl FnOnce(&mut InTrace) -> HostResult<R>,
) -> Option<HostResult<R>> {
    let state = c.data_mut();
    let active = state.compile.active.as_mut()?;
    let grad = active.grad.as_mut()?;
    let mut t = InTrace {
        recorder: &mut active.recorder,
        grad,
        handles: &mut state.handles,
    };
    Some(f(&mut t))
}

/// A new guest handle to traced value `v`.
fn traced_handle(c: &mut Ctx, v: ValueId) -> HostResult<i32> {
    Ok(c.data_mut().handles.insert(GuestValue::Traced(v))? as i32)
}

fn not_a_leaf() -> Fail {
    Fail(
        ErrorCode::Grad,
        "only a leaf holds a gradient, and this tensor is not one (mark it with requires_grad)"
            .into(),
    )
}

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
    raw_handles(c, ptr, n)?
        .into_iter()
        .map(|h| match (h, zero_ok) {
            (0, true) => Ok(None),
            _ => eager(c, h).map(Some),
        })
        .collect()
}

/// `grad_compute`: the gradients of the outputs with respect to the inputs, as new handles.
fn compute(c: &mut Ctx, args: [i32; 6], retain_graph: bool) -> HostResult<i32> {
    let [outputs_ptr, n_outputs, grads_ptr, inputs_ptr, n_inputs, results_ptr] = args;
    if n_outputs < 1 {
        return Err(Fail(
            ErrorCode::Invalid,
            "grad_compute needs at least one output".into(),
        ));
    }
    if c.data().compile.traces_grad() {
        let outputs = raw_handles(c, outputs_ptr, n_outputs)?;
        let grads = raw_handles(c, grads_ptr, n_outputs)?;
        let inputs = raw_handles(c, inputs_ptr, n_inputs)?;
        let results = in_trace(c, |t| {
            let outputs = outputs
                .iter()
                .map(|&h| t.id(h))
                .collect::<HostResult<Vec<_>>>()?;
            let seeds = grads
                .iter()
                .map(|&h| t.optional_id(h))
                .collect::<HostResult<Vec<_>>>()?;
            let inputs = inputs
                .iter()
                .map(|&h| t.id(h))
                .collect::<HostResult<Vec<_>>>()?;
            t.grad
                .functional_grad(t.recorder, &outputs, &seeds, &inputs, retain_graph)
        })
        .expect("a trace is active")?;
        return write_new_handles(c, results.into_iter().map(GuestValue::Traced), results_ptr);
    }
    let outputs: Vec<Tensor> = tensors(c, outputs_ptr, n_outputs, false)?
        .into_iter()
        .flatten()
        .collect();
    let grads = tensors(c, grads_ptr, n_outputs, true)?;
    let inputs: Vec<Tensor> = tensors(c, inputs_ptr, n_inputs, false)?
        .into_iter()
        .flatten()
        .collect();
    let rt = c.data().runtime.clone();
    let results = autograd::grad(&rt, &outputs, &grads, &inputs, retain_graph)?;
    write_new_handles(c, results.into_iter().map(GuestValue::Eager), results_ptr)
}

/// `n` handles at `ptr`.
fn raw_handles(c: &mut Ctx, ptr: i32, n: i32) -> HostResult<Vec<i32>> {
    check_n_inputs(n)?;
    let raw = read(c, ptr, n * 4)?;
    Ok(raw
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect())
}

//! Gradients while a compiled function is traced: the tape of its graph, the parameters and
//! other tensors it captured from the guest, their gradients, and the updates it makes.
//!
//! A traced training step calls `backward` on a traced loss and an optimizer's `set_data`
//! on parameters the guest holds. Nothing of that happens to real tensors while tracing: the
//! backward is appended to the graph ([`Tape::backward`]), and every gradient or value the
//! step leaves behind becomes an extra output of the program, written back after each run
//! ([`Effect`]). What the trace read from outside is guarded ([`Guard`]), so a later call
//! reuses the program only when those tensors still look the same.

use std::collections::{HashMap, HashSet};

use neuronlab_compile::autodiff::Tape;
use neuronlab_compile::captures::{Access, Captured, Effect, Guard, Slot, TensorState};
use neuronlab_compile::graph::{Part, ValueId};
use neuronlab_compile::recorder::{tensor_key, Recorder, TensorKey};
use neuronlab_core::autograd::errors;
use neuronlab_core::ops::{Attrs, Registry};
use neuronlab_core::tensor::Tensor;

use crate::handles::HandleTable;
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;

/// A gradient as the trace sees it now.
#[derive(Clone, Copy, Debug)]
enum GradNow {
    /// This graph value.
    Value(ValueId),
    /// None (cleared, or there was none).
    Cleared,
}

/// What a function trace knows beyond its graph.
pub(crate) struct GradTrace {
    /// Tensors the guest held when the call began, by identity, and the handle holding each.
    held: HashMap<TensorKey, u32>,
    /// The tensor behind each handle the guest held when the call began.
    originals: HashMap<u32, Tensor>,
    /// The call's arguments.
    args: Vec<Tensor>,
    /// Which values require gradients, and which nodes backward runs through.
    tape: Tape,
    /// Graph inputs read from outside, and what each reads.
    reads: HashMap<ValueId, Access>,
    guards: Vec<Guard>,
    /// Values that are leaves, and whose gradient they feed.
    leaves: HashMap<ValueId, Slot>,
    /// Values that require gradients because of an eager graph outside the trace.
    from_eager_graph: HashSet<ValueId>,
    /// Values that require gradients through an eager op run during the trace (a
    /// collective): backward cannot reach through them.
    made_eagerly: HashSet<ValueId>,
    /// Gradients the trace read or wrote.
    grads: HashMap<Slot, GradNow>,
    grad_writes: Vec<Slot>,
    /// Held handles the trace gave new data, in order.
    data_writes: Vec<u32>,
    backward_ran: bool,
}

/// What a finished trace adds to its compiled version.
pub(crate) struct Finished {
    /// The graph outputs after the function's results, one per effect that has one.
    pub(crate) extra_outputs: Vec<ValueId>,
    pub(crate) captured: Vec<Captured>,
    pub(crate) guards: Vec<Guard>,
    pub(crate) effects: Vec<Effect>,
}

impl GradTrace {
    /// The state of a trace that begins now, with `handles` the guest's and `args` the call's
    /// arguments, already bound as the recording's first inputs (in order).
    pub(crate) fn begin(
        handles: &HandleTable<GuestValue>,
        recorder: &Recorder,
        args: &[Tensor],
    ) -> GradTrace {
        let mut trace = GradTrace {
            held: HashMap::new(),
            originals: HashMap::new(),
            args: args.to_vec(),
            tape: Tape::new(),
            reads: HashMap::new(),
            guards: Vec::new(),
            leaves: HashMap::new(),
            from_eager_graph: HashSet::new(),
            made_eagerly: HashSet::new(),
            grads: HashMap::new(),
            grad_writes: Vec::new(),
            data_writes: Vec::new(),
            backward_ran: false,
        };
        for (h, v) in handles.iter() {
            if let GuestValue::Eager(t) = v {
                trace.held.entry(tensor_key(t)).or_insert(h);
                trace.originals.insert(h, t.clone());
            }
        }
        for (i, t) in args.iter().enumerate() {
            let v = recorder.graph().inputs[i];
            trace.note_requires(v, t, Slot::Arg(i));
        }
        trace
    }

    fn note_requires(&mut self, v: ValueId, t: &Tensor, slot: Slot) {
        if !t.requires_grad() {
            return;
        }
        self.tape.require(v);
        if t.leaf().is_some() {
            self.leaves.insert(v, slot);
        } else {
            self.from_eager_graph.insert(v);
        }
    }

    /// The value standing for real tensor `t`: a guarded input read at every call when the
    /// guest held it before the call, else a tensor made while tracing, fixed.
    pub(crate) fn bind(&mut self, recorder: &mut Recorder, t: &Tensor) -> ValueId {
        let before = recorder.bindings().len();
        let v = recorder.bind(t);
        if recorder.bindings().len() == before {
            return v;
        }
        if let Some(&h) = self.held.get(&tensor_key(t)) {
            self.read(v, Access::Data(Slot::Held(h)), Some(TensorState::of(t)));
            self.note_requires(v, t, Slot::Held(h));
        } else if t.requires_grad() {
            // Made during the call by an op that ran eagerly (a collective), with a gradient
            // of its own: backward will say it cannot reach through it.
            self.tape.require(v);
            self.made_eagerly.insert(v);
        }
        v
    }

    fn read(&mut self, v: ValueId, access: Access, expect: Option<TensorState>) {
        self.reads.insert(v, access);
        self.guard(access, expect);
    }

    fn guard(&mut self, access: Access, expect: Option<TensorState>) {
        if !self.guards.iter().any(|g| g.access == access) {
            self.guards.push(Guard { access, expect });
        }
    }

    /// True when `v` requires a gradient.
    pub(crate) fn requires(&self, v: ValueId) -> bool {
        self.tape.requires(v)
    }

    /// Notes the node just recorded, as eager recording would under `grad_enabled`, and puts
    /// it in its part: forward while it is taped or no backward ran, else the update.
    pub(crate) fn recorded(
        &mut self,
        recorder: &mut Recorder,
        grad_enabled: bool,
    ) -> HostResult<()> {
        let graph = recorder.graph_mut();
        let n = graph.nodes.len() - 1;
        self.tape.record(graph, n, grad_enabled)?;
        let taped = graph.nodes[n]
            .outputs
            .iter()
            .any(|&o| self.tape.requires(o));
        graph.nodes[n].part = if self.backward_ran && !taped {
            Part::Update
        } else {
            Part::Forward
        };
        Ok(())
    }

    /// The slot whose gradient a handle's `value` feeds, when it is a leaf: one the guest
    /// held before the call, an argument, or a held leaf's new data.
    pub(crate) fn slot_of(&self, value: &GuestValue) -> Option<Slot> {
        match value {
            GuestValue::Traced(v) => self.leaves.get(v).copied(),
            GuestValue::Eager(t) if t.leaf().is_some() => {
                self.held.get(&tensor_key(t)).map(|&h| Slot::Held(h))
            }
            _ => None,
        }
    }

    /// The tensor a slot names, as the call began.
    fn tensor(&self, slot: Slot) -> Option<&Tensor> {
        match slot {
            Slot::Arg(i) => self.args.get(i),
            Slot::Held(h) => self.originals.get(&h),
        }
    }

    /// The gradient of `slot` as the trace sees it now; the first read of one from before the
    /// call binds it (or its absence) as a guarded input.
    pub(crate) fn grad(&mut self, recorder: &mut Recorder, slot: Slot) -> Option<ValueId> {
        match self.grads.get(&slot) {
            Some(GradNow::Value(v)) => return Some(*v),
            Some(GradNow::Cleared) => return None,
            None => {}
        }
        let real = self
            .tensor(slot)
            .and_then(|t| t.leaf())
            .and_then(|leaf| leaf.grad());
        let now = match &real {
            Some(g) => {
                let v = recorder.arg(g);
                self.read(v, Access::Grad(slot), Some(TensorState::of(g)));
                GradNow::Value(v)
            }
            None => {
                self.guard(Access::Grad(slot), None);
                GradNow::Cleared
            }
        };
        self.grads.insert(slot, now);
        match now {
            GradNow::Value(v) => Some(v),
            GradNow::Cleared => None,
        }
    }

    /// Makes `slot`'s gradient `grad` (`None`: cleared) from now on.
    pub(crate) fn set_grad(&mut self, slot: Slot, grad: Option<ValueId>) {
        self.grads
            .insert(slot, grad.map_or(GradNow::Cleared, GradNow::Value));
        if !self.grad_writes.contains(&slot) {
            self.grad_writes.push(slot);
        }
    }

    /// A value equal to `v` that does not require a gradient (a view of it).
    pub(crate) fn detach(&mut self, recorder: &mut Recorder, v: ValueId) -> HostResult<ValueId> {
        let shape: Vec<i64> = recorder
            .graph()
            .meta(v)
            .shape
            .iter()
            .map(|&d| d as i64)
            .collect();
        let id = Registry::global()
            .id("reshape")
            .expect("reshape is a registry op");
        let alias = recorder
            .graph_mut()
            .op(id, &[v], &Attrs::new().with("shape", shape))?[0];
        self.recorded(recorder, false)?;
        Ok(alias)
    }

    /// `loss.backward()` inside the trace: appends the backward of `roots` (seeded by
    /// `seeds`) and accumulates the gradients of the leaves it reaches, as eager backward
    /// does (a new gradient made contiguous, added to one that exists).
    pub(crate) fn backward(
        &mut self,
        recorder: &mut Recorder,
        roots: &[ValueId],
        seeds: &[Option<ValueId>],
        retain_graph: bool,
    ) -> HostResult<()> {
        let mut wanted: Vec<ValueId> = self.leaves.keys().copied().collect();
        wanted.extend(self.from_eager_graph.iter().copied());
        wanted.extend(self.made_eagerly.iter().copied());
        wanted.sort();
        let grads =
            self.tape
                .backward(recorder.graph_mut(), roots, seeds, &wanted, retain_graph)?;
        let previous = recorder.graph_mut().set_part(Part::Backward);
        let accumulated = self.accumulate(recorder, &wanted, grads);
        recorder.graph_mut().set_part(previous);
        accumulated?;
        self.backward_ran = true;
        Ok(())
    }

    fn accumulate(
        &mut self,
        recorder: &mut Recorder,
        wanted: &[ValueId],
        grads: Vec<Option<ValueId>>,
    ) -> HostResult<()> {
        let op = |recorder: &mut Recorder, name: &str, inputs: &[ValueId]| -> HostResult<ValueId> {
            let id = Registry::global().id(name).expect("a registry op");
            Ok(recorder.graph_mut().op(id, inputs, &Attrs::new())?[0])
        };
        for (&v, g) in wanted.iter().zip(grads) {
            let Some(g) = g else { continue };
            let Some(&slot) = self.leaves.get(&v) else {
                let message = if self.made_eagerly.contains(&v) {
                    "backward inside a compiled function reached a tensor that a collective \
                     made during the call: collectives run eagerly, as graph breaks, and a \
                     compiled training step cannot be split around them; run the step \
                     without compile (as sharded steps do), or gather outside the function \
                     and pass the result in"
                } else {
                    "backward inside a compiled function reached a tensor computed eagerly \
                     before the call; pass the leaves (or a detached tensor) to the function \
                     instead"
                };
                return Err(Fail(ErrorCode::Grad, message.into()));
            };
            let g = op(recorder, "contiguous", &[g])?;
            let total = match self.grad(recorder, slot) {
                Some(old) => op(recorder, "add", &[old, g])?,
                None => g,
            };
            self.set_grad(slot, Some(total));
        }
        Ok(())
    }

    /// The gradients of `outputs` with respect to `inputs` (`torch.autograd.grad`) inside the
    /// trace; an input the outputs do not reach is an error, as eager.
    pub(crate) fn functional_grad(
        &mut self,
        recorder: &mut Recorder,
        outputs: &[ValueId],
        seeds: &[Option<ValueId>],
        inputs: &[ValueId],
        retain_graph: bool,
    ) -> HostResult<Vec<ValueId>> {
        for (i, &v) in inputs.iter().enumerate() {
            if !self.tape.requires(v) {
                return Err(errors::input_not_required(i, recorder.graph().meta(v)).into());
            }
        }
        let grads =
            self.tape
                .backward(recorder.graph_mut(), outputs, seeds, inputs, retain_graph)?;
        grads
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                g.ok_or_else(|| errors::input_unused(i, recorder.graph().meta(inputs[i])).into())
            })
            .collect()
    }

    /// The guest's `set_data` of handle `h` (holding `current`) to `data` inside the trace:
    /// returns what `h` holds from now on. A tensor held before the call is updated after
    /// each run, keeping its identity and gradient; one made in the trace simply holds `data`.
    pub(crate) fn assign(
        &mut self,
        recorder: &mut Recorder,
        h: u32,
        current: &GuestValue,
        data: ValueId,
    ) -> HostResult<GuestValue> {
        let graph = recorder.graph();
        let current_meta = match current {
            GuestValue::Traced(v) => graph.meta(*v).clone(),
            GuestValue::Eager(t) => t.meta(),
            _ => unreachable!("the caller passes tensors"),
        };
        let data_meta = graph.meta(data).clone();
        if current_meta != data_meta {
            return Err(Fail(
                ErrorCode::Grad,
                format!(
                    "an in-place update must keep the tensor's shape, dtype and core: \
                     {current_meta} cannot become {data_meta}"
                ),
            ));
        }
        let is_taped_result = match current {
            GuestValue::Traced(v) => self.tape.requires(*v) && !self.leaves.contains_key(v),
            _ => false,
        };
        if is_taped_result {
            return Err(Fail(
                ErrorCode::Grad,
                "this tensor is an op's output in the graph; only leaves and tensors outside the \
                 graph can be updated in place"
                    .into(),
            ));
        }
        let Some(original) = self.originals.get(&h).cloned() else {
            return Ok(GuestValue::Traced(data));
        };
        // A value of its own, so marking it a leaf leaves other uses of `data` alone.
        let value = self.detach(recorder, data)?;
        if original.requires_grad() && original.leaf().is_some() {
            self.tape.require(value);
            self.leaves.insert(value, Slot::Held(h));
        }
        self.guard(
            Access::Data(Slot::Held(h)),
            Some(TensorState::of(&original)),
        );
        if !self.data_writes.contains(&h) {
            self.data_writes.push(h);
        }
        Ok(GuestValue::Traced(value))
    }

    /// Puts back what the guest held before the call, for a trace that is abandoned.
    pub(crate) fn restore(&self, handles: &mut HandleTable<GuestValue>) {
        for h in &self.data_writes {
            if let (Ok(slot), Some(t)) = (handles.get_mut(*h), self.originals.get(h)) {
                *slot = GuestValue::Eager(t.clone());
            }
        }
    }

    /// True when the trace involves gradients or updates: a graph break cannot split it.
    pub(crate) fn involves_grad(&self) -> bool {
        !self.tape.is_empty() || !self.data_writes.is_empty() || !self.grad_writes.is_empty()
    }

    /// True once a backward ran in the trace.
    pub(crate) fn backward_ran(&self) -> bool {
        self.backward_ran
    }

    /// What the compiled version needs: the graph's extra outputs (values of the updates),
    /// captures after the arguments, guards and effects. `handles` holds the values the
    /// trace left in the guest's handles; `n_args` inputs come first in `bindings`.
    pub(crate) fn finish(
        &self,
        recorder: &mut Recorder,
        handles: &HandleTable<GuestValue>,
        n_args: usize,
    ) -> HostResult<Finished> {
        let mut extra_outputs = Vec::new();
        let mut effects = Vec::new();
        for &slot in &self.grad_writes {
            let output = match self.grads.get(&slot) {
                Some(GradNow::Value(v)) => {
                    extra_outputs.push(*v);
                    Some(extra_outputs.len() - 1)
                }
                _ => None,
            };
            effects.push(Effect {
                access: Access::Grad(slot),
                output,
            });
        }
        for &h in &self.data_writes {
            let value = match handles.get(h) {
                Ok(GuestValue::Traced(v)) => *v,
                Ok(GuestValue::Eager(t)) => recorder.bind(t),
                // The guest freed it in the trace: nothing to write back.
                _ => continue,
            };
            extra_outputs.push(value);
            effects.push(Effect {
                access: Access::Data(Slot::Held(h)),
                output: Some(extra_outputs.len() - 1),
            });
        }
        let graph = recorder.graph();
        let captured = recorder.bindings()[n_args..]
            .iter()
            .zip(&graph.inputs[n_args..])
            .map(|(t, v)| match self.reads.get(v) {
                Some(access) => Captured::Read(*access),
                None => Captured::Fixed(t.clone()),
            })
            .collect();
        Ok(Finished {
            extra_outputs,
            captured,
            guards: self.guards.clone(),
            effects,
        })
    }
}

//! The `compile` group of imports (ABI.md "compile"): tracing guest functions through the
//! trampoline, graph breaks, lazy mode, and running cached programs without entering the guest.
//!
//! While a recording is active, `op_call` records instead of running, and the handles it
//! returns are [`GuestValue::Traced`]. Reading a traced tensor's data is a sync point: in lazy
//! mode it simply flushes (as touching a tensor does under torch-neuronx's XLA path); inside a
//! compiled function it is a graph break, reported with its reason, or an error under
//! `fullgraph`.

use std::sync::Arc;

use wasmtime::Extern;

use super::context::{
    read, read_handles, read_str, status, value, write, write_capped, write_new_handles, Ctx,
    GuestState,
};
use super::table::{imports, Import};
use crate::attr_codec;
use crate::compile_state::{Active, Frame, Kind};
use crate::grad_trace::{Finished, GradTrace};
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;
use neuronlab_compile::captures::{Access, Captured, Effect, Slot, TensorState};
use neuronlab_compile::function::{CompileOptions, CompiledFunction, Entry, Plan};
use neuronlab_compile::graph::{Producer, ValueId};
use neuronlab_compile::guards::Signature;
use neuronlab_compile::recorder::Recorder;
use neuronlab_core::autograd;
use neuronlab_core::events::{CacheSource, EventKind, LimitAction, LogLevel};
use neuronlab_core::tensor::Tensor;

/// The compile group, in ABI.md's order.
pub(crate) const COMPILE: &[Import] = imports! { Compile;
    fn compile_fn(c, fn_index: i32, name_ptr: i32, name_len: i32, attrs_ptr: i32, attrs_len: i32) -> i32 {
        let r = compile_fn(&mut c, fn_index, name_ptr, name_len, attrs_ptr, attrs_len);
        status(&mut c, r)
    }
    fn compile_call(c, f: i32, inputs_ptr: i32, n_inputs: i32, outputs_ptr: i32, max_outputs: i32) -> wasmtime::Result<i32> {
        // A trap inside the traced guest function passes through as a trap.
        let r =
            compile_call(&mut c, f, inputs_ptr, n_inputs, outputs_ptr, max_outputs)?;
        Ok(status(&mut c, r))
    }
    fn compile_arg(c, i: i32) -> i32 {
        let r = compile_arg(&mut c, i);
        status(&mut c, r)
    }
    fn compile_result(c, h: i32) -> i32 {
        let r = compile_result(&mut c, h);
        status(&mut c, r)
    }
    fn compile_explain(c, f: i32, ptr: i32, cap: i32) -> i32 {
        let r = compile_explain(&mut c, f, ptr, cap);
        status(&mut c, r)
    }
    #[since(1, 3)]
    fn compile_stats(c, f: i32, ptr: i32) -> i32 {
        let r = compile_stats(&mut c, f, ptr);
        status(&mut c, r)
    }
    fn lazy_begin(c) -> i32 {
        let r = lazy_begin(&mut c);
        status(&mut c, r)
    }
    fn lazy_sync(c) -> i32 {
        let r = lazy_sync(&mut c);
        status(&mut c, r)
    }
    fn lazy_end(c) -> i32 {
        let r = lazy_end(&mut c);
        status(&mut c, r)
    }
};

/// A failure of a compile import: a status for the guest, or a trap to pass through.
enum CallError {
    Fail(Fail),
    Trap(wasmtime::Error),
}

impl From<Fail> for CallError {
    fn from(f: Fail) -> CallError {
        CallError::Fail(f)
    }
}

impl From<neuronlab_core::Error> for CallError {
    fn from(e: neuronlab_core::Error) -> CallError {
        CallError::Fail(Fail::from(e))
    }
}

/// Runs the flush of the active recording: every live traced value (in handles and in
/// trampoline frames) gets its real value. The recording continues, empty.
fn sync(c: &mut Ctx, label: &str) -> HostResult<()> {
    let state = c.data_mut();
    let Some(active) = state.compile.active.as_mut() else {
        return Ok(());
    };
    let recorder = std::mem::take(&mut active.recorder);
    let mut live: Vec<ValueId> = Vec::new();
    let frames = state
        .compile
        .frames
        .iter()
        .flat_map(|f| f.args.iter().chain(&f.results));
    for v in state.handles.values().chain(frames) {
        if let GuestValue::Traced(id) = v {
            if !live.contains(id) {
                live.push(*id);
            }
        }
    }
    let (rt, core) = (state.runtime.clone(), state.core);
    let tensors = match recorder.flush(&rt, &state.shared.programs, core, &live, label) {
        Ok(tensors) => tensors,
        Err(e) => {
            // The recording goes on, empty; what it held is gone with the graph that failed.
            let why = format!("a traced tensor of a graph that failed to run: {e}");
            mark_gone(state, &why);
            return Err(e.into());
        }
    };
    let resolve = |v: &mut GuestValue| {
        if let GuestValue::Traced(id) = v {
            let i = live
                .iter()
                .position(|l| l == id)
                .expect("every live value was flushed");
            *v = GuestValue::Eager(tensors[i].clone());
        }
    };
    state.handles.values_mut().for_each(resolve);
    for f in &mut state.compile.frames {
        f.args
            .iter_mut()
            .chain(f.results.iter_mut())
            .for_each(resolve);
    }
    Ok(())
}

/// Marks every traced value the guest holds, in handles and trampoline frames, as gone.
fn mark_gone(state: &mut GuestState, why: &str) {
    let frames = state
        .compile
        .frames
        .iter_mut()
        .flat_map(|f| f.args.iter_mut().chain(f.results.iter_mut()));
    for v in state.handles.values_mut().chain(frames) {
        if let GuestValue::Traced(_) = v {
            *v = GuestValue::Gone(why.to_string());
        }
    }
}

/// Ends the active recording, marking any traced value still held as gone; tensors held
/// before a function trace that it gave new data get their old data back.
fn abandon(c: &mut Ctx, why: &str) {
    let state = c.data_mut();
    if let Some(grad) = state.compile.active.take().and_then(|a| a.grad) {
        grad.restore(&mut state.handles);
    }
    for v in state.handles.values_mut() {
        if let GuestValue::Traced(_) = v {
            *v = GuestValue::Gone(why.to_string());
        }
    }
}

/// Called before a guest reads the data of handle `h` (`what` names the read). A traced value
/// is made real first: a sync in lazy mode, a graph break in a compiled function.
pub(crate) fn before_data_read(c: &mut Ctx, h: i32, what: &str) -> HostResult<Tensor> {
    let v = value(c, h)?;
    let GuestValue::Traced(id) = v else {
        return v.as_eager().cloned();
    };
    let state = c.data_mut();
    let active = state
        .compile
        .active
        .as_ref()
        .expect("traced values exist only while recording");
    let producer = match &active.recorder.graph().producers[id.0 as usize] {
        Producer::Node { node, .. } => active.recorder.graph().nodes[*node].name().to_string(),
        Producer::Input(_) => "an input".to_string(),
        Producer::Constant(_) => "a constant".to_string(),
    };
    let label = match active.kind {
        Kind::Lazy => "lazy graph (synced by a data read)".to_string(),
        Kind::Function { index } => {
            let f = &mut state.compile.functions[index];
            if active.grad.as_ref().is_some_and(|g| g.involves_grad()) {
                return Err(Fail(
                    ErrorCode::Grad,
                    format!(
                        "'{}': {what} reads the data of a traced tensor (produced by \
                         {producer}) in a step with gradients or in-place updates, which a graph \
                         break cannot split; return the value from the function and read it \
                         after the call",
                        f.name
                    ),
                ));
            }
            if f.options.fullgraph {
                return Err(Fail(
                    ErrorCode::Op,
                    format!(
                        "graph break in '{}' with fullgraph set: {what} reads the data of a traced \
                         tensor (produced by {producer}); move the read out of the compiled \
                         function, or compile without fullgraph",
                        f.name
                    ),
                ));
            }
            let reason = format!("{what} reads the data of a traced tensor");
            let entry = format!("{reason} (produced by {producer})");
            if !f.breaks.contains(&entry) {
                f.breaks.push(entry);
            }
            let name = f.name.clone();
            state.runtime.bus().publish(
                state.core,
                EventKind::GraphBreak {
                    function: name.clone(),
                    reason,
                    op: producer,
                },
            );
            format!("graph of '{name}' up to a break")
        }
    };
    sync(c, &label)?;
    match value(c, h)? {
        GuestValue::Eager(t) => Ok(t),
        other => Err(Fail(
            ErrorCode::Handle,
            format!("handle {h:#x} could not be made real: {other:?}"),
        )),
    }
}

/// Calls the guest's trampoline for function-table entry `fn_index` with `args`.
fn enter(c: &mut Ctx, fn_index: u32, args: Vec<GuestValue>) -> Result<Vec<GuestValue>, CallError> {
    let func = match c.get_export("neuronlab_trampoline") {
        Some(Extern::Func(f)) => f,
        _ => {
            return Err(Fail(
                ErrorCode::Invalid,
                "the module does not export neuronlab_trampoline; build it with the neuronlab SDK (see ABI.md)".into(),
            )
            .into())
        }
    };
    let typed = func.typed::<(i32, i32), i32>(&*c).map_err(|_| {
        Fail(
            ErrorCode::Invalid,
            "neuronlab_trampoline must have the type (i32, i32) -> i32 (see ABI.md)".into(),
        )
    })?;
    let n = args.len() as i32;
    c.data_mut().compile.frames.push(Frame {
        args,
        results: Vec::new(),
    });
    let status = typed.call(&mut *c, (fn_index as i32, n));
    let frame = c.data_mut().compile.frames.pop().expect("pushed above");
    let status = status.map_err(CallError::Trap)?;
    if status < 0 {
        return Err(Fail(
            ErrorCode::Op,
            format!("the compiled function returned an error (status {status})"),
        )
        .into());
    }
    if status as usize != frame.results.len() {
        return Err(Fail(
            ErrorCode::Invalid,
            format!(
                "neuronlab_trampoline returned {status} results but handed {} to \
                 compile_result; it must return the number it handed (see ABI.md)",
                frame.results.len()
            ),
        )
        .into());
    }
    Ok(frame.results)
}

fn eager_tensors(values: Vec<GuestValue>) -> HostResult<Vec<Tensor>> {
    values.iter().map(|v| v.as_eager().cloned()).collect()
}

/// A cached version to run, no longer borrowing its function.
struct Hit {
    compiled: Arc<neuronlab_compile::recorder::CachedProgram>,
    captured: Vec<Captured>,
    effects: Vec<Effect>,
}

/// A [`Plan`] that no longer borrows the function.
enum Owned {
    Hit(Hit),
    Trace { reason: String, recompile: bool },
    Lazy,
    Eager { first: bool, reason: String },
    Fail { first: bool, message: String },
}

/// Runs compiled function `index` on `inputs` (real tensors), returning real outputs.
fn call_function(c: &mut Ctx, index: usize, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, CallError> {
    let signature = Signature::of(&inputs);
    let state = c.data_mut();
    let (rt, core) = (state.runtime.clone(), state.core);
    let handles = &state.handles;
    let observe = |access: &Access| {
        let t = reach(handles, &inputs, access).ok()?;
        Some(TensorState::of(&t))
    };
    let f = &mut state.compile.functions[index];
    let (name, fn_index, limit) = (f.name.clone(), f.fn_index, f.options.recompile_limit);
    let plan = match f.plan(&signature, &observe) {
        Plan::Hit(entry) => Owned::Hit(Hit {
            compiled: entry.compiled.clone(),
            captured: entry.captured.clone(),
            effects: entry.effects.clone(),
        }),
        Plan::Trace { reason, recompile } => Owned::Trace { reason, recompile },
        Plan::Lazy => Owned::Lazy,
        Plan::Eager { first, reason } => Owned::Eager { first, reason },
        Plan::Fail { first, message } => Owned::Fail { first, message },
    };
    match plan {
        Owned::Hit(hit) => {
            rt.bus().publish(
                core,
                EventKind::CacheHit {
                    function: name,
                    source: CacheSource::Memory,
                },
            );
            let captured = hit
                .captured
                .iter()
                .map(|cap| match cap {
                    Captured::Fixed(t) => Ok(t.clone()),
                    Captured::Read(access) => reach(&c.data().handles, &inputs, access),
                })
                .collect::<HostResult<Vec<_>>>()?;
            let bound: Vec<&Tensor> = inputs.iter().chain(&captured).collect();
            let outputs = hit.compiled.program.run(&rt, core, &bound)?;
            Ok(write_back(c, &inputs, &hit.effects, outputs)?)
        }
        Owned::Fail { first, message } => {
            if first {
                rt.bus().publish(
                    core,
                    EventKind::RecompileLimit {
                        function: name,
                        limit,
                        action: LimitAction::Fail,
                    },
                );
            }
            Err(Fail(ErrorCode::Op, message).into())
        }
        Owned::Eager { first, reason } => {
            if first {
                announce_eager(c, &name, limit, &reason);
            }
            let results = enter(
                c,
                fn_index,
                inputs.into_iter().map(GuestValue::Eager).collect(),
            )?;
            Ok(eager_tensors(results)?)
        }
        Owned::Lazy => {
            let args = start_function_trace(c, index, &inputs);
            let results = trace_body(
                c,
                fn_index,
                args,
                &format!("graph of '{name}' after its last break"),
            )?;
            Ok(results)
        }
        Owned::Trace { reason, recompile } => {
            let traced = Traced {
                index,
                signature,
                reason,
                recompile,
            };
            trace_version(c, traced, &inputs)
        }
    }
}

/// The events of a function's first call past its recompile limit, when it runs eagerly.
fn announce_eager(c: &mut Ctx, name: &str, limit: u32, reason: &str) {
    let state = c.data();
    let (bus, core) = (state.runtime.bus(), state.core);
    bus.publish(
        core,
        EventKind::RecompileLimit {
            function: name.to_string(),
            limit,
            action: LimitAction::RunEager,
        },
    );
    bus.publish(
        core,
        EventKind::Log {
            level: LogLevel::Warn,
            target: "recompiles".into(),
            message: format!(
                "'{name}' reached its recompile limit ({limit}); it runs eagerly from now on. \
                 Last reason: {reason}"
            ),
        },
    );
}

/// A call that traces a new version of compiled function `index`.
struct Traced {
    index: usize,
    signature: Signature,
    reason: String,
    recompile: bool,
}

/// Traces a new version of a compiled function on `inputs`, compiles or finds its program,
/// runs it and adds the version; a trace that breaks finishes as a lazy run instead.
fn trace_version(c: &mut Ctx, call: Traced, inputs: &[Tensor]) -> Result<Vec<Tensor>, CallError> {
    let Traced {
        index,
        signature,
        reason,
        recompile,
    } = call;
    let (rt, core) = (c.data().runtime.clone(), c.data().core);
    let f = &c.data().compile.functions[index];
    let (name, fn_index) = (f.name.clone(), f.fn_index);
    let label = f.compile_label(recompile, &reason);
    let args = start_function_trace(c, index, inputs);
    let results = match enter(c, fn_index, args) {
        Ok(r) => r,
        Err(e) => {
            abandon(
                c,
                &format!("an intermediate of '{name}', whose trace failed"),
            );
            return Err(e);
        }
    };
    let state = c.data_mut();
    if !state.compile.functions[index].breaks.is_empty() {
        // The trace broke: finish it as a lazy run; later calls re-enter the guest.
        return finish_lazy(
            c,
            results,
            &format!("graph of '{name}' after its last break"),
        );
    }
    let mut active = state
        .compile
        .active
        .take()
        .expect("the trace is still active");
    let finished = finish_trace(&mut active, &results, &state.handles, &name, inputs.len());
    if let Some(grad) = &active.grad {
        grad.restore(&mut state.handles);
    }
    abandon(
        c,
        &format!("an intermediate of '{name}': return it from the function to keep it"),
    );
    let (outputs, finished) = finished?;
    let (graph, bindings) = active.recorder.finish(&outputs);
    let programs = c.data().shared.programs.clone();
    let (compiled, _) =
        programs.get_or_compile(&rt, core, &graph, &name, &label, recompile, true)?;
    let bound: Vec<&Tensor> = bindings.iter().collect();
    let outputs = compiled.program.run(&rt, core, &bound)?;
    let results = write_back(c, inputs, &finished.effects, outputs)?;
    let f = &mut c.data_mut().compile.functions[index];
    let guards = signature.guards(&f.options.input_names).join("; ");
    f.add(
        Entry {
            signature,
            compiled: Arc::clone(&compiled),
            captured: finished.captured,
            guards: finished.guards,
            effects: finished.effects,
        },
        recompile,
    );
    let version = f.entries.len();
    rt.bus().publish(
        core,
        EventKind::Log {
            level: LogLevel::Info,
            target: "guards".into(),
            message: format!("'{name}' version {version}: {guards}"),
        },
    );
    Ok(results)
}

/// The graph outputs of a finished function trace (its results, then the values of its
/// updates) and what its version records about captures, guards and effects.
///
/// A result that requires a gradient is returned detached when the trace ran its own
/// backward; without one it is an error, as a compiled forward is not yet differentiable from
/// outside.
fn finish_trace(
    active: &mut Active,
    results: &[GuestValue],
    handles: &crate::handles::HandleTable<GuestValue>,
    name: &str,
    n_args: usize,
) -> HostResult<(Vec<ValueId>, Finished)> {
    let mut outputs = results
        .iter()
        .map(|v| active.value_id(v))
        .collect::<HostResult<Vec<_>>>()?;
    let grad = active
        .grad
        .as_mut()
        .expect("function traces track gradients");
    for out in &mut outputs {
        if !grad.requires(*out) {
            continue;
        }
        if !grad.backward_ran() {
            return Err(Fail(
                ErrorCode::Grad,
                format!(
                    "'{name}' returns a tensor that requires grad but runs no backward: compile \
                     traces backward inside the function, so call backward (and the optimizer \
                     step) in it, or return a detached tensor"
                ),
            ));
        }
        *out = grad.detach(&mut active.recorder, *out)?;
    }
    let finished = grad.finish(&mut active.recorder, handles, n_args)?;
    outputs.extend(&finished.extra_outputs);
    Ok((outputs, finished))
}

/// The tensor `access` reaches now: a held handle's, or a gradient of one or of an argument.
fn reach(
    handles: &crate::handles::HandleTable<GuestValue>,
    args: &[Tensor],
    access: &Access,
) -> HostResult<Tensor> {
    let slot_tensor = |slot: &Slot| -> HostResult<Tensor> {
        match slot {
            Slot::Arg(i) => args
                .get(*i)
                .cloned()
                .ok_or_else(|| Fail(ErrorCode::Invalid, format!("the call has no argument {i}"))),
            Slot::Held(h) => handles.get(*h)?.as_eager().cloned(),
        }
    };
    match access {
        Access::Data(slot) => slot_tensor(slot),
        Access::Grad(slot) => slot_tensor(slot)?
            .leaf()
            .and_then(|leaf| leaf.grad())
            .ok_or_else(|| Fail(ErrorCode::Grad, "the gradient is gone".into())),
    }
}

/// Splits a run's outputs into the function's results and its updates, and makes the updates:
/// new data for held tensors (keeping their identity and gradient), new gradients.
fn write_back(
    c: &mut Ctx,
    args: &[Tensor],
    effects: &[Effect],
    mut outputs: Vec<Tensor>,
) -> HostResult<Vec<Tensor>> {
    let n_extra = effects.iter().filter(|e| e.output.is_some()).count();
    let extras = outputs.split_off(outputs.len() - n_extra);
    let handles = &mut c.data_mut().handles;
    for effect in effects {
        let value = effect.output.map(|k| extras[k].clone());
        match (effect.access, value) {
            (Access::Data(Slot::Held(h)), Some(data)) => {
                let current = handles.get(h)?.as_eager()?.clone();
                let updated = autograd::replace_data(&current, &data)?;
                *handles.get_mut(h)? = GuestValue::Eager(updated);
            }
            (Access::Grad(slot), grad) => {
                let leaf = match slot {
                    Slot::Arg(i) => args[i].clone(),
                    Slot::Held(h) => handles.get(h)?.as_eager()?.clone(),
                };
                autograd::set_grad(&leaf, grad)?;
            }
            _ => unreachable!("data effects have values and name held tensors"),
        }
    }
    Ok(outputs)
}

/// Starts recording compiled function `index`: each input becomes a graph input of its own,
/// and the returned traced values are the arguments to pass to the trampoline.
fn start_function_trace(c: &mut Ctx, index: usize, inputs: &[Tensor]) -> Vec<GuestValue> {
    let mut recorder = Recorder::new();
    let args = inputs
        .iter()
        .map(|t| GuestValue::Traced(recorder.arg(t)))
        .collect();
    let state = c.data_mut();
    let grad = GradTrace::begin(&state.handles, &recorder, inputs);
    state.compile.active = Some(Active {
        recorder,
        kind: Kind::Function { index },
        grad: Some(grad),
    });
    args
}

/// Runs the traced body, then flushes what is left (the lazy path for functions that break).
fn trace_body(
    c: &mut Ctx,
    fn_index: u32,
    args: Vec<GuestValue>,
    label: &str,
) -> Result<Vec<Tensor>, CallError> {
    let results = match enter(c, fn_index, args) {
        Ok(r) => r,
        Err(e) => {
            abandon(c, "an intermediate of a compiled function whose run failed");
            return Err(e);
        }
    };
    finish_lazy(c, results, label)
}

fn finish_lazy(
    c: &mut Ctx,
    results: Vec<GuestValue>,
    label: &str,
) -> Result<Vec<Tensor>, CallError> {
    c.data_mut().compile.frames.push(Frame {
        args: Vec::new(),
        results,
    });
    let synced = sync(c, label);
    let frame = c.data_mut().compile.frames.pop().expect("pushed above");
    abandon(
        c,
        "an intermediate of a compiled function: return it from the function to keep it",
    );
    synced?;
    Ok(eager_tensors(frame.results)?)
}

fn write_handles(
    c: &mut Ctx,
    tensors: Vec<Tensor>,
    outputs_ptr: i32,
    max_outputs: i32,
) -> HostResult<i32> {
    if tensors.len() > max_outputs.max(0) as usize {
        return Err(Fail(
            ErrorCode::TooSmall,
            format!(
                "the function returned {} tensors but max_outputs is {max_outputs}",
                tensors.len()
            ),
        ));
    }
    let values = tensors.into_iter().map(GuestValue::Eager);
    write_new_handles(c, values, outputs_ptr)
}

fn function_index(c: &Ctx, f: i32) -> HostResult<usize> {
    let n = c.data().compile.functions.len();
    if f >= 1 && (f as usize) <= n {
        Ok(f as usize - 1)
    } else {
        Err(Fail(
            ErrorCode::Handle,
            format!("{f} is not a compiled function of this instance (it has {n})"),
        ))
    }
}

/// `compile_fn(fn_index, name_ptr, name_len, attrs_ptr, attrs_len) -> f`
fn compile_fn(
    c: &mut Ctx,
    fn_index: i32,
    name_ptr: i32,
    name_len: i32,
    attrs_ptr: i32,
    attrs_len: i32,
) -> HostResult<i32> {
    let name = read_str(c, name_ptr, name_len, "the function name")?;
    let attrs = attr_codec::decode(&read(c, attrs_ptr, attrs_len)?)
        .map_err(|e| Fail(ErrorCode::Invalid, e))?;
    let options = CompileOptions::from_attrs(&attrs).map_err(|e| Fail(ErrorCode::Invalid, e))?;
    if fn_index < 0 {
        return Err(Fail(
            ErrorCode::Invalid,
            format!("{fn_index} is not a function-table index"),
        ));
    }
    let functions = &mut c.data_mut().compile.functions;
    functions.push(CompiledFunction::new(&name, fn_index as u32, options));
    Ok(functions.len() as i32)
}

/// `compile_call(f, inputs_ptr, n_inputs, outputs_ptr, max_outputs) -> n_outputs`; a trap in
/// the traced guest function passes through as a trap.
fn compile_call(
    c: &mut Ctx,
    f: i32,
    inputs_ptr: i32,
    n_inputs: i32,
    outputs_ptr: i32,
    max_outputs: i32,
) -> wasmtime::Result<Result<i32, Fail>> {
    let run = |c: &mut Ctx| -> Result<i32, CallError> {
        let index = function_index(c, f)?;
        let values = read_handles(c, inputs_ptr, n_inputs)?;
        if c.data().compile.recording() {
            // A compiled function called while recording is traced inline.
            let fn_index = c.data().compile.functions[index].fn_index;
            let results = enter(c, fn_index, values)?;
            return Ok(write_new_handles(c, results, outputs_ptr)?);
        }
        let inputs = eager_tensors(values)?;
        let results = call_function(c, index, inputs)?;
        Ok(write_handles(c, results, outputs_ptr, max_outputs)?)
    };
    match run(c) {
        Ok(n) => Ok(Ok(n)),
        Err(CallError::Fail(f)) => Ok(Err(f)),
        Err(CallError::Trap(e)) => Err(e),
    }
}

/// `compile_arg(i) -> handle`: argument `i` of the innermost trampoline call.
fn compile_arg(c: &mut Ctx, i: i32) -> HostResult<i32> {
    let arg = c
        .data()
        .compile
        .frames
        .last()
        .and_then(|f| f.args.get(i.max(0) as usize).filter(|_| i >= 0))
        .cloned()
        .ok_or_else(|| {
            Fail(
                ErrorCode::Invalid,
                format!("no argument {i}: compile_arg is for the trampoline"),
            )
        })?;
    Ok(c.data_mut().handles.insert(arg).map_err(Fail::from)? as i32)
}

/// `compile_result(h) -> 0`: adds a result to the innermost trampoline call.
fn compile_result(c: &mut Ctx, h: i32) -> HostResult<i32> {
    let v = value(c, h)?;
    let frame = c.data_mut().compile.frames.last_mut().ok_or_else(|| {
        Fail(
            ErrorCode::Invalid,
            "compile_result is for the trampoline".into(),
        )
    })?;
    frame.results.push(v);
    Ok(0)
}

/// `compile_explain(f, ptr, cap) -> len`
fn compile_explain(c: &mut Ctx, f: i32, ptr: i32, cap: i32) -> HostResult<i32> {
    let index = function_index(c, f)?;
    let text = c.data().compile.functions[index].explain();
    write_capped(c, ptr, cap, text.as_bytes())
}

/// `compile_stats(f, out_ptr) -> 0`: writes the function's calls, compiles, cache hits and
/// eager calls as four `i64`s.
fn compile_stats(c: &mut Ctx, f: i32, ptr: i32) -> HostResult<i32> {
    let index = function_index(c, f)?;
    let s = c.data().compile.functions[index].stats;
    let bytes: Vec<u8> = [s.calls, s.compiles, s.cache_hits, s.eager_calls]
        .iter()
        .flat_map(|v| (*v as i64).to_le_bytes())
        .collect();
    write(c, ptr, &bytes)?;
    Ok(0)
}

/// `lazy_begin() -> 0`
fn lazy_begin(c: &mut Ctx) -> HostResult<i32> {
    let compile = &mut c.data_mut().compile;
    if compile.recording() {
        return Err(Fail(
            ErrorCode::Invalid,
            "already recording (lazy mode or a compiled function); lazy regions do not nest".into(),
        ));
    }
    compile.active = Some(Active::lazy());
    Ok(0)
}

/// `lazy_sync() -> 0`: runs what was recorded (`xm.mark_step()`); no-op outside lazy mode.
fn lazy_sync(c: &mut Ctx) -> HostResult<i32> {
    if matches!(
        c.data().compile.active,
        Some(Active {
            kind: Kind::Lazy,
            ..
        })
    ) {
        sync(c, "lazy graph (mark_step)")?;
    }
    Ok(0)
}

/// `lazy_end() -> 0`: syncs and leaves lazy mode.
fn lazy_end(c: &mut Ctx) -> HostResult<i32> {
    if !matches!(
        c.data().compile.active,
        Some(Active {
            kind: Kind::Lazy,
            ..
        })
    ) {
        return Err(Fail(
            ErrorCode::Invalid,
            "lazy_end without lazy_begin".into(),
        ));
    }
    sync(c, "lazy graph (end of lazy region)")?;
    c.data_mut().compile.active = None;
    Ok(0)
}

//! The compile state of one guest instance: its compiled functions, the recording that ops go
//! into while one is active (lazy mode or a function being traced), and the trampoline calls
//! in progress. The compile group of imports (`abi/compile.rs`) drives it.

use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::GuestValue;
use neuronlab_compile::function::CompiledFunction;
use neuronlab_compile::graph::ValueId;
use neuronlab_compile::recorder::Recorder;
use neuronlab_core::tensor::TensorMeta;

/// Why a recording is active.
pub(crate) enum Kind {
    /// `lazy_begin` .. `lazy_end`.
    Lazy,
    /// Tracing compiled function number `index`.
    Function { index: usize },
}

pub(crate) struct Active {
    pub(crate) recorder: Recorder,
    pub(crate) kind: Kind,
}

/// Arguments and results of one trampoline call.
pub(crate) struct Frame {
    pub(crate) args: Vec<GuestValue>,
    pub(crate) results: Vec<GuestValue>,
}

/// The compile state of one guest instance.
#[derive(Default)]
pub struct CompileState {
    /// The recording ops go into instead of running, if any.
    pub(crate) active: Option<Active>,
    /// The instance's compiled functions; a guest names function `i` as `i + 1`.
    pub(crate) functions: Vec<CompiledFunction>,
    /// The arguments and results of the trampoline calls in progress, innermost last.
    pub(crate) frames: Vec<Frame>,
}

impl CompileState {
    /// `(name, explanation)` of every function the instance compiled, in the order they were
    /// made (see [`CompiledFunction::explain`]).
    pub fn explanations(&self) -> Vec<(String, String)> {
        self.functions
            .iter()
            .map(|f| (f.name.clone(), f.explain()))
            .collect()
    }

    /// True while ops are recorded instead of run.
    pub fn recording(&self) -> bool {
        self.active.is_some()
    }

    /// The shape and dtype of a traced value.
    pub fn meta(&self, v: ValueId) -> Option<TensorMeta> {
        self.active
            .as_ref()
            .map(|a| a.recorder.graph().meta(v).clone())
    }

    /// Records `op` on `inputs` (bound or traced) for `rt`, returning traced outputs.
    pub fn record(
        &mut self,
        rt: &neuronlab_core::Runtime,
        op: neuronlab_core::ops::OpId,
        inputs: &[GuestValue],
        attrs: &neuronlab_core::ops::Attrs,
    ) -> HostResult<Vec<GuestValue>> {
        let active = self
            .active
            .as_mut()
            .expect("record is called while recording");
        let ids = inputs
            .iter()
            .map(|v| value_id(&mut active.recorder, v))
            .collect::<HostResult<Vec<_>>>()?;
        let outs = active.recorder.op(rt, op, &ids, attrs)?;
        Ok(outs.into_iter().map(GuestValue::Traced).collect())
    }
}

/// The recording's value for a guest value: itself when traced, a bound input when real.
pub(crate) fn value_id(recorder: &mut Recorder, v: &GuestValue) -> HostResult<ValueId> {
    match v {
        GuestValue::Traced(id) => Ok(*id),
        GuestValue::Eager(t) => Ok(recorder.bind(t)),
        GuestValue::Gone(why) => Err(Fail(ErrorCode::Handle, why.clone())),
        GuestValue::Dist(d) => Err(d.not_a_tensor()),
    }
}

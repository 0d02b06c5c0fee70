//! The compile state of one guest instance: its compiled functions, the recording that ops go
//! into while one is active (lazy mode or a function being traced), and the trampoline calls
//! in progress. The compile group of imports (`abi/compile.rs`) drives it.

use crate::grad_trace::GradTrace;
use crate::status::{ErrorCode, Fail, HostResult};
use crate::values::{tokenizer_not_a_tensor, GuestValue};
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
    /// The gradients, captures and updates of a function trace; none in lazy mode.
    pub(crate) grad: Option<GradTrace>,
}

impl Active {
    /// A lazy-mode recording.
    pub(crate) fn lazy() -> Active {
        Active {
            recorder: Recorder::new(),
            kind: Kind::Lazy,
            grad: None,
        }
    }

    /// The recording's value for a guest value: itself when traced, a bound input when real
    /// (guarded and read at every call when a function trace captured it from the guest).
    pub(crate) fn value_id(&mut self, v: &GuestValue) -> HostResult<ValueId> {
        match v {
            GuestValue::Traced(id) => Ok(*id),
            GuestValue::Eager(t) => Ok(match &mut self.grad {
                Some(grad) => grad.bind(&mut self.recorder, t),
                None => self.recorder.bind(t),
            }),
            GuestValue::Gone(why) => Err(Fail(ErrorCode::Handle, why.clone())),
            GuestValue::Dist(d) => Err(d.not_a_tensor()),
            GuestValue::Tokenizer(_) => Err(tokenizer_not_a_tensor()),
        }
    }
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

    /// Records `op` on `inputs` (bound or traced) for `rt` under grad mode `grad_enabled`,
    /// returning traced outputs.
    pub(crate) fn record(
        &mut self,
        rt: &neuronlab_core::Runtime,
        op: neuronlab_core::ops::OpId,
        inputs: &[GuestValue],
        attrs: &neuronlab_core::ops::Attrs,
        grad_enabled: bool,
    ) -> HostResult<Vec<GuestValue>> {
        let active = self
            .active
            .as_mut()
            .expect("record is called while recording");
        let ids = inputs
            .iter()
            .map(|v| active.value_id(v))
            .collect::<HostResult<Vec<_>>>()?;
        let outs = active.recorder.op(rt, op, &ids, attrs)?;
        if let Some(grad) = &mut active.grad {
            grad.recorded(&mut active.recorder, grad_enabled)?;
        }
        Ok(outs.into_iter().map(GuestValue::Traced).collect())
    }

    /// True while a compiled function is traced (its gradients with it).
    pub(crate) fn traces_grad(&self) -> bool {
        self.active.as_ref().is_some_and(|a| a.grad.is_some())
    }
}

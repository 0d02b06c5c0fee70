//! The one dispatch path: every op run, eager, folded at compile time or fused, is a [`Work`]
//! handed to [`Runtime::dispatch`], which reserves its outputs, runs it, and publishes what
//! happened under one lock of the bus.
//!
//! Callers do the checking that needs their own knowledge first (a registry op resolves its
//! attributes and infers its outputs; a fused kernel was planned when its program compiled),
//! and describe the result as a `Work`: a name, the inputs, the inferred outputs, the modeled
//! cost, and how to compute it. Dispatch then keeps the invariants every op shares:
//!
//! - outputs are reserved in the core's HBM before any kernel runs, so an oversized request
//!   fails without touching RAM;
//! - a kernel's buffers must match the inferred outputs, or the run is an internal error;
//! - a panic or a cancellation inside a kernel becomes an [`Error`], never an unwind into the
//!   caller;
//! - alloc events go out with the op's event under one lock (or on their own before an
//!   error, so every free event has its alloc event).
//!
//! What an op does beyond running belongs at this path's registry entry, `Runtime::call_on`,
//! right after `dispatch` returns: the one place that holds the op, its resolved attributes,
//! its inputs and its outputs together. Autograd records its nodes there.

use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use smallvec::SmallVec;

use super::Runtime;
use crate::cancel::Cancelled;
use crate::device::cost::ModeledTime;
use crate::device::memory::{Allocation, MemoryError};
use crate::device::topology::CoreId;
use crate::error::{Error, Result};
use crate::events::{EventKind, MemoryEvent, OpEvent, Phase, TensorSig};
use crate::ops::registry::{OutputBuffers, ViewResult};
use crate::tensor::{checked_numel, Layout, Storage, Tensor, TensorMeta};

/// Where a dispatch's outputs live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On this core: outputs are charged to its HBM and the run is published as an op event.
    Core(CoreId),
    /// Compile-time constants (constant folding): tagged with this core but charged to no
    /// HBM and published as no event, because the device never runs them; a program copies
    /// its constants onto the core when it runs.
    Constant(CoreId),
}

impl Placement {
    /// The core the outputs are tagged with.
    pub fn core(self) -> CoreId {
        match self {
            Placement::Core(core) | Placement::Constant(core) => core,
        }
    }
}

/// A kernel as dispatch runs it: given the inputs' and the outputs' metas, fresh dense
/// row-major buffers, one per output.
pub type KernelFn<'a> = &'a dyn Fn(&[TensorMeta], &[TensorMeta]) -> Result<OutputBuffers>;

/// How a [`Work`] computes its outputs.
pub enum Compute<'a> {
    /// A kernel that fills fresh buffers.
    Buffers(KernelFn<'a>),
    /// A view of `input`: its storage with a new layout, or a contiguous copy.
    View {
        /// The one input the view describes.
        input: &'a Tensor,
        /// The view's layout, or the shape of the copy to make.
        view: ViewResult,
    },
}

/// What the device would spend on a run: its flops, its HBM traffic and the modeled time.
#[derive(Clone, Copy, Debug)]
pub struct WorkCost {
    /// Useful floating-point operations.
    pub flops: f64,
    /// Bytes read and written.
    pub bytes: f64,
    /// The roofline time of the run.
    pub modeled: ModeledTime,
}

/// One run for [`Runtime::dispatch`].
pub struct Work<'a> {
    /// The op's or fused kernel's name, as events and errors show it.
    pub name: Cow<'static, str>,
    /// The operands as errors list them (`x: f32[2, 3], w: f32[3]`), from the inputs' metas;
    /// called only on an error.
    pub operands: &'a dyn Fn(&[TensorMeta]) -> String,
    /// The inputs' shapes and dtypes, which move into the op event.
    pub inputs: Vec<TensorMeta>,
    /// The outputs' inferred shapes and dtypes.
    pub outputs: Vec<TensorMeta>,
    /// Where the outputs live.
    pub placement: Placement,
    /// The modeled cost.
    pub cost: WorkCost,
    /// When the inputs are ready on the core's modeled device clock
    /// ([`Tensor::ready_after`]): the run waits for a collective's output.
    pub ready_us: f64,
    /// How to compute the outputs.
    pub compute: Compute<'a>,
}

impl Runtime {
    /// Runs `work`: reserves its outputs on its core, computes them, checks them against the
    /// inferred outputs, and publishes the alloc events and one op event together. See the
    /// module docs for the invariants.
    pub fn dispatch(&self, work: Work<'_>) -> Result<Vec<Tensor>> {
        let charged = matches!(work.placement, Placement::Core(_));
        let core = work.placement.core();
        // One clock read stamps the op event and its output allocations' events.
        let start_us = self.bus.now_us();
        let mut reserved = Reserved::default();
        let result = self.run(&work, charged, &mut reserved);
        let allocs = reserved.events.into_iter().map(EventKind::Memory);
        let outputs = match result {
            Ok(outputs) => outputs,
            Err(e) => {
                // The alloc events go out before the allocations are dropped (and publish
                // their frees).
                self.bus.publish_all_at(core, start_us, allocs);
                drop(reserved.allocations);
                return Err(e);
            }
        };
        if charged {
            let op = EventKind::Op(OpEvent {
                name: work.name,
                // The metas move into the event: no copies of shapes on every op's path.
                inputs: work.inputs.into_iter().map(TensorSig::from).collect(),
                outputs: work.outputs.into_iter().map(TensorSig::from).collect(),
                flops: work.cost.flops,
                bytes: work.cost.bytes,
                host_us: self.bus.now_us() - start_us,
                modeled: work.cost.modeled,
                phase: Phase::current(),
            });
            self.bus
                .publish_all_after(core, start_us, work.ready_us, allocs.chain([op]));
        }
        Ok(outputs)
    }

    /// Reserves and computes `work`'s outputs. The reservations and their events go to
    /// `reserved`, which the caller publishes, then drops on an error.
    fn run(&self, work: &Work<'_>, charged: bool, reserved: &mut Reserved) -> Result<Vec<Tensor>> {
        let core = work.placement.core();
        let mut reserve = |metas: &[TensorMeta]| -> Result<()> {
            for m in metas {
                let bytes = checked_numel(&m.shape)
                    .and_then(|n| n.checked_mul(m.dtype.size()))
                    .ok_or_else(|| {
                        work.op_error(format!("output shape {:?} overflows", m.shape))
                    })?;
                if charged {
                    let (allocation, event) = self
                        .memory
                        .reserve_unpublished(core, bytes as u64)
                        .map_err(|e| work.memory_error(e))?;
                    reserved.allocations.push(allocation);
                    reserved.events.push(event);
                }
            }
            Ok(())
        };
        let copy;
        let (buffers, layouts): (OutputBuffers, &[TensorMeta]) = match &work.compute {
            Compute::View {
                input,
                view: ViewResult::View(layout),
            } => {
                let meta = TensorMeta {
                    shape: layout.shape.clone(),
                    dtype: input.dtype(),
                };
                self.check_materializable(&meta)
                    .map_err(|e| work.memory_error(e))?;
                return Ok(vec![input.view(layout.clone())]);
            }
            Compute::View {
                input,
                view: ViewResult::Copy(shape),
            } => {
                copy = [TensorMeta {
                    shape: shape.clone(),
                    dtype: input.dtype(),
                }];
                reserve(&copy)?;
                let buffer = guarded(&work.name, || input.to_buffer())?;
                (OutputBuffers::from_iter([buffer]), &copy)
            }
            Compute::Buffers(kernel) => {
                // Reserve before computing, so an oversized request fails without touching RAM.
                reserve(&work.outputs)?;
                let buffers = guarded(&work.name, || kernel(&work.inputs, &work.outputs))??;
                (buffers, &work.outputs)
            }
        };
        check_buffers(work, &buffers, layouts)?;
        let mut allocations = std::mem::take(&mut reserved.allocations).into_iter();
        Ok(buffers
            .into_iter()
            .zip(layouts)
            .map(|(buffer, m)| {
                let storage = Arc::new(Storage::new(buffer, allocations.next()));
                Tensor::from_storage(storage, Layout::contiguous(&m.shape), core)
            })
            .collect())
    }
}

impl Runtime {
    /// Checks that a tensor of `meta`'s shape could exist on this host: its element count
    /// fits in 64 bits and, at 8 bytes an element (the widest temporary a kernel makes of an
    /// operand), within the host cap. Views are checked with it when they are made, so a view
    /// of one element cannot describe terabytes that a later kernel would walk or copy.
    pub fn check_materializable(&self, meta: &TensorMeta) -> std::result::Result<(), MemoryError> {
        let limit = self.memory.host_limit();
        let numel = checked_numel(&meta.shape);
        let fits = numel
            .and_then(|n| (n as u64).checked_mul(8))
            .is_some_and(|bytes| bytes <= limit);
        if fits {
            return Ok(());
        }
        Err(MemoryError::TooLarge {
            shape: meta.to_string(),
            elements: numel.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
            limit,
        })
    }
}

/// Checks that a kernel computed the outputs it was inferred to: a kernel that did not is a
/// bug, reported as an internal error instead of a tensor whose data disagrees with its shape.
fn check_buffers(work: &Work<'_>, buffers: &OutputBuffers, layouts: &[TensorMeta]) -> Result<()> {
    if buffers.len() != layouts.len() {
        return Err(work.internal_error(format!(
            "it computed {} outputs for {} inferred",
            buffers.len(),
            layouts.len()
        )));
    }
    match buffers
        .iter()
        .zip(layouts)
        .find(|(b, m)| b.dtype() != m.dtype || b.len() != m.numel())
    {
        Some((buffer, m)) => Err(work.internal_error(format!(
            "it computed {} values of {} for an inferred {m}",
            buffer.len(),
            buffer.dtype()
        ))),
        None => Ok(()),
    }
}

/// The output reservations of one run and their unpublished alloc events.
#[derive(Default)]
struct Reserved {
    allocations: SmallVec<[Allocation; 2]>,
    events: SmallVec<[MemoryEvent; 2]>,
}

impl Work<'_> {
    /// An error of this run: its name, its operands and what was wrong.
    pub fn op_error(&self, message: String) -> Error {
        Error::Op {
            op: self.name.to_string(),
            operands: (self.operands)(&self.inputs),
            message,
        }
    }

    fn memory_error(&self, source: MemoryError) -> Error {
        Error::OpOutOfMemory {
            op: self.name.to_string(),
            operands: (self.operands)(&self.inputs),
            source,
        }
    }

    fn internal_error(&self, what: String) -> Error {
        Error::Invalid(format!(
            "internal error in {}: {what}; the session is intact, but please report this",
            self.name
        ))
    }
}

/// Runs the kernel of op or fused kernel `name`, turning a cancellation (see [`crate::cancel`])
/// into [`Error::Cancelled`] and a panic (a bug: kernels validate through inference first)
/// into an error, so the caller's session survives either.
pub fn guarded<R>(name: &str, kernel: impl FnOnce() -> R) -> Result<R> {
    std::panic::catch_unwind(AssertUnwindSafe(kernel)).map_err(|payload| {
        if payload.is::<Cancelled>() {
            return Error::Cancelled(format!("{name} was interrupted"));
        }
        let what = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Error::Invalid(format!(
            "internal error in {name}: {what}; the session is intact, but please report this"
        ))
    })
}

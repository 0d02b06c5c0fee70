//! The eager runtime: dispatches registry ops on simulated cores, accounts memory, measures host
//! time, models device time, and publishes one `Op` event per call.
//!
//! [`Runtime::call_on`] checks a registry op and hands it to [`Runtime::dispatch`]
//! (`dispatch.rs`), the one path every op run takes: eager ops, constant folding and the
//! compiled programs' fused kernels.

mod dispatch;

use std::borrow::Cow;
use std::sync::Arc;

pub use dispatch::{guarded, Compute, KernelFn, Placement, Work, WorkCost};

use crate::activity::Activities;
use crate::autograd;
use crate::device::cost::CostModel;
use crate::device::host::{host_limit_from_env, HostLimitError};
use crate::device::memory::DeviceMemory;
use crate::device::topology::{CoreId, Topology};
use crate::error::{Error, Result};
use crate::events::EventBus;
use crate::ops::attrs::{Attrs, ResolvedAttrs};
use crate::ops::registry::{Exec, KernelArgs, MetaArgs, OpDef, OpId, Registry, ViewResult};
use crate::tensor::grad::{AutogradBytes, AutogradUse};
use crate::tensor::{checked_numel, Buffer, Layout, Storage, Tensor, TensorMeta};

/// Settings for a [`Runtime`].
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// The simulated instance.
    pub topology: Topology,
    /// The real cap on host bytes held by tensors.
    pub host_limit: u64,
}

impl RuntimeOptions {
    /// Topology and host limit from the environment (`NEURONLAB_INSTANCE`,
    /// `NEURON_LOGICAL_NC_CONFIG`, `NEURON_RT_VISIBLE_CORES`, `NEURONLAB_HOST_MEM_LIMIT`).
    pub fn from_env() -> Result<RuntimeOptions> {
        Ok(RuntimeOptions {
            topology: Topology::from_env()?,
            host_limit: host_limit_from_env()
                .map_err(|e: HostLimitError| Error::Invalid(e.to_string()))?,
        })
    }
}

/// One eager Neuron runtime: a topology, its memory, a cost model and an event bus.
///
/// Cheap to share behind an `Arc`; every method takes `&self` and is thread-safe, so SPMD
/// ranks on different threads can use one runtime.
pub struct Runtime {
    topology: Topology,
    memory: Arc<DeviceMemory>,
    cost: CostModel,
    bus: Arc<EventBus>,
    default_device: CoreId,
    autograd: Vec<Arc<AutogradBytes>>,
    activities: Arc<Activities>,
}

impl Runtime {
    /// A runtime with these options.
    pub fn new(options: RuntimeOptions) -> Runtime {
        let bus = Arc::new(EventBus::new());
        let memory = DeviceMemory::new(&options.topology, options.host_limit, Some(bus.clone()));
        let autograd = (0..options.topology.num_cores())
            .map(|_| Arc::default())
            .collect();
        Runtime {
            autograd,
            cost: CostModel::new(&options.topology),
            topology: options.topology,
            memory,
            bus,
            default_device: CoreId(0),
            activities: Arc::default(),
        }
    }

    /// A runtime configured from the environment (see [`RuntimeOptions::from_env`]).
    pub fn from_env() -> Result<Runtime> {
        Ok(Runtime::new(RuntimeOptions::from_env()?))
    }

    /// The simulated instance.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Per-core memory accounting.
    pub fn memory(&self) -> &Arc<DeviceMemory> {
        &self.memory
    }

    /// The event bus every op publishes to.
    pub fn bus(&self) -> &Arc<EventBus> {
        &self.bus
    }

    /// Long host work under way for the guests (checkpoint reads), for progress reports.
    pub fn activities(&self) -> &Arc<Activities> {
        &self.activities
    }

    /// The cost model.
    pub fn cost_model(&self) -> &CostModel {
        &self.cost
    }

    /// Where ops without tensor inputs (creation ops) put their outputs.
    pub fn default_device(&self) -> CoreId {
        self.default_device
    }

    /// What autograd holds on `core`: the counters its nodes and leaves account into.
    pub fn autograd_bytes(&self, core: CoreId) -> Result<Arc<AutogradBytes>> {
        self.check_core(core)?;
        Ok(self.autograd[core.0 as usize].clone())
    }

    /// Bytes autograd holds on `core` (saved activations and gradients), for `%mem`.
    pub fn autograd_use(&self, core: CoreId) -> Result<AutogradUse> {
        Ok(self.autograd_bytes(core)?.snapshot())
    }

    /// Checks that `core` is one of the visible cores.
    pub fn check_core(&self, core: CoreId) -> Result<()> {
        if (core.0 as usize) < self.topology.num_cores() {
            Ok(())
        } else {
            Err(Error::Invalid(format!(
                "{core} does not exist: {} has {} visible cores (neuron:0 to neuron:{})",
                self.topology.instance_name(),
                self.topology.num_cores(),
                self.topology.num_cores().saturating_sub(1)
            )))
        }
    }

    /// A tensor holding `buffer` with `shape` on `core`, accounted against its HBM quota.
    pub fn tensor_on(&self, core: CoreId, buffer: Buffer, shape: &[usize]) -> Result<Tensor> {
        self.check_core(core)?;
        let numel = checked_numel(shape).ok_or_else(|| {
            Error::Invalid(format!("shape {shape:?} overflows the element count"))
        })?;
        if numel != buffer.len() {
            return Err(Error::Invalid(format!(
                "a buffer of {} elements cannot have shape {shape:?} ({numel} elements)",
                buffer.len()
            )));
        }
        let bytes = (buffer.len() * buffer.dtype().size()) as u64;
        let allocation = self.memory.reserve(core, bytes)?;
        let storage = Arc::new(Storage::new(buffer, Some(allocation)));
        Ok(Tensor::from_storage(
            storage,
            Layout::contiguous(shape),
            core,
        ))
    }

    /// [`Runtime::tensor_on`] on the default device.
    pub fn tensor(&self, buffer: Buffer, shape: &[usize]) -> Result<Tensor> {
        self.tensor_on(self.default_device, buffer, shape)
    }

    /// Calls an op by name.
    pub fn call(&self, op: &str, inputs: &[&Tensor], attrs: &Attrs) -> Result<Vec<Tensor>> {
        let (id, _) = Registry::global().lookup(op).map_err(Error::UnknownOp)?;
        self.call_id(id, inputs, attrs)
    }

    /// Calls a single-output op by name and returns its output.
    pub fn call1(&self, op: &str, inputs: &[&Tensor], attrs: &Attrs) -> Result<Tensor> {
        let mut out = self.call(op, inputs, attrs)?;
        Ok(out.swap_remove(0))
    }

    /// Calls an op by registry id (what the guest ABI uses after `op_lookup`).
    pub fn call_id(&self, id: OpId, inputs: &[&Tensor], attrs: &Attrs) -> Result<Vec<Tensor>> {
        let def = Registry::global()
            .get(id)
            .ok_or_else(|| Error::UnknownOp(format!("no op has id {}", id.0)))?;
        self.call_on(def, inputs, attrs, self.default_device)
    }

    /// Infers an op's outputs without running it (what tracing uses).
    pub fn infer(def: &OpDef, inputs: &[TensorMeta], attrs: &Attrs) -> Result<Vec<TensorMeta>> {
        let op_err = |message: String| op_error(def, inputs, message);
        check_input_count(def, inputs.len()).map_err(op_err)?;
        let resolved = ResolvedAttrs::resolve(def.attrs, attrs).map_err(op_err)?;
        let outputs = (def.infer)(&MetaArgs {
            inputs,
            attrs: &resolved,
        })
        .map_err(op_err)?;
        // A traced graph carries its shapes to every pass: none may overflow a byte count.
        check_byte_counts(&outputs).map_err(op_err)?;
        Ok(outputs)
    }

    /// Checks that the `outputs` of `def` on `inputs` could exist on this host
    /// ([`Runtime::check_materializable`]): what tracing checks of every op it records, as
    /// eager checks its views, so no graph holds a value too large to ever run.
    pub fn check_outputs(
        &self,
        def: &OpDef,
        inputs: &[TensorMeta],
        outputs: &[TensorMeta],
    ) -> Result<()> {
        for m in outputs {
            self.check_materializable(m)
                .map_err(|source| Error::OpOutOfMemory {
                    op: def.name.to_string(),
                    operands: operands(def, inputs),
                    source,
                })?;
        }
        Ok(())
    }

    /// Calls `def`; ops without inputs create their outputs on `creation_core`.
    ///
    /// This checks what only the registry knows (the operand count, one core for all inputs,
    /// the attributes, the inferred outputs), then hands the run to [`Runtime::dispatch`].
    /// When an input requires a gradient, autograd records the op's node on the outputs.
    pub fn call_on(
        &self,
        def: &OpDef,
        inputs: &[&Tensor],
        attrs: &Attrs,
        creation_core: CoreId,
    ) -> Result<Vec<Tensor>> {
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
        let op_err = |message: String| op_error(def, &metas, message);
        check_input_count(def, inputs.len()).map_err(op_err)?;
        let core = match inputs.first() {
            Some(first) => {
                if let Some((i, t)) = inputs
                    .iter()
                    .enumerate()
                    .find(|(_, t)| t.device() != first.device())
                {
                    return Err(op_err(format!(
                        "all inputs must be on one core: {} is on {} but {} is on {}",
                        def.input_name(0),
                        first.device(),
                        def.input_name(i),
                        t.device()
                    )));
                }
                first.device()
            }
            None => {
                self.check_core(creation_core)?;
                creation_core
            }
        };
        let resolved = ResolvedAttrs::resolve(def.attrs, attrs).map_err(op_err)?;
        let meta_args = MetaArgs {
            inputs: &metas,
            attrs: &resolved,
        };
        let out_metas = (def.infer)(&meta_args).map_err(op_err)?;
        check_byte_counts(&out_metas).map_err(op_err)?;
        let cost = (def.cost)(&meta_args, &out_metas);
        let cost = WorkCost {
            flops: cost.flops,
            bytes: cost.bytes_read + cost.bytes_written,
            modeled: self.cost.modeled(&cost),
        };
        let kernel;
        let compute = match def.exec {
            Exec::View(view) => Compute::View {
                input: inputs[0],
                view: view(inputs[0], &resolved).map_err(op_err)?,
            },
            Exec::Compute(f) => {
                let attrs = &resolved;
                kernel = move |ins: &[TensorMeta], outs: &[TensorMeta]| {
                    let args = KernelArgs {
                        inputs,
                        attrs,
                        outputs: outs,
                    };
                    f(&args).map_err(|message| op_error(def, ins, message))
                };
                Compute::Buffers(&kernel)
            }
        };
        // A view shares its input's storage, and with it when the storage is ready: it does
        // not wait for a collective's output, the first op that reads the elements does.
        let ready_us = match &compute {
            Compute::View {
                view: ViewResult::View(_),
                ..
            } => 0.0,
            _ => Tensor::ready_after(inputs),
        };
        let outputs = self.dispatch(Work {
            name: Cow::Borrowed(def.name),
            operands: &|ins| operands(def, ins),
            inputs: metas,
            outputs: out_metas,
            placement: Placement::Core(core),
            cost,
            ready_us,
            compute,
        })?;
        autograd::record(self, def, &resolved, inputs, outputs)
    }
}

/// Checks that every output's byte count fits in 64 bits, before the cost model or a pass
/// multiplies it out.
fn check_byte_counts(outputs: &[TensorMeta]) -> Result<(), String> {
    match outputs.iter().find(|m| {
        checked_numel(&m.shape)
            .and_then(|n| n.checked_mul(m.dtype.size()))
            .is_none()
    }) {
        Some(m) => Err(format!("output shape {:?} overflows", m.shape)),
        None => Ok(()),
    }
}

fn check_input_count(def: &OpDef, n: usize) -> Result<(), String> {
    let (min, max) = def.input_count();
    let ok = n >= min && max.is_none_or(|m| n <= m);
    if ok {
        return Ok(());
    }
    let expected = match max {
        Some(m) if m == min => format!("{min}"),
        Some(m) => format!("{min} to {m}"),
        None => format!("at least {min}"),
    };
    Err(format!(
        "expected {expected} input tensor(s), got {n}; schema: {}",
        def.schema()
    ))
}

fn operands(def: &OpDef, inputs: &[TensorMeta]) -> String {
    inputs
        .iter()
        .enumerate()
        .map(|(i, m)| format!("{}: {m}", def.input_name(i)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An op's error: its name, its operands and what was wrong.
pub fn op_error(def: &OpDef, inputs: &[TensorMeta], message: String) -> Error {
    Error::Op {
        op: def.name.to_string(),
        operands: operands(def, inputs),
        message,
    }
}

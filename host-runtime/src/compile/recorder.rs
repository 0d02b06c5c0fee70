//! Recording ops into a graph instead of running them, and flushing the recording: the
//! machinery behind lazy mode (`xm.mark_step()`), graph breaks, and tracing a compiled
//! function.
//!
//! A [`Recorder`] holds one pending graph. Real tensors that enter it become graph inputs
//! bound to those tensors. [`Recorder::flush`] compiles the pending graph (or finds it in the
//! session's [`ProgramCache`] by its canonical hash), runs it on the bound tensors, and returns
//! the real values of the requested outputs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::graph::{Graph, Producer, ValueId};
use super::program::{optimize, CompileReport, Program};
use crate::device::topology::CoreId;
use crate::events::{CacheSource, CompileEvent, EventKind};
use crate::ops::{Attrs, OpId};
use crate::tensor::Tensor;
use crate::{Result, Runtime};

/// A compiled graph and what compiling it found.
pub struct CachedProgram {
    /// The executable.
    pub program: Program,
    /// Node counts, fused kernels, compile time.
    pub report: CompileReport,
}

/// A session's compiled graphs, by canonical graph hash.
#[derive(Default)]
pub struct ProgramCache {
    programs: Mutex<HashMap<[u8; 32], Arc<CachedProgram>>>,
}

impl ProgramCache {
    /// An empty cache.
    pub fn new() -> ProgramCache {
        ProgramCache::default()
    }

    /// The program for `graph`, compiled now (publishing a compile event with `reason`) or found
    /// in the cache (publishing a cache hit). Returns the program and where it came from.
    pub fn get_or_compile(
        &self,
        rt: &Runtime,
        core: CoreId,
        graph: &Graph,
        label: &str,
        reason: &str,
        recompile: bool,
    ) -> Result<(Arc<CachedProgram>, CacheSource)> {
        let key = *graph.canonical_hash().as_bytes();
        if let Some(hit) = self.lock().get(&key).cloned() {
            rt.bus().publish(
                core,
                EventKind::CacheHit {
                    function: label.to_string(),
                    source: CacheSource::Memory,
                },
            );
            return Ok((hit, CacheSource::Memory));
        }
        let start_us = rt.bus().now_us();
        let started = Instant::now();
        let (program, mut report) = optimize(graph)?;
        report.host_compile_us = started.elapsed().as_secs_f64() * 1e6;
        rt.bus().publish_at(
            core,
            start_us,
            EventKind::Compile(CompileEvent {
                function: label.to_string(),
                reason: reason.to_string(),
                recompile,
                nodes_before: report.nodes_before,
                nodes_after: report.nodes_after,
                fused_kernels: report.kernels.len(),
                host_compile_us: report.host_compile_us,
                cache: CacheSource::Miss,
            }),
        );
        let cached = Arc::new(CachedProgram { program, report });
        self.lock().insert(key, cached.clone());
        Ok((cached, CacheSource::Miss))
    }

    /// Number of cached programs.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every program.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<CachedProgram>>> {
        // A panic while holding the lock cannot leave the map half-updated (single inserts).
        self.programs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One pending graph and the real tensors its inputs are bound to.
#[derive(Default)]
pub struct Recorder {
    graph: Graph,
    bindings: Vec<Tensor>,
    /// Real tensors already bound, by identity, so a tensor used twice is one input.
    bound: HashMap<(usize, Vec<usize>, Vec<usize>, usize), ValueId>,
}

impl Recorder {
    /// An empty recording.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// The value standing for real tensor `t` in this recording (a new input the first time).
    pub fn bind(&mut self, t: &Tensor) -> ValueId {
        let key = (
            t.storage_id(),
            t.shape().to_vec(),
            t.strides().to_vec(),
            t.layout().offset,
        );
        if let Some(v) = self.bound.get(&key) {
            return *v;
        }
        let v = self.graph.input(t.meta());
        self.bindings.push(t.clone());
        self.bound.insert(key, v);
        v
    }

    /// A new graph input bound to `t`, even when `t` is already bound: a compiled function's
    /// arguments are inputs of their own, so a later call may pass different tensors.
    pub fn arg(&mut self, t: &Tensor) -> ValueId {
        let v = self.graph.input(t.meta());
        self.bindings.push(t.clone());
        v
    }

    /// Records an op; its outputs are values of this recording.
    pub fn op(&mut self, op: OpId, inputs: &[ValueId], attrs: &Attrs) -> Result<Vec<ValueId>> {
        self.graph.op(op, inputs, attrs)
    }

    /// The recorded graph so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Number of recorded op nodes.
    pub fn len(&self) -> usize {
        self.graph.nodes.len()
    }

    /// True when no op was recorded.
    pub fn is_empty(&self) -> bool {
        self.graph.nodes.is_empty()
    }

    /// The real tensors the graph inputs are bound to, in input order.
    pub fn bindings(&self) -> &[Tensor] {
        &self.bindings
    }

    /// Sets `outputs` as the graph's outputs and returns the graph and its bindings.
    pub fn finish(mut self, outputs: &[ValueId]) -> (Graph, Vec<Tensor>) {
        self.graph.set_outputs(outputs.to_vec());
        (self.graph, self.bindings)
    }

    /// Compiles or finds the graph computing `outputs`, runs it on the bound tensors and
    /// returns the outputs' real values, in order. Outputs that are bound inputs or constants
    /// are returned as they are; only op results go through a program.
    pub fn flush(
        self,
        rt: &Runtime,
        core: CoreId,
        outputs: &[ValueId],
        label: &str,
    ) -> Result<Vec<Tensor>> {
        let mut values: Vec<Option<Tensor>> = outputs
            .iter()
            .map(|v| match &self.graph.producers[v.0 as usize] {
                Producer::Input(i) => Some(self.bindings[*i].clone()),
                Producer::Constant(t) => Some(t.clone()),
                Producer::Node { .. } => None,
            })
            .collect();
        let computed: Vec<ValueId> = outputs
            .iter()
            .zip(&values)
            .filter(|(_, v)| v.is_none())
            .map(|(o, _)| *o)
            .collect();
        if !computed.is_empty() {
            let (graph, bindings) = self.finish(&computed);
            let reason = format!("{label}: new graph");
            let (cached, _) = rt
                .programs()
                .get_or_compile(rt, core, &graph, label, &reason, false)?;
            let refs: Vec<&Tensor> = bindings.iter().collect();
            let mut results = cached.program.run(rt, core, &refs)?.into_iter();
            for slot in values.iter_mut().filter(|v| v.is_none()) {
                *slot = results.next();
            }
        }
        Ok(values
            .into_iter()
            .map(|v| v.expect("every output is filled"))
            .collect())
    }
}

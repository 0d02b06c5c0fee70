//! Recording ops into a graph instead of running them, and flushing the recording: the
//! machinery behind lazy mode (`xm.mark_step()`), graph breaks, and tracing a compiled
//! function.
//!
//! A [`Recorder`] holds one pending graph. Real tensors that enter it become graph inputs
//! bound to those tensors. [`Recorder::flush`] compiles the pending graph (or finds it in the
//! session's [`ProgramCache`] by its canonical hash), runs it on the bound tensors, and returns
//! the real values of the requested outputs. The cache keeps programs in memory and, when it
//! has a folder (a session from the environment has one), on disk too (see [`super::disk`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::disk::{DiskCache, Lookup};
use super::graph::{Graph, Producer, ValueId};
use super::program::{optimize, CompileReport, Program};
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::events::{CacheSource, CompileEvent, EventKind, LogLevel};
use neuronlab_core::ops::{Attrs, OpId, Registry};
use neuronlab_core::paths::CacheDir;
use neuronlab_core::tensor::{Tensor, TensorMeta};
use neuronlab_core::{Result, Runtime};

/// A compiled graph and what compiling it found.
pub struct CachedProgram {
    /// The executable.
    pub program: Program,
    /// Node counts, fused kernels, compile time.
    pub report: CompileReport,
}

/// Compiled graphs by canonical graph hash: in memory for the session, and optionally on disk
/// (see [`super::disk`]), where other sessions and processes find them too.
#[derive(Default)]
pub struct ProgramCache {
    programs: Mutex<HashMap<[u8; 32], Arc<CachedProgram>>>,
    disk: Option<DiskCache>,
}

impl ProgramCache {
    /// An empty cache, in memory only.
    pub fn new() -> ProgramCache {
        ProgramCache::default()
    }

    /// An empty in-memory cache over the on-disk cache in `dir` (created on the first store),
    /// or in memory only for `None`.
    pub fn with_disk_dir(dir: Option<PathBuf>) -> ProgramCache {
        ProgramCache::with_disk(dir.map(DiskCache::new))
    }

    /// An empty in-memory cache over the on-disk cache in `programs` under
    /// [`CacheDir::Programs`] (`NEURONLAB_CACHE_DIR`, else the user's cache directory).
    pub fn from_env() -> ProgramCache {
        ProgramCache::with_disk_dir(Some(CacheDir::Programs.path()))
    }

    /// An empty in-memory cache over `disk`.
    pub(crate) fn with_disk(disk: Option<DiskCache>) -> ProgramCache {
        ProgramCache {
            programs: Mutex::default(),
            disk,
        }
    }

    /// The directory of the on-disk cache, if there is one.
    pub fn disk_dir(&self) -> Option<&Path> {
        self.disk.as_ref().map(DiskCache::dir)
    }

    /// The program for `graph`: found in memory, else loaded from disk, else compiled now and
    /// stored in both. Returns the program and where it came from.
    ///
    /// One event says what happened. A compile (`traced` is true: a function was traced
    /// because its guards failed) is always a compile event with `reason`, whose `cache` field
    /// says whether the program was compiled now or found in memory or on disk. A lazy graph
    /// (`traced` is false) found in a cache is a cache hit event instead.
    ///
    /// An unusable disk entry (unreadable, truncated, corrupt) is reported as a warning log
    /// event with target `cache`, and replaced by the program compiled now; so is a failure to
    /// write one. Neither fails the call.
    #[allow(clippy::too_many_arguments)]
    pub fn get_or_compile(
        &self,
        rt: &Runtime,
        core: CoreId,
        graph: &Graph,
        label: &str,
        reason: &str,
        recompile: bool,
        traced: bool,
    ) -> Result<(Arc<CachedProgram>, CacheSource)> {
        let hash = graph.canonical_hash();
        let start_us = rt.bus().now_us();
        let (cached, source) = self.find_or_compile(rt, core, graph, &hash, label)?;
        let kind = if source == CacheSource::Miss || traced {
            let report = &cached.report;
            EventKind::Compile(CompileEvent {
                function: label.to_string(),
                reason: reason.to_string(),
                recompile,
                graph: graph_id(&hash),
                nodes_before: report.nodes_before,
                nodes_after: report.nodes_after,
                fused_kernels: report.kernels.len(),
                // A program found in a cache cost no compile now.
                host_compile_us: if source == CacheSource::Miss {
                    report.host_compile_us
                } else {
                    0.0
                },
                cache: source,
            })
        } else {
            EventKind::CacheHit {
                function: label.to_string(),
                source,
            }
        };
        rt.bus().publish_at(core, start_us, kind);
        Ok((cached, source))
    }

    fn find_or_compile(
        &self,
        rt: &Runtime,
        core: CoreId,
        graph: &Graph,
        hash: &blake3::Hash,
        label: &str,
    ) -> Result<(Arc<CachedProgram>, CacheSource)> {
        let key = *hash.as_bytes();
        if let Some(hit) = self.lock().get(&key).cloned() {
            return Ok((hit, CacheSource::Memory));
        }
        let warn = |message: String| {
            rt.bus().publish(
                core,
                EventKind::Log {
                    level: LogLevel::Warn,
                    target: "cache".into(),
                    message,
                },
            );
        };
        if let Some(disk) = &self.disk {
            match disk.load(hash) {
                Lookup::Hit(program) => {
                    let report = program.report().clone();
                    let cached = Arc::new(CachedProgram {
                        program: *program,
                        report,
                    });
                    self.lock().insert(key, cached.clone());
                    return Ok((cached, CacheSource::Disk));
                }
                Lookup::Miss => {}
                Lookup::Bad { path, reason } => warn(format!(
                    "program cache entry {} is unusable: {reason}; recompiling '{label}'",
                    path.display()
                )),
            }
        }
        // The report holds the measured compile time, which a disk hit later reports as well.
        let (program, report) = optimize(rt, graph)?;
        if let Some(disk) = &self.disk {
            if let Err(e) = disk.store(hash, &program) {
                warn(format!(
                    "could not write program cache entry {}: {e}",
                    disk.path(hash).display()
                ));
            }
        }
        let cached = Arc::new(CachedProgram { program, report });
        self.lock().insert(key, cached.clone());
        Ok((cached, CacheSource::Miss))
    }

    /// Number of programs cached in memory.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when nothing is cached in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every program held in memory; the disk cache is kept.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<CachedProgram>>> {
        // A panic while holding the lock cannot leave the map half-updated (single inserts).
        self.programs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A graph's id in events: the first 16 hex digits of its canonical hash.
pub fn graph_id(hash: &blake3::Hash) -> String {
    hash.to_hex()[..16].to_string()
}

/// What makes two tensors the same to a recording: one storage, viewed the same way, at the
/// same place in autograd's graph (a detached copy of a leaf is another tensor).
pub type TensorKey = (usize, Vec<usize>, Vec<usize>, usize, Option<(usize, usize)>);

/// The identity of `t` as a recording binds it.
pub fn tensor_key(t: &Tensor) -> TensorKey {
    (
        t.storage_id(),
        t.shape().to_vec(),
        t.strides().to_vec(),
        t.layout().offset,
        t.grad_edge().map(|e| e.key()),
    )
}

/// One pending graph and the real tensors its inputs are bound to.
#[derive(Default)]
pub struct Recorder {
    graph: Graph,
    bindings: Vec<Tensor>,
    /// Real tensors already bound, by identity, so a tensor used twice is one input.
    bound: HashMap<TensorKey, ValueId>,
}

impl Recorder {
    /// An empty recording.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// The value standing for real tensor `t` in this recording (a new input the first time).
    pub fn bind(&mut self, t: &Tensor) -> ValueId {
        let key = tensor_key(t);
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
    ///
    /// An op whose outputs could not exist on `rt`'s host is refused here, where eager would
    /// refuse it, and is not recorded.
    pub fn op(
        &mut self,
        rt: &Runtime,
        op: OpId,
        inputs: &[ValueId],
        attrs: &Attrs,
    ) -> Result<Vec<ValueId>> {
        let outputs = self.graph.op(op, inputs, attrs)?;
        let metas: Vec<TensorMeta> = outputs
            .iter()
            .map(|&v| self.graph.meta(v).clone())
            .collect();
        let inputs: Vec<TensorMeta> = inputs.iter().map(|&v| self.graph.meta(v).clone()).collect();
        let def = Registry::global()
            .get(op)
            .expect("the graph checked the id");
        if let Err(e) = rt.check_outputs(def, &inputs, &metas) {
            self.graph.pop_node();
            return Err(e);
        }
        Ok(outputs)
    }

    /// The recorded graph so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The recorded graph, to append nodes to (a traced backward) or mark their parts.
    /// Inputs must be added through [`Recorder::bind`] and [`Recorder::arg`], which keep the
    /// bindings.
    pub fn graph_mut(&mut self) -> &mut Graph {
        &mut self.graph
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
        programs: &ProgramCache,
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
            let (cached, _) =
                programs.get_or_compile(rt, core, &graph, label, &reason, false, false)?;
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

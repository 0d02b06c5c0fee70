//! The executable form of a graph: [`optimize`] runs the passes (see [`super::passes`]) and
//! returns a [`Program`], a list of kernels in execution order with a plan for when each value
//! is dropped; [`Program::run`] runs it on a core as eager would, one op event per kernel.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Instant;

use smallvec::SmallVec;

use super::fused::Fused;
use super::graph::{value_list, Graph, Part, Producer, ValueId};
use super::passes::buffers::{self, KernelIo};
use super::passes::{
    cse, dce, def_of, fold, fuse_elementwise, fuse_reduction, infer, matmul_epilogue, Fusion,
    KernelPlan, Pass, Users,
};
use neuronlab_core::autograd;
use neuronlab_core::device::CoreId;
use neuronlab_core::events::fmt;
use neuronlab_core::ops::registry::Exec;
use neuronlab_core::tensor::{same_shape, Tensor};
use neuronlab_core::{Error, Result, Runtime};

/// The size of a graph after one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct PassReport {
    /// The pass, as explain names it (`dead code`, `elementwise fusion`, ...).
    pub name: &'static str,
    /// Nodes after the pass. After the fusion passes a fused kernel counts as one node.
    pub nodes: usize,
}

/// What [`optimize`] did to a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileReport {
    /// Op nodes in the graph as given.
    pub nodes_before: usize,
    /// Kernels in the program: plain ops and fused kernels.
    pub nodes_after: usize,
    /// Every kernel in execution order: an op name (`matmul`) or a fused kernel's description
    /// (`fused[mul,add,gelu]`).
    pub kernels: Vec<String>,
    /// The node count after each pass, in order.
    pub passes: Vec<PassReport>,
    /// Modeled peak bytes of intermediates when the graph runs op by op and keeps every result
    /// to the end.
    pub peak_intermediate_bytes_before: u64,
    /// Modeled peak bytes of intermediates of the program, which drops each after its last use.
    pub peak_intermediate_bytes_after: u64,
    /// Measured host time of the passes and lowering, microseconds.
    pub host_compile_us: f64,
}

impl CompileReport {
    /// How many kernels run several ops.
    pub fn fused_kernels(&self) -> usize {
        self.kernels
            .iter()
            .filter(|k| k.starts_with("fused["))
            .count()
    }
}

/// One step of a program.
#[derive(Clone)]
enum Kernel {
    /// Graph node `.0`, run through the runtime exactly as eager runs it.
    Op(usize),
    /// Several nodes as one kernel.
    Fused(Box<Fused>),
}

/// An optimized graph, ready to run on any core of a runtime.
///
/// Programs are immutable and `Send + Sync`, so caches can share them across threads.
#[derive(Clone)]
pub struct Program {
    /// The graph as given, for [`Program::explain`].
    before: Graph,
    /// The graph after dead code, common subexpressions and constant folding; the kernels
    /// refer to its nodes and values.
    graph: Graph,
    /// The fusion passes' partition of `graph`, which `kernels` lowers (kept for the disk cache).
    plans: Vec<KernelPlan>,
    kernels: Vec<Kernel>,
    /// The values to drop after each kernel.
    release_after: Vec<Vec<ValueId>>,
    report: CompileReport,
}

/// Optimizes `graph` into a program. Fails when the graph is inconsistent (see
/// [`super::passes::infer`]) or when an interrupt arrives while constants are folded.
pub fn optimize(rt: &Runtime, graph: &Graph) -> Result<(Program, CompileReport)> {
    let started = Instant::now();
    infer::run(graph)?;
    let mut passes = Vec::with_capacity(Pass::ALL.len());
    let mut note = |pass: Pass, nodes| {
        debug_assert_eq!(
            pass,
            Pass::ALL[passes.len()],
            "Pass::ALL lists the passes in order"
        );
        passes.push(PassReport {
            name: pass.name(),
            nodes,
        });
    };
    note(Pass::Infer, graph.nodes.len());
    let g = dce::run(graph);
    note(Pass::DeadCode, g.nodes.len());
    let g = cse::run(&g);
    note(Pass::CommonSubexpressions, g.nodes.len());
    let g = fold::run(rt, &g)?;
    note(Pass::ConstantFolding, g.nodes.len());

    let mut fusion = Fusion::new(&g);
    fuse_elementwise::run(&mut fusion);
    note(Pass::ElementwiseFusion, fusion.kernel_count());
    matmul_epilogue::run(&mut fusion);
    note(Pass::MatmulEpilogues, fusion.kernel_count());
    fuse_reduction::run(&mut fusion);
    note(Pass::ReductionFusion, fusion.kernel_count());
    let plans = fusion.into_plans();
    // Each plan lowers to one kernel; `from_parts` plans their buffers.
    note(Pass::BufferReuse, plans.len());

    let mut program = Program::from_parts(graph.clone(), g, plans, passes, 0.0);
    program.report.host_compile_us = started.elapsed().as_secs_f64() * 1e6;
    let report = program.report.clone();
    Ok((program, report))
}

fn kernel_io(g: &Graph, k: &Kernel) -> KernelIo {
    match k {
        Kernel::Op(n) => {
            let node = &g.nodes[*n];
            KernelIo {
                inputs: node.inputs.clone(),
                outputs: node.outputs.clone(),
                view: matches!(def_of(node).exec, Exec::View(_)),
            }
        }
        Kernel::Fused(f) => KernelIo {
            inputs: f.inputs.clone(),
            outputs: f.outputs.clone(),
            view: false,
        },
    }
}

fn kernel_name(g: &Graph, k: &Kernel) -> String {
    match k {
        Kernel::Op(n) => g.nodes[*n].name().to_string(),
        Kernel::Fused(f) => f.name.clone(),
    }
}

impl Program {
    /// The program that runs `plans`, kernels of `graph` in execution order, where `graph` is
    /// the optimized form of `before`: lowers the fused kernels, plans the buffers and fills in
    /// the report around `passes` and `host_compile_us`.
    ///
    /// `plans` must partition `graph`'s nodes into kernels that the lowering accepts, in an
    /// order that runs producers first: what the fusion passes make, or what the disk cache's
    /// decoder has checked (see [`super::serial`]).
    pub(crate) fn from_parts(
        before: Graph,
        graph: Graph,
        plans: Vec<KernelPlan>,
        passes: Vec<PassReport>,
        host_compile_us: f64,
    ) -> Program {
        let users = Users::new(&graph);
        let kernels: Vec<Kernel> = plans
            .iter()
            .map(|plan| match Fused::lower(&graph, &users, plan) {
                Some(fused) => Kernel::Fused(Box::new(fused)),
                // A plan that does not lower to a fused kernel is a single op.
                None => Kernel::Op(plan.nodes()[0]),
            })
            .collect();
        let io: Vec<KernelIo> = kernels.iter().map(|k| kernel_io(&graph, k)).collect();
        let memory = buffers::plan(&graph, &io);
        let report = CompileReport {
            nodes_before: before.nodes.len(),
            nodes_after: kernels.len(),
            kernels: kernels.iter().map(|k| kernel_name(&graph, k)).collect(),
            passes,
            peak_intermediate_bytes_before: buffers::peak_unplanned(&before),
            peak_intermediate_bytes_after: memory.peak_bytes,
            host_compile_us,
        };
        Program {
            before,
            graph,
            plans,
            kernels,
            release_after: memory.release_after,
            report,
        }
    }

    /// The graph as given to [`optimize`].
    pub(crate) fn before(&self) -> &Graph {
        &self.before
    }

    /// The kernel plans, in execution order.
    pub(crate) fn plans(&self) -> &[KernelPlan] {
        &self.plans
    }

    /// What [`optimize`] reported.
    pub fn report(&self) -> &CompileReport {
        &self.report
    }

    /// The optimized graph the kernels run (before fusion).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Runs the program on `core`. The inputs must have the graph's input shapes and dtypes
    /// and live on `core`. Outputs are charged to the core's HBM like eager outputs, and every
    /// kernel publishes one op event.
    // The run loop of a program: inputs checked, constants placed, each kernel run and its
    // buffers freed after their last use, in the order the memory plan assumes.
    pub fn run(&self, rt: &Runtime, core: CoreId, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        rt.check_core(core)?;
        let g = &self.graph;
        if inputs.len() != g.inputs.len() {
            return Err(Error::Invalid(format!(
                "the program takes {} input(s) ({}), got {}",
                g.inputs.len(),
                g.inputs
                    .iter()
                    .map(|&v| g.meta(v).to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                inputs.len()
            )));
        }
        for (i, (t, &v)) in inputs.iter().zip(&g.inputs).enumerate() {
            let want = g.meta(v);
            if !same_shape(t.shape(), &want.shape) || t.dtype() != want.dtype {
                return Err(Error::Invalid(format!(
                    "input {i} is {} but the program was compiled for {want}",
                    t.meta()
                )));
            }
            if t.device() != core {
                return Err(Error::Invalid(format!(
                    "input {i} is on {} but the program runs on {core}; move it first",
                    t.device()
                )));
            }
        }
        // On small tensors a cached program's run costs about what its bookkeeping does, so
        // the per-run vectors stay on the stack.
        // Inputs and constants are borrowed, not cloned (a tensor's clone copies its layout).
        let mut values: SmallVec<[Option<Cow<Tensor>>; 16]> =
            SmallVec::from_elem(None, g.values.len());
        for (&t, v) in inputs.iter().zip(&g.inputs) {
            values[v.0 as usize] = Some(Cow::Borrowed(t));
        }
        for (i, p) in g.producers.iter().enumerate() {
            if let Producer::Constant(t) = p {
                // A constant captured (or folded) elsewhere is copied to this core, and charged
                // to it, for the run.
                values[i] = Some(if t.device() == core {
                    Cow::Borrowed(t)
                } else {
                    Cow::Owned(rt.tensor_on(core, t.to_buffer(), t.shape())?)
                });
            }
        }
        let missing = |v: &ValueId| {
            Error::Invalid(format!(
                "internal error: {v} is not computed when the program needs it; please report this"
            ))
        };
        for (kernel, release) in self.kernels.iter().zip(&self.release_after) {
            let (ins, outs) = match kernel {
                Kernel::Op(n) => (&g.nodes[*n].inputs, &g.nodes[*n].outputs),
                Kernel::Fused(f) => (&f.inputs, &f.outputs),
            };
            let results = {
                let tensors = ins
                    .iter()
                    .map(|v| values[v.0 as usize].as_deref().ok_or_else(|| missing(v)))
                    .collect::<Result<SmallVec<[&Tensor; 4]>>>()?;
                // Untaped: a program's inputs may require gradients, but its own backward is
                // in the graph; its kernels' events carry their part's phase.
                let phase = self.part_of(kernel).phase();
                autograd::in_phase(phase, || match kernel {
                    Kernel::Op(n) => {
                        let node = &g.nodes[*n];
                        rt.call_on(def_of(node), &tensors, &node.attrs, core)
                    }
                    Kernel::Fused(f) => f.run(rt, core, &tensors),
                })?
            };
            for (v, t) in outs.iter().zip(results) {
                values[v.0 as usize] = Some(Cow::Owned(t));
            }
            for v in release {
                values[v.0 as usize] = None;
            }
        }
        // Each output moves out at its last mention, so only repeated outputs are cloned.
        g.outputs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let slot = &mut values[v.0 as usize];
                let value = if g.outputs[i + 1..].contains(v) {
                    slot.clone()
                } else {
                    slot.take()
                };
                value.map(Cow::into_owned).ok_or_else(|| missing(v))
            })
            .collect()
    }

    /// The part of a training step a kernel belongs to: its last node's (the one whose
    /// result it produces).
    fn part_of(&self, kernel: &Kernel) -> Part {
        let n = match kernel {
            Kernel::Op(n) => *n,
            Kernel::Fused(f) => *f.nodes.last().expect("a fused kernel runs nodes"),
        };
        self.graph.nodes[n].part
    }

    /// The graph before and after the passes, the node count after each pass, the fused
    /// kernels with the ops inside them, the peak intermediate bytes and the compile time.
    pub fn explain(&self) -> String {
        let r = &self.report;
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(out, "graph before passes ({} nodes):", r.nodes_before);
        let _ = writeln!(out, "{}", self.before);
        let _ = writeln!(out, "passes:");
        for p in &r.passes {
            let _ = writeln!(out, "  {:<28}{:>5} nodes", p.name, p.nodes);
        }
        let _ = writeln!(
            out,
            "  peak intermediates (modeled): {} -> {}",
            fmt::bytes(r.peak_intermediate_bytes_before),
            fmt::bytes(r.peak_intermediate_bytes_after)
        );
        let _ = writeln!(
            out,
            "graph after passes ({} kernels, {} fused):",
            r.nodes_after,
            r.fused_kernels()
        );
        self.write_kernels(&mut out);
        let _ = write!(
            out,
            "host compile time: {}",
            fmt::duration_us(r.host_compile_us)
        );
        out
    }

    /// The program in the style of [`Graph`]'s display, each fused kernel followed by the
    /// nodes it runs.
    fn write_kernels(&self, out: &mut String) {
        let g = &self.graph;
        let inputs: Vec<String> = g
            .inputs
            .iter()
            .map(|v| format!("{v}: {}", g.meta(*v)))
            .collect();
        let _ = writeln!(out, "program({}):", inputs.join(", "));
        for (i, p) in g.producers.iter().enumerate() {
            if let Producer::Constant(_) = p {
                let _ = writeln!(out, "  %{i} = constant  # {}", g.values[i]);
            }
        }
        for kernel in &self.kernels {
            match kernel {
                Kernel::Op(n) => {
                    let _ = writeln!(out, "  {}", g.node_line(*n));
                }
                Kernel::Fused(f) => {
                    let part = self.part_of(kernel).listing_suffix();
                    let _ = writeln!(
                        out,
                        "  {} = {}({})  # {}{part}",
                        value_list(&f.outputs),
                        f.name,
                        value_list(&f.inputs),
                        metas(g, &f.outputs)
                    );
                    for &n in &f.nodes {
                        let _ = writeln!(out, "      {}", g.node_line(n));
                    }
                }
            }
        }
        let _ = writeln!(out, "  return {}", value_list(&g.outputs));
    }
}

fn metas(g: &Graph, vs: &[ValueId]) -> String {
    vs.iter()
        .map(|v| g.meta(*v).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[path = "program_tests.rs"]
pub(crate) mod tests;

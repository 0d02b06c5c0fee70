//! The serialized form of an optimized [`Program`], for the on-disk cache ([`super::disk`]).
//!
//! A payload is a little-endian `u64` length, that many bytes of JSON describing the program,
//! then the elements of every constant, little-endian and back to back, in the order the JSON
//! lists the constants. The JSON carries the structure; the tail carries the tensor data
//! without the cost of text.
//!
//! The JSON holds the graph as traced (for `explain`, and so that a loaded entry can be checked
//! against the graph asked for), the optimized graph, its kernel plan, and the passes' node
//! counts and compile time. Everything else (the fused kernels, the buffer plan, the kernel
//! names, the peak bytes) is derived again on load by [`Program::from_parts`], the same code
//! that derives it after optimizing.
//!
//! Decoding trusts nothing:
//! - ops are stored by name, since registry ids can change between builds;
//! - every graph goes through the inference pass ([`infer`]), which infers every shape and
//!   dtype again through the registry;
//! - every constant must have exactly the bytes of its shape and dtype;
//! - the kernel plan must keep every invariant the fusion passes guarantee and the lowering and
//!   the executor rely on.
//!
//! A violation is an error that names it, never a panic.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::graph::{Graph, Node, Part, Producer, ValueId};
use super::passes::Pass;
use super::passes::{def_of, infer, producer_node, Group, KernelPlan, Users};
use super::program::{PassReport, Program};
use neuronlab_core::device::CoreId;
use neuronlab_core::ops::attrs::{AttrValue, Attrs, ResolvedAttrs};
use neuronlab_core::ops::registry::MetaArgs;
use neuronlab_core::ops::Registry;
use neuronlab_core::tensor::{
    broadcast_shapes, checked_numel, Buffer, DType, Layout, Storage, Tensor, TensorMeta,
};

/// The most bytes the values of one graph may add up to. Real graphs are far below it; the
/// bound keeps every byte count the passes add up within `u64`.
const MAX_GRAPH_BYTES: u64 = 1 << 62;

/// A program, as the JSON part of a payload.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProgramRepr {
    before: GraphRepr,
    graph: GraphRepr,
    kernels: Vec<PlanRepr>,
    /// Nodes after each pass, in the order of [`Pass::ALL`].
    passes: Vec<usize>,
    /// The bits of the measured compile time in microseconds, an `f64` (JSON numbers do not
    /// always read back to the same `f64`).
    host_compile_us: u64,
}

/// A graph. Constants' elements are in the payload's tail.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphRepr {
    values: Vec<MetaRepr>,
    producers: Vec<ProducerRepr>,
    nodes: Vec<NodeRepr>,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaRepr {
    dtype: DType,
    shape: Vec<usize>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ProducerRepr {
    Input(usize),
    /// The next constant of the payload's tail, with this value's shape and dtype.
    Constant,
    Node {
        node: usize,
        output: usize,
    },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeRepr {
    /// The registry name.
    op: String,
    attrs: Vec<(String, AttrRepr)>,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
    part: Part,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum AttrRepr {
    Int(i64),
    /// The bits of an `f64`, so that every value (infinities and NaNs too) survives exactly.
    Float(u64),
    Ints(Vec<i64>),
    Str(String),
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum PlanRepr {
    Op {
        node: usize,
    },
    Elementwise {
        group: GroupRepr,
    },
    Matmul {
        node: usize,
        epilogue: GroupRepr,
    },
    Rows {
        node: usize,
        prologue: Option<GroupRepr>,
        epilogue: Option<GroupRepr>,
    },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupRepr {
    nodes: Vec<usize>,
    shape: Vec<usize>,
}

/// The payload that describes `program`.
pub(crate) fn encode(program: &Program) -> Vec<u8> {
    let mut tail = Vec::new();
    let report = program.report();
    let repr = ProgramRepr {
        before: GraphRepr::new(program.before(), &mut tail),
        graph: GraphRepr::new(program.graph(), &mut tail),
        kernels: program.plans().iter().map(PlanRepr::new).collect(),
        passes: report.passes.iter().map(|p| p.nodes).collect(),
        host_compile_us: report.host_compile_us.to_bits(),
    };
    // Plain structs, strings, numbers and lists always serialize.
    let json = serde_json::to_vec(&repr).expect("a program's description serializes");
    let mut payload = Vec::with_capacity(8 + json.len() + tail.len());
    payload.extend_from_slice(&(json.len() as u64).to_le_bytes());
    payload.extend_from_slice(&json);
    payload.extend_from_slice(&tail);
    payload
}

/// The program `payload` describes, or why it does not describe a valid one.
pub(crate) fn decode(payload: &[u8]) -> Result<Program, String> {
    let (len, rest) = payload
        .split_first_chunk::<8>()
        .ok_or_else(|| format!("the payload has {} bytes, no header", payload.len()))?;
    let len = usize::try_from(u64::from_le_bytes(*len))
        .ok()
        .filter(|&n| n <= rest.len())
        .ok_or("the description's length runs past the end of the payload")?;
    let (json, tail) = rest.split_at(len);
    let repr: ProgramRepr =
        serde_json::from_slice(json).map_err(|e| format!("the description does not parse: {e}"))?;
    let mut constants = Constants(tail);
    let before = repr
        .before
        .decode(&mut constants)
        .map_err(|e| format!("the traced graph: {e}"))?;
    let graph = repr
        .graph
        .decode(&mut constants)
        .map_err(|e| format!("the optimized graph: {e}"))?;
    if !constants.0.is_empty() {
        return Err(format!(
            "{} bytes follow the last constant",
            constants.0.len()
        ));
    }
    if repr.passes.len() != Pass::ALL.len() {
        return Err(format!(
            "the report has {} passes, the compiler runs {}",
            repr.passes.len(),
            Pass::ALL.len()
        ));
    }
    let passes = Pass::ALL
        .iter()
        .zip(repr.passes)
        .map(|(pass, nodes)| PassReport {
            name: pass.name(),
            nodes,
        })
        .collect();
    let host_compile_us = f64::from_bits(repr.host_compile_us);
    if !(host_compile_us.is_finite() && host_compile_us >= 0.0) {
        return Err(format!(
            "the compile time {host_compile_us} µs is not a duration"
        ));
    }
    let plans: Vec<KernelPlan> = repr.kernels.into_iter().map(PlanRepr::decode).collect();
    check_plans(&graph, &plans).map_err(|e| format!("the kernel plan: {e}"))?;
    Ok(Program::from_parts(
        before,
        graph,
        plans,
        passes,
        host_compile_us,
    ))
}

/// The payload's tail: constants not yet decoded.
struct Constants<'a>(&'a [u8]);

impl Constants<'_> {
    /// The next constant, with the shape and dtype `meta` (whose size is known to fit a `usize`).
    fn take(&mut self, meta: &TensorMeta) -> Option<Tensor> {
        let n = meta.nbytes();
        if self.0.len() < n {
            return None;
        }
        let (bytes, rest) = self.0.split_at(n);
        self.0 = rest;
        let buffer = Buffer::from_le_bytes(meta.dtype, bytes)?;
        // Like a folded constant: on no core's HBM until a run copies it there.
        Some(Tensor::from_storage(
            Arc::new(Storage::new(buffer, None)),
            Layout::contiguous(&meta.shape),
            CoreId(0),
        ))
    }
}

fn ids(values: &[ValueId]) -> Vec<u32> {
    values.iter().map(|v| v.0).collect()
}

fn value_ids(ids: Vec<u32>) -> Vec<ValueId> {
    ids.into_iter().map(ValueId).collect()
}

impl GraphRepr {
    /// `g`, with its constants' elements appended to `tail`.
    fn new(g: &Graph, tail: &mut Vec<u8>) -> GraphRepr {
        let producers = g
            .producers
            .iter()
            .map(|p| match p {
                Producer::Input(i) => ProducerRepr::Input(*i),
                Producer::Constant(t) => {
                    tail.extend_from_slice(&t.to_buffer().to_le_bytes());
                    ProducerRepr::Constant
                }
                Producer::Node { node, output } => ProducerRepr::Node {
                    node: *node,
                    output: *output,
                },
            })
            .collect();
        GraphRepr {
            values: g
                .values
                .iter()
                .map(|m| MetaRepr {
                    dtype: m.dtype,
                    shape: m.shape.clone(),
                })
                .collect(),
            producers,
            nodes: g.nodes.iter().map(NodeRepr::new).collect(),
            inputs: ids(&g.inputs),
            outputs: ids(&g.outputs),
        }
    }

    /// The graph, checked, with its constants taken from `constants`.
    fn decode(self, constants: &mut Constants) -> Result<Graph, String> {
        if u32::try_from(self.values.len()).is_err() {
            return Err(format!("{} values are too many", self.values.len()));
        }
        let mut total = 0u64;
        let mut values = Vec::with_capacity(self.values.len());
        for (i, m) in self.values.into_iter().enumerate() {
            let bytes = checked_numel(&m.shape).and_then(|n| n.checked_mul(m.dtype.size()));
            total = bytes
                .and_then(|b| total.checked_add(b as u64))
                .filter(|&t| t <= MAX_GRAPH_BYTES)
                .ok_or_else(|| format!("%{i} ({} {:?}) is impossibly large", m.dtype, m.shape))?;
            values.push(TensorMeta::new(m.shape, m.dtype));
        }
        if self.producers.len() != values.len() {
            return Err(format!(
                "{} value metas but {} producers",
                values.len(),
                self.producers.len()
            ));
        }
        let nodes = self
            .nodes
            .into_iter()
            .enumerate()
            .map(|(n, node)| node.decode().map_err(|e| format!("node {n}: {e}")))
            .collect::<Result<Vec<Node>, String>>()?;
        let inputs = value_ids(self.inputs);
        let mut producers = Vec::with_capacity(values.len());
        for (i, p) in self.producers.into_iter().enumerate() {
            // In range: there are fewer than 2^32 values.
            let v = ValueId(i as u32);
            producers.push(match p {
                ProducerRepr::Input(k) => {
                    if inputs.get(k) != Some(&v) {
                        return Err(format!("{v} claims to be input {k}, which it is not"));
                    }
                    Producer::Input(k)
                }
                ProducerRepr::Constant => Producer::Constant(
                    constants
                        .take(&values[i])
                        .ok_or_else(|| format!("the data of constant {v} is cut short"))?,
                ),
                ProducerRepr::Node { node, output } => {
                    if nodes.get(node).and_then(|n| n.outputs.get(output)) != Some(&v) {
                        return Err(format!(
                            "{v} claims to be output {output} of node {node}, which it is not"
                        ));
                    }
                    Producer::Node { node, output }
                }
            });
        }
        let g = Graph {
            values,
            producers,
            nodes,
            inputs,
            outputs: value_ids(self.outputs),
            ..Graph::default()
        };
        // Every node's op, attributes, operands and inferred metas; operands before users.
        infer::run(&g).map_err(|e| e.to_string())?;
        Ok(g)
    }
}

impl NodeRepr {
    fn new(node: &Node) -> NodeRepr {
        NodeRepr {
            op: node.name().to_string(),
            attrs: node
                .attrs
                .0
                .iter()
                .map(|(name, value)| (name.clone(), AttrRepr::new(value)))
                .collect(),
            inputs: ids(&node.inputs),
            outputs: ids(&node.outputs),
            part: node.part,
        }
    }

    /// The node with its op looked up by name; the rest is checked with the graph.
    fn decode(self) -> Result<Node, String> {
        let op = Registry::global()
            .id(&self.op)
            .ok_or_else(|| format!("no op is named '{}'", self.op))?;
        Ok(Node {
            op,
            attrs: Attrs(
                self.attrs
                    .into_iter()
                    .map(|(name, value)| (name, value.decode()))
                    .collect(),
            ),
            inputs: value_ids(self.inputs),
            outputs: value_ids(self.outputs),
            part: self.part,
        })
    }
}

impl AttrRepr {
    fn new(value: &AttrValue) -> AttrRepr {
        match value {
            AttrValue::Int(v) => AttrRepr::Int(*v),
            AttrValue::Float(v) => AttrRepr::Float(v.to_bits()),
            AttrValue::Ints(v) => AttrRepr::Ints(v.clone()),
            AttrValue::Str(v) => AttrRepr::Str(v.clone()),
        }
    }

    fn decode(self) -> AttrValue {
        match self {
            AttrRepr::Int(v) => AttrValue::Int(v),
            AttrRepr::Float(bits) => AttrValue::Float(f64::from_bits(bits)),
            AttrRepr::Ints(v) => AttrValue::Ints(v),
            AttrRepr::Str(v) => AttrValue::Str(v),
        }
    }
}

impl GroupRepr {
    fn new(group: &Group) -> GroupRepr {
        GroupRepr {
            nodes: group.nodes.clone(),
            shape: group.shape.clone(),
        }
    }

    fn decode(self) -> Group {
        Group {
            nodes: self.nodes,
            shape: self.shape,
        }
    }
}

impl PlanRepr {
    fn new(plan: &KernelPlan) -> PlanRepr {
        match plan {
            KernelPlan::Op(node) => PlanRepr::Op { node: *node },
            KernelPlan::Elementwise(group) => PlanRepr::Elementwise {
                group: GroupRepr::new(group),
            },
            KernelPlan::Matmul { node, epilogue } => PlanRepr::Matmul {
                node: *node,
                epilogue: GroupRepr::new(epilogue),
            },
            KernelPlan::Rows {
                node,
                prologue,
                epilogue,
            } => PlanRepr::Rows {
                node: *node,
                prologue: prologue.as_ref().map(GroupRepr::new),
                epilogue: epilogue.as_ref().map(GroupRepr::new),
            },
        }
    }

    /// The plan, unchecked: see [`check_plans`].
    fn decode(self) -> KernelPlan {
        match self {
            PlanRepr::Op { node } => KernelPlan::Op(node),
            PlanRepr::Elementwise { group } => KernelPlan::Elementwise(group.decode()),
            PlanRepr::Matmul { node, epilogue } => KernelPlan::Matmul {
                node,
                epilogue: epilogue.decode(),
            },
            PlanRepr::Rows {
                node,
                prologue,
                epilogue,
            } => KernelPlan::Rows {
                node,
                prologue: prologue.map(GroupRepr::decode),
                epilogue: epilogue.map(GroupRepr::decode),
            },
        }
    }
}

/// Checks that `plans` run every node of `g` (a graph the inference pass accepted) exactly
/// once, in kernels the lowering accepts, in an order where every kernel's operands are
/// computed before it runs: the invariants the fusion passes keep.
fn check_plans(g: &Graph, plans: &[KernelPlan]) -> Result<(), String> {
    let mut kernel_of: Vec<Option<usize>> = vec![None; g.nodes.len()];
    for (k, plan) in plans.iter().enumerate() {
        for n in plan.nodes() {
            match kernel_of.get_mut(n) {
                None => return Err(format!("kernel {k} runs node {n}, which does not exist")),
                Some(Some(_)) => return Err(format!("node {n} is run twice")),
                Some(slot) => *slot = Some(k),
            }
        }
    }
    if let Some(n) = kernel_of.iter().position(Option::is_none) {
        return Err(format!("node {n} ({}) is in no kernel", g.nodes[n].name()));
    }
    let users = Users::new(g);
    // Values computed before the current kernel: inputs, constants, earlier kernels' results.
    let mut ready: Vec<bool> = g
        .producers
        .iter()
        .map(|p| !matches!(p, Producer::Node { .. }))
        .collect();
    for (k, plan) in plans.iter().enumerate() {
        let check = KernelCheck {
            g,
            users: &users,
            kernel_of: &kernel_of,
            kernel: k,
            ready: &ready,
        };
        check.plan(plan).map_err(|e| format!("kernel {k}: {e}"))?;
        for n in plan.nodes() {
            for v in &g.nodes[n].outputs {
                ready[v.0 as usize] = true;
            }
        }
    }
    Ok(())
}

/// The checks of one kernel of a plan whose nodes are known to exist, each in one kernel.
struct KernelCheck<'a> {
    g: &'a Graph,
    users: &'a Users,
    kernel_of: &'a [Option<usize>],
    kernel: usize,
    ready: &'a [bool],
}

impl KernelCheck<'_> {
    fn plan(&self, plan: &KernelPlan) -> Result<(), String> {
        let g = self.g;
        match plan {
            KernelPlan::Op(n) => self.operands_ready(*n, 0),
            KernelPlan::Elementwise(group) => self.group(group, None),
            KernelPlan::Matmul { node, epilogue } => {
                let mm = &g.nodes[*node];
                let y = match mm.outputs[..] {
                    [y] if def_of(mm).name == "matmul" && g.meta(y).dtype.is_float() => y,
                    _ => {
                        return Err(format!(
                            "{} takes an epilogue, which only a float matmul can",
                            mm.name()
                        ))
                    }
                };
                self.operands_ready(*node, 0)?;
                self.group(epilogue, Some(y))?;
                let inside = |u: &usize| epilogue.nodes.binary_search(u).is_ok();
                if self.users.is_output[y.0 as usize]
                    || !self.users.of[y.0 as usize].iter().all(inside)
                {
                    return Err(format!(
                        "the matmul's result {y} is used outside its epilogue"
                    ));
                }
                Ok(())
            }
            KernelPlan::Rows {
                node,
                prologue,
                epilogue,
            } => {
                let rn = &g.nodes[*node];
                let def = def_of(rn);
                let (&x, y) = match (rn.inputs.first(), &rn.outputs[..]) {
                    (Some(x), [y]) if self.has_rows(rn) => (x, *y),
                    _ => return Err(format!("{} has no row form here", def.name)),
                };
                match prologue {
                    Some(group) => {
                        self.group(group, None)?;
                        if group.shape != g.meta(x).shape {
                            return Err(format!(
                                "the prologue runs over {:?} but {} reads {x} of shape {:?}",
                                group.shape,
                                def.name,
                                g.meta(x).shape
                            ));
                        }
                        let computes_x = producer_node(g, x)
                            .is_some_and(|p| group.nodes.binary_search(&p).is_ok());
                        if !computes_x {
                            return Err(format!(
                                "the prologue does not compute {x}, the input of {}",
                                def.name
                            ));
                        }
                        self.operands_ready(*node, 1)?;
                    }
                    None => self.operands_ready(*node, 0)?,
                }
                match epilogue {
                    Some(group) => self.group(group, Some(y)),
                    None => Ok(()),
                }
            }
        }
    }

    /// True when row node `rn` works on whole rows of its first input.
    fn has_rows(&self, rn: &Node) -> bool {
        let def = def_of(rn);
        let (Some(rowwise), Ok(attrs)) =
            (def.rowwise, ResolvedAttrs::resolve(def.attrs, &rn.attrs))
        else {
            return false;
        };
        let metas: Vec<TensorMeta> = rn.inputs.iter().map(|&v| self.g.meta(v).clone()).collect();
        (rowwise.rows)(&MetaArgs {
            inputs: &metas,
            attrs: &attrs,
        })
        .is_some()
    }

    /// Checks that node `n`'s operands from `skip` on are computed before the kernel runs.
    fn operands_ready(&self, n: usize, skip: usize) -> Result<(), String> {
        let node = &self.g.nodes[n];
        match node.inputs[skip.min(node.inputs.len())..]
            .iter()
            .find(|v| !self.ready[v.0 as usize])
        {
            Some(v) => Err(format!("{} reads {v} before it is computed", node.name())),
            None => Ok(()),
        }
    }

    /// Checks an elementwise group of the kernel. `block` is the value the enclosing kernel
    /// hands the group (a matmul's or row op's result), which must have the group's shape.
    fn group(&self, group: &Group, block: Option<ValueId>) -> Result<(), String> {
        let g = self.g;
        if group.nodes.is_empty() || !group.nodes.windows(2).all(|w| w[0] < w[1]) {
            return Err(format!(
                "the group {:?} is empty or not in graph order",
                group.nodes
            ));
        }
        // The loop runs over the shape of its last node's result, as the elementwise pass
        // builds groups: every member is a producer of that root.
        let root = &g.nodes[group.nodes[group.nodes.len() - 1]];
        if root.outputs.first().map(|&v| &g.meta(v).shape) != Some(&group.shape) {
            return Err(format!(
                "the group's loop shape {:?} is not its last node's result shape",
                group.shape
            ));
        }
        if let Some(b) = block.filter(|b| g.meta(*b).shape != group.shape) {
            return Err(format!(
                "the epilogue runs over {:?} but {b} has shape {:?}",
                group.shape,
                g.meta(b).shape
            ));
        }
        let member =
            |v: ValueId| producer_node(g, v).is_some_and(|p| group.nodes.binary_search(&p).is_ok());
        let fits = |v: ValueId| {
            broadcast_shapes(&g.meta(v).shape, &group.shape).as_ref() == Ok(&group.shape)
        };
        for &n in &group.nodes {
            let node = &g.nodes[n];
            let name = node.name();
            let out = match node.outputs[..] {
                [out] if def_of(node).pointwise.is_some() => out,
                _ => return Err(format!("{name} (node {n}) cannot be fused elementwise")),
            };
            if !fits(out) {
                return Err(format!(
                    "{out} = {name} of shape {:?} does not broadcast to the loop's {:?}",
                    g.meta(out).shape,
                    group.shape
                ));
            }
            // Operands from earlier members (the graph is in topological order) or handed in
            // are computed inside the kernel; the rest must exist before it and broadcast.
            for &v in node
                .inputs
                .iter()
                .filter(|&&v| Some(v) != block && !member(v))
            {
                if !self.ready[v.0 as usize] {
                    return Err(format!("{name} reads {v} before it is computed"));
                }
                if !fits(v) {
                    return Err(format!(
                        "{name} reads {v} of shape {:?}, which does not broadcast to the loop's {:?}",
                        g.meta(v).shape,
                        group.shape
                    ));
                }
            }
            let escapes = self.users.is_output[out.0 as usize]
                || self.users.of[out.0 as usize]
                    .iter()
                    .any(|&u| self.kernel_of[u] != Some(self.kernel));
            if escapes && g.meta(out).shape != group.shape {
                return Err(format!(
                    "{out} = {name} leaves the kernel with shape {:?}, not the loop's {:?}",
                    g.meta(out).shape,
                    group.shape
                ));
            }
        }
        Ok(())
    }
}

//! The backward engine: `backward` (accumulating leaves' `.grad`) and `grad` (returning the
//! gradients of chosen tensors, as `torch.autograd.grad`).
//!
//! Both walk the nodes reachable from the roots in descending creation order, which is a
//! topological order of the reversed graph: a node runs once every gradient of its outputs
//! has been summed. Nothing the caller can see changes until the whole walk succeeds: leaves
//! are accumulated, and saved tensors freed (unless `retain_graph`), only at the end, so a
//! failed backward (out of memory, an interrupt) can simply be run again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::derivatives::{self, OpBackward, OpCalls};
use super::function::FunctionBackward;
use super::{as_backward, errors};
use crate::device::topology::CoreId;
use crate::error::{Error, Result};
use crate::ops::attrs::Attrs;
use crate::ops::Registry;
use crate::runtime::Runtime;
use crate::tensor::grad::{GradEdge, Leaf, Node};
use crate::tensor::{Tensor, TensorMeta};

impl OpCalls for Runtime {
    fn call_op(&self, op: &str, inputs: &[&Tensor], attrs: Attrs, core: CoreId) -> Result<Tensor> {
        let (_, def) = Registry::global().lookup(op).map_err(Error::UnknownOp)?;
        Ok(self.call_on(def, inputs, &attrs, core)?.swap_remove(0))
    }
}

/// Computes the gradients of `roots` (each with its gradient, or `None` for a one-element
/// root, whose gradient is 1) and adds them into the `.grad` of every leaf they reach, as
/// `torch.autograd.backward`. Without `retain_graph` the graph's saved tensors are freed, and
/// a second backward through it is an error.
pub fn backward(
    rt: &Runtime,
    roots: &[Tensor],
    grads: &[Option<Tensor>],
    retain_graph: bool,
) -> Result<()> {
    as_backward(|| {
        let walk = walk(rt, roots, grads, &[])?;
        // Everything computed: now make it visible.
        let mut updates = Vec::with_capacity(walk.leaves.len());
        for (leaf, g) in walk.leaves.into_values() {
            let g = rt.call_op("contiguous", &[&g], Attrs::new(), g.device())?;
            let total = match leaf.grad() {
                Some(old) => rt.call_op("add", &[&old, &g], Attrs::new(), g.device())?,
                None => g,
            };
            updates.push((leaf, total));
        }
        for (leaf, total) in updates {
            leaf.set_grad(Some(total));
        }
        finish(&walk.nodes, retain_graph);
        Ok(())
    })
}

/// The gradients of `outputs` (with `grad_outputs` as in [`backward`]) with respect to each
/// of `inputs`, without touching any `.grad`, as `torch.autograd.grad`. An input the outputs
/// do not depend on is an error.
pub fn grad(
    rt: &Runtime,
    outputs: &[Tensor],
    grad_outputs: &[Option<Tensor>],
    inputs: &[Tensor],
    retain_graph: bool,
) -> Result<Vec<Tensor>> {
    as_backward(|| {
        let mut wanted = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            match t.grad_edge() {
                Some(edge) => wanted.push(edge.key()),
                None => return Err(errors::input_not_required(i, &t.meta())),
            }
        }
        let walk = walk(rt, outputs, grad_outputs, &wanted)?;
        let grads = wanted
            .iter()
            .enumerate()
            .map(|(i, key)| {
                walk.captured
                    .get(key)
                    .cloned()
                    .ok_or_else(|| errors::input_unused(i, &inputs[i].meta()))
            })
            .collect::<Result<Vec<_>>>()?;
        finish(&walk.nodes, retain_graph);
        Ok(grads)
    })
}

/// What a walk computed, before anything is made visible.
struct Walk {
    /// Each reached leaf and the sum of the gradients that reached it.
    leaves: HashMap<(usize, usize), (Arc<Leaf>, Tensor)>,
    /// The gradients of the slots the caller asked for.
    captured: HashMap<(usize, usize), Tensor>,
    /// Every node that ran.
    nodes: Vec<Arc<Node>>,
}

fn finish(nodes: &[Arc<Node>], retain_graph: bool) {
    if !retain_graph {
        nodes.iter().for_each(|n| n.free());
    }
}

fn walk(
    rt: &Runtime,
    roots: &[Tensor],
    grads: &[Option<Tensor>],
    wanted: &[(usize, usize)],
) -> Result<Walk> {
    if roots.is_empty() {
        return Err(errors::no_roots());
    }
    if grads.len() != roots.len() {
        return Err(errors::root_count(roots.len(), grads.len()));
    }
    let wanted: HashSet<(usize, usize)> = wanted.iter().copied().collect();
    let mut pending: HashMap<(usize, usize), Tensor> = HashMap::new();
    let mut leaves: HashMap<(usize, usize), (Arc<Leaf>, Tensor)> = HashMap::new();
    let mut roots_nodes = Vec::new();
    for (i, (root, given)) in roots.iter().zip(grads).enumerate() {
        let edge = root
            .grad_edge()
            .ok_or_else(|| errors::root_not_required(i, &root.meta()))?;
        let g = root_grad(rt, root, given.as_ref())?;
        deliver(rt, edge, g, &mut pending, &mut leaves)?;
        if let GradEdge::Node { node, .. } = edge {
            roots_nodes.push(node.clone());
        }
    }
    let nodes = reachable(roots_nodes);
    let mut unpacker = Unpacker::new(&nodes);
    let mut captured = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let ptr = Arc::as_ptr(node) as usize;
        let state = node.state();
        let Some(state) = state.as_ref() else {
            return Err(errors::freed(node.name));
        };
        let kind = if let Some(op) = state.downcast_ref::<OpBackward>() {
            Backward::Op(op)
        } else if let Some(f) = state.downcast_ref::<FunctionBackward>() {
            Backward::Function(f)
        } else {
            return Err(Error::Invalid(format!(
                "internal error: {} holds no backward",
                node.name
            )));
        };
        let (output_metas, core) = match kind {
            Backward::Op(op) => (&op.output_metas, op.core),
            Backward::Function(f) => (&f.output_metas, f.core),
        };
        let mut out_grads = Vec::with_capacity(output_metas.len());
        let mut any = false;
        for (k, meta) in output_metas.iter().enumerate() {
            match pending.remove(&(ptr, k)) {
                Some(g) => {
                    if wanted.contains(&(ptr, k)) {
                        captured.insert((ptr, k), g.clone());
                    }
                    any = true;
                    out_grads.push(g);
                }
                None => out_grads.push(zeros(rt, meta, core)?),
            }
        }
        if !any {
            continue;
        }
        let needs: Vec<bool> = node.next.iter().map(Option::is_some).collect();
        let in_grads = match kind {
            Backward::Op(op) => {
                let unpacked = unpacker.take(rt, &nodes, i, op)?;
                let op = unpacked.as_ref().unwrap_or(op);
                derivatives::input_grads(rt, node.name, op, &out_grads, &needs)?
            }
            Backward::Function(f) => f.input_grads(rt, node.name, &out_grads, &needs)?,
        };
        for (edge, g) in node.next.iter().zip(in_grads) {
            if let (Some(edge), Some(g)) = (edge, g) {
                deliver(rt, edge, g, &mut pending, &mut leaves)?;
            }
        }
    }
    for (key, (_, g)) in &leaves {
        if wanted.contains(key) {
            captured.insert(*key, g.clone());
        }
    }
    Ok(Walk {
        leaves,
        captured,
        nodes,
    })
}

/// The gradient a root starts with: the one given (checked against the root's shape), or 1
/// for a one-element root.
fn root_grad(rt: &Runtime, root: &Tensor, given: Option<&Tensor>) -> Result<Tensor> {
    match given {
        Some(g) if g.shape() != root.shape() => Err(errors::seed_shape(&g.meta(), &root.meta())),
        Some(g) if g.device() != root.device() => Err(Error::Autograd(format!(
            "the gradient is on {} but its tensor on {}",
            g.device(),
            root.device()
        ))),
        Some(g) => Ok(g.detach()),
        None if root.numel() == 1 => {
            let shape: Vec<i64> = root.shape().iter().map(|&d| d as i64).collect();
            let attrs = Attrs::new()
                .with("shape", shape)
                .with("value", 1.0)
                .with("dtype", root.dtype());
            rt.call_op("full", &[], attrs, root.device())
        }
        None => Err(errors::seed_needed(&root.meta())),
    }
}

/// Adds `g` into the slot `edge` names.
fn deliver(
    rt: &Runtime,
    edge: &GradEdge,
    g: Tensor,
    pending: &mut HashMap<(usize, usize), Tensor>,
    leaves: &mut HashMap<(usize, usize), (Arc<Leaf>, Tensor)>,
) -> Result<()> {
    let add = |a: &Tensor, b: &Tensor| rt.call_op("add", &[a, b], Attrs::new(), a.device());
    let key = edge.key();
    match edge {
        GradEdge::Leaf(leaf) => {
            let total = match leaves.remove(&key) {
                Some((_, old)) => add(&old, &g)?,
                None => g,
            };
            leaves.insert(key, (leaf.clone(), total));
        }
        GradEdge::Node { .. } => {
            let total = match pending.remove(&key) {
                Some(old) => add(&old, &g)?,
                None => g,
            };
            pending.insert(key, total);
        }
    }
    Ok(())
}

/// Makes the packed saves of the nodes that have them again ([`OpBackward::unpacked`]), one
/// such node ahead of the walk: as FSDP2's backward prefetch, the all-gather of the next
/// parameter backward reads is issued before this node's formula runs, so it overlaps that
/// compute on the modeled clock, and at most one node's rematerialized tensors wait ahead.
/// Every rank walks the same nodes in the same order, so the all-gathers meet.
struct Unpacker {
    /// The walk's indices of the nodes with packed saves, in order.
    packing: Vec<usize>,
    /// How many of `packing` were started.
    started: usize,
    /// The node started ahead, by walk index, with its state unpacked.
    ahead: Option<(usize, OpBackward)>,
}

impl Unpacker {
    fn new(nodes: &[Arc<Node>]) -> Unpacker {
        let packing = (nodes.iter().enumerate())
            .filter(|(_, n)| {
                n.state()
                    .as_ref()
                    .and_then(|s| s.downcast_ref::<OpBackward>())
                    .is_some_and(|op| !op.packed.is_empty())
            })
            .map(|(i, _)| i)
            .collect();
        Unpacker {
            packing,
            started: 0,
            ahead: None,
        }
    }

    /// Node `i`'s state `op` unpacked (`None` when it packs nothing), after starting the next
    /// node that packs.
    fn take(
        &mut self,
        rt: &Runtime,
        nodes: &[Arc<Node>],
        i: usize,
        op: &OpBackward,
    ) -> Result<Option<OpBackward>> {
        let mine = match self.ahead.take() {
            Some((j, state)) if j == i => Some(state),
            // Started for a node still ahead: keep it.
            Some((j, state)) if j > i => {
                self.ahead = Some((j, state));
                op.unpacked(rt)?
            }
            // Started for a node the walk skipped (no gradient reached it): drop it.
            _ => op.unpacked(rt)?,
        };
        while self.packing.get(self.started).is_some_and(|&j| j <= i) {
            self.started += 1;
        }
        if self.ahead.is_none() {
            if let Some(&j) = self.packing.get(self.started) {
                self.started += 1;
                let state = nodes[j].state();
                let next = state.as_ref().and_then(|s| s.downcast_ref::<OpBackward>());
                if let Some(unpacked) = next.map(|op| op.unpacked(rt)).transpose()?.flatten() {
                    self.ahead = Some((j, unpacked));
                }
            }
        }
        Ok(mine)
    }
}

/// A node's backward: a registry op's formula, or a recorded function's.
#[derive(Clone, Copy)]
enum Backward<'a> {
    Op(&'a OpBackward),
    Function(&'a FunctionBackward),
}

fn zeros(rt: &Runtime, meta: &TensorMeta, core: CoreId) -> Result<Tensor> {
    let shape: Vec<i64> = meta.shape.iter().map(|&d| d as i64).collect();
    let attrs = Attrs::new().with("shape", shape).with("dtype", meta.dtype);
    rt.call_op("zeros", &[], attrs, core)
}

/// Every node reachable from `roots`, latest first.
fn reachable(roots: Vec<Arc<Node>>) -> Vec<Arc<Node>> {
    let mut seen = HashSet::new();
    let mut stack = roots;
    let mut nodes = Vec::new();
    while let Some(node) = stack.pop() {
        if !seen.insert(Arc::as_ptr(&node) as usize) {
            continue;
        }
        for edge in node.next.iter().flatten() {
            if let GradEdge::Node { node, .. } = edge {
                stack.push(node.clone());
            }
        }
        nodes.push(node);
    }
    nodes.sort_by_key(|n| std::cmp::Reverse(n.seq));
    nodes
}

//! The optimization passes, in the order [`crate::program::optimize`] runs them.
//!
//! Graph to graph (each returns a new, compact [`Graph`]):
//! - [`infer`]: checks every recorded shape and dtype against the registry's inference.
//! - [`dce`]: removes nodes and constants that no output depends on.
//! - [`cse`]: merges nodes that apply the same op to the same values, and equal constants.
//! - [`fold`]: evaluates nodes whose inputs are all constants with the real kernels.
//!
//! Graph to kernels (each refines a `Fusion`, the grouping of nodes into kernels):
//! - [`fuse_elementwise`]: groups elementwise ops into loops over one shape, across broadcasting.
//! - [`matmul_epilogue`]: gives a matmul the elementwise group that consumes it as its epilogue.
//! - [`fuse_reduction`]: gives a row op (softmax, norms, trailing reductions) the elementwise
//!   group that produces its input as a prologue and the one that consumes it as an epilogue.
//!
//! Kernels to a memory plan:
//! - [`buffers`]: frees each intermediate after its last use and reports peak bytes.

pub mod buffers;
pub mod cse;
pub mod dce;
pub mod fold;
pub mod fuse_elementwise;
pub mod fuse_reduction;
pub mod infer;
pub mod matmul_epilogue;

use super::graph::{Graph, Node, Producer, ValueId};

/// Declares [`Pass`] from one list of `Variant => "name"` rows, in the order
/// [`crate::program::optimize`] runs them, so the passes and their names are written once.
macro_rules! passes {
    ($($variant:ident => $name:literal,)*) => {
        /// One optimization pass, as reports, `explain` and the disk cache name it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Pass {
            $(
                #[doc = $name]
                $variant,
            )*
        }

        impl Pass {
            /// Every pass, in the order `optimize` runs them.
            pub const ALL: &'static [Pass] = &[$(Pass::$variant),*];

            /// The pass's name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Pass::$variant => $name,)*
                }
            }
        }
    };
}

passes! {
    Infer => "shape and dtype inference",
    DeadCode => "dead code",
    CommonSubexpressions => "common subexpressions",
    ConstantFolding => "constant folding",
    ElementwiseFusion => "elementwise fusion",
    MatmulEpilogues => "matmul epilogues",
    ReductionFusion => "reduction fusion",
    BufferReuse => "buffer reuse",
}
use neuronlab_core::ops::{OpDef, Registry};

/// The registry entry of a node. Graphs are built through [`Graph::op`], which checks the id,
/// so a missing entry is a bug.
pub(crate) fn def_of(node: &Node) -> &'static OpDef {
    Registry::global()
        .get(node.op)
        .expect("graph nodes hold registry ids")
}

/// The node that produces `v`, if an op does.
pub(crate) fn producer_node(g: &Graph, v: ValueId) -> Option<usize> {
    match g.producers[v.0 as usize] {
        Producer::Node { node, .. } => Some(node),
        _ => None,
    }
}

/// Sets `to`'s outputs to the values `map` gives for `from`'s outputs (for passes that rebuild
/// a graph, `map[old value]` is its new value).
pub(crate) fn set_mapped_outputs(to: &mut Graph, from: &Graph, map: &[Option<ValueId>]) {
    to.set_outputs(
        from.outputs
            .iter()
            .map(|v| map[v.0 as usize].expect("outputs are values"))
            .collect(),
    );
}

/// Appends a copy of `node` of graph `from` to `to`, with its operands renamed to `inputs`
/// (values of `to`). Shapes and dtypes are copied, not inferred again: the passes keep them.
pub(crate) fn copy_node(
    to: &mut Graph,
    from: &Graph,
    node: &Node,
    inputs: Vec<ValueId>,
) -> Vec<ValueId> {
    let index = to.nodes.len();
    let outputs: Vec<ValueId> = node
        .outputs
        .iter()
        .enumerate()
        .map(|(output, &v)| {
            let id = ValueId(to.values.len() as u32);
            to.values.push(from.meta(v).clone());
            to.producers.push(Producer::Node {
                node: index,
                output,
            });
            id
        })
        .collect();
    to.nodes.push(Node {
        op: node.op,
        attrs: node.attrs.clone(),
        inputs,
        outputs: outputs.clone(),
        part: node.part,
    });
    outputs
}

/// A graph with the inputs of `g` (same order and metas) and nothing else, and the map from
/// `g`'s values to the new graph's, filled for the inputs.
pub(crate) fn with_inputs(g: &Graph) -> (Graph, Vec<Option<ValueId>>) {
    let mut out = Graph::new();
    let mut map = vec![None; g.values.len()];
    for &v in &g.inputs {
        map[v.0 as usize] = Some(out.input(g.meta(v).clone()));
    }
    (out, map)
}

/// Who uses each value.
pub(crate) struct Users {
    /// The nodes reading each value (each node once), by [`ValueId`].
    pub of: Vec<Vec<usize>>,
    /// Whether each value is a graph output.
    pub is_output: Vec<bool>,
}

impl Users {
    /// The users of every value of `g`.
    pub(crate) fn new(g: &Graph) -> Users {
        let mut of: Vec<Vec<usize>> = vec![Vec::new(); g.values.len()];
        for (n, node) in g.nodes.iter().enumerate() {
            for v in &node.inputs {
                let users = &mut of[v.0 as usize];
                if users.last() != Some(&n) {
                    users.push(n);
                }
            }
        }
        let mut is_output = vec![false; g.values.len()];
        for v in &g.outputs {
            is_output[v.0 as usize] = true;
        }
        Users { of, is_output }
    }
}

/// A group of nodes that one elementwise loop computes.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    /// The member nodes, in graph (topological) order.
    pub nodes: Vec<usize>,
    /// The shape the loop runs over: the shape of every value that leaves the group.
    pub shape: Vec<usize>,
}

/// A matmul and the elementwise group it feeds, run as one kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatmulFusion {
    /// The matmul node.
    pub node: usize,
    /// The epilogue group, an index into [`Fusion::groups`].
    pub epilogue: usize,
}

/// A row op with an elementwise prologue and/or epilogue, run as one kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowFusion {
    /// The row op's node.
    pub node: usize,
    /// The group producing its first input, an index into [`Fusion::groups`].
    pub prologue: Option<usize>,
    /// The group consuming its output, an index into [`Fusion::groups`].
    pub epilogue: Option<usize>,
}

/// The grouping of a graph's nodes into kernels, as the fusion passes refine it.
pub(crate) struct Fusion<'g> {
    /// The graph being partitioned.
    pub graph: &'g Graph,
    /// Its value users.
    pub users: Users,
    /// Elementwise groups (singletons included).
    pub groups: Vec<Group>,
    /// The group of each node, if any.
    pub group_of: Vec<Option<usize>>,
    /// Whether each group belongs to a matmul or row kernel.
    pub claimed: Vec<bool>,
    /// Matmuls with epilogues.
    pub matmuls: Vec<MatmulFusion>,
    /// Row ops with prologues or epilogues.
    pub rows: Vec<RowFusion>,
}

/// One kernel of a partition: the nodes it runs.
#[derive(Clone, Debug)]
pub(crate) enum KernelPlan {
    /// A single registry op, run as eager runs it.
    Op(usize),
    /// Elementwise ops in one loop.
    Elementwise(Group),
    /// A matmul with an elementwise epilogue.
    Matmul {
        /// The matmul node.
        node: usize,
        /// Its epilogue.
        epilogue: Group,
    },
    /// A row op with an optional prologue and epilogue.
    Rows {
        /// The row op's node.
        node: usize,
        /// The group producing its first input.
        prologue: Option<Group>,
        /// The group consuming its output.
        epilogue: Option<Group>,
    },
}

impl KernelPlan {
    /// The nodes the kernel runs, in graph order.
    pub(crate) fn nodes(&self) -> Vec<usize> {
        let mut nodes = match self {
            KernelPlan::Op(n) => vec![*n],
            KernelPlan::Elementwise(g) => g.nodes.clone(),
            KernelPlan::Matmul { node, epilogue } => {
                let mut v = epilogue.nodes.clone();
                v.push(*node);
                v
            }
            KernelPlan::Rows {
                node,
                prologue,
                epilogue,
            } => {
                let mut v = vec![*node];
                v.extend(prologue.iter().chain(epilogue).flat_map(|g| g.nodes.iter()));
                v
            }
        };
        nodes.sort_unstable();
        nodes
    }
}

impl<'g> Fusion<'g> {
    /// Every node its own kernel.
    pub(crate) fn new(graph: &'g Graph) -> Fusion<'g> {
        Fusion {
            users: Users::new(graph),
            groups: Vec::new(),
            group_of: vec![None; graph.nodes.len()],
            claimed: Vec::new(),
            matmuls: Vec::new(),
            rows: Vec::new(),
            graph,
        }
    }

    /// How many kernels the grouping makes so far.
    pub(crate) fn kernel_count(&self) -> usize {
        let grouped: usize = self.groups.iter().map(|g| g.nodes.len()).sum();
        let merges = self.matmuls.len()
            + self
                .rows
                .iter()
                .map(|r| r.prologue.is_some() as usize + r.epilogue.is_some() as usize)
                .sum::<usize>();
        self.graph.nodes.len() - grouped + self.groups.len() - merges
    }

    /// True when running `nodes` as one kernel keeps the graph acyclic: no path leaves the set
    /// and comes back into it through a node outside it.
    pub(crate) fn convex(&self, nodes: &[usize]) -> bool {
        let g = self.graph;
        let mut inside = vec![false; g.nodes.len()];
        for &n in nodes {
            inside[n] = true;
        }
        let Some(&last) = nodes.iter().max() else {
            return true;
        };
        let mut seen = vec![false; g.nodes.len()];
        let mut stack = Vec::new();
        let outside_users = |n: usize| {
            g.nodes[n]
                .outputs
                .iter()
                .flat_map(|v| self.users.of[v.0 as usize].iter().copied())
        };
        for &n in nodes {
            for u in outside_users(n) {
                if !inside[u] && !std::mem::replace(&mut seen[u], true) {
                    stack.push(u);
                }
            }
        }
        while let Some(u) = stack.pop() {
            // Nodes are in topological order: one after the last member cannot reach it.
            if u > last {
                continue;
            }
            for w in outside_users(u) {
                if inside[w] {
                    return false;
                }
                if !std::mem::replace(&mut seen[w], true) {
                    stack.push(w);
                }
            }
        }
        true
    }

    /// The kernels, in an order that runs every producer before its users.
    pub(crate) fn into_plans(self) -> Vec<KernelPlan> {
        let g = self.graph;
        let mut plans: Vec<KernelPlan> = Vec::new();
        let mut taken = vec![false; self.groups.len()];
        for m in &self.matmuls {
            taken[m.epilogue] = true;
            plans.push(KernelPlan::Matmul {
                node: m.node,
                epilogue: self.groups[m.epilogue].clone(),
            });
        }
        for r in &self.rows {
            for gid in r.prologue.iter().chain(&r.epilogue) {
                taken[*gid] = true;
            }
            plans.push(KernelPlan::Rows {
                node: r.node,
                prologue: r.prologue.map(|gid| self.groups[gid].clone()),
                epilogue: r.epilogue.map(|gid| self.groups[gid].clone()),
            });
        }
        let claimed_nodes: Vec<usize> = plans.iter().flat_map(|p| p.nodes()).collect();
        let mut in_plan = vec![false; g.nodes.len()];
        for n in claimed_nodes {
            in_plan[n] = true;
        }
        for (gid, group) in self.groups.iter().enumerate() {
            if taken[gid] {
                continue;
            }
            for &n in &group.nodes {
                in_plan[n] = true;
            }
            plans.push(if group.nodes.len() == 1 {
                // A lone elementwise op runs as eager runs it.
                KernelPlan::Op(group.nodes[0])
            } else {
                KernelPlan::Elementwise(group.clone())
            });
        }
        for (n, done) in in_plan.iter().enumerate() {
            if !done {
                plans.push(KernelPlan::Op(n));
            }
        }
        topological(g, plans)
    }
}

/// Orders kernels so that producers run first; among ready kernels, the one whose first node
/// came first in the graph runs first, which keeps the trace order where it can.
fn topological(g: &Graph, plans: Vec<KernelPlan>) -> Vec<KernelPlan> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    let members: Vec<Vec<usize>> = plans.iter().map(KernelPlan::nodes).collect();
    let mut kernel_of = vec![0usize; g.nodes.len()];
    for (k, nodes) in members.iter().enumerate() {
        for &n in nodes {
            kernel_of[n] = k;
        }
    }
    let mut waiting = vec![0usize; plans.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); plans.len()];
    for (k, nodes) in members.iter().enumerate() {
        let mut deps: Vec<usize> = nodes
            .iter()
            .flat_map(|&n| g.nodes[n].inputs.iter())
            .filter_map(|&v| producer_node(g, v))
            .map(|p| kernel_of[p])
            .filter(|&d| d != k)
            .collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[k] = deps.len();
        for d in deps {
            dependents[d].push(k);
        }
    }
    let first = |k: usize| members[k].first().copied().unwrap_or(0);
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> = (0..plans.len())
        .filter(|&k| waiting[k] == 0)
        .map(|k| Reverse((first(k), k)))
        .collect();
    let mut order = Vec::with_capacity(plans.len());
    while let Some(Reverse((_, k))) = ready.pop() {
        order.push(k);
        for &d in &dependents[k] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(Reverse((first(d), d)));
            }
        }
    }
    debug_assert_eq!(
        order.len(),
        plans.len(),
        "fusion kept the kernel graph acyclic"
    );
    let mut slots: Vec<Option<KernelPlan>> = plans.into_iter().map(Some).collect();
    order.into_iter().filter_map(|k| slots[k].take()).collect()
}

#[cfg(test)]
pub(crate) mod testing {
    //! Small graphs for the passes' unit tests.

    use crate::graph::{Graph, ValueId};
    use neuronlab_core::ops::{Attrs, Registry};
    use neuronlab_core::tensor::{DType, TensorMeta};

    /// An f32 meta.
    pub fn f32s(shape: &[usize]) -> TensorMeta {
        TensorMeta::new(shape.to_vec(), DType::F32)
    }

    /// Applies a single-output op by name.
    pub fn op(g: &mut Graph, name: &str, inputs: &[ValueId], attrs: Attrs) -> ValueId {
        let id = Registry::global().id(name).expect("a registry op");
        g.op(id, inputs, &attrs).expect("a valid op")[0]
    }

    /// The op names of a graph's nodes, in order.
    pub fn names(g: &Graph) -> Vec<&'static str> {
        g.nodes.iter().map(|n| n.name()).collect()
    }
}

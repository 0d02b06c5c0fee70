//! The graph IR: nodes are registry ops over values with static shapes and dtypes.
//!
//! A [`Graph`] is built in trace order ([`Graph::input`], [`Graph::constant`], [`Graph::op`]),
//! with shapes and dtypes inferred by the op registry at each step, so a shape error surfaces
//! while tracing, with the op named. Its [`Graph::canonical_hash`] is structural: each value's
//! hash covers the op, its attributes (defaults filled in) and its inputs' hashes, so the hash
//! does not depend on handle numbers, on the order independent ops were traced in, or on nodes
//! that do not reach an output.

use std::fmt;

use neuronlab_core::events::Phase;
use neuronlab_core::ops::attrs::ResolvedAttrs;
use neuronlab_core::ops::{Attrs, OpId, Registry};
use neuronlab_core::tensor::{Tensor, TensorMeta};
use neuronlab_core::{Error, Result, Runtime};

/// A value in a graph: a graph input, a constant, or an op output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// What produces a value.
#[derive(Clone, Debug)]
pub enum Producer {
    /// Graph input number `index`.
    Input(usize),
    /// A tensor captured by value when the graph was built.
    Constant(Tensor),
    /// Output `output` of node `node`.
    Node {
        /// Index into [`Graph::nodes`].
        node: usize,
        /// Which of the node's outputs.
        output: usize,
    },
}

/// The part of a training step a node belongs to: what `explain` groups it under, and the
/// phase its kernel's events carry.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// The forward computation, and everything of a graph without gradients.
    #[default]
    Forward,
    /// Gradients, as a traced backward made them.
    Backward,
    /// What a trace recorded after its backward: the optimizer's update.
    Update,
}

impl Part {
    /// Its name in listings.
    pub fn name(self) -> &'static str {
        match self {
            Part::Forward => "forward",
            Part::Backward => "backward",
            Part::Update => "update",
        }
    }

    /// What a listing line of its nodes ends with: `  (backward)`, nothing for forward.
    pub(crate) fn listing_suffix(self) -> String {
        match self {
            Part::Forward => String::new(),
            other => format!("  ({})", other.name()),
        }
    }

    /// The phase of its ops' events.
    pub fn phase(self) -> Phase {
        match self {
            Part::Backward => Phase::Backward,
            Part::Forward | Part::Update => Phase::Forward,
        }
    }
}

/// One op application.
#[derive(Clone, Debug)]
pub struct Node {
    /// The registry op.
    pub op: OpId,
    /// Its attributes, with defaults filled in (canonical).
    pub attrs: Attrs,
    /// Its operands.
    pub inputs: Vec<ValueId>,
    /// Its results.
    pub outputs: Vec<ValueId>,
    /// The part of a training step it belongs to.
    pub part: Part,
}

impl Node {
    /// The op's registry name.
    pub fn name(&self) -> &'static str {
        Registry::global()
            .get(self.op)
            .map_or("<unknown op>", |d| d.name)
    }
}

/// A dataflow graph of registry ops.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Shape and dtype of every value, indexed by [`ValueId`].
    pub values: Vec<TensorMeta>,
    /// What produces every value, indexed by [`ValueId`].
    pub producers: Vec<Producer>,
    /// The op nodes, in trace order (a topological order).
    pub nodes: Vec<Node>,
    /// The graph inputs, in order.
    pub inputs: Vec<ValueId>,
    /// The graph outputs, in order.
    pub outputs: Vec<ValueId>,
    /// The part new nodes get.
    pub(crate) part: Part,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    fn value(&mut self, meta: TensorMeta, producer: Producer) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(meta);
        self.producers.push(producer);
        id
    }

    /// Removes the node added last and its outputs, which are the values added last.
    pub(crate) fn pop_node(&mut self) {
        if let Some(node) = self.nodes.pop() {
            let kept = self.values.len() - node.outputs.len();
            self.values.truncate(kept);
            self.producers.truncate(kept);
        }
    }

    /// Makes later nodes part `part` (until the next call); returns the previous part.
    pub fn set_part(&mut self, part: Part) -> Part {
        std::mem::replace(&mut self.part, part)
    }

    /// Adds a graph input with this shape and dtype.
    pub fn input(&mut self, meta: TensorMeta) -> ValueId {
        let index = self.inputs.len();
        let id = self.value(meta, Producer::Input(index));
        self.inputs.push(id);
        id
    }

    /// Adds a constant: a tensor whose value is fixed when the graph is built.
    pub fn constant(&mut self, tensor: Tensor) -> ValueId {
        self.value(tensor.meta(), Producer::Constant(tensor))
    }

    /// The shape and dtype of a value.
    pub fn meta(&self, v: ValueId) -> &TensorMeta {
        &self.values[v.0 as usize]
    }

    /// Applies `op` to `inputs`, inferring the outputs' shapes and dtypes. Errors are the same
    /// op errors eager execution gives.
    pub fn op(&mut self, op: OpId, inputs: &[ValueId], attrs: &Attrs) -> Result<Vec<ValueId>> {
        let def = Registry::global()
            .get(op)
            .ok_or_else(|| Error::UnknownOp(format!("no op has id {}", op.0)))?;
        if let Some(bad) = inputs.iter().find(|v| v.0 as usize >= self.values.len()) {
            return Err(Error::Invalid(format!(
                "{bad} is not a value of this graph"
            )));
        }
        let metas: Vec<TensorMeta> = inputs.iter().map(|&v| self.meta(v).clone()).collect();
        let outs = Runtime::infer(def, &metas, attrs)?;
        let canonical = ResolvedAttrs::resolve(def.attrs, attrs)
            .map_err(Error::Invalid)?
            .to_attrs();
        let node = self.nodes.len();
        let outputs: Vec<ValueId> = outs
            .into_iter()
            .enumerate()
            .map(|(output, meta)| self.value(meta, Producer::Node { node, output }))
            .collect();
        self.nodes.push(Node {
            op,
            attrs: canonical,
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
            part: self.part,
        });
        Ok(outputs)
    }

    /// Sets the graph outputs.
    pub fn set_outputs(&mut self, outputs: Vec<ValueId>) {
        self.outputs = outputs;
    }

    /// The nodes the outputs depend on, in trace order.
    pub fn live_nodes(&self) -> Vec<usize> {
        let mut live = vec![false; self.nodes.len()];
        let mut stack: Vec<ValueId> = self.outputs.clone();
        while let Some(v) = stack.pop() {
            if let Producer::Node { node, .. } = self.producers[v.0 as usize] {
                if !std::mem::replace(&mut live[node], true) {
                    stack.extend(&self.nodes[node].inputs);
                }
            }
        }
        (0..self.nodes.len()).filter(|&n| live[n]).collect()
    }

    /// A structural hash of what the outputs compute from the inputs (see the module docs).
    pub fn canonical_hash(&self) -> blake3::Hash {
        let mut value_hash: Vec<Option<blake3::Hash>> = vec![None; self.values.len()];
        let meta_bytes = |m: &TensorMeta, h: &mut blake3::Hasher| {
            h.update(m.dtype.name().as_bytes());
            for d in &m.shape {
                h.update(&(*d as u64).to_le_bytes());
            }
            h.update(b";");
        };
        for (i, p) in self.producers.iter().enumerate() {
            let mut h = blake3::Hasher::new();
            match p {
                Producer::Input(index) => {
                    h.update(b"input");
                    h.update(&(*index as u64).to_le_bytes());
                    meta_bytes(&self.values[i], &mut h);
                    value_hash[i] = Some(h.finalize());
                }
                Producer::Constant(t) => {
                    h.update(b"constant");
                    meta_bytes(&self.values[i], &mut h);
                    h.update(&t.to_buffer().to_le_bytes());
                    value_hash[i] = Some(h.finalize());
                }
                Producer::Node { .. } => {}
            }
        }
        // Nodes are in topological order, so their inputs are hashed before them.
        for node in &self.nodes {
            let mut h = blake3::Hasher::new();
            h.update(node.name().as_bytes());
            h.update(node.part.name().as_bytes());
            h.update(format!("{:?}", node.attrs.0).as_bytes());
            for v in &node.inputs {
                let input = value_hash[v.0 as usize].expect("inputs precede their users");
                h.update(input.as_bytes());
            }
            let node_hash = h.finalize();
            for (k, out) in node.outputs.iter().enumerate() {
                let mut ho = blake3::Hasher::new();
                ho.update(node_hash.as_bytes());
                ho.update(&(k as u64).to_le_bytes());
                value_hash[out.0 as usize] = Some(ho.finalize());
            }
        }
        let mut h = blake3::Hasher::new();
        h.update(b"neuronlab-graph-v1");
        for v in &self.inputs {
            meta_bytes(&self.values[v.0 as usize], &mut h);
        }
        h.update(b"outputs");
        for v in &self.outputs {
            h.update(
                value_hash[v.0 as usize]
                    .expect("every value is hashed")
                    .as_bytes(),
            );
        }
        h.finalize()
    }
}

/// Value names separated by commas: `%3, %4`.
pub fn value_list(vs: &[ValueId]) -> String {
    vs.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Graph {
    /// Node `n` as one line: `%3 = softmax(%2; dim=-1)  # f32[8, 128]`.
    pub fn node_line(&self, n: usize) -> String {
        let node = &self.nodes[n];
        let attrs: Vec<String> = node
            .attrs
            .0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let args = if attrs.is_empty() {
            value_list(&node.inputs)
        } else {
            format!("{}; {}", value_list(&node.inputs), attrs.join(", "))
        };
        let metas: Vec<String> = node
            .outputs
            .iter()
            .map(|v| self.meta(*v).to_string())
            .collect();
        let part = node.part.listing_suffix();
        format!(
            "{} = {}({args})  # {}{part}",
            value_list(&node.outputs),
            node.name(),
            metas.join(", ")
        )
    }
}

impl fmt::Display for Graph {
    /// One line per node: `%3 = matmul(%0, %1)  # f32[8, 128]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|v| format!("{v}: {}", self.meta(*v)))
            .collect();
        writeln!(f, "graph({}):", inputs.join(", "))?;
        for (i, p) in self.producers.iter().enumerate() {
            if let Producer::Constant(_) = p {
                writeln!(f, "  %{i} = constant  # {}", self.values[i])?;
            }
        }
        for n in 0..self.nodes.len() {
            writeln!(f, "  {}", self.node_line(n))?;
        }
        write!(f, "  return {}", value_list(&self.outputs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuronlab_core::tensor::DType;

    fn id(name: &str) -> OpId {
        Registry::global().id(name).unwrap()
    }

    fn meta(shape: &[usize]) -> TensorMeta {
        TensorMeta::new(shape.to_vec(), DType::F32)
    }

    #[test]
    fn shapes_are_inferred_and_errors_name_the_op() {
        let mut g = Graph::new();
        let x = g.input(meta(&[8, 128]));
        let w = g.input(meta(&[128, 64]));
        let y = g.op(id("matmul"), &[x, w], &Attrs::new()).unwrap()[0];
        assert_eq!(g.meta(y), &meta(&[8, 64]));
        let e = g
            .op(id("matmul"), &[w, w], &Attrs::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("matmul(a: f32[128, 64], b: f32[128, 64])"),
            "{e}"
        );
    }

    #[test]
    fn the_hash_ignores_trace_order_dead_nodes_and_spelled_out_defaults() {
        let build = |swap: bool, dead: bool, explicit_dim: bool| {
            let mut g = Graph::new();
            let x = g.input(meta(&[4, 8]));
            let y = g.input(meta(&[4, 8]));
            let (a, b) = if swap {
                let b = g.op(id("exp"), &[y], &Attrs::new()).unwrap()[0];
                let a = g.op(id("tanh"), &[x], &Attrs::new()).unwrap()[0];
                (a, b)
            } else {
                let a = g.op(id("tanh"), &[x], &Attrs::new()).unwrap()[0];
                let b = g.op(id("exp"), &[y], &Attrs::new()).unwrap()[0];
                (a, b)
            };
            if dead {
                g.op(id("sin"), &[x], &Attrs::new()).unwrap();
            }
            let s = g.op(id("add"), &[a, b], &Attrs::new()).unwrap()[0];
            let attrs = if explicit_dim {
                Attrs::new().with("dim", -1)
            } else {
                Attrs::new()
            };
            let out = g.op(id("softmax"), &[s], &attrs).unwrap()[0];
            g.set_outputs(vec![out]);
            g.canonical_hash()
        };
        let base = build(false, false, false);
        assert_eq!(base, build(true, false, false));
        assert_eq!(base, build(false, true, false));
        assert_eq!(base, build(false, false, true));
        // Different structure, different hash: operands of add swapped.
        let mut g = Graph::new();
        let x = g.input(meta(&[4, 8]));
        let y = g.input(meta(&[4, 8]));
        let a = g.op(id("tanh"), &[x], &Attrs::new()).unwrap()[0];
        let b = g.op(id("exp"), &[y], &Attrs::new()).unwrap()[0];
        let s = g.op(id("add"), &[b, a], &Attrs::new()).unwrap()[0];
        let out = g.op(id("softmax"), &[s], &Attrs::new()).unwrap()[0];
        g.set_outputs(vec![out]);
        assert_ne!(base, g.canonical_hash());
    }
}

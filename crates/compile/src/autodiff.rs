//! Gradients inside a traced graph: which values require gradients, and backward over the
//! graph's own nodes, appended to the same graph (AOTAutograd's joint graph).
//!
//! Backward runs the table of backward formulas eager backward runs
//! ([`neuronlab_core::autograd::derivatives`]), on stand-in tensors ([`Tensor::stand_in`])
//! whose ops are recorded as graph nodes instead of run. So a compiled training step computes
//! exactly the ops eager backward would, and the passes and fusion see all of it.
//!
//! The rules follow eager: a node is on the tape when grad mode was on, an input required a
//! gradient and the op is differentiable; its float outputs then require gradients. A backward
//! without `retain_graph` frees the nodes it walked, and a second backward through them fails
//! with the eager error.

use std::cell::RefCell;
use std::collections::HashMap;

use neuronlab_core::autograd::derivatives::{self, Derivative, OpBackward, OpCalls};
use neuronlab_core::autograd::errors;
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::ops::attrs::{Attrs, ResolvedAttrs};
use neuronlab_core::ops::Registry;
use neuronlab_core::tensor::{Tensor, TensorMeta};
use neuronlab_core::{Error, Result};

use super::graph::{Graph, Part, Producer, ValueId};

/// What a trace knows about gradients: values that require them, and the nodes backward can
/// run through.
#[derive(Default)]
pub struct Tape {
    /// By value id: the value requires a gradient.
    requires: Vec<bool>,
    /// By node index: the node is on the tape.
    taped: Vec<bool>,
    /// By node index: a backward without `retain_graph` walked it.
    freed: Vec<bool>,
}

impl Tape {
    /// A tape on which nothing requires a gradient.
    pub fn new() -> Tape {
        Tape::default()
    }

    /// Marks `v` as requiring a gradient (a leaf bound from outside the trace).
    pub fn require(&mut self, v: ValueId) {
        let i = v.0 as usize;
        if self.requires.len() <= i {
            self.requires.resize(i + 1, false);
        }
        self.requires[i] = true;
    }

    /// True when `v` requires a gradient.
    pub fn requires(&self, v: ValueId) -> bool {
        self.requires.get(v.0 as usize).copied().unwrap_or(false)
    }

    /// True when nothing requires a gradient.
    pub fn is_empty(&self) -> bool {
        !self.requires.contains(&true)
    }

    /// Notes node `n` of `graph`, just recorded with grad mode `grad_enabled`, as eager
    /// recording would: an op without a row in the table of formulas is an error there.
    pub fn record(&mut self, graph: &Graph, n: usize, grad_enabled: bool) -> Result<()> {
        let node = &graph.nodes[n];
        if self.taped.len() <= n {
            self.taped.resize(n + 1, false);
            self.freed.resize(n + 1, false);
        }
        if !grad_enabled || !node.inputs.iter().any(|&v| self.requires(v)) {
            return Ok(());
        }
        match derivatives::of(node.name()) {
            Some(Derivative::Vjp { .. }) => {}
            Some(Derivative::NotDifferentiable) => return Ok(()),
            None => return Err(errors::no_formula(node.name())),
        }
        self.taped[n] = true;
        for &out in &node.outputs {
            if graph.meta(out).dtype.is_float() {
                self.require(out);
            }
        }
        Ok(())
    }

    /// Appends to `graph` the gradients of `roots`, each seeded with its cotangent in
    /// `seeds` (`None`: 1, for a one-element root), and returns the gradient reaching each of
    /// `wanted` (`None` where none does). The new nodes are [`Part::Backward`].
    pub fn backward(
        &mut self,
        graph: &mut Graph,
        roots: &[ValueId],
        seeds: &[Option<ValueId>],
        wanted: &[ValueId],
        retain_graph: bool,
    ) -> Result<Vec<Option<ValueId>>> {
        if roots.is_empty() {
            return Err(errors::no_roots());
        }
        if seeds.len() != roots.len() {
            return Err(errors::root_count(roots.len(), seeds.len()));
        }
        let previous = graph.set_part(Part::Backward);
        let walked = self.walk(graph, roots, seeds);
        graph.set_part(previous);
        let (cotangents, walked) = walked?;
        if !retain_graph {
            for n in walked {
                self.freed[n] = true;
            }
        }
        Ok(wanted.iter().map(|v| cotangents.get(v).copied()).collect())
    }

    /// Every value's total cotangent, and the nodes that ran.
    fn walk(
        &self,
        graph: &mut Graph,
        roots: &[ValueId],
        seeds: &[Option<ValueId>],
    ) -> Result<(HashMap<ValueId, ValueId>, Vec<usize>)> {
        let tracer = Tracer::new(graph);
        let mut cotangents: HashMap<ValueId, ValueId> = HashMap::new();
        for (i, (&root, seed)) in roots.iter().zip(seeds).enumerate() {
            if !self.requires(root) {
                return Err(errors::root_not_required(i, &tracer.meta(root)));
            }
            let g = tracer.seed(root, *seed)?;
            tracer.deliver(&mut cotangents, root, g)?;
        }
        let mut walked = Vec::new();
        let n_nodes = self.taped.len().min(tracer.graph.borrow().nodes.len());
        for n in (0..n_nodes).rev() {
            if !self.taped[n] {
                continue;
            }
            let node = tracer.graph.borrow().nodes[n].clone();
            if !node.outputs.iter().any(|o| cotangents.contains_key(o)) {
                continue;
            }
            if self.freed[n] {
                return Err(errors::freed(node.name()));
            }
            let Some(Derivative::Vjp { saves, vjp }) = derivatives::of(node.name()) else {
                continue;
            };
            let def = Registry::global()
                .get(node.op)
                .expect("graph nodes are registry ops");
            let attrs = ResolvedAttrs::resolve(def.attrs, &node.attrs).map_err(Error::Invalid)?;
            let saved = |vs: &[ValueId], keep: bool| -> Vec<Option<Tensor>> {
                vs.iter()
                    .map(|&v| keep.then(|| tracer.stand_in(v)))
                    .collect()
            };
            let state = OpBackward {
                vjp: *vjp,
                attrs,
                input_metas: node.inputs.iter().map(|&v| tracer.meta(v)).collect(),
                output_metas: node.outputs.iter().map(|&v| tracer.meta(v)).collect(),
                inputs: saved(&node.inputs, saves.inputs),
                outputs: saved(&node.outputs, saves.outputs),
                packed: Vec::new(),
                core: CoreId(0),
            };
            let out_grads = node
                .outputs
                .iter()
                // A value's gradient is complete at its producer: every user came later.
                .map(|o| match cotangents.get(o) {
                    Some(&g) => Ok(tracer.stand_in(g)),
                    None => tracer.zeros(&tracer.meta(*o)),
                })
                .collect::<Result<Vec<_>>>()?;
            let needs: Vec<bool> = node.inputs.iter().map(|&v| self.requires(v)).collect();
            let grads = derivatives::input_grads(&tracer, node.name(), &state, &out_grads, &needs)?;
            for (&input, g) in node.inputs.iter().zip(grads) {
                if let Some(g) = g {
                    let g = tracer.value_of(&g)?;
                    tracer.deliver(&mut cotangents, input, g)?;
                }
            }
            walked.push(n);
        }
        Ok((cotangents, walked))
    }
}

/// Runs backward formulas into a graph: each op call becomes a node, and its result a
/// stand-in tensor that names the node's output.
struct Tracer<'g> {
    graph: RefCell<&'g mut Graph>,
    /// Stand-ins by storage id, and the value each names.
    values: RefCell<HashMap<usize, ValueId>>,
    /// The stand-ins made so far, kept alive so their storage ids stay unique.
    alive: RefCell<Vec<Tensor>>,
}

impl<'g> Tracer<'g> {
    fn new(graph: &'g mut Graph) -> Tracer<'g> {
        Tracer {
            graph: RefCell::new(graph),
            values: RefCell::default(),
            alive: RefCell::default(),
        }
    }

    fn meta(&self, v: ValueId) -> TensorMeta {
        self.graph.borrow().meta(v).clone()
    }

    /// A stand-in for value `v`.
    fn stand_in(&self, v: ValueId) -> Tensor {
        let t = Tensor::stand_in(&self.meta(v), CoreId(0));
        self.values.borrow_mut().insert(t.storage_id(), v);
        self.alive.borrow_mut().push(t.clone());
        t
    }

    /// The value a stand-in names.
    fn value_of(&self, t: &Tensor) -> Result<ValueId> {
        self.values
            .borrow()
            .get(&t.storage_id())
            .copied()
            .ok_or_else(|| {
                Error::Invalid(
                    "internal error: a backward formula used a tensor that is not a value of \
                     the traced graph; please report this"
                        .into(),
                )
            })
    }

    fn node(&self, op: &str, inputs: &[ValueId], attrs: &Attrs) -> Result<ValueId> {
        let id = Registry::global()
            .id(op)
            .ok_or_else(|| Error::UnknownOp(format!("no op is named '{op}'")))?;
        Ok(self.graph.borrow_mut().op(id, inputs, attrs)?[0])
    }

    fn zeros(&self, meta: &TensorMeta) -> Result<Tensor> {
        let shape: Vec<i64> = meta.shape.iter().map(|&d| d as i64).collect();
        let attrs = Attrs::new().with("shape", shape).with("dtype", meta.dtype);
        Ok(self.stand_in(self.node("zeros", &[], &attrs)?))
    }

    /// A root's starting gradient: the one given (checked against the root), or 1 for a
    /// one-element root.
    fn seed(&self, root: ValueId, given: Option<ValueId>) -> Result<ValueId> {
        let meta = self.meta(root);
        match given {
            Some(g) if self.meta(g).shape != meta.shape => {
                Err(errors::seed_shape(&self.meta(g), &meta))
            }
            Some(g) => Ok(g),
            None if meta.numel() == 1 => {
                let shape: Vec<i64> = meta.shape.iter().map(|&d| d as i64).collect();
                let attrs = Attrs::new()
                    .with("shape", shape)
                    .with("value", 1.0)
                    .with("dtype", meta.dtype);
                self.node("full", &[], &attrs)
            }
            None => Err(errors::seed_needed(&meta)),
        }
    }

    /// Adds `g` into `v`'s cotangent.
    fn deliver(
        &self,
        cotangents: &mut HashMap<ValueId, ValueId>,
        v: ValueId,
        g: ValueId,
    ) -> Result<()> {
        let total = match cotangents.remove(&v) {
            Some(old) => self.node("add", &[old, g], &Attrs::new())?,
            None => g,
        };
        cotangents.insert(v, total);
        Ok(())
    }
}

impl OpCalls for Tracer<'_> {
    fn call_op(&self, op: &str, inputs: &[&Tensor], attrs: Attrs, _core: CoreId) -> Result<Tensor> {
        let ids = inputs
            .iter()
            .map(|t| self.value_of(t))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.stand_in(self.node(op, &ids, &attrs)?))
    }
}

/// The values of `graph` that its [`Part::Backward`] nodes read from outside the backward:
/// what was saved for backward (inputs and forward results), in value order.
pub fn saved_for_backward(graph: &Graph) -> Vec<ValueId> {
    let mut saved: Vec<ValueId> = Vec::new();
    for node in graph.nodes.iter().filter(|n| n.part == Part::Backward) {
        for &v in &node.inputs {
            let from_outside = match graph.producers[v.0 as usize] {
                Producer::Node { node, .. } => graph.nodes[node].part != Part::Backward,
                Producer::Input(_) => true,
                Producer::Constant(_) => false,
            };
            if from_outside && !saved.contains(&v) {
                saved.push(v);
            }
        }
    }
    saved.sort();
    saved
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuronlab_core::tensor::DType;

    fn op(g: &mut Graph, name: &str, inputs: &[ValueId]) -> ValueId {
        let id = Registry::global().id(name).unwrap();
        g.op(id, inputs, &Attrs::new()).unwrap()[0]
    }

    /// loss = sum(tanh(x @ w)), traced with w requiring a gradient.
    fn traced() -> (Graph, Tape, ValueId, ValueId, ValueId) {
        let mut g = Graph::new();
        let mut tape = Tape::new();
        let x = g.input(TensorMeta::new(vec![3, 4], DType::F64));
        let w = g.input(TensorMeta::new(vec![4, 2], DType::F64));
        tape.require(w);
        for name in ["matmul", "tanh", "sum"] {
            let last = match g.nodes.last() {
                None => vec![x, w],
                Some(n) => vec![n.outputs[0]],
            };
            op(&mut g, name, &last);
            tape.record(&g, g.nodes.len() - 1, true).unwrap();
        }
        let loss = g.nodes.last().unwrap().outputs[0];
        (g, tape, x, w, loss)
    }

    #[test]
    fn the_traced_gradient_runs_to_the_eager_one() {
        let (mut g, mut tape, x, w, loss) = traced();
        assert!(tape.requires(loss) && !tape.requires(x));
        let grads = tape
            .backward(&mut g, &[loss], &[None], &[w, x], false)
            .unwrap();
        let gw = grads[0].expect("w gets a gradient");
        assert!(grads[1].is_none(), "x does not require one");
        assert!(g.nodes[3..].iter().all(|n| n.part == Part::Backward));
        g.set_outputs(vec![loss, gw]);

        let rt = crate::program::tests::runtime();
        let randn = |shape: Vec<i64>, seed: i64| {
            let attrs = Attrs::new()
                .with("shape", shape)
                .with("dtype", DType::F64)
                .with("seed", seed);
            rt.call1("randn", &[], &attrs).unwrap()
        };
        let (xs, ws) = (randn(vec![3, 4], 1), randn(vec![4, 2], 2));
        let (program, _) = crate::program::optimize(&rt, &g).unwrap();
        let out = program.run(&rt, CoreId(0), &[&xs, &ws]).unwrap();

        let leaf = neuronlab_core::autograd::requires_grad(&rt, &ws).unwrap();
        let y = rt.call1("matmul", &[&xs, &leaf], &Attrs::new()).unwrap();
        let y = rt.call1("tanh", &[&y], &Attrs::new()).unwrap();
        let eager_loss = rt.call1("sum", &[&y], &Attrs::new()).unwrap();
        neuronlab_core::autograd::backward(&rt, std::slice::from_ref(&eager_loss), &[None], false)
            .unwrap();
        let eager_grad = leaf.leaf().unwrap().grad().unwrap();
        assert_eq!(out[0].to_vec::<f64>(), eager_loss.to_vec::<f64>());
        assert_eq!(out[1].to_vec::<f64>(), eager_grad.to_vec::<f64>());
        assert!(!saved_for_backward(&g).is_empty());
    }

    #[test]
    fn a_second_backward_needs_retain_graph_and_roots_must_require_grad() {
        let (mut g, mut tape, x, w, loss) = traced();
        tape.backward(&mut g, &[loss], &[None], &[w], true).unwrap();
        tape.backward(&mut g, &[loss], &[None], &[w], false)
            .unwrap();
        let e = tape
            .backward(&mut g, &[loss], &[None], &[w], false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a second time") && e.contains("retain_graph"),
            "{e}"
        );
        let e = tape
            .backward(&mut g, &[x], &[None], &[w], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not require a gradient"), "{e}");
        let y = g.nodes[1].outputs[0];
        let e = tape
            .backward(&mut g, &[y], &[None], &[w], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs a gradient of that shape"), "{e}");
    }
}

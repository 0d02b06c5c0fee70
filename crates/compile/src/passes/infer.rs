//! Shape and dtype inference: checks that every recorded value meta is what the registry
//! infers, that operands precede their users, and that the graph's lists agree.
//!
//! [`Graph::op`] infers while tracing, so a graph built through it passes. The check matters
//! for graphs assembled or edited through the public fields (a cache entry, a pass): the
//! executor trusts these metas to size buffers, so a wrong one must fail here, by name.

use crate::graph::{Graph, Producer, ValueId};
use neuronlab_core::ops::Registry;
use neuronlab_core::{Error, Result, Runtime};

/// Checks `g`; the error names the first inconsistent value or node.
pub fn run(g: &Graph) -> Result<()> {
    let bad = |msg: String| Err(Error::Invalid(format!("inconsistent graph: {msg}")));
    if g.values.len() != g.producers.len() {
        return bad(format!(
            "{} value metas but {} producers",
            g.values.len(),
            g.producers.len()
        ));
    }
    let valid = |v: ValueId| (v.0 as usize) < g.values.len();
    for (i, &v) in g.inputs.iter().enumerate() {
        if !valid(v) || !matches!(g.producers[v.0 as usize], Producer::Input(k) if k == i) {
            return bad(format!("graph input {i} is {v}, which is not input {i}"));
        }
    }
    if let Some(v) = g.outputs.iter().find(|v| !valid(**v)) {
        return bad(format!("output {v} is not a value"));
    }
    // Values an earlier node (or the inputs and constants) defined.
    let mut defined: Vec<bool> = g
        .producers
        .iter()
        .map(|p| !matches!(p, Producer::Node { .. }))
        .collect();
    for (n, node) in g.nodes.iter().enumerate() {
        let def = Registry::global()
            .get(node.op)
            .ok_or_else(|| Error::UnknownOp(format!("node {n}: no op has id {}", node.op.0)))?;
        if let Some(v) = node
            .inputs
            .iter()
            .find(|v| !valid(**v) || !defined[v.0 as usize])
        {
            return bad(format!("{} reads {v} before it is defined", def.name));
        }
        let metas: Vec<_> = node.inputs.iter().map(|&v| g.meta(v).clone()).collect();
        let inferred = Runtime::infer(def, &metas, &node.attrs)?;
        if inferred.len() != node.outputs.len() {
            return bad(format!(
                "{} has {} outputs, the registry infers {}",
                def.name,
                node.outputs.len(),
                inferred.len()
            ));
        }
        for (k, (&v, meta)) in node.outputs.iter().zip(&inferred).enumerate() {
            let produced_here = valid(v)
                && matches!(g.producers[v.0 as usize],
                    Producer::Node { node, output } if node == n && output == k);
            if !produced_here {
                return bad(format!(
                    "{} output {k} is {v}, which it does not produce",
                    def.name
                ));
            }
            if g.meta(v) != meta {
                return bad(format!(
                    "{v} = {} is recorded as {} but infers {meta}",
                    def.name,
                    g.meta(v)
                ));
            }
            defined[v.0 as usize] = true;
        }
    }
    if let Some(v) = g.outputs.iter().find(|v| !defined[v.0 as usize]) {
        return bad(format!("output {v} is never computed"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testing::{f32s, op};
    use neuronlab_core::ops::Attrs;

    #[test]
    fn traced_graphs_pass_and_wrong_metas_are_named() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[4, 8]));
        let y = op(&mut g, "exp", &[x], Attrs::new());
        let s = op(&mut g, "sum", &[y], Attrs::new().with("dims", vec![-1i64]));
        g.set_outputs(vec![s]);
        run(&g).unwrap();

        let mut wrong = g.clone();
        wrong.values[s.0 as usize] = f32s(&[8]);
        let e = run(&wrong).unwrap_err().to_string();
        assert!(
            e.contains("%2 = sum is recorded as f32[8] but infers f32[4]"),
            "{e}"
        );

        let mut early = g.clone();
        early.nodes[0].inputs = vec![s];
        let e = run(&early).unwrap_err().to_string();
        assert!(e.contains("exp reads %2 before it is defined"), "{e}");
    }
}

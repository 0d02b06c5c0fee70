//! Dead code elimination: keeps the nodes the outputs depend on and the constants they read.
//! Inputs stay, used or not: they are the graph's signature.

use super::{copy_node, with_inputs};
use crate::graph::{Graph, Producer};

/// `g` without the nodes and constants no output depends on.
pub fn run(g: &Graph) -> Graph {
    let live = g.live_nodes();
    let mut used = vec![false; g.values.len()];
    for v in live
        .iter()
        .flat_map(|&n| g.nodes[n].inputs.iter())
        .chain(&g.outputs)
    {
        used[v.0 as usize] = true;
    }
    let (mut out, mut map) = with_inputs(g);
    for (i, p) in g.producers.iter().enumerate() {
        if let (Producer::Constant(t), true) = (p, used[i]) {
            map[i] = Some(out.constant(t.clone()));
        }
    }
    for &n in &live {
        let node = &g.nodes[n];
        let inputs = node
            .inputs
            .iter()
            .map(|v| map[v.0 as usize].expect("live operands are mapped first"))
            .collect();
        for (old, new) in node
            .outputs
            .iter()
            .zip(copy_node(&mut out, g, node, inputs))
        {
            map[old.0 as usize] = Some(new);
        }
    }
    out.set_outputs(
        g.outputs
            .iter()
            .map(|v| map[v.0 as usize].expect("outputs are live"))
            .collect(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testing::{f32s, names, op};
    use neuronlab_core::ops::Attrs;
    use neuronlab_core::tensor::{Buffer, Layout, Storage, Tensor};
    use std::sync::Arc;

    #[test]
    fn unused_nodes_and_constants_go_and_inputs_stay() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[4]));
        let unused = g.input(f32s(&[2]));
        let c = g.constant(Tensor::from_storage(
            Arc::new(Storage::new(Buffer::F32(vec![1.0; 4]), None)),
            Layout::contiguous(&[4]),
            neuronlab_core::device::CoreId(0),
        ));
        let a = op(&mut g, "exp", &[x], Attrs::new());
        let dead = op(&mut g, "add", &[a, c], Attrs::new());
        op(&mut g, "tanh", &[dead], Attrs::new());
        let out = op(&mut g, "neg", &[a], Attrs::new());
        g.set_outputs(vec![out]);

        let d = run(&g);
        assert_eq!(names(&d), ["exp", "neg"]);
        assert_eq!(d.inputs.len(), 2);
        assert_eq!(d.meta(d.inputs[1]), g.meta(unused));
        assert!(!d
            .producers
            .iter()
            .any(|p| matches!(p, Producer::Constant(_))));
        assert_eq!(d.canonical_hash(), g.canonical_hash());
    }
}

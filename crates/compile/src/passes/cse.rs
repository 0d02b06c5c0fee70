//! Common subexpression elimination: a node that applies the same op with the same attributes
//! to the same values as an earlier one reuses that node's outputs, and equal constants become
//! one. Every registry op is a pure function of its operands and attributes (random ops are
//! keyed by their seed attribute), so this never changes a result.

use std::collections::HashMap;

use super::{copy_node, set_mapped_outputs, with_inputs};
use crate::graph::{Graph, Producer, ValueId};

/// `g` with repeated computations and constants merged.
pub fn run(g: &Graph) -> Graph {
    let (mut out, mut map) = with_inputs(g);
    let mut constants: HashMap<(String, blake3::Hash), ValueId> = HashMap::new();
    for (i, p) in g.producers.iter().enumerate() {
        if let Producer::Constant(t) = p {
            let key = (
                g.values[i].to_string(),
                blake3::hash(&t.to_buffer().to_le_bytes()),
            );
            let v = *constants
                .entry(key)
                .or_insert_with(|| out.constant(t.clone()));
            map[i] = Some(v);
        }
    }
    // Attributes are canonical (defaults filled in), so their debug form identifies them, as
    // in `Graph::canonical_hash`.
    let mut seen: HashMap<(u32, String, Vec<ValueId>), Vec<ValueId>> = HashMap::new();
    for node in &g.nodes {
        let inputs: Vec<ValueId> = node
            .inputs
            .iter()
            .map(|v| map[v.0 as usize].expect("operands precede their users"))
            .collect();
        let key = (node.op.0, format!("{:?}", node.attrs.0), inputs.clone());
        let outputs = match seen.get(&key) {
            Some(outputs) => outputs.clone(),
            None => {
                let outputs = copy_node(&mut out, g, node, inputs);
                seen.insert(key, outputs.clone());
                outputs
            }
        };
        for (old, new) in node.outputs.iter().zip(outputs) {
            map[old.0 as usize] = Some(new);
        }
    }
    set_mapped_outputs(&mut out, g, &map);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testing::{f32s, names, op};
    use neuronlab_core::device::CoreId;
    use neuronlab_core::ops::Attrs;
    use neuronlab_core::tensor::{Buffer, Layout, Storage, Tensor};
    use std::sync::Arc;

    fn constant(v: f32) -> Tensor {
        Tensor::from_storage(
            Arc::new(Storage::new(Buffer::F32(vec![v; 3]), None)),
            Layout::contiguous(&[3]),
            CoreId(0),
        )
    }

    #[test]
    fn repeated_ops_and_equal_constants_merge() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[3]));
        let (c1, c2, c3) = (
            g.constant(constant(2.0)),
            g.constant(constant(2.0)),
            g.constant(constant(3.0)),
        );
        let a = op(&mut g, "mul", &[x, c1], Attrs::new());
        let b = op(&mut g, "mul", &[x, c2], Attrs::new());
        let c = op(&mut g, "mul", &[x, c3], Attrs::new());
        // Same op and operands, but an explicit default: still the same computation.
        let s1 = op(&mut g, "softmax", &[a], Attrs::new());
        let s2 = op(&mut g, "softmax", &[b], Attrs::new().with("dim", -1));
        let s3 = op(&mut g, "softmax", &[b], Attrs::new().with("dim", 0));
        let sum = op(&mut g, "add", &[s1, s2], Attrs::new());
        g.set_outputs(vec![sum, s3, c]);

        let merged = run(&g);
        assert_eq!(names(&merged), ["mul", "mul", "softmax", "softmax", "add"]);
        let add = &merged.nodes[4];
        assert_eq!(add.inputs[0], add.inputs[1]);
        let constants = merged
            .producers
            .iter()
            .filter(|p| matches!(p, Producer::Constant(_)))
            .count();
        assert_eq!(constants, 2);
        assert_eq!(merged.canonical_hash(), g.canonical_hash());
    }
}

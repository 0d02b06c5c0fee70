//! Elementwise fusion: groups ops that expose a per-element form ([`neuronlab_core::ops::registry::Pointwise`])
//! into one loop over one shape, across broadcasting.
//!
//! Groups grow from a root (visited last to first, so each root is as late as it can be)
//! towards its producers. A producer joins when
//! - its shape broadcasts to the group's shape: a smaller producer is recomputed at each
//!   position it broadcasts to, which gives the same values (the ops are pure) without an
//!   intermediate buffer;
//! - and either every use of its value is in the group, or its value has the group's shape,
//!   in which case the fused kernel also writes it out (a multi-output kernel);
//! - and the group stays convex: no path leaves it and comes back (see `Fusion::convex`).
//!
//! A group of one op stays a group here: the matmul and reduction passes may still take it as
//! an epilogue or a prologue. Left alone, it runs as the plain op.

use super::{def_of, producer_node, Fusion, Group};
use neuronlab_core::tensor::broadcast_shapes;

/// True when a node can be part of a fused elementwise loop.
fn fusible(f: &Fusion, n: usize) -> bool {
    let node = &f.graph.nodes[n];
    node.outputs.len() == 1 && def_of(node).pointwise.is_some()
}

/// Forms the elementwise groups of `f`.
pub(crate) fn run(f: &mut Fusion) {
    let g = f.graph;
    for root in (0..g.nodes.len()).rev() {
        if f.group_of[root].is_some() || !fusible(f, root) {
            continue;
        }
        let gid = f.groups.len();
        let shape = g.meta(g.nodes[root].outputs[0]).shape.clone();
        let mut members = vec![root];
        f.group_of[root] = Some(gid);
        // A producer rejected because some of its users had not joined yet may fit once they
        // have, so sweep until nothing changes.
        let mut changed = true;
        while changed {
            changed = false;
            let mut i = 0;
            while i < members.len() {
                let operands = g.nodes[members[i]].inputs.clone();
                for v in operands {
                    let Some(p) = producer_node(g, v) else {
                        continue;
                    };
                    if f.group_of[p].is_some() || !fusible(f, p) {
                        continue;
                    }
                    let p_shape = &g.meta(v).shape;
                    if broadcast_shapes(p_shape, &shape).as_ref() != Ok(&shape) {
                        continue;
                    }
                    let internal = !f.users.is_output[v.0 as usize]
                        && f.users.of[v.0 as usize]
                            .iter()
                            .all(|&u| f.group_of[u] == Some(gid));
                    if !internal && *p_shape != shape {
                        continue;
                    }
                    members.push(p);
                    if f.convex(&members) {
                        f.group_of[p] = Some(gid);
                        changed = true;
                    } else {
                        members.pop();
                    }
                }
                i += 1;
            }
        }
        members.sort_unstable();
        f.groups.push(Group {
            nodes: members,
            shape,
        });
        f.claimed.push(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Graph;
    use crate::passes::testing::{f32s, op};
    use crate::passes::KernelPlan;
    use neuronlab_core::ops::Attrs;

    fn plans(g: &Graph) -> Vec<KernelPlan> {
        let mut f = Fusion::new(g);
        run(&mut f);
        f.into_plans()
    }

    fn fused_names(g: &Graph, p: &KernelPlan) -> Vec<&'static str> {
        p.nodes().iter().map(|&n| g.nodes[n].name()).collect()
    }

    #[test]
    fn a_broadcasting_tree_is_one_loop() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[8, 16]));
        let row = g.input(f32s(&[16]));
        let col = g.input(f32s(&[8, 1]));
        // exp(row) is [16]: recomputed per row inside the [8, 16] loop.
        let e = op(&mut g, "exp", &[row], Attrs::new());
        let a = op(&mut g, "mul", &[x, e], Attrs::new());
        let b = op(&mut g, "add", &[a, col], Attrs::new());
        // a is used twice, both times inside the group.
        let c = op(&mut g, "mul", &[b, a], Attrs::new());
        let out = op(&mut g, "gelu", &[c], Attrs::new());
        g.set_outputs(vec![out]);
        let p = plans(&g);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(fused_names(&g, &p[0]), ["exp", "mul", "add", "mul", "gelu"]);
    }

    #[test]
    fn non_elementwise_ops_and_cycles_split_groups() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[4, 4]));
        let w = g.input(f32s(&[4, 4]));
        let a = op(&mut g, "exp", &[x], Attrs::new());
        let m = op(&mut g, "matmul", &[a, w], Attrs::new());
        let r = op(&mut g, "relu", &[m], Attrs::new());
        // add reads exp both directly and through the matmul: exp may not join add's group,
        // or the group would need its own output before it starts.
        let out = op(&mut g, "add", &[r, a], Attrs::new());
        // A smaller value that is also an output cannot be recomputed inside a bigger loop.
        let row = g.input(f32s(&[4]));
        let small = op(&mut g, "neg", &[row], Attrs::new());
        let out2 = op(&mut g, "mul", &[out, small], Attrs::new());
        g.set_outputs(vec![out2, small]);
        let p = plans(&g);
        let kernels: Vec<Vec<&str>> = p.iter().map(|k| fused_names(&g, k)).collect();
        assert_eq!(
            kernels,
            [
                vec!["exp"],
                vec!["matmul"],
                vec!["neg"],
                vec!["relu", "add", "mul"]
            ]
        );
    }

    #[test]
    fn values_of_the_loop_shape_may_leave_the_group() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[4, 4]));
        let h = op(&mut g, "add", &[x, x], Attrs::new());
        let y = op(&mut g, "tanh", &[h], Attrs::new());
        g.set_outputs(vec![h, y]);
        let p = plans(&g);
        assert_eq!(p.len(), 1);
        assert_eq!(fused_names(&g, &p[0]), ["add", "tanh"]);
    }
}

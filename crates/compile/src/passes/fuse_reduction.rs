//! Reduction fusion: a row op ([`neuronlab_core::ops::registry::Rowwise`]: softmax, log_softmax,
//! layer_norm, rms_norm, and float reductions over trailing dims) takes
//! - as a prologue, the elementwise group that produces its first input (`x * scale + mask`
//!   before a softmax, a residual add before a norm), and
//! - as an epilogue, an elementwise group of its output's shape that reads its output
//!   (`* weight` and an activation after a norm, `rsqrt(var + eps)` after a reduction).
//!
//! The fused kernel then works a block of whole rows at a time: the prologue computes the
//! rows, the row op's own row function reduces or normalizes them, the epilogue finishes them,
//! with no full-size intermediate in between. Values the prologue computes that are used
//! elsewhere too (the residual stream) are still written out.

use super::{def_of, producer_node, Fusion, RowFusion};
use neuronlab_core::ops::attrs::ResolvedAttrs;
use neuronlab_core::ops::registry::MetaArgs;
use neuronlab_core::tensor::TensorMeta;

/// Gives row ops their prologue and epilogue groups.
pub(crate) fn run(f: &mut Fusion) {
    let g = f.graph;
    for (n, node) in g.nodes.iter().enumerate() {
        let def = def_of(node);
        let Some(rowwise) = def.rowwise else {
            continue;
        };
        let Ok(attrs) = ResolvedAttrs::resolve(def.attrs, &node.attrs) else {
            continue;
        };
        let metas: Vec<TensorMeta> = node.inputs.iter().map(|&v| g.meta(v).clone()).collect();
        let args = MetaArgs {
            inputs: &metas,
            attrs: &attrs,
        };
        if (rowwise.rows)(&args).is_none() {
            continue;
        }
        let produces = |gid: usize, v: &crate::graph::ValueId| {
            producer_node(g, *v).is_some_and(|p| f.group_of[p] == Some(gid))
        };
        let reads_from = |reader: usize, writer: usize| {
            f.groups[reader]
                .nodes
                .iter()
                .any(|&m| g.nodes[m].inputs.iter().any(|v| produces(writer, v)))
        };
        let x = node.inputs[0];
        let prologue = producer_node(g, x)
            .and_then(|p| f.group_of[p])
            .filter(|&gid| {
                !f.claimed[gid]
                    && f.groups[gid].shape == g.meta(x).shape
                    // The weight and bias are read whole, from outside the kernel.
                    && !node.inputs[1..].iter().any(|v| produces(gid, v))
            });
        let y = node.outputs[0];
        let epilogue = f.users.of[y.0 as usize]
            .iter()
            .filter_map(|&u| f.group_of[u])
            .find(|&gid| {
                !f.claimed[gid]
                    && Some(gid) != prologue
                    && f.groups[gid].shape == g.meta(y).shape
                    && !node.inputs.iter().any(|v| produces(gid, v))
                    // The epilogue sees the row op's output block, not the prologue's.
                    && prologue.is_none_or(|p| !reads_from(gid, p))
            });
        let candidates = [(prologue, epilogue), (prologue, None), (None, epilogue)];
        let chosen = candidates.into_iter().find(|&(pro, epi)| {
            if pro.is_none() && epi.is_none() {
                return false;
            }
            let mut nodes = vec![n];
            for gid in pro.iter().chain(&epi) {
                nodes.extend(&f.groups[*gid].nodes);
            }
            f.convex(&nodes)
        });
        if let Some((prologue, epilogue)) = chosen {
            for gid in prologue.iter().chain(&epilogue) {
                f.claimed[*gid] = true;
            }
            f.rows.push(RowFusion {
                node: n,
                prologue,
                epilogue,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Graph;
    use crate::passes::testing::{f32s, op};
    use crate::passes::{fuse_elementwise, KernelPlan};
    use neuronlab_core::ops::Attrs;

    fn fuse(g: &Graph) -> Vec<KernelPlan> {
        let mut f = Fusion::new(g);
        fuse_elementwise::run(&mut f);
        run(&mut f);
        f.into_plans()
    }

    #[test]
    fn softmax_takes_its_scale_and_mask_and_the_norm_its_epilogue() {
        let mut g = Graph::new();
        let s = g.input(f32s(&[4, 16]));
        let scale = g.input(f32s(&[]));
        let mask = g.input(f32s(&[16]));
        let a = op(&mut g, "mul", &[s, scale], Attrs::new());
        let b = op(&mut g, "add", &[a, mask], Attrs::new());
        let p = op(&mut g, "softmax", &[b], Attrs::new());
        let w = g.input(f32s(&[16]));
        let n = op(&mut g, "rms_norm", &[p], Attrs::new());
        let m = op(&mut g, "mul", &[n, w], Attrs::new());
        let out = op(&mut g, "silu", &[m], Attrs::new());
        g.set_outputs(vec![out]);
        let plans = fuse(&g);
        assert_eq!(plans.len(), 2, "{plans:?}");
        let KernelPlan::Rows {
            node: 2,
            prologue: Some(pro),
            epilogue: None,
        } = &plans[0]
        else {
            panic!("{plans:?}");
        };
        assert_eq!(pro.nodes, [0, 1]);
        let KernelPlan::Rows {
            node: 3,
            prologue: None,
            epilogue: Some(epi),
        } = &plans[1]
        else {
            panic!("{plans:?}");
        };
        assert_eq!(epi.nodes, [4, 5]);
    }

    #[test]
    fn a_residual_add_before_a_norm_is_also_written() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[4, 8]));
        let r = g.input(f32s(&[4, 8]));
        let h = op(&mut g, "add", &[x, r], Attrs::new());
        let n = op(&mut g, "layer_norm", &[h], Attrs::new());
        // A reduction over a leading dim has no row form: it stays an op.
        let s = op(&mut g, "sum", &[n], Attrs::new().with("dims", vec![0i64]));
        g.set_outputs(vec![h, s]);
        let plans = fuse(&g);
        assert!(
            matches!(&plans[0], KernelPlan::Rows { node: 1, prologue: Some(p), epilogue: None } if p.nodes == [0]),
            "{plans:?}"
        );
        assert!(matches!(plans[1], KernelPlan::Op(2)), "{plans:?}");
    }
}

//! Matmul epilogues: a float `matmul` whose result feeds only one elementwise group of the
//! result's shape (a bias add, an activation, a residual) runs that group on each band of
//! output rows right after the band's gemm, while it is in cache. The matmul's own result is
//! then never written out.

use super::{def_of, Fusion, MatmulFusion};

/// Gives matmuls their epilogue groups.
pub(crate) fn run(f: &mut Fusion) {
    let g = f.graph;
    for (n, node) in g.nodes.iter().enumerate() {
        if def_of(node).name != "matmul" {
            continue;
        }
        let y = node.outputs[0];
        let meta = g.meta(y);
        let users = &f.users.of[y.0 as usize];
        if !meta.dtype.is_float() || f.users.is_output[y.0 as usize] || users.is_empty() {
            continue;
        }
        let Some(gid) = f.group_of[users[0]] else {
            continue;
        };
        let one_group = users.iter().all(|&u| f.group_of[u] == Some(gid));
        if !one_group || f.claimed[gid] || f.groups[gid].shape != meta.shape {
            continue;
        }
        let mut nodes = f.groups[gid].nodes.clone();
        nodes.push(n);
        if f.convex(&nodes) {
            f.claimed[gid] = true;
            f.matmuls.push(MatmulFusion {
                node: n,
                epilogue: gid,
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

    #[test]
    fn bias_and_activation_join_the_matmul() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[8, 32]));
        let w = g.input(f32s(&[32, 16]));
        let b = g.input(f32s(&[16]));
        let y = op(&mut g, "matmul", &[x, w], Attrs::new());
        let z = op(&mut g, "add", &[y, b], Attrs::new());
        let a = op(
            &mut g,
            "gelu",
            &[z],
            Attrs::new().with("approximate", "tanh"),
        );
        // A matmul whose result is returned has no epilogue.
        let w2 = g.input(f32s(&[16, 16]));
        let y2 = op(&mut g, "matmul", &[a, w2], Attrs::new());
        g.set_outputs(vec![y2]);
        let mut f = Fusion::new(&g);
        fuse_elementwise::run(&mut f);
        assert_eq!(f.kernel_count(), 3);
        run(&mut f);
        assert_eq!(f.kernel_count(), 2);
        let plans = f.into_plans();
        let KernelPlan::Matmul { node, epilogue } = &plans[0] else {
            panic!("{plans:?}");
        };
        assert_eq!((*node, epilogue.nodes.as_slice()), (0, &[1, 2][..]));
        assert!(matches!(plans[1], KernelPlan::Op(3)));
    }

    #[test]
    fn a_result_used_twice_keeps_its_own_kernel() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[4, 4]));
        let y = op(&mut g, "matmul", &[x, x], Attrs::new());
        let r = op(&mut g, "relu", &[y], Attrs::new());
        let s = op(&mut g, "sum", &[y], Attrs::new());
        g.set_outputs(vec![r, s]);
        let mut f = Fusion::new(&g);
        fuse_elementwise::run(&mut f);
        run(&mut f);
        assert!(f.matmuls.is_empty());
    }
}

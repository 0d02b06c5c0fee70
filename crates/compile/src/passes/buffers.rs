//! Buffer reuse: a liveness plan that lets go of each value right after the last kernel that
//! reads it, so its bytes return to the core's HBM quota (and its host memory to the
//! allocator, which hands it to the next kernel's outputs) while the program still runs.
//!
//! The plan also models the peak bytes of intermediates, the values kernels produce, with
//! views sharing their base's storage: [`peak_unplanned`] for the graph as traced, with every
//! op's result kept to the end, and [`BufferPlan::peak_bytes`] for the planned kernels.

use crate::graph::{Graph, ValueId};

/// What the plan needs to know of a kernel.
#[derive(Clone, Debug)]
pub struct KernelIo {
    /// Values it reads.
    pub inputs: Vec<ValueId>,
    /// Values it produces.
    pub outputs: Vec<ValueId>,
    /// Its output is a view of its first input (it shares that storage).
    pub view: bool,
}

/// When to drop each value.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferPlan {
    /// The values to drop after each kernel, by kernel index.
    pub release_after: Vec<Vec<ValueId>>,
    /// The modeled peak of intermediate bytes live at once.
    pub peak_bytes: u64,
}

/// Plans when the values of `g` die, for its kernels in execution order.
pub fn plan(g: &Graph, kernels: &[KernelIo]) -> BufferPlan {
    let mut last_use: Vec<Option<usize>> = vec![None; g.values.len()];
    for (k, kernel) in kernels.iter().enumerate() {
        for v in kernel.inputs.iter().chain(&kernel.outputs) {
            last_use[v.0 as usize] = Some(k);
        }
    }
    for v in &g.outputs {
        last_use[v.0 as usize] = None;
    }
    let mut release_after = vec![Vec::new(); kernels.len()];
    for (v, last) in last_use.iter().enumerate() {
        if let Some(k) = last {
            release_after[*k].push(ValueId(v as u32));
        }
    }
    let peak_bytes = simulate(g, kernels, &release_after);
    BufferPlan {
        release_after,
        peak_bytes,
    }
}

/// The peak intermediate bytes of `g` run node by node with nothing freed before the end.
pub fn peak_unplanned(g: &Graph) -> u64 {
    let kernels: Vec<KernelIo> = g
        .nodes
        .iter()
        .map(|n| KernelIo {
            inputs: n.inputs.clone(),
            outputs: n.outputs.clone(),
            view: matches!(
                super::def_of(n).exec,
                neuronlab_core::ops::registry::Exec::View(_)
            ),
        })
        .collect();
    simulate(g, &kernels, &vec![Vec::new(); kernels.len()])
}

/// Runs the plan on paper: each kernel's outputs are allocated (views share their base's
/// storage), then the values released after it are dropped; storage is freed when its last
/// value is. Inputs and constants are not intermediates and count zero.
fn simulate(g: &Graph, kernels: &[KernelIo], release_after: &[Vec<ValueId>]) -> u64 {
    // The storage behind each value, by the value that allocated it.
    let mut root: Vec<Option<usize>> = vec![None; g.values.len()];
    let mut holders = vec![0usize; g.values.len()];
    let (mut live, mut peak) = (0u64, 0u64);
    for (kernel, release) in kernels.iter().zip(release_after) {
        for &out in &kernel.outputs {
            let base = match kernel.view {
                true => kernel.inputs.first().and_then(|v| root[v.0 as usize]),
                false => {
                    live += g.meta(out).nbytes() as u64;
                    Some(out.0 as usize)
                }
            };
            if let Some(b) = base {
                holders[b] += 1;
            }
            root[out.0 as usize] = base;
        }
        peak = peak.max(live);
        for v in release {
            if let Some(b) = root[v.0 as usize] {
                holders[b] -= 1;
                if holders[b] == 0 {
                    live -= g.values[b].nbytes() as u64;
                }
            }
        }
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testing::{f32s, op};
    use neuronlab_core::ops::Attrs;

    fn node_kernels(g: &Graph) -> Vec<KernelIo> {
        g.nodes
            .iter()
            .map(|n| KernelIo {
                inputs: n.inputs.clone(),
                outputs: n.outputs.clone(),
                view: n.name() == "transpose",
            })
            .collect()
    }

    #[test]
    fn a_chain_holds_two_buffers_at_a_time() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[256]));
        let mut v = x;
        for name in ["exp", "tanh", "neg", "abs", "sin"] {
            v = op(&mut g, name, &[v], Attrs::new());
        }
        g.set_outputs(vec![v]);
        assert_eq!(peak_unplanned(&g), 5 * 1024);
        let p = plan(&g, &node_kernels(&g));
        assert_eq!(p.peak_bytes, 2 * 1024);
        // Each value is released after its only reader; the output never is.
        assert_eq!(p.release_after[0], [x]);
        assert_eq!(p.release_after[1], [ValueId(1)]);
        assert!(p.release_after.iter().all(|r| !r.contains(&v)));
    }

    #[test]
    fn a_view_keeps_its_base_alive() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[16, 16]));
        let e = op(&mut g, "exp", &[x], Attrs::new());
        let t = op(&mut g, "transpose", &[e], Attrs::new());
        let n = op(&mut g, "neg", &[x], Attrs::new());
        let out = op(&mut g, "add", &[t, n], Attrs::new());
        g.set_outputs(vec![out]);
        let p = plan(&g, &node_kernels(&g));
        // exp's storage lives through its transposed view until add: exp, neg and add at once.
        assert_eq!(p.peak_bytes, 3 * 1024);
        assert_eq!(peak_unplanned(&g), 3 * 1024);
    }
}

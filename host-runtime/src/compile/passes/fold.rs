//! Constant folding: a node whose operands are all constants (creation ops have none) is run at
//! compile time with its real kernel, and its outputs become constants.
//!
//! Results larger than [`FOLD_LIMIT_BYTES`] stay ops: the program holds its constants for as
//! long as it is cached, and a big `zeros` is cheaper to run than to keep. A node whose kernel
//! fails (an out-of-range index, say) also stays, so the error surfaces when the program runs,
//! exactly as eager reports it. Folded constants are not charged to any core's HBM until a
//! run copies them there (see [`crate::compile::program::Program::run`]).

use std::sync::Arc;

use super::{copy_node, dce, def_of, set_mapped_outputs, with_inputs};
use crate::compile::graph::{Graph, Node, Producer, ValueId};
use crate::device::CoreId;
use crate::ops::attrs::ResolvedAttrs;
use crate::ops::registry::{Exec, KernelArgs, ViewResult};
use crate::runtime::guarded;
use crate::tensor::{Layout, Storage, Tensor, TensorMeta};
use crate::{Error, Result};

/// The largest result, in bytes, that folding turns into a constant.
pub const FOLD_LIMIT_BYTES: usize = 1 << 20;

/// `g` with its constant subexpressions evaluated, and what they used to read removed.
pub fn run(g: &Graph) -> Result<Graph> {
    let (mut out, mut map) = with_inputs(g);
    for (i, p) in g.producers.iter().enumerate() {
        if let Producer::Constant(t) = p {
            map[i] = Some(out.constant(t.clone()));
        }
    }
    for node in &g.nodes {
        let inputs: Vec<ValueId> = node
            .inputs
            .iter()
            .map(|v| map[v.0 as usize].expect("operands precede their users"))
            .collect();
        let constants: Option<Vec<Tensor>> = inputs
            .iter()
            .map(|v| match &out.producers[v.0 as usize] {
                Producer::Constant(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        let metas: Vec<TensorMeta> = node.outputs.iter().map(|&v| g.meta(v).clone()).collect();
        let small = metas.iter().all(|m| m.nbytes() <= FOLD_LIMIT_BYTES);
        let folded = match constants {
            Some(constants) if small => evaluate(node, &constants, &metas)?,
            _ => None,
        };
        let outputs = match folded {
            Some(tensors) => tensors.into_iter().map(|t| out.constant(t)).collect(),
            None => copy_node(&mut out, g, node, inputs),
        };
        for (old, new) in node.outputs.iter().zip(outputs) {
            map[old.0 as usize] = Some(new);
        }
    }
    set_mapped_outputs(&mut out, g, &map);
    // The constants and nodes that only fed folded nodes are dead now.
    Ok(dce::run(&out))
}

/// Runs `node` on constant operands: its outputs, or `None` when it should stay an op.
fn evaluate(node: &Node, inputs: &[Tensor], metas: &[TensorMeta]) -> Result<Option<Vec<Tensor>>> {
    let def = def_of(node);
    let Ok(attrs) = ResolvedAttrs::resolve(def.attrs, &node.attrs) else {
        return Ok(None);
    };
    let device = inputs.first().map_or(CoreId(0), Tensor::device);
    let constant = |buffer, shape: &[usize]| {
        Tensor::from_storage(
            Arc::new(Storage::new(buffer, None)),
            Layout::contiguous(shape),
            device,
        )
    };
    let result = match def.exec {
        Exec::Compute(kernel) => {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let args = KernelArgs {
                inputs: &refs,
                attrs: &attrs,
                outputs: metas,
            };
            guarded(def.name, || kernel(&args)).map(|r| {
                r.ok().and_then(|buffers| {
                    let fits = buffers.len() == metas.len()
                        && buffers
                            .iter()
                            .zip(metas)
                            .all(|(b, m)| b.dtype() == m.dtype && b.len() == m.numel());
                    fits.then(|| {
                        buffers
                            .into_iter()
                            .zip(metas)
                            .map(|(b, m)| constant(b, &m.shape))
                            .collect()
                    })
                })
            })
        }
        Exec::View(view) => {
            let input = &inputs[0];
            guarded(def.name, || view(input, &attrs)).map(|r| match r {
                Ok(ViewResult::View(layout)) => Some(vec![input.view(layout)]),
                Ok(ViewResult::Copy(shape)) => Some(vec![constant(input.to_buffer(), &shape)]),
                Err(_) => None,
            })
        }
    };
    match result {
        Ok(tensors) => Ok(tensors),
        // An interrupt stops the compile; a kernel bug leaves the node to fail at run time.
        Err(e @ Error::Cancelled(_)) => Err(e),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::passes::testing::{f32s, names, op};
    use crate::ops::Attrs;
    use crate::tensor::{Buffer, DType};

    fn constant(v: Vec<f32>, shape: &[usize]) -> Tensor {
        Tensor::from_storage(
            Arc::new(Storage::new(Buffer::F32(v), None)),
            Layout::contiguous(shape),
            CoreId(0),
        )
    }

    #[test]
    fn constant_subgraphs_become_constants() {
        let mut g = Graph::new();
        let x = g.input(f32s(&[2, 2]));
        let c = g.constant(constant(vec![1.0, 4.0], &[2]));
        let s = op(&mut g, "sqrt", &[c], Attrs::new());
        let t = op(&mut g, "transpose", &[x], Attrs::new());
        let ones = op(
            &mut g,
            "ones",
            &[],
            Attrs::new()
                .with("shape", vec![2i64])
                .with("dtype", DType::F32),
        );
        let scale = op(&mut g, "add", &[s, ones], Attrs::new());
        let y = op(&mut g, "mul", &[t, scale], Attrs::new());
        g.set_outputs(vec![y]);

        let f = run(&g).unwrap();
        assert_eq!(names(&f), ["transpose", "mul"]);
        let mul = &f.nodes[1];
        let Producer::Constant(folded) = &f.producers[mul.inputs[1].0 as usize] else {
            panic!("the scale was not folded: {f}");
        };
        assert_eq!(folded.to_vec::<f32>(), vec![2.0, 3.0]);
    }

    #[test]
    fn failing_and_large_nodes_stay() {
        let mut g = Graph::new();
        let big = op(
            &mut g,
            "zeros",
            &[],
            Attrs::new().with("shape", vec![1024i64, 1024]),
        );
        let idx = g.constant(Tensor::from_storage(
            Arc::new(Storage::new(Buffer::I64(vec![7]), None)),
            Layout::contiguous(&[1]),
            CoreId(0),
        ));
        let w = g.constant(constant(vec![0.0; 6], &[3, 2]));
        // Index 7 is out of range for 3 rows: the kernel fails, so the node stays.
        let e = op(&mut g, "embedding", &[idx, w], Attrs::new());
        g.set_outputs(vec![big, e]);
        assert_eq!(names(&run(&g).unwrap()), ["zeros", "embedding"]);
    }
}

//! Constant folding: a node whose operands are all constants (creation ops have none) is run at
//! compile time with its real kernel, and its outputs become constants.
//!
//! Results larger than [`FOLD_LIMIT_BYTES`] stay ops: the program holds its constants for as
//! long as it is cached, and a big `zeros` is cheaper to run than to keep. A node whose kernel
//! fails (an out-of-range index, say) also stays, so the error surfaces when the program runs,
//! exactly as eager reports it. Folded constants are not charged to any core's HBM until a
//! run copies them there (see [`crate::program::Program::run`]).

use std::borrow::Cow;

use super::{copy_node, dce, def_of, set_mapped_outputs, with_inputs};
use crate::graph::{Graph, Node, Producer, ValueId};
use neuronlab_core::device::{CoreId, OpCost};
use neuronlab_core::ops::attrs::ResolvedAttrs;
use neuronlab_core::ops::registry::{Exec, KernelArgs};
use neuronlab_core::runtime::{guarded, Compute, Placement, Work, WorkCost};
use neuronlab_core::tensor::{Tensor, TensorMeta};
use neuronlab_core::{Error, Result, Runtime};

/// The largest result, in bytes, that folding turns into a constant.
pub const FOLD_LIMIT_BYTES: usize = 1 << 20;

/// `g` with its constant subexpressions evaluated, and what they used to read removed.
pub fn run(rt: &Runtime, g: &Graph) -> Result<Graph> {
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
            Some(constants) if small => evaluate(rt, node, &constants, &metas)?,
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

/// Runs `node` on constant operands through the runtime's one dispatch path, as compile-time
/// constants (no HBM, no event): its outputs, or `None` when it should stay an op.
fn evaluate(
    rt: &Runtime,
    node: &Node,
    inputs: &[Tensor],
    metas: &[TensorMeta],
) -> Result<Option<Vec<Tensor>>> {
    let def = def_of(node);
    let Ok(attrs) = ResolvedAttrs::resolve(def.attrs, &node.attrs) else {
        return Ok(None);
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let kernel;
    let compute = match def.exec {
        Exec::Compute(f) => {
            let (refs, attrs) = (&refs, &attrs);
            kernel = move |_: &[TensorMeta], outs: &[TensorMeta]| {
                let args = KernelArgs {
                    inputs: refs,
                    attrs,
                    outputs: outs,
                };
                f(&args).map_err(Error::Invalid)
            };
            Compute::Buffers(&kernel)
        }
        Exec::View(view) => match guarded(def.name, || view(&inputs[0], &attrs)) {
            Ok(Ok(view)) => Compute::View {
                input: &inputs[0],
                view,
            },
            Ok(Err(_)) => return Ok(None),
            Err(e) => return cancelled_or_none(e),
        },
    };
    let device = inputs.first().map_or(CoreId(0), Tensor::device);
    let result = rt.dispatch(Work {
        name: Cow::Borrowed(def.name),
        operands: &|_| String::new(),
        inputs: inputs.iter().map(Tensor::meta).collect(),
        outputs: metas.to_vec(),
        placement: Placement::Constant(device),
        cost: WorkCost {
            flops: 0.0,
            bytes: 0.0,
            modeled: rt.cost_model().modeled(&OpCost::free()),
        },
        // Folded at compile time: no device clock to wait on.
        ready_us: 0.0,
        compute,
    });
    match result {
        Ok(tensors) => Ok(Some(tensors)),
        Err(e) => cancelled_or_none(e),
    }
}

/// An interrupt stops the compile; any other failure leaves the node to fail at run time,
/// exactly as eager reports it.
fn cancelled_or_none(e: Error) -> Result<Option<Vec<Tensor>>> {
    match e {
        Error::Cancelled(_) => Err(e),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testing::{f32s, names, op};
    use crate::program::tests::runtime;
    use neuronlab_core::ops::Attrs;
    use neuronlab_core::tensor::{Buffer, DType};
    use neuronlab_core::tensor::{Layout, Storage};
    use std::sync::Arc;

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

        let f = run(&runtime(), &g).unwrap();
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
        assert_eq!(names(&run(&runtime(), &g).unwrap()), ["zeros", "embedding"]);
    }
}

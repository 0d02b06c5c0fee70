//! Autograd as a host user sees it: leaves, backward, accumulation, the graph's lifetime,
//! grad mode, events tagged backward, and each refusal as a clear error. Gradients of every
//! op against JAX are in tests/python/test_grad_jax.py.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use neuronlab_core::autograd::rematerialize::Rematerialize;
use neuronlab_core::autograd::{self, backward, grad, no_grad, requires_grad};
use neuronlab_core::device::topology::Topology;
use neuronlab_core::events::{EventKind, Phase};
use neuronlab_core::ops::Attrs;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::Buffer;
use neuronlab_core::{Error, Runtime, Tensor};

fn rt() -> Runtime {
    Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.3xlarge", None).unwrap(),
        host_limit: 1 << 32,
    })
}

fn f32s(rt: &Runtime, v: &[f32], shape: &[usize]) -> Tensor {
    rt.tensor(Buffer::F32(v.to_vec()), shape).unwrap()
}

fn leaf(rt: &Runtime, v: &[f32], shape: &[usize]) -> Tensor {
    requires_grad(rt, &f32s(rt, v, shape)).unwrap()
}

fn call(rt: &Runtime, op: &str, inputs: &[&Tensor]) -> Tensor {
    rt.call1(op, inputs, &Attrs::new()).unwrap()
}

fn sum(rt: &Runtime, t: &Tensor) -> Tensor {
    call(rt, "sum", &[t])
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>()
}

fn autograd_error<T>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::Autograd(msg)) => msg,
        Err(other) => panic!("expected an autograd error, got {other}"),
        Ok(_) => panic!("expected an autograd error"),
    }
}

#[test]
fn backward_accumulates_into_leaves_with_broadcasting_reduced() {
    let rt = rt();
    let a = leaf(&rt, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = leaf(&rt, &[10.0, 20.0, 30.0], &[3]);
    // loss = sum(a * b): d/da = b broadcast, d/db = column sums of a.
    let loss = sum(&rt, &call(&rt, "mul", &[&a, &b]));
    backward(&rt, &[loss], &[None], false).unwrap();
    let ga = a.leaf().unwrap().grad().unwrap();
    let gb = b.leaf().unwrap().grad().unwrap();
    assert_eq!(ga.shape(), &[2, 3]);
    assert_eq!(values(&ga), [10.0, 20.0, 30.0, 10.0, 20.0, 30.0]);
    assert_eq!(gb.shape(), &[3]);
    assert_eq!(values(&gb), [5.0, 7.0, 9.0]);

    // A second graph adds into .grad, as torch accumulates across backward calls.
    let loss = sum(&rt, &call(&rt, "mul", &[&a, &b]));
    backward(&rt, &[loss], &[None], false).unwrap();
    assert_eq!(
        values(&b.leaf().unwrap().grad().unwrap()),
        [10.0, 14.0, 18.0]
    );
    b.leaf().unwrap().set_grad(None);
    assert!(b.leaf().unwrap().grad().is_none());
}

#[test]
fn a_tensor_used_twice_gets_both_gradients() {
    let rt = rt();
    let x = leaf(&rt, &[3.0], &[]);
    // y = x*x + x: dy/dx = 2x + 1 = 7
    let y = call(&rt, "add", &[&call(&rt, "mul", &[&x, &x]), &x]);
    backward(&rt, &[y], &[None], false).unwrap();
    assert_eq!(values(&x.leaf().unwrap().grad().unwrap()), [7.0]);
}

#[test]
fn a_second_backward_needs_retain_graph_and_then_accumulates() {
    let rt = rt();
    let x = leaf(&rt, &[1.0, 2.0], &[2]);
    let loss = sum(&rt, &call(&rt, "exp", &[&x]));
    backward(&rt, std::slice::from_ref(&loss), &[None], true).unwrap();
    backward(&rt, std::slice::from_ref(&loss), &[None], false).unwrap();
    let g = values(&x.leaf().unwrap().grad().unwrap());
    assert!((g[0] - 2.0 * 1f32.exp()).abs() < 1e-5, "{g:?}");
    let msg = autograd_error(backward(&rt, &[loss], &[None], false));
    assert!(
        msg.contains("a second time") && msg.contains("retain_graph"),
        "{msg}"
    );
    // The failed call changed nothing.
    assert!((values(&x.leaf().unwrap().grad().unwrap())[0] - g[0]).abs() == 0.0);
}

#[test]
fn refusals_are_clear_errors() {
    let rt = rt();
    let x = leaf(&rt, &[1.0, 2.0], &[2]);
    let y = call(&rt, "exp", &[&x]);
    let msg = autograd_error(backward(&rt, std::slice::from_ref(&y), &[None], false));
    assert!(msg.contains("f32[2]") && msg.contains("gradient"), "{msg}");
    let plain = f32s(&rt, &[1.0], &[]);
    let msg = autograd_error(backward(&rt, &[plain], &[None], false));
    assert!(msg.contains("does not require a gradient"), "{msg}");
    let wrong = f32s(&rt, &[1.0, 2.0, 3.0], &[3]);
    let msg = autograd_error(backward(
        &rt,
        std::slice::from_ref(&y),
        &[Some(wrong)],
        false,
    ));
    assert!(msg.contains("does not match"), "{msg}");
    let ints = rt.tensor(Buffer::I64(vec![1, 2]), &[2]).unwrap();
    let msg = autograd_error(requires_grad(&rt, &ints));
    assert!(msg.contains("only float tensors"), "{msg}");
    let msg = autograd_error(requires_grad(&rt, &y));
    assert!(msg.contains("detach"), "{msg}");
    // After all that, the graph still works.
    let ones = f32s(&rt, &[1.0, 1.0], &[2]);
    backward(&rt, &[y], &[Some(ones)], false).unwrap();
    assert!(x.leaf().unwrap().grad().is_some());
}

#[test]
fn no_grad_detach_and_integer_results_record_nothing() {
    let rt = rt();
    let x = leaf(&rt, &[1.0, -2.0, 3.0], &[3]);
    let y = no_grad(|| call(&rt, "exp", &[&x]));
    assert!(!y.requires_grad());
    assert!(autograd::is_grad_enabled());
    assert!(!call(&rt, "exp", &[&x.detach()]).requires_grad());
    let idx = rt
        .call1("argmax", &[&x], &Attrs::new().with("dim", 0i64))
        .unwrap();
    assert!(!idx.requires_grad());
    assert!(!call(&rt, "gt", &[&x, &x]).requires_grad());
    assert!(call(&rt, "relu", &[&x]).requires_grad());
}

#[test]
fn functional_grad_leaves_dot_grad_alone_and_reaches_intermediates() {
    let rt = rt();
    let x = leaf(&rt, &[1.0, 2.0, 3.0], &[3]);
    let h = call(&rt, "mul", &[&x, &x]);
    let loss = sum(&rt, &call(&rt, "exp", &[&h]));
    let grads = grad(&rt, &[loss], &[None], &[x.clone(), h.clone()], false).unwrap();
    let hv = [1.0f32, 4.0, 9.0];
    for (i, g) in values(&grads[1]).iter().enumerate() {
        assert!((g - hv[i].exp()).abs() / hv[i].exp() < 1e-6);
    }
    for (i, g) in values(&grads[0]).iter().enumerate() {
        let want = hv[i].exp() * 2.0 * (i + 1) as f32;
        assert!((g - want).abs() / want < 1e-6);
    }
    assert!(x.leaf().unwrap().grad().is_none());
    let unused = leaf(&rt, &[1.0], &[]);
    let loss = sum(&rt, &call(&rt, "exp", &[&x]));
    let msg = autograd_error(grad(&rt, &[loss], &[None], &[unused], false));
    assert!(msg.contains("not used"), "{msg}");
}

#[test]
fn backward_ops_are_tagged_backward_in_events() {
    let rt = rt();
    let x = leaf(&rt, &[1.0, 2.0], &[2]);
    let loss = sum(&rt, &call(&rt, "tanh", &[&x]));
    let before = rt.bus().events().len();
    backward(&rt, &[loss], &[None], false).unwrap();
    let phases: Vec<(String, Phase)> = rt.bus().events()[before..]
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Op(op) => Some((op.name.to_string(), op.phase)),
            _ => None,
        })
        .collect();
    assert!(phases.iter().any(|(n, _)| n == "mul"), "{phases:?}");
    assert!(
        phases.iter().all(|(_, p)| *p == Phase::Backward),
        "{phases:?}"
    );
    let forward = call(&rt, "exp", &[&x]);
    drop(forward);
    match &rt.bus().events().last().unwrap().kind {
        EventKind::Op(op) => assert_eq!(op.phase, Phase::Forward),
        EventKind::Memory(_) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn saved_activations_and_gradients_are_accounted_per_core() {
    let rt = rt();
    let core = rt.default_device();
    let x = leaf(&rt, &[0.5; 256], &[16, 16]);
    let y = call(&rt, "exp", &[&x]); // saves its 1 KiB output
    let loss = sum(&rt, &call(&rt, "mul", &[&y, &x])); // saves both inputs
    let used = rt.autograd_use(core).unwrap();
    assert_eq!(used.saved, 2048, "{used:?}");
    assert_eq!(used.saved_storages, 2, "x and y, y counted once: {used:?}");
    assert_eq!(used.grads, 0);
    backward(&rt, &[loss], &[None], false).unwrap();
    let used = rt.autograd_use(core).unwrap();
    assert_eq!(used.saved, 0, "backward frees what was saved: {used:?}");
    assert_eq!(used.saved_storages, 0);
    assert_eq!(used.saved_peak, 2048);
    assert_eq!(used.grads, 1024);
    // The graph's nodes hold the leaf, as torch's do: the gradient goes with the last of them.
    drop((x, y));
    assert_eq!(rt.autograd_use(core).unwrap().grads, 0);
}

#[test]
fn dropping_a_very_long_graph_does_not_overflow_the_stack() {
    let rt = rt();
    let x = leaf(&rt, &[1.0], &[]);
    let mut t = x.clone();
    for _ in 0..200_000 {
        t = call(&rt, "neg", &[&t]);
    }
    drop(t);
    assert_eq!(rt.autograd_use(rt.default_device()).unwrap().saved, 0);
}

#[test]
fn an_in_place_update_keeps_the_leaf_and_refuses_a_new_shape() {
    let rt = rt();
    let w = leaf(&rt, &[1.0, 2.0], &[2]);
    let loss = sum(&rt, &call(&rt, "square", &[&w]));
    backward(&rt, &[loss], &[None], false).unwrap();
    let updated = autograd::replace_data(&w, &f32s(&rt, &[0.5, 0.5], &[2])).unwrap();
    assert_eq!(updated.leaf().unwrap().version(), 1);
    assert_eq!(values(&updated.leaf().unwrap().grad().unwrap()), [2.0, 4.0]);
    let msg = autograd_error(autograd::replace_data(&w, &f32s(&rt, &[1.0; 3], &[3])));
    assert!(msg.contains("keep the tensor's shape"), "{msg}");
}

/// Makes a tensor again from its values, counting the calls: what an all-gather recipe does
/// for FSDP's reshard after forward, without the collective.
struct Remake {
    values: Vec<f32>,
    shape: Vec<usize>,
    calls: Arc<AtomicUsize>,
}

impl Rematerialize for Remake {
    fn rematerialize(&self, rt: &Runtime) -> Result<Tensor, Error> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        rt.tensor(Buffer::F32(self.values.clone()), &self.shape)
    }
}

#[test]
fn a_saved_view_of_a_storage_with_a_recipe_is_made_again_for_backward_not_kept() {
    let rt = rt();
    let core = rt.default_device();
    let xv: Vec<f32> = (0..32).map(|i| (i as f32 * 0.37).sin()).collect();
    let wv: Vec<f32> = (0..128).map(|i| i as f32 * 0.25 - 3.0).collect();
    // x [4, 8] times the first 8 rows of w [16, 8] (a view, as FSDP cuts its padding off).
    let run = |packed: bool| {
        let x = leaf(&rt, &xv, &[4, 8]);
        let whole = leaf(&rt, &wv, &[16, 8]);
        let calls = Arc::new(AtomicUsize::new(0));
        if packed {
            whole.set_rematerialize(Arc::new(Remake {
                values: wv.clone(),
                shape: vec![16, 8],
                calls: calls.clone(),
            }));
        }
        let attrs = Attrs::new()
            .with("dim", 0i64)
            .with("start", 0i64)
            .with("length", 8i64);
        let w = rt.call1("narrow", &[&whole], &attrs).unwrap();
        let loss = sum(&rt, &call(&rt, "matmul", &[&x, &w]));
        let saved = rt.autograd_use(core).unwrap().saved;
        backward(&rt, &[loss], &[None], false).unwrap();
        let grad = |t: &Tensor| values(&t.leaf().unwrap().grad().unwrap());
        (grad(&x), grad(&whole), saved, calls.load(Ordering::Relaxed))
    };
    let (gx, gw, saved, calls) = run(false);
    assert_eq!(
        (saved, calls),
        (32 * 4 + 128 * 4, 0),
        "x and the whole of w kept"
    );
    let (px, pw, packed_saved, packed_calls) = run(true);
    assert_eq!(packed_saved, 32 * 4, "only x kept: w is a recipe");
    assert_eq!(
        packed_calls, 1,
        "made again once, when backward reached the matmul"
    );
    assert_eq!((px, pw), (gx, gw), "the same gradients, bit for bit");
}

#[test]
fn gelus_backward_is_one_kernel_and_allocates_only_the_gradient() {
    for approximate in ["none", "tanh"] {
        let rt = rt();
        let core = rt.default_device();
        let values: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) / 512.0).collect();
        let x = leaf(&rt, &values, &[64, 64]);
        let mode = Attrs::new().with("approximate", approximate);
        let y = rt.call1("gelu", &[&x], &mode).unwrap();
        let seed = f32s(&rt, &[1.0; 4096], &[64, 64]);
        let before = rt.bus().events().len();
        rt.memory().reset_peak(core).unwrap();
        let held = rt.memory().stats(core).unwrap().in_use;
        backward(&rt, &[y], &[Some(seed)], false).unwrap();
        let ops: Vec<String> = rt.bus().events()[before..]
            .iter()
            .filter_map(|e| match &e.kind {
                // The leaf's gradient is stored contiguous, a step of its own.
                EventKind::Op(op) if op.name != "contiguous" => Some(op.name.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(ops, ["gelu_backward"], "{approximate}");
        // The formula as separate ops would hold several x-sized intermediates at once.
        let extra = rt.memory().stats(core).unwrap().peak - held;
        assert_eq!(extra, 4096 * 4, "{approximate}: only the gradient");
    }
}

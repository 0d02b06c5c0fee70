//! The eager runtime as a user of the host API sees it: ops, views, errors per class, memory
//! accounting, events and the Chrome trace.

use neuronlab_core::device::topology::{CoreId, Topology};
use neuronlab_core::events::{chrome_trace, EventKind, Summary};
use neuronlab_core::ops::Attrs;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::{format_tensor, Buffer, FormatOptions};
use neuronlab_core::{DType, Error, Runtime, Tensor};

fn runtime(host_limit: u64) -> Runtime {
    Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.3xlarge", None).unwrap(),
        host_limit,
    })
}

fn rt() -> Runtime {
    runtime(1 << 32)
}

fn f32s(rt: &Runtime, v: &[f32], shape: &[usize]) -> Tensor {
    rt.tensor(Buffer::F32(v.to_vec()), shape).unwrap()
}

fn attrs() -> Attrs {
    Attrs::new()
}

/// The message of an op error, checked to be an op error for `op`.
fn op_error(r: Result<Vec<Tensor>, Error>, op: &str) -> String {
    match r {
        Err(e @ (Error::Op { .. } | Error::OpOutOfMemory { .. })) => {
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("{op}(")), "{msg}");
            msg
        }
        Err(other) => panic!("expected an op error from {op}, got {other}"),
        Ok(_) => panic!("expected {op} to fail"),
    }
}

#[test]
fn views_share_storage_and_contiguous_copies() {
    let rt = rt();
    let x = f32s(&rt, &[0., 1., 2., 3., 4., 5.], &[2, 3]);
    let t = rt.call1("transpose", &[&x], &attrs()).unwrap();
    assert!(t.shares_storage(&x) && !t.is_contiguous());
    assert_eq!(t.to_vec::<f32>(), vec![0., 3., 1., 4., 2., 5.]);
    let c = rt.call1("contiguous", &[&t], &attrs()).unwrap();
    assert!(!c.shares_storage(&x) && c.is_contiguous());
    assert_eq!(c.to_vec::<f32>(), t.to_vec::<f32>());
    // reshape of a transposed tensor cannot be a view: it copies, with the right values.
    let r = rt
        .call1("reshape", &[&t], &Attrs::new().with("shape", vec![6i64]))
        .unwrap();
    assert_eq!(r.to_vec::<f32>(), vec![0., 3., 1., 4., 2., 5.]);
    let e = op_error(
        rt.call("view", &[&t], &Attrs::new().with("shape", vec![6i64])),
        "view",
    );
    assert!(e.contains("use reshape"), "{e}");
    let s = rt
        .call1(
            "slice",
            &[&x],
            &Attrs::new().with("dim", 1).with("start", 1).with("step", 2),
        )
        .unwrap();
    assert_eq!(
        (s.shape().to_vec(), s.to_vec::<f32>()),
        (vec![2, 1], vec![1., 4.])
    );
}

#[test]
fn broadcasting_and_promotion() {
    let rt = rt();
    let a = f32s(&rt, &[1., 2., 3.], &[3, 1]);
    let b = rt.tensor(Buffer::I32(vec![10, 20]), &[2]).unwrap();
    let c = rt.call1("add", &[&a, &b], &attrs()).unwrap();
    assert_eq!(c.shape(), &[3, 2]);
    assert_eq!(c.dtype(), DType::F32);
    assert_eq!(c.to_vec::<f32>(), vec![11., 21., 12., 22., 13., 23.]);
    // A zero-dim f64 does not widen a bf16 tensor (PyTorch's rule).
    let h = rt
        .call1(
            "full",
            &[],
            &Attrs::new()
                .with("shape", vec![2i64])
                .with("value", 1.5)
                .with("dtype", "bf16"),
        )
        .unwrap();
    let s = rt.tensor(Buffer::F64(vec![2.0]), &[]).unwrap();
    assert_eq!(
        rt.call1("mul", &[&h, &s], &attrs()).unwrap().dtype(),
        DType::Bf16
    );
}

/// `where` over every mix of whole and broadcast operands, each through its own loop: a
/// whole condition with a scalar on either side (a causal mask's `-inf`), a scalar
/// condition, two scalars, and a row broadcast along the run (the indexed loop).
#[test]
fn where_selects_with_scalar_and_broadcast_operands() {
    let rt = rt();
    let cond = rt
        .tensor(
            Buffer::Bool(vec![true, false, true, false, false, true]),
            &[2, 3],
        )
        .unwrap();
    let x = f32s(&rt, &[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let y = f32s(&rt, &[-1., -2., -3., -4., -5., -6.], &[2, 3]);
    let s = f32s(&rt, &[9.], &[]);
    let yes = rt.tensor(Buffer::Bool(vec![false]), &[1]).unwrap();
    let row = f32s(&rt, &[7., 8., 9.], &[3]);
    let col = f32s(&rt, &[10., 20.], &[2, 1]);
    let select = |c: &Tensor, a: &Tensor, b: &Tensor| {
        rt.call1("where", &[c, a, b], &attrs())
            .unwrap()
            .to_vec::<f32>()
    };
    assert_eq!(select(&cond, &x, &y), [1., -2., 3., -4., -5., 6.]);
    assert_eq!(select(&cond, &x, &s), [1., 9., 3., 9., 9., 6.]);
    assert_eq!(select(&cond, &s, &y), [9., -2., 9., -4., -5., 9.]);
    assert_eq!(select(&yes, &x, &y), [-1., -2., -3., -4., -5., -6.]);
    assert_eq!(select(&cond, &s, &col), [9., 10., 9., 20., 20., 9.]);
    assert_eq!(select(&cond, &row, &y), [7., -2., 9., -4., -5., 9.]);
    let two = f32s(&rt, &[2.], &[]);
    assert_eq!(select(&cond, &s, &two), [9., 2., 9., 2., 2., 9.]);
}

/// A product's output is written by the GEMM alone (never zeroed first), also when the inner
/// dim is empty.
#[test]
fn matmul_writes_every_output_element() {
    let rt = rt();
    let a = f32s(&rt, &[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = f32s(&rt, &[1., 0., 0., 1., 1., 1.], &[3, 2]);
    let c = rt.call1("matmul", &[&a, &b], &attrs()).unwrap();
    assert_eq!(c.to_vec::<f32>(), [4., 5., 10., 11.]);
    let empty_a = f32s(&rt, &[], &[2, 0]);
    let empty_b = f32s(&rt, &[], &[0, 3]);
    let zeros = rt.call1("matmul", &[&empty_a, &empty_b], &attrs()).unwrap();
    assert_eq!(zeros.shape(), &[2, 3]);
    assert_eq!(zeros.to_vec::<f32>(), [0.; 6]);
}

#[test]
fn every_error_class_names_the_op_and_operands() {
    let rt = rt();
    let a = f32s(&rt, &[0.; 12], &[3, 4]);
    let b = f32s(&rt, &[0.; 5], &[5]);
    // Non-broadcastable shapes.
    let e = op_error(rt.call("add", &[&a, &b], &attrs()), "add");
    assert!(
        e.contains("a: f32[3, 4], b: f32[5]") && e.contains("4 vs 5"),
        "{e}"
    );
    // Shape mismatch in a contraction.
    let e = op_error(rt.call("matmul", &[&a, &b], &attrs()), "matmul");
    assert!(e.contains("inner dims differ"), "{e}");
    // Bad dim.
    let e = op_error(
        rt.call("softmax", &[&a], &Attrs::new().with("dim", 2)),
        "softmax",
    );
    assert!(
        e.contains("dim 2 is out of range") && e.contains("[3, 4]"),
        "{e}"
    );
    // Bad dtype.
    let i = rt.tensor(Buffer::I64(vec![1, 2]), &[2]).unwrap();
    let e = op_error(rt.call("mean", &[&i], &attrs()), "mean");
    assert!(e.contains("floating dtype, got i64"), "{e}");
    // Out-of-range index.
    let idx = rt.tensor(Buffer::I64(vec![0, 3]), &[2]).unwrap();
    let e = op_error(rt.call("embedding", &[&idx, &a], &attrs()), "embedding");
    assert!(
        e.contains("index 3 is out of range") && e.contains("size 3"),
        "{e}"
    );
    // Wrong input count and bad attributes.
    let e = op_error(rt.call("add", &[&a], &attrs()), "add");
    assert!(e.contains("expected 2 input tensor(s), got 1"), "{e}");
    let e = op_error(
        rt.call("gelu", &[&a], &Attrs::new().with("approximate", "fast")),
        "gelu",
    );
    assert!(e.contains("expected one of none, tanh"), "{e}");
    // Unknown op.
    let e = rt.call("sofmax", &[&a], &attrs()).unwrap_err().to_string();
    assert!(e.contains("did you mean softmax"), "{e}");
    // The operands are untouched by all of this.
    assert_eq!(a.to_vec::<f32>(), vec![0.; 12]);
}

#[test]
fn too_large_allocations_fail_before_touching_memory() {
    let rt = runtime(64 << 20);
    // Bigger than the host cap but within HBM: the host cap names the core and the limit.
    let e = op_error(
        rt.call(
            "zeros",
            &[],
            &Attrs::new().with("shape", vec![1024i64, 1024, 32]),
        ),
        "zeros",
    );
    assert!(
        e.contains("host memory limit")
            && e.contains("neuron:0")
            && e.contains("NEURONLAB_HOST_MEM_LIMIT"),
        "{e}"
    );
    // Bigger than a core's HBM (24 GiB on trn2 at LNC=2): an out-of-device-memory error.
    let rt = runtime(1 << 40);
    let e = op_error(
        rt.call(
            "zeros",
            &[],
            &Attrs::new()
                .with("shape", vec![1i64 << 33])
                .with("dtype", "f32"),
        ),
        "zeros",
    );
    assert!(e.contains("out of device memory on neuron:0"), "{e}");
    // An element count that overflows is an error, not a wrap-around.
    let e = op_error(
        rt.call(
            "zeros",
            &[],
            &Attrs::new().with("shape", vec![1i64 << 40, 1 << 40]),
        ),
        "zeros",
    );
    assert!(e.contains("overflows"), "{e}");
    // The runtime still works.
    assert_eq!(
        rt.call1("ones", &[], &Attrs::new().with("shape", vec![2i64]))
            .unwrap()
            .numel(),
        2
    );
}

#[test]
fn memory_is_accounted_per_core_and_freed_on_drop() {
    let rt = rt();
    let core = CoreId(0);
    let before = rt.memory().stats(core).unwrap().in_use;
    let x = rt
        .call1("zeros", &[], &Attrs::new().with("shape", vec![256i64, 256]))
        .unwrap();
    let v = rt.call1("transpose", &[&x], &attrs()).unwrap();
    assert_eq!(
        rt.memory().stats(core).unwrap().in_use - before,
        256 * 256 * 4,
        "a view costs nothing"
    );
    drop(x);
    assert_eq!(
        rt.memory().stats(core).unwrap().in_use - before,
        256 * 256 * 4,
        "the view keeps storage alive"
    );
    drop(v);
    let s = rt.memory().stats(core).unwrap();
    assert_eq!(s.in_use, before);
    assert!(s.peak >= 256 * 256 * 4);
}

#[test]
fn ops_publish_events_with_modeled_time_and_the_trace_has_tracks() {
    let rt = rt();
    let x = rt
        .call1(
            "randn",
            &[],
            &Attrs::new()
                .with("shape", vec![256i64, 512])
                .with("seed", 1),
        )
        .unwrap();
    let w = rt
        .call1(
            "randn",
            &[],
            &Attrs::new()
                .with("shape", vec![512i64, 256])
                .with("seed", 2),
        )
        .unwrap();
    let y = rt.call1("matmul", &[&x, &w], &attrs()).unwrap();
    let _ = rt.call1("softmax", &[&y], &attrs()).unwrap();
    let events = rt.bus().events();
    let ops: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Op(op) => Some(op),
            _ => None,
        })
        .collect();
    assert_eq!(
        ops.iter().map(|o| &*o.name).collect::<Vec<_>>(),
        ["randn", "randn", "matmul", "softmax"]
    );
    let mm = ops[2];
    assert_eq!(mm.flops, 2.0 * 256.0 * 512.0 * 256.0);
    assert!(mm.modeled.total_s > 0.0 && mm.host_us > 0.0);
    assert_eq!(mm.outputs[0].to_string(), "f32[256, 256]");
    assert!(events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Memory(_))));
    let summary = Summary::from_events(&events).to_string();
    assert!(summary.contains("4 ops"), "{summary}");

    let path = std::env::temp_dir().join(format!("neuronlab-trace-{}.json", std::process::id()));
    neuronlab_core::events::save_chrome_trace(&path, &events).unwrap();
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    let te = trace["traceEvents"].as_array().unwrap();
    assert_eq!(
        te.len(),
        chrome_trace(&events)["traceEvents"]
            .as_array()
            .unwrap()
            .len()
    );
    let slices: Vec<&str> = te
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == 1)
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(slices, ["randn", "randn", "matmul", "softmax"]);
    let thread_names: Vec<&str> = te
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(thread_names.contains(&"neuron:0"), "{thread_names:?}");
}

/// The memory changes published since `since`, in stream order, as (action, bytes).
fn memory_changes(rt: &Runtime, since: u64) -> Vec<(String, u64)> {
    rt.bus()
        .since(since)
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Memory(m) => Some((format!("{:?}", m.action), m.bytes)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_op_publishes_its_alloc_events_just_before_its_own_even_when_it_fails() {
    let rt = rt();
    let x = f32s(&rt, &[1.0, 2.0, 3.0], &[3]);
    let start = rt.bus().next_seq();
    let y = rt.call1("exp", &[&x], &attrs()).unwrap();
    let events = rt.bus().since(start);
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.tag()).collect();
    assert_eq!(kinds, ["memory", "op"]);
    assert_eq!(events[1].seq, events[0].seq + 1);
    assert_eq!(
        events[0].ts_us, events[1].ts_us,
        "the alloc is stamped with its op"
    );
    drop(y);
    let changes = memory_changes(&rt, start);
    assert_eq!(changes, [("Alloc".into(), 12), ("Free".into(), 12)]);

    // pow of integers fails in its kernel, after the output was reserved: the alloc event
    // still goes out, before the free that gives the bytes back, and no op event does.
    let base = rt.tensor(Buffer::I64(vec![2, 3]), &[2]).unwrap();
    let exponent = rt.tensor(Buffer::I64(vec![1, -1]), &[2]).unwrap();
    let start = rt.bus().next_seq();
    let in_use = rt.memory().stats(CoreId(0)).unwrap().in_use;
    let message = op_error(rt.call("pow", &[&base, &exponent], &attrs()), "pow");
    assert!(message.contains("negative integer powers"), "{message}");
    let changes = memory_changes(&rt, start);
    assert_eq!(changes, [("Alloc".into(), 16), ("Free".into(), 16)]);
    assert!(rt
        .bus()
        .since(start)
        .iter()
        .all(|e| !matches!(e.kind, EventKind::Op(_))));
    assert_eq!(rt.memory().stats(CoreId(0)).unwrap().in_use, in_use);
}

#[test]
fn formatting_matches_numpy_conventions() {
    let rt = rt();
    let x = f32s(&rt, &[1.0, -2.5, 3.25, 4.0], &[2, 2]);
    assert_eq!(
        format_tensor(&x, &FormatOptions::default()),
        "tensor([[ 1.0000, -2.5000],\n        [ 3.2500,  4.0000]], dtype=f32, device=neuron:0)"
    );
    let i = rt
        .call1("arange", &[], &Attrs::new().with("end", 2000.0))
        .unwrap();
    let text = format_tensor(&i, &FormatOptions::default());
    assert_eq!(
        text,
        "tensor([   0,    1,    2, ..., 1997, 1998, 1999], dtype=i64, device=neuron:0)"
    );
    let b = rt.tensor(Buffer::Bool(vec![true, false]), &[2]).unwrap();
    assert_eq!(
        format_tensor(&b, &FormatOptions::default()),
        "tensor([ True, False], dtype=bool, device=neuron:0)"
    );
    let s = f32s(&rt, &[1e-6, 1.0], &[2]);
    assert!(format_tensor(&s, &FormatOptions::default()).contains("1.0000e-06"));
}

#[test]
fn random_tensors_do_not_depend_on_thread_count() {
    let rt = rt();
    let attrs = Attrs::new()
        .with("shape", vec![300i64, 400])
        .with("seed", 42);
    let many = rt.call1("randn", &[], &attrs).unwrap().to_vec::<f32>();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let one = pool.install(|| rt.call1("randn", &[], &attrs).unwrap().to_vec::<f32>());
    assert_eq!(many, one);
    // The first values do not change when a larger tensor is drawn with the same seed.
    let small = rt
        .call1(
            "randn",
            &[],
            &Attrs::new().with("shape", vec![10i64]).with("seed", 42),
        )
        .unwrap()
        .to_vec::<f32>();
    assert_eq!(small[..], many[..10]);
}

#[test]
fn a_pending_interrupt_cancels_a_small_kernel_on_the_calling_thread() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let rt = rt();
    let x = rt
        .call1("zeros", &[], &Attrs::new().with("shape", vec![8i64]))
        .unwrap();
    // Small enough to run sequentially: the kernel checks the flag without a Token handle.
    let flag = Arc::new(AtomicBool::new(true));
    let r = neuronlab_core::cancel::with_token(flag, || rt.call1("exp", &[&x], &attrs()));
    assert!(
        matches!(r, Err(Error::Cancelled(_))),
        "{:?}",
        r.map(|t| t.meta())
    );
    assert!(
        rt.call1("exp", &[&x], &attrs()).is_ok(),
        "the next call runs"
    );
}

#[test]
fn an_interrupt_cancels_a_long_kernel_and_the_runtime_goes_on() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let rt = rt();
    let x = rt
        .call1("zeros", &[], &Attrs::new().with("shape", vec![1i64 << 26]))
        .unwrap();
    let before = rt.memory().stats(CoreId(0)).unwrap().in_use;
    let flag = Arc::new(AtomicBool::new(false));
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            flag.store(true, Ordering::SeqCst);
        })
    };
    let r = neuronlab_core::cancel::with_token(flag, || rt.call1("exp", &[&x], &attrs()));
    setter.join().unwrap();
    match r {
        Err(Error::Cancelled(msg)) => assert!(msg.contains("exp"), "{msg}"),
        other => panic!(
            "expected the kernel to be cancelled, got {:?}",
            other.map(|t| t.meta())
        ),
    }
    assert_eq!(
        rt.memory().stats(CoreId(0)).unwrap().in_use,
        before,
        "the abandoned output is freed"
    );
    let y = rt.call1(
        "exp",
        &[&rt
            .call1("zeros", &[], &Attrs::new().with("shape", vec![3i64]))
            .unwrap()],
        &attrs(),
    );
    assert_eq!(y.unwrap().to_vec::<f32>(), vec![1.0; 3]);
}

#[test]
fn shape_arithmetic_that_would_wrap_is_an_error_naming_the_op() {
    use neuronlab_core::ops::Registry;
    use neuronlab_core::tensor::TensorMeta;
    let def = |name| Registry::global().lookup(name).unwrap().1;
    let meta = |shape: &[usize]| TensorMeta::new(shape.to_vec(), DType::F32);
    let huge = meta(&[1 << 62]);
    // cat along a 2^62 dim: the sum wrapped to a negative or zero dim before.
    let e = Runtime::infer(def("cat"), &[huge.clone(), huge.clone()], &Attrs::new()).unwrap_err();
    assert!(
        e.to_string().starts_with("cat(") && e.to_string().contains("overflows"),
        "{e}"
    );
    // flatten of [2^32, 2^32]: the product wrapped to 0 before.
    let wide = meta(&[1 << 32, 1 << 32]);
    let e = Runtime::infer(def("flatten"), &[wide], &Attrs::new()).unwrap_err();
    assert!(
        e.to_string().contains("more elements than fit in 64 bits"),
        "{e}"
    );
    // Any op whose output's byte count would overflow, however it was inferred.
    let e = Runtime::infer(
        def("zeros"),
        &[],
        &Attrs::new().with("shape", vec![1i64 << 61, 16]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("overflows"), "{e}");
}

#[test]
fn reductions_over_an_empty_dim_give_their_identity() {
    let rt = rt();
    // [2, 0]: every row is empty, and its offset points past the empty storage.
    let x = rt
        .call1("zeros", &[], &Attrs::new().with("shape", vec![2i64, 0]))
        .unwrap();
    let dims = Attrs::new().with("dims", vec![1i64]);
    let sum = rt.call1("sum", &[&x], &dims).unwrap();
    assert_eq!(sum.shape(), &[2]);
    assert_eq!(sum.to_vec::<f32>(), vec![0.0, 0.0]);
    let t = rt
        .call1(
            "transpose",
            &[&x],
            &Attrs::new().with("dim0", 0).with("dim1", 1),
        )
        .unwrap();
    let prod = rt
        .call1("prod", &[&t], &Attrs::new().with("dims", vec![0i64]))
        .unwrap();
    assert_eq!(prod.to_vec::<f32>(), vec![1.0, 1.0]);
}

//! The device clock (`device_time_ns`, fixtures/device_clock.wat): a guest's clock starts at
//! zero whatever its core ran before, and advances by exactly the modeled time its op event
//! carries: 12.898 µs for a bf16 matmul of m=1, n=k=1024 on trn2.48xlarge (docs/cost-model.md).

use std::path::PathBuf;
use std::sync::Arc;

use neuronlab_core::device::topology::{CoreId, Topology};
use neuronlab_core::events::EventKind;
use neuronlab_core::ops::Attrs;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::DType;
use neuronlab_core::Runtime;
use neuronlab_dist::World;
use neuronlab_sandbox::{ErrorCode, Guest, Limits, Sandbox, Shared};

fn guest(runtime: &Arc<Runtime>) -> Guest {
    let sandbox = Sandbox::new(None).unwrap();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/device_clock.wat");
    let module = sandbox.load_file(&fixture).unwrap();
    sandbox
        .instantiate_rank(
            &module,
            World::single(runtime.clone(), CoreId(0)).rank(0),
            Shared::default(),
            Limits::default(),
            Box::new(|_| {}),
        )
        .unwrap()
}

fn call(guest: &mut Guest, entry: &str) -> i64 {
    call_with(guest, entry, &[])
}

fn call_with(guest: &mut Guest, entry: &str, args: &[&str]) -> i64 {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = guest.call(entry, &args).unwrap();
    out.first().map_or(0, |v| v.parse().unwrap())
}

#[test]
fn the_device_clock_advances_by_the_modeled_time_of_each_op() {
    let runtime = Arc::new(Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.48xlarge", None).unwrap(),
        host_limit: 1 << 30,
    }));
    // Work on the core before the guest starts is not the guest's.
    runtime
        .call1("arange", &[], &Attrs::new().with("end", 6.0))
        .unwrap();
    let before = runtime.bus().device_us(CoreId(0));
    assert!(
        before >= 10.0,
        "the arange's launch is on the core's clock: {before}"
    );
    let mut guest = guest(&runtime);
    assert_eq!(
        call(&mut guest, "time"),
        0,
        "a new instance's clock starts at 0"
    );

    let seq = runtime.bus().next_seq();
    assert_eq!(call(&mut guest, "matmul"), 1, "the matmul has one output");
    let after_one = call(&mut guest, "time");
    let modeled: Vec<f64> = runtime
        .bus()
        .since(seq)
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Op(op) => Some(op.modeled.total_s * 1e9),
            _ => None,
        })
        .collect();
    // tensor_create publishes no op event: the matmul's is the only one.
    assert_eq!(modeled.len(), 1, "{modeled:?}");
    assert_eq!(after_one, modeled[0].round() as i64, "the event's figure");
    assert_eq!(after_one, 12_898, "docs/cost-model.md: 12.898 µs");

    assert_eq!(call(&mut guest, "matmul"), 1);
    assert_eq!(
        call(&mut guest, "time"),
        (2.0 * modeled[0]).round() as i64,
        "it adds up, rounded once: {} ns each",
        modeled[0]
    );
    let core = runtime.bus().device_us(CoreId(0));
    assert!(
        (core - before - 2.0 * modeled[0] / 1e3).abs() < 1e-6,
        "the core's clock counts the arange before the guest too: {core}"
    );
    assert_eq!(
        runtime.bus().device_us(CoreId(1)),
        0.0,
        "other cores' clocks are apart"
    );
    assert_eq!(call(&mut guest, "comm"), 0, "matmuls are compute");
}

#[test]
fn peak_flops_are_the_instances_published_figures_per_core() {
    let runtime = Arc::new(Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.48xlarge", None).unwrap(),
        host_limit: 1 << 30,
    }));
    let mut guest = guest(&runtime);
    let topology = runtime.topology();
    for dtype in [DType::Bf16, DType::F16, DType::F32] {
        let code = dtype.code().to_string();
        assert_eq!(
            call_with(&mut guest, "peak", &[&code]),
            topology.tensor_flops(dtype).round() as i64,
            "{dtype}"
        );
    }
    // Trainium2: 667 dense BF16 TFLOPS per chip of 8 NeuronCores (4 logical cores at LNC=2).
    let bf16 = call_with(&mut guest, "peak", &[&DType::Bf16.code().to_string()]);
    assert_eq!(bf16, 667_000_000_000_000 / topology.cores_per_chip() as i64);
    let invalid = call_with(&mut guest, "peak", &["99"]);
    assert_eq!(
        invalid,
        ErrorCode::Invalid as i64,
        "a code that is not a dtype"
    );
}

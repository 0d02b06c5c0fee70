//! A machine without a wasm32 toolchain (forced with `NEURONLAB_WASM_TOOLCHAIN=none`, in a
//! test binary of its own so no other test sees the variable): Rust cells fail with the exact
//! fix, while `%%wat`, `%load` and `%run` still work.

use neuronlab_core::device::topology::Topology;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_sandbox::Limits;
use neuronlab_session::{Outcome, Output, Session, SessionOptions};

#[test]
fn rust_cells_name_the_fix_and_wasm_still_runs() {
    std::env::set_var("NEURONLAB_WASM_TOOLCHAIN", "none");
    let work = std::env::temp_dir().join(format!("neuronlab-no-toolchain-{}", std::process::id()));
    let mut s = Session::new(SessionOptions {
        runtime: RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 1 << 30,
        },
        limits: Limits::default(),
        work_dir: Some(work.clone()),
        world: Default::default(),
        program_cache: None,
        logs: Default::default(),
        sdk_dir: None,
    })
    .unwrap();
    let mut outputs = Vec::new();
    assert_eq!(
        s.execute("let x = 1;", &mut |o| outputs.push(o)),
        Outcome::Error
    );
    let e = outputs
        .iter()
        .find_map(|o| match o {
            Output::Error(e) => Some(e.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(e.ename, "NoToolchain");
    assert!(
        e.evalue
            .contains("rustup target add wasm32-unknown-unknown"),
        "{}",
        e.evalue
    );
    assert!(
        e.evalue
            .contains("apt-get install rustc-web cargo-web rust-web-src lld"),
        "{}",
        e.evalue
    );
    assert!(
        e.evalue.contains("%%wat cells, %load, %run"),
        "{}",
        e.evalue
    );

    let wat = "%%wat\n(module\n  (memory (export \"memory\") 1)\n  (func (export \"neuronlab_abi_version\") (result i32) (i32.const 0x10002))\n  (func (export \"answer\") (result i32) (i32.const 42)))\n";
    let mut outputs = Vec::new();
    assert_eq!(
        s.execute(wat, &mut |o| outputs.push(o)),
        Outcome::Ok,
        "{outputs:?}"
    );
    let mut outputs = Vec::new();
    assert_eq!(
        s.execute("%run answer", &mut |o| outputs.push(o)),
        Outcome::Ok
    );
    assert!(
        outputs
            .iter()
            .any(|o| matches!(o, Output::Result(b) if b.plain() == "42")),
        "{outputs:?}"
    );
    let _ = std::fs::remove_dir_all(work);
}

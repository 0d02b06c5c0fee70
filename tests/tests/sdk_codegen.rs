//! The Rust guest SDK's op API (`guest-sdk/src/ops.rs`) is generated from the op registry.
//! This test fails when the committed file differs from what the generator writes today.

use std::process::Command;

#[test]
fn guest_sdk_ops_match_the_registry() {
    let output = Command::new(env!("CARGO_BIN_EXE_sdk_codegen"))
        .arg("--check")
        .output()
        .expect("run sdk_codegen");
    assert!(
        output.status.success(),
        "guest-sdk/src/ops.rs is out of date with the op registry.\n\
         Regenerate it with `cargo run -p neuronlab-tests --bin sdk_codegen`.\n\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

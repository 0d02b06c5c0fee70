//! `neuronlab bench --json`: the document bench/compare.py reads. Checks its shape and that
//! `--filter` selects, never the timings themselves (they are noisy).

use std::process::{Command, Output};

use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_neuronlab"))
        .arg("bench")
        .args(args)
        .env_remove("NEURONLAB_INSTANCE")
        .output()
        .expect("neuronlab runs")
}

/// The JSON document on stdout, which must be all of stdout.
fn document(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn json_has_the_selected_cases_with_their_fields() {
    let doc = document(&bench(&["--json", "--filter", "sum_lastdim"]));
    assert_eq!(doc["tool"], "neuronlab bench");
    assert!(doc["cores"].as_u64().is_some_and(|n| n >= 1), "{doc}");
    let cases = doc["cases"].as_array().expect("a cases array");
    assert_eq!(cases.len(), 1, "{doc}");
    let case = &cases[0];
    assert_eq!(case["id"], "sum_lastdim_f32_4096x1024");
    assert_eq!(case["group"], "reduction");
    assert!(case["description"]
        .as_str()
        .is_some_and(|d| d.contains("4096")));
    let median = case["median_s"].as_f64().expect("median_s is a number");
    assert!(median > 0.0 && median.is_finite(), "{case}");
    assert!(case["reps"].as_u64().is_some_and(|r| r >= 5), "{case}");
    assert_eq!(case["calls_per_rep"], 1);
    let bytes = case["bytes"]
        .as_f64()
        .expect("bytes for a memory-bound case");
    let gbps = case["gb_per_s"].as_f64().expect("gb_per_s");
    assert!(
        (gbps - bytes / median / 1e9).abs() <= 1e-9 * gbps,
        "gb_per_s is bytes / median_s: {case}"
    );
    assert!(case.get("gflop_per_s").is_none(), "{case}");
}

#[test]
fn json_dispatch_case_is_per_call() {
    let doc = document(&bench(&["--json", "--filter", "dispatch_host"]));
    let cases = doc["cases"].as_array().expect("a cases array");
    let ids: Vec<&str> = cases.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, ["dispatch_host_tiny_op"]);
    assert!(cases[0]["calls_per_rep"].as_u64().is_some_and(|n| n > 1));
    assert!(cases[0].get("gb_per_s").is_none());
}

#[test]
fn a_filter_matching_nothing_fails_and_lists_the_ids() {
    let out = bench(&["--json", "--filter", "no_such_case"]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing on stdout");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no_such_case") && err.contains("matmul_f32_1024"),
        "{err}"
    );
}

#[test]
fn the_guest_dispatch_cases_run_their_loops_in_a_guest() {
    // Each case asserts that its guest loop returned success before it reports a time.
    let doc = document(&bench(&["--json", "--filter", "dispatch_guest"]));
    let cases = doc["cases"].as_array().expect("a cases array");
    let ids: Vec<&str> = cases.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, ["dispatch_guest_tiny_op", "dispatch_guest_host_call"]);
    for case in cases {
        assert!(
            case["calls_per_rep"].as_u64().is_some_and(|n| n > 1),
            "{case}"
        );
        assert!(case["median_s"].as_f64().is_some_and(|s| s > 0.0), "{case}");
    }
}

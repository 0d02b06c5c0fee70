"""End-to-end: compiled functions, graph breaks, recompile limits and lazy mode, from a real Rust
guest (tests/guests/compile-check), with the host's compile events printed by NEURONLAB_LOGS."""

from __future__ import annotations

import re

import pytest

from test_experiments import module, run

LOGS = "compiles,recompiles,graph_breaks,cache"


@pytest.fixture(scope="module")
def out():
    result = run(module("compile-check"), env={"NEURONLAB_LOGS": LOGS})
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def stdout_value(out, label: str) -> str:
    match = re.search(rf"^{re.escape(label)}: (.*)$", out.stdout, re.M)
    assert match, f"no line '{label}: ...' in:\n{out.stdout}"
    return match.group(1)


def logs(out, prefix: str) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.startswith(prefix)]


def test_compiled_results_equal_eager_and_the_second_call_hits_the_cache(out):
    assert float(stdout_value(out, "mlp compiled vs eager max diff")) <= 1e-6
    assert float(stdout_value(out, "mlp second call vs first max diff")) == 0.0
    compiles = [line for line in logs(out, "[compiles]") if "'mlp'" in line]
    assert compiles and compiles[0].startswith("[compiles] compile of 'mlp': new function"), out.stderr
    assert "[cache] hit for 'mlp' (memory)" in out.stderr


def test_recompile_reasons_name_every_failed_guard(out):
    recompiles = [line for line in logs(out, "[recompiles]") if "'mlp'" in line]
    assert recompiles[0].startswith(
        "[recompiles] recompile 1/8 of 'mlp': input 0 'x' shape changed: expected [4, 64], got [5, 64]"
    ), recompiles
    # The bf16 call is closest to the [5, 64] version: every input's dtype changed.
    assert recompiles[1].startswith(
        "[recompiles] recompile 2/8 of 'mlp': input 0 'x' dtype changed: expected f32, got bf16; "
        "input 1 'w' dtype changed: expected f32, got bf16; input 2 'b' dtype changed: expected f32, got bf16"
    ), recompiles
    assert stdout_value(out, "mlp [5, 64] output shape") == "[5, 32]"
    assert stdout_value(out, "mlp bf16 output dtype") == "bf16"


def test_graph_breaks_are_reported_and_fullgraph_makes_them_errors(out):
    assert float(stdout_value(out, "with_break vs eager max diff")) <= 1e-6
    breaks = [line for line in logs(out, "[graph_breaks]") if "'with_break'" in line]
    assert len(breaks) == 2, breaks  # one per call: the function re-enters the guest
    assert "tensor_read (to_vec, item) reads the data of a traced tensor (produced by sum)" in breaks[0]
    # The second call finds both segments in the cache by graph hash.
    assert re.search(r"\[cache\] hit for 'graph of 'with_break' up to a break'", out.stderr), out.stderr
    error = stdout_value(out, "fullgraph error")
    assert error.startswith("ERR_OP: graph break in 'with_break_fullgraph' with fullgraph set"), error


def test_the_recompile_limit_falls_back_to_eager_or_fails(out):
    for n in range(1, 6):
        assert stdout_value(out, f"double n={n}") == str([float(2 * i) for i in range(n)])
    assert "[recompiles] 'double' reached its recompile limit (2); later calls run eagerly" in out.stderr
    assert stdout_value(out, "double_strict n=2") == "[0.0, 2.0]"
    error = stdout_value(out, "double_strict n=3 error")
    assert "'double_strict' reached its recompile limit (1) and fail_on_recompile is set" in error
    assert "input 0 shape changed: expected [2], got [3]" in error
    assert (
        "[recompiles] 'double_strict' reached its recompile limit (1); "
        "later calls fail (fail_on_recompile)" in out.stderr
    ), out.stderr


def test_lazy_mode_compiles_a_repeated_graph_once(out):
    assert stdout_value(out, "lazy round 0") == "[4]"
    assert stdout_value(out, "lazy round 1") == "[4]"
    lazy_compiles = [line for line in logs(out, "[compiles]") if "lazy graph" in line]
    assert len(lazy_compiles) == 1, lazy_compiles
    assert "[cache] hit for 'lazy graph (end of lazy region)' (memory)" in out.stderr


def test_explain_shows_versions_and_guards(out):
    text = out.stdout.split("explain:\n", 1)[1]
    assert "compiled function 'mlp': 3 version(s), 2 recompile(s) of 8 allowed" in text
    assert "input 0 'x': dtype == f32 and shape == [4, 64]" in text
    assert "guards:" in text


def test_a_compiled_step_leaves_the_gradients_eager_backward_leaves(out):
    assert float(stdout_value(out, "grad_step grad vs eager max diff")) == 0.0
    # A second call finds the gradient of the first: it accumulates, as eager backward does.
    assert float(stdout_value(out, "grad_step accumulated vs twice max diff")) == 0.0


def test_requires_grad_and_gradient_presence_are_guarded(out):
    recompiles = [line for line in logs(out, "[recompiles]") if "'grad_step'" in line]
    assert recompiles[0].startswith(
        "[recompiles] recompile 1/8 of 'grad_step': the gradient of input 1 'w' was None and is now f32[4, 3]"
    ), recompiles
    assert recompiles[1].startswith(
        "[recompiles] recompile 2/8 of 'grad_step': input 1 'w' requires_grad changed: expected true, got false"
    ), recompiles


def test_a_closure_over_parameters_and_an_optimizer_compiles_once_and_reads_them_each_call(out):
    # Forward, backward and the SGD update with momentum, compiled: bitwise the eager steps.
    assert float(stdout_value(out, "sgd_step compiled vs eager max diff")) == 0.0
    # The parameter was zeroed outside between calls: the cached program read the new value.
    assert float(stdout_value(out, "sgd_step loss after set_data")) == 0.0
    assert stdout_value(out, "sgd_step compiles") == "1 of 4 calls"


def test_a_bad_training_step_is_a_clear_error_and_loses_nothing(out):
    assert "backward through mean a second time" in stdout_value(out, "twice_backward error")
    assert "retain_graph=true" in stdout_value(out, "twice_backward error")
    assert "must keep the tensor's shape" in stdout_value(out, "reshaping error")
    reading = stdout_value(out, "reading error")
    assert reading.startswith("ERR_GRAD") and "return the value from the function" in reading
    assert "call backward (and the optimizer step) in it" in stdout_value(out, "forward_only error")
    assert stdout_value(out, "p unchanged by the bad steps") == "true"
    assert "never printed" not in out.stdout

"""End-to-end: the experiments, built with the real wasm32 toolchain, run through `neuronlab run`,
with their printed results checked against numpy.

scripts/test rebuilds every experiment into NEURONLAB_EXPERIMENTS (one `<name>.wasm` each) and
the C example into the same folder; without that variable the committed prebuilt modules are
used. NEURONLAB_BIN names the `neuronlab` binary (default: target/debug/neuronlab).
"""

from __future__ import annotations

import ast
import math
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("NEURONLAB_BIN", REPO / "target" / "debug" / "neuronlab"))
BUILT = os.environ.get("NEURONLAB_EXPERIMENTS")


def module(name: str) -> Path:
    if BUILT:
        path = Path(BUILT) / f"{name}.wasm"
    else:
        path = REPO / "notebooks" / "experiments" / name / f"{name}.wasm"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run scripts/test, or `neuronlab build` the experiment")
    return path


def run(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: run `cargo build -p neuronlab-repl` first")
    # A fresh compile cache per run, so every run compiles (and logs) from scratch.
    with tempfile.TemporaryDirectory(prefix="neuronlab-cache-") as cache:
        return subprocess.run(
            [str(BIN), "run", str(path), *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "NEURONLAB_CACHE_DIR": cache, **(env or {})},
        )


def values(stdout: str, label: str) -> np.ndarray:
    """The list printed after `label = ` on its own line."""
    for line in stdout.splitlines():
        if line.startswith(label + " = "):
            return np.array(ast.literal_eval(line[len(label) + 3 :]), dtype=np.float64)
    raise AssertionError(f"no line starts with {label!r} in:\n{stdout}")


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), back as float64."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def tensor_after(stdout: str, label: str) -> np.ndarray:
    """The numbers of the tensor printed on the lines after `label`, up to its closing `)`."""
    text = stdout.split(label, 1)[1]
    body = text[text.index("tensor(") : text.index("dtype=")]
    return np.array([float(v) for v in re.findall(r"-?\d+\.?\d*(?:e[+-]\d+)?", body)])


def test_hello_tensors_matches_numpy():
    out = run(module("hello-tensors"))
    assert out.returncode == 0, out.stderr
    a = np.arange(6, dtype=np.float32).reshape(2, 3).astype(np.float64)
    b = np.arange(3, dtype=np.float64)
    close = lambda label, want, rtol=1e-6: np.testing.assert_allclose(  # noqa: E731
        values(out.stdout, label), np.ravel(want), rtol=rtol, atol=1e-6, err_msg=label
    )
    close("a + b", a + b)
    close("a @ a.T", a @ a.T)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    close("softmax(a, -1)", e / e.sum(axis=1, keepdims=True))
    mean, var = a.mean(axis=1, keepdims=True), a.var(axis=1, keepdims=True)
    close("layer_norm(a)", (a - mean) / np.sqrt(var + 1e-5), rtol=1e-5)
    close("a.sum(1)", a.sum(axis=1))
    assert float(re.search(r"a\.sum\(\) = (\S+)", out.stdout).group(1)) == a.sum()
    close("(a - b) * sqrt(a)", (a - b) * np.sqrt(a))
    np.testing.assert_array_equal(values(out.stdout, "bf16(b / (b + 1))"), bf16_round((b / (b + 1)).astype(np.float32)))
    caught = next(line for line in out.stdout.splitlines() if line.startswith("caught: "))
    assert "ERR_OP: matmul(a: f32[2, 3], b: f32[1, 3]): inner dims differ" in caught
    assert re.search(r"\d+ ops on neuron:0", out.stderr), out.stderr


def test_c_example_matches_numpy():
    out = run(module("hello-c"))
    assert out.returncode == 0, out.stderr
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    b = np.arange(6, dtype=np.float64).reshape(3, 2)
    logits = a @ b + np.array([10.0, 20.0])
    np.testing.assert_array_equal(tensor_after(out.stdout, "a @ b ="), np.ravel(a @ b))
    np.testing.assert_array_equal(tensor_after(out.stdout, "a @ b + bias ="), np.ravel(logits))
    e = np.exp(logits - logits.max(axis=0))
    np.testing.assert_allclose(tensor_after(out.stdout, "dim=0) ="), np.ravel(e / e.sum(axis=0)), rtol=1e-4, atol=1e-12)
    assert "caught: ERR_OP: matmul(" in out.stdout


def test_generation_cache_padded_steps_match_and_keep_one_shape():
    out = run(module("generation-cache"), env={"NEURONLAB_LOGS": "compiles,recompiles,cache"})
    assert out.returncode == 0, out.stderr
    growing = re.findall(r"growing step\s+(\d+): input \[(\d+), 64\]", out.stdout)
    padded = re.findall(r"padded  step\s+(\d+): input \[(\d+), 64\]", out.stdout)
    assert [int(t) for t, _ in growing] == list(range(4, 16))
    # The growing input has t rows at step t; the padded one always has the 128-row cache.
    assert all(int(rows) == int(t) for t, rows in growing)
    assert all(int(rows) == 128 for _, rows in padded) and len(padded) == 12
    assert "distinct step shapes: growing 12, padded 1" in out.stdout
    diff = float(re.search(r"max \|growing - padded\| over 12 steps = (\S+)", out.stdout).group(1))
    assert diff < 1e-5
    # The growing step recompiles every step, each time saying which guards failed, until its
    # recompile limit; the padded step compiles once and then hits the cache.
    recompiles = re.findall(r"\[recompiles\] recompile (\d+)/8 of 'decode_step \(growing\)': (.*?): graph \w+, \d+ ops", out.stderr)
    assert [int(n) for n, _ in recompiles] == list(range(1, 9))
    assert recompiles[0][1].startswith("input 0 'tokens' shape changed: expected [4, 64], got [5, 64]")
    assert "'decode_step (growing)' reached its recompile limit (8); later calls run eagerly" in out.stderr
    assert len(re.findall(r"\[compiles\] compile of 'decode_step \(padded\)': new function", out.stderr)) == 1
    assert out.stderr.count("[cache] hit for 'decode_step (padded)'") == 11
    # The event summary follows the run.
    assert re.search(r"\d+ ops on neuron:0 · host .* · modeled", out.stderr), out.stderr
    assert "compiles 10 (recompiles 8) · cache hits 11 · recompile limit reached 1" in out.stderr


def test_a_trapping_guest_exits_non_zero_with_the_error(tmp_path):
    wat = tmp_path / "trap.wat"
    wat.write_text(
        '(module (memory (export "memory") 1)'
        ' (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10000))'
        ' (func $inner (unreachable)) (func (export "run") (call $inner)))'
    )
    out = run(wat)
    assert out.returncode != 0
    assert "GuestTrap" in out.stderr and "wasm backtrace" in out.stderr and "inner" in out.stderr


def test_numeric_arguments_reach_the_entry(tmp_path):
    wat = tmp_path / "args.wat"
    wat.write_text(
        '(module (memory (export "memory") 1)'
        ' (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10000))'
        ' (func (export "scale") (param i32 f64) (result f64)'
        "   (f64.mul (f64.convert_i32_s (local.get 0)) (local.get 1))))"
    )
    out = run(wat, "--entry", "scale", "-3", "2.5")
    assert out.returncode == 0, out.stderr
    assert "scale returned -7.5" in out.stdout
    bad = run(wat, "--entry", "scale", "x", "2.5")
    assert bad.returncode != 0 and "'x' is not a valid i32" in bad.stderr


def test_bucketing_compiles_once_per_bucket_instead_of_once_per_length():
    out = run(module("bucketing"), env={"NEURONLAB_LOGS": "compiles,recompiles"})
    assert out.returncode == 0, out.stderr
    lengths = [37, 90, 150, 128, 200, 300, 77, 260, 12, 129]
    buckets = [int(b) for b in re.findall(r"-> bucket (\d+)", out.stdout)]
    assert buckets == [(n + 127) // 128 * 128 for n in lengths]
    # Every trace is logged, fresh or found in the session cache: one per length, one per bucket.
    exact = re.findall(r"^\[(?:re)?compiles\] (?:compile|recompile \d+/64) of 'encoder \(exact lengths\)'", out.stderr, re.M)
    bucketed = re.findall(r"^\[(?:re)?compiles\] (?:compile|recompile \d+/64) of 'encoder \(buckets of 128\)'", out.stderr, re.M)
    assert len(exact) == len(set(lengths)) == 10
    assert len(bucketed) == 3
    assert (
        "recompile 2/64 of 'encoder (buckets of 128)': input 0 'x' shape changed: expected [256, 64], got [384, 64]; "
        "input 1 'mask' shape changed: expected [256, 1], got [384, 1]"
    ) in out.stderr
    assert "compiled graphs: exact lengths 10 version(s), buckets 3 version(s)" in out.stdout
    assert float(re.search(r"max \|exact - bucketed\| = (\S+)", out.stdout).group(1)) < 1e-5


def adamw_reference(params, grads_fn, steps, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    """torch.optim.AdamW's documented update, in float32: decoupled decay, then bias-corrected
    moments with eps added after the square root. Returns the loss before each step."""
    f32 = np.float32
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    losses = []
    for t in range(1, steps + 1):
        loss, grads = grads_fn(params)
        losses.append(loss)
        bias1, bias2_sqrt = 1 - betas[0] ** t, math.sqrt(1 - betas[1] ** t)
        for i, (p, g) in enumerate(zip(params, grads)):
            p = p * f32(1 - lr * weight_decay)
            m[i] = m[i] + f32(1 - betas[0]) * (g - m[i])
            v[i] = f32(betas[1]) * v[i] + f32(1 - betas[1]) * g * g
            denom = np.sqrt(v[i]) / f32(bias2_sqrt) + f32(eps)
            params[i] = p - (m[i] * f32(lr / bias1)) / denom
    return losses


def test_train_mlp_loss_follows_adamw_by_hand():
    proc = run(module("train-mlp"))
    assert proc.returncode == 0, proc.stderr
    f32 = np.float32
    x = values(proc.stdout, "x").astype(f32).reshape(16, 4)
    y = values(proc.stdout, "y").astype(f32).reshape(16, 1)
    w1 = values(proc.stdout, "w1").astype(f32).reshape(4, 8)
    w2 = values(proc.stdout, "w2").astype(f32).reshape(8, 1)

    def loss_and_grads(params):
        w1, b1, w2, b2 = params
        pre = x @ w1 + b1
        hidden = np.maximum(pre, 0)
        pred = hidden @ w2 + b2
        loss = np.mean((pred - y) ** 2)
        dpred = f32(2) * (pred - y) / f32(pred.size)
        dhidden = (dpred @ w2.T) * (pre > 0)
        return float(loss), [x.T @ dhidden, dhidden.sum(0), hidden.T @ dpred, dpred.sum(0)]

    params = [w1, np.zeros(8, f32), w2, np.zeros(1, f32)]
    want = adamw_reference(params, loss_and_grads, 20)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in lines] == [str(n) for n in range(1, 21)], proc.stdout
    got = [float(line.split()[3]) for line in lines]
    # f32 throughout; the two sides sum in different orders, so the steps drift apart slowly.
    np.testing.assert_allclose(got, want, rtol=2e-4)
    assert got[-1] < 0.5 * got[0], f"the loss did not fall: {got}"


def test_train_mlp_compiled_equals_eager_and_compiles_once():
    eager = run(module("train-mlp"), "--entry", "steps", "20")
    compiled = run(module("train-mlp"), "--entry", "compiled", "20")
    assert eager.returncode == 0, eager.stderr
    assert compiled.returncode == 0, compiled.stderr

    def losses(proc):
        return [line for line in proc.stdout.splitlines() if line.startswith("step ")]

    # The same ops in the same order: the compiled steps are bitwise the eager ones.
    assert len(losses(compiled)) == 20
    assert losses(compiled) == losses(eager)
    assert "train_step: 20 calls, 1 compile(s), 19 cache hits" in compiled.stdout
    # explain shows the three parts of the joint graph and what backward saved.
    parts = re.search(r"parts: forward (\d+) ops, backward (\d+) ops, update (\d+) ops", compiled.stdout)
    assert parts and all(int(n) > 0 for n in parts.groups()), compiled.stdout
    assert re.search(r"saved for backward \(\d+ B\): %0 f32\[16, 4\]", compiled.stdout), compiled.stdout
    # Every parameter's AdamW update (moments, sqrt, the step) is one fused op, in the graph
    # after passes too.
    after = compiled.stdout.split("graph after passes", 1)[-1]
    updates = re.findall(r"= adamw_step\(.*\(update\)", after)
    assert len(updates) == 4, compiled.stdout

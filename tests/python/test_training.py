"""Training end to end, from a real Rust guest (tests/guests/grad-check) run by `neuronlab run`:

- Optimizer steps (SGD, Adam, AdamW in several settings, f32 and bf16 parameters, 20 steps with
  the gradients the guest set and printed) against a reference written here from torch's
  documented update rules, as its single-tensor loops run them: per-parameter state made at the
  parameter's first gradient, a parameter without a gradient skipped (its step count too), the
  step count's derived numbers (bias corrections, step size) as Python floats. Each of torch's
  tensor ops (mul_, add_, lerp_, addcmul_, sqrt, div, addcdiv_) computes in f32 and rounds once
  to the parameter's dtype; for bf16 that rounding is ml_dtypes' round-to-nearest-even.
- An AdamW run under transformers' cosine schedule with warmup: the learning rate of each step,
  and the parameters that follow from it.
- A pre-norm transformer block's loss gradient, for every weight and the input, against
  `jax.grad` of the same function in jax.numpy on CPU in float64, from the guest's exact inputs.
- Optimizers over bad parameter lists: the SDK's errors, and the guest carries on after them.
"""

from __future__ import annotations

import json
import math
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from test_experiments import module, run

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

F32 = np.float32
STEPS = 20

# The settings of each run, as torch spells them; the guest prints its own and they must agree.
SGD = {"optimizer": "SGD", "lr": 0.1, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False}
ADAM = {"optimizer": "Adam", "lr": 0.05, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
CASES = {
    "sgd": SGD,
    "sgd_momentum": {**SGD, "momentum": 0.9},
    "sgd_dampening": {**SGD, "momentum": 0.9, "dampening": 0.1},
    "sgd_nesterov": {**SGD, "momentum": 0.9, "nesterov": True},
    "sgd_weight_decay": {**SGD, "momentum": 0.5, "weight_decay": 0.1},
    "adam": ADAM,
    "adam_weight_decay": {**ADAM, "weight_decay": 0.1},
    "adamw_defaults": {"optimizer": "AdamW", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
    "adamw_custom": {"optimizer": "AdamW", "lr": 0.02, "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.05},
}
SCHEDULED = {"optimizer": "AdamW", "lr": 0.05, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}

# torch's own kernels differ in the last f32 bit (its CPU kernels fuse multiply-adds, its CPU
# addcdiv multiplies before dividing and its CUDA one divides first); the reference fixes one
# order, each op correctly rounded. f32: 1e-6 relative (~8 ulps) leaves room for a kernel that
# fuses or reorders, over 20 steps. bf16: an f32 difference changes a bf16 result only next to
# a rounding tie, and the runs agree bit for bit, so they must stay exact.
OPTIMIZER_TOLERANCE = {"f32": dict(rtol=1e-6, atol=1e-9), "bf16": dict(rtol=0, atol=0)}


def rounding(dtype: str):
    """The rounding of one torch op's f32 result to the parameter's dtype."""
    if dtype == "bf16":
        return lambda x: np.asarray(x, F32).astype(ml_dtypes.bfloat16).astype(F32)
    return lambda x: np.asarray(x, F32)


def sgd_reference(config, init, steps, r):
    """torch.optim.SGD: grad += wd * p; buf = grad on the first step, then
    buf = momentum * buf + (1 - dampening) * grad; nesterov: grad + momentum * buf; p -= lr * d."""
    lr, momentum, dampening = config["lr"], config["momentum"], config["dampening"]
    wd, nesterov = config["weight_decay"], config["nesterov"]
    params = [np.array(p, F32) for p in init]
    bufs = [None] * len(params)
    history = []
    for step in steps:
        for i, g in enumerate(step["grads"]):
            if g is None:
                continue
            p, d = params[i], np.array(g, F32)
            if wd:
                d = r(d + p * F32(wd))  # grad.add(param, alpha=weight_decay)
            if momentum:
                if bufs[i] is None:
                    bufs[i] = d.copy()  # torch.clone(grad)
                else:
                    # buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                    bufs[i] = r(r(bufs[i] * F32(momentum)) + d * F32(1 - dampening))
                d = r(d + bufs[i] * F32(momentum)) if nesterov else bufs[i]
            params[i] = r(p + d * F32(-lr))  # param.add_(grad, alpha=-lr)
        history.append([p.copy() for p in params])
    return history


def adam_reference(config, init, steps, r, decoupled, lrs):
    """torch.optim.Adam / AdamW, one step count per parameter (state['step'])."""
    (b1, b2), eps, wd = config["betas"], config["eps"], config["weight_decay"]
    params = [np.array(p, F32) for p in init]
    state = [None] * len(params)
    history = []
    for step, lr in zip(steps, lrs):
        for i, g in enumerate(step["grads"]):
            if g is None:
                continue
            if state[i] is None:
                state[i] = {"step": 0, "m": np.zeros_like(params[i]), "v": np.zeros_like(params[i])}
            s, p, g = state[i], params[i], np.array(g, F32)
            s["step"] += 1
            t = s["step"]
            if decoupled:
                p = r(p * F32(1 - lr * wd))  # param.mul_(1 - lr * weight_decay)
            elif wd:
                g = r(g + p * F32(wd))  # grad.add(param, alpha=weight_decay)
            s["m"] = r(s["m"] + F32(1 - b1) * (g - s["m"]))  # exp_avg.lerp_(grad, 1 - beta1)
            # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            s["v"] = r(r(s["v"] * F32(b2)) + F32(1 - b2) * g * g)
            step_size = lr / (1 - b1**t)
            bias_correction2_sqrt = math.sqrt(1 - b2**t)
            # denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            denom = r(r(r(np.sqrt(s["v"])) / F32(bias_correction2_sqrt)) + F32(eps))
            # param.addcdiv_(exp_avg, denom, value=-step_size), dividing first as torch's CUDA kernel
            params[i] = r(p + F32(-step_size) * (s["m"] / denom))
        history.append([p.copy() for p in params])
    return history


def cosine_with_warmup(step: int, warmup: int, total: int) -> float:
    """transformers' get_cosine_schedule_with_warmup factor (num_cycles 0.5)."""
    if step < warmup:
        return step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))


def reference(run_):
    config, shapes = run_["config"], run_["shapes"]
    init = [np.array(p, F32).reshape(s) for p, s in zip(run_["init"], shapes)]
    steps = [
        {"grads": [None if g is None else np.array(g, F32).reshape(s) for g, s in zip(step["grads"], shapes)]}
        for step in run_["steps"]
    ]
    r = rounding(run_["dtype"])
    if config["optimizer"] == "SGD":
        return sgd_reference(config, init, steps, r)
    if run_["schedule"]:
        warmup, total = run_["schedule"]["warmup"], run_["schedule"]["total"]
        lrs = [config["lr"] * cosine_with_warmup(t, warmup, total) for t in range(len(steps))]
    else:
        lrs = [config["lr"]] * len(steps)
    return adam_reference(config, init, steps, r, config["optimizer"] == "AdamW", lrs)


def compare(run_):
    """Checks every step's parameters against the reference."""
    want = reference(run_)
    tol = OPTIMIZER_TOLERANCE[run_["dtype"]]
    for t, (step, expected) in enumerate(zip(run_["steps"], want), 1):
        for i, (got, ref) in enumerate(zip(step["params"], expected)):
            got = np.array(got, F32).reshape(ref.shape)
            np.testing.assert_allclose(got, ref, **tol, err_msg=f"{run_['case']} {run_['dtype']} step {t} param {i}")


def json_lines(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def optimizer_runs():
    return json_lines(run(module("grad-check"), "--entry", "optimizers"))


def test_every_optimizer_setting_ran_in_f32_and_bf16(optimizer_runs):
    assert sorted((r["case"], r["dtype"]) for r in optimizer_runs) == sorted(
        (case, dtype) for case in CASES for dtype in ("f32", "bf16")
    )
    for r in optimizer_runs:
        assert r["config"] == CASES[r["case"]], r["case"]
        assert r["shapes"] == [[], [3, 4], [5]] and len(r["steps"]) == STEPS
        # Some steps leave a parameter without a gradient: torch skips it, state and all.
        assert any(g is None for step in r["steps"] for g in step["grads"])


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_optimizer_steps_follow_torch(optimizer_runs, case, dtype):
    run_ = next(r for r in optimizer_runs if r["case"] == case and r["dtype"] == dtype)
    compare(run_)
    final = np.concatenate([np.ravel(p) for p in run_["steps"][-1]["params"]])
    initial = np.concatenate([np.ravel(p) for p in run_["init"]])
    assert not np.array_equal(final, initial), "the parameters never moved"


@pytest.fixture(scope="module")
def scheduled_runs():
    return json_lines(run(module("grad-check"), "--entry", "schedule"))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_adamw_under_a_cosine_schedule_uses_each_steps_learning_rate(scheduled_runs, dtype):
    run_ = next(r for r in scheduled_runs if r["dtype"] == dtype)
    assert run_["config"] == SCHEDULED and run_["schedule"] == {"warmup": 5, "total": STEPS}
    lrs = [step["lr"] for step in run_["steps"]]
    want = [SCHEDULED["lr"] * cosine_with_warmup(t, 5, STEPS) for t in range(STEPS)]
    # The guest's cos (Rust's libm in wasm) and Python's may differ in the last bit.
    np.testing.assert_allclose(lrs, want, rtol=1e-15, atol=1e-18)
    assert lrs[0] == 0.0 and lrs[5] == SCHEDULED["lr"]
    compare(run_)


# (rtol, atol) against the largest |gradient| of each tensor, as test_grad_jax.py judges: the
# block's backward is ~80 ops deep with sums of 8..32 terms, and the softmax and norm backward
# formulas cancel, so a gradient carries errors of several ulps of its largest element (seen:
# 4e-7 in f32, 8e-16 in f64); the bounds leave a factor of ~25 over that.
BLOCK_TOLERANCE = {"f32": (1e-5, 1e-7), "f64": (2e-14, 1e-16)}
BATCH, SEQ, D_MODEL, HEADS, HIDDEN, VOCAB = 2, 8, 16, 2, 32, 11
NAMES = ["norm1", "wq", "wk", "wv", "wo", "norm2_w", "norm2_b", "w1", "b1", "w2", "b2", "w_out", "x"]


def block_loss(norm1, wq, wk, wv, wo, norm2_w, norm2_b, w1, b1, w2, b2, w_out, x, targets):
    head_dim = D_MODEL // HEADS

    def heads(t):
        return t.reshape(BATCH, SEQ, HEADS, head_dim).transpose(0, 2, 1, 3)

    h = x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * norm1
    q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
    scores = q @ k.swapaxes(-1, -2) * (1.0 / math.sqrt(head_dim))
    scores = jnp.where(jnp.tril(jnp.ones((SEQ, SEQ), bool)), scores, -jnp.inf)
    context = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(BATCH, SEQ, D_MODEL)
    x1 = x + context @ wo
    mean = jnp.mean(x1, axis=-1, keepdims=True)
    var = jnp.mean((x1 - mean) ** 2, axis=-1, keepdims=True)
    h2 = (x1 - mean) / jnp.sqrt(var + 1e-5) * norm2_w + norm2_b
    out = x1 + jax.nn.gelu(h2 @ w1 + b1, approximate=False) @ w2 + b2
    logits = (out @ w_out).reshape(BATCH * SEQ, VOCAB)
    picked = logits[jnp.arange(BATCH * SEQ), targets]
    return jnp.mean(jax.scipy.special.logsumexp(logits, axis=1) - picked)


# Compiled once for both dtypes (the reference runs in f64 for each): JAX's op-by-op dispatch
# of the same graph takes seconds.
BLOCK_VALUE_AND_GRAD = jax.jit(jax.value_and_grad(block_loss, argnums=tuple(range(len(NAMES)))))


@pytest.mark.parametrize("bits,dtype", [(32, "f32"), (64, "f64")])
def test_transformer_block_gradients_match_jax(bits, dtype):
    (out,) = json_lines(run(module("grad-check"), "--entry", "transformer", str(bits)))
    assert out["dtype"] == dtype and list(out["tensors"]) == NAMES
    # backward's leaf gradients and the functional grad are one computation.
    assert out["backward_vs_grad"] == 0.0
    tensors = out["tensors"]
    inputs = [np.array(tensors[n]["value"], np.float64).reshape(tensors[n]["shape"]) for n in NAMES]
    targets = np.array(out["targets"])
    loss, grads = BLOCK_VALUE_AND_GRAD(*inputs, targets)
    rtol, atol = BLOCK_TOLERANCE[dtype]
    np.testing.assert_allclose(out["loss"][0], float(loss), rtol=rtol)
    for name, want in zip(NAMES, grads):
        got = np.array(tensors[name]["grad"]).reshape(want.shape)
        scale = float(np.abs(want).max())
        assert scale > 0, name
        err = float(np.abs(got - want).max())
        assert err <= atol + rtol * scale, f"{dtype} d loss / d {name}: max error {err:.3g}, max |grad| {scale:.3g}"


def test_bad_parameter_lists_are_clear_errors_and_the_guest_carries_on():
    # A guest's tensors all live on its rank's core (no op moves one to another), so an
    # optimizer over two cores cannot be built from a guest; the SDK still checks for it.
    proc = run(module("grad-check"), "--entry", "bad_inputs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert lines["SGD over no parameters"] == "ERR_INVALID: SGD got an empty parameter list"
    assert lines["AdamW over no parameters"] == "ERR_INVALID: AdamW got an empty parameter list"
    assert lines["Adam over a tensor without requires_grad"] == (
        "ERR_INVALID: Adam: parameter 1 does not require a gradient; mark it with requires_grad()"
    )
    assert lines["SGD nesterov without momentum"] == (
        "ERR_INVALID: SGD: nesterov needs a momentum > 0 and zero dampening"
    )
    assert lines["unchanged after the errors"] == "true"
    got, want = re.fullmatch(r"(\[.*\]) \(want (\[.*\])\)", lines["step after the errors"]).groups()
    assert json.loads(got) == json.loads(want)

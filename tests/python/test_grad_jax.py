"""Checks the gradient of every differentiable registry op against JAX, and against central
finite differences in f64.

How it works:
- The cases are the numpy cross-check's (tests/python/test_ops_numpy.py): the same random
  shapes, dtypes, broadcasting, attribute variants and non-contiguous views. Their float
  inputs get fresh continuous values in each op's smooth domain (no NaN, no ties on a grid),
  and each case asks the bridge for the vector-Jacobian product of its output with a random
  cotangent, with respect to every float input (the viewed tensor, made a leaf).
- The reference is `jax.vjp` of the same function (JAX_FUNCTIONS, written with jax.numpy) on
  CPU in float64, from the exact input values of the case's dtype. Our gradient, in the
  input's dtype, passes when |ours - jax| <= atol + rtol * max|jax| over the tensor
  (GRAD_TOLERANCES): backward formulas cancel (softmax, the norms), so errors are judged
  against the gradient's scale.
- For f64 cases the same gradient is also checked against a central finite difference of
  L(x) = sum(cotangent * op(x)) along a random direction, from two more forward runs.
- Every differentiable op in the registry (`opcheck list`) must have a JAX function here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import test_ops_numpy as base
from test_ops_numpy import Case, Operand, opcheck  # noqa: F401 (the fixture)

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

SEEDS = (0,)  # one stream per op: every generator already covers each float dtype
FD_STEP = 1e-6

# (rtol, atol) against the reference gradient's largest magnitude. bf16 and f16 backward
# formulas round after every op (the norms, softmaxes and losses compute in f32), so their
# bounds cover a few roundings of ~2^-8 (bf16) and ~2^-11 (f16) relative error each.
GRAD_TOLERANCES = {"f64": (1e-9, 1e-12), "f32": (2e-4, 1e-6), "bf16": (6e-2, 1e-3), "f16": (1.5e-2, 1e-4)}
FD_TOLERANCE = 1e-6  # relative to sum |grad * direction|


def _axes(at, x):
    dims = at.get("dims", [])
    return tuple(d % x.ndim for d in dims) if dims else None


def _keep(at):
    return bool(at.get("keepdim", 0))


def _norm(center, default_eps):
    def f(at, x, *affine):
        ns = at.get("normalized_shape") or [x.shape[-1]]
        axes = tuple(range(x.ndim - len(ns), x.ndim))
        mean = jnp.mean(x, axes, keepdims=True) if center else 0.0
        y = (x - mean) / jnp.sqrt(jnp.mean((x - mean) ** 2, axes, keepdims=True) + at.get("eps", default_eps))
        if affine:
            y = y * affine[0]
        if len(affine) > 1:
            y = y + affine[1]
        return y

    return f


def _cross_entropy(at, logits, target):
    rows = logits.reshape(-1, logits.shape[-1])
    t = target.reshape(-1).astype(np.int64)
    keep = t != at.get("ignore_index", -100)
    lse = jax.scipy.special.logsumexp(rows, axis=1)
    picked = rows[np.arange(len(t)), np.where(keep, t, 0)]
    loss = jnp.where(keep, lse - picked, 0.0)
    reduction = at.get("reduction", "mean")
    if reduction == "none":
        return loss.reshape(target.shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / keep.sum()


def _gelu_backward(at, grad, x):
    dtype = jnp.result_type(grad, x, jnp.float32)  # integer operands compute as floats
    grad, x = jnp.broadcast_arrays(grad.astype(dtype), x.astype(dtype))
    gelu = functools.partial(jax.nn.gelu, approximate=at.get("approximate", "none") == "tanh")
    return jax.vjp(gelu, x)[1](grad)[0]


def _slice(x, at):
    index = [slice(None)] * x.ndim
    index[at.get("dim", 0)] = slice(at.get("start", 0), at.get("end"), at.get("step", 1))
    return x[tuple(index)]


def _narrow(x, at):
    d = at["dim"]
    start = at["start"] + x.shape[d] if at["start"] < 0 else at["start"]
    return _slice(x, {"dim": d, "start": start, "end": start + at["length"]})


def _flatten(x, at):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = at.get("start_dim", 0) % x.ndim, at.get("end_dim", -1) % x.ndim
    return x.reshape(x.shape[:s] + (int(np.prod(x.shape[s : e + 1])),) + x.shape[e + 1 :])


def _expand(x, at):
    shape = at["shape"]
    lead = len(shape) - x.ndim
    return jnp.broadcast_to(x, [x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)])


def _squeeze(x, at):
    dims = at.get("dims") or range(x.ndim)
    return jnp.squeeze(x, axis=tuple(d % x.ndim for d in dims if x.shape[d] == 1))


def _unsqueeze(x, at):
    d = at["dim"]
    return jnp.expand_dims(x, d if d >= 0 else d + x.ndim + 1)


def _gather(at, x, index):
    d = at.get("dim", 0) % x.ndim
    lead = tuple(slice(0, n) if k != d else slice(None) for k, n in enumerate(index.shape))
    return jnp.take_along_axis(x[lead], index, axis=d)


def _scatter_add(at, x, index, src):
    d = at.get("dim", 0) % x.ndim
    positions = np.indices(index.shape)
    target = tuple(positions[k] if k != d else index for k in range(x.ndim))
    return x.at[target].add(src)


def _pad(at, x):
    p = at["pad"]
    widths = [(0, 0)] * x.ndim
    for k in range(len(p) // 2):
        widths[x.ndim - 1 - k] = (p[2 * k], p[2 * k + 1])
    return jnp.pad(x, widths, constant_values=at.get("value", 0.0)) if x.ndim else x


def _clamp(at, x):
    # torch's gradient passes where min <= x <= max (jnp.clip's is 1/2 at the bounds).
    lo, hi = at.get("min"), at.get("max")
    if lo is not None:
        x = jnp.where(x < lo, lo, x)
    if hi is not None:
        x = jnp.where(x > hi, hi, x)
    return x


def _pow(at, a, b):
    return jnp.power(a, b)


JAX_FUNCTIONS = {
    "reshape": lambda at, x: x.reshape(at["shape"]),
    "view": lambda at, x: x.reshape(at["shape"]),
    "flatten": lambda at, x: _flatten(x, at),
    "transpose": lambda at, x: jnp.swapaxes(x, at.get("dim0", -2), at.get("dim1", -1)),
    "permute": lambda at, x: jnp.transpose(x, at["dims"]),
    "slice": lambda at, x: _slice(x, at),
    "narrow": lambda at, x: _narrow(x, at),
    "expand": lambda at, x: _expand(x, at),
    "squeeze": lambda at, x: _squeeze(x, at),
    "unsqueeze": lambda at, x: _unsqueeze(x, at),
    "contiguous": lambda at, x: x,
    "exp": lambda at, x: jnp.exp(x),
    "log": lambda at, x: jnp.log(x),
    "sqrt": lambda at, x: jnp.sqrt(x),
    "rsqrt": lambda at, x: 1 / jnp.sqrt(x),
    "reciprocal": lambda at, x: 1 / x,
    "tanh": lambda at, x: jnp.tanh(x),
    "sigmoid": lambda at, x: jax.nn.sigmoid(x),
    "silu": lambda at, x: jax.nn.silu(x),
    "sin": lambda at, x: jnp.sin(x),
    "cos": lambda at, x: jnp.cos(x),
    "erf": lambda at, x: jax.scipy.special.erf(x),
    "gelu": lambda at, x: jax.nn.gelu(x, approximate=at.get("approximate", "none") == "tanh"),
    "gelu_backward": _gelu_backward,
    "neg": lambda at, x: -x,
    "abs": lambda at, x: jnp.abs(x),
    "relu": lambda at, x: jax.nn.relu(x),
    "square": lambda at, x: x * x,
    "add": lambda at, a, b: a + b,
    "sub": lambda at, a, b: a - b,
    "mul": lambda at, a, b: a * b,
    "div": lambda at, a, b: a / b,
    "maximum": lambda at, a, b: jnp.maximum(a, b),
    "minimum": lambda at, a, b: jnp.minimum(a, b),
    "pow": _pow,
    "clamp": _clamp,
    "where": lambda at, c, a, b: jnp.where(c, a, b),
    "sum": lambda at, x: jnp.sum(x, _axes(at, x), keepdims=_keep(at)),
    "mean": lambda at, x: jnp.mean(x, _axes(at, x), keepdims=_keep(at)),
    "prod": lambda at, x: jnp.prod(x, _axes(at, x), keepdims=_keep(at)),
    "var": lambda at, x: jnp.var(x, _axes(at, x), ddof=at.get("correction", 1), keepdims=_keep(at)),
    "std": lambda at, x: jnp.std(x, _axes(at, x), ddof=at.get("correction", 1), keepdims=_keep(at)),
    "max": lambda at, x: jnp.max(x, _axes(at, x), keepdims=_keep(at)),
    "min": lambda at, x: jnp.min(x, _axes(at, x), keepdims=_keep(at)),
    "matmul": lambda at, a, b: jnp.matmul(a, b),
    # torch takes dim -1 of a 0-d tensor as the tensor itself.
    "softmax": lambda at, x: jax.nn.softmax(x, axis=at.get("dim", -1)) if x.ndim else x / x,
    "log_softmax": lambda at, x: jax.nn.log_softmax(x, axis=at.get("dim", -1)) if x.ndim else x - x,
    "layer_norm": _norm(True, 1e-5),
    "rms_norm": _norm(False, 1e-6),
    "embedding": lambda at, idx, w: w[idx],
    "index_select": lambda at, x, idx: jnp.take(x, idx, axis=at.get("dim", 0)),
    "gather": _gather,
    "scatter_add": _scatter_add,
    "cat": lambda at, *parts: jnp.concatenate(parts, axis=at.get("dim", 0)),
    "stack": lambda at, *parts: jnp.stack(parts, axis=at.get("dim", 0)),
    "pad": _pad,
    "triu": lambda at, x: jnp.triu(x, at.get("diagonal", 0)),
    "tril": lambda at, x: jnp.tril(x, at.get("diagonal", 0)),
    "cast": lambda at, x: x,
    "cross_entropy": _cross_entropy,
}

# Where each op's float inputs are drawn: inside its smooth domain, away from its poles.
DOMAINS = {
    "log": [(0.3, 4.0)],
    "sqrt": [(0.3, 4.0)],
    "rsqrt": [(0.3, 4.0)],
    "reciprocal": [(0.5, 3.0)],
    "div": [(-2.0, 2.0), (0.5, 2.0)],
    "pow": [(0.5, 2.0), (-2.0, 2.0)],
    "prod": [(0.6, 1.4)],
    "exp": [(-3.0, 3.0)],
}
DEFAULT_DOMAIN = (-2.0, 2.0)


def registry() -> list[dict]:
    proc = subprocess.run([str(base.opcheck_path()), "list"], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def float_inputs(case: Case) -> list[int]:
    return [i for i, o in enumerate(case.inputs) if o.dtype in base.FLOATS]


def redraw(rng, case: Case) -> Case:
    """The case with its float inputs redrawn from the op's domain (same shapes and views)."""
    inputs = []
    for i, o in enumerate(case.inputs):
        if o.dtype in base.FLOATS:
            domains = DOMAINS.get(case.op, [DEFAULT_DOMAIN])
            lo, hi = domains[min(i, len(domains) - 1)]
            values = base.round_to(rng.uniform(lo, hi, size=o.base.shape), o.dtype)
            o = Operand(values, o.dtype, list(o.views))
        inputs.append(o)
    return Case(case.op, inputs, dict(case.attrs))


def jax_value(o: Operand):
    v = o.value()
    if o.dtype in base.FLOATS:
        return jnp.asarray(v, jnp.float64)
    if o.dtype == "bool":
        return jnp.asarray(v, bool)
    return jnp.asarray(v, jnp.int64)


@dataclasses.dataclass
class GradCase:
    case: Case
    wrt: list[int]
    cotangent: np.ndarray
    want: list[np.ndarray]  # JAX's gradient per input in wrt
    cotangent_dtype: str
    fd: dict | None = None  # for f64: the direction and the two perturbed forward cases


def output_dtype(case: Case, result: dict) -> str:
    return result["outputs"][0]["dtype"]


def build(probe_results: dict, probes: list[Case]) -> list[GradCase]:
    grads = []
    for case in probes:
        r = probe_results[case.id]
        if not r["ok"] or output_dtype(case, r) not in base.FLOATS:
            continue
        wrt = float_inputs(case)
        rng = np.random.default_rng(zlib.crc32(case.id.encode()))
        out_shape = r["outputs"][0]["shape"]
        out_dtype = output_dtype(case, r)
        cot = base.round_to(rng.normal(size=out_shape), out_dtype)
        fn = JAX_FUNCTIONS[case.op]
        args = [jax_value(o) for o in case.inputs]

        def f(*diff, args=args, wrt=wrt, fn=fn, at=case.attrs):
            full = list(args)
            for i, d in zip(wrt, diff):
                full[i] = d
            return fn(at, *full)

        out, vjp = jax.vjp(f, *[args[i] for i in wrt])
        if not np.all(np.isfinite(np.asarray(out))):
            continue
        want = [np.asarray(g) for g in vjp(jnp.asarray(cot, jnp.float64))]
        if not all(np.all(np.isfinite(w)) for w in want):
            continue
        grads.append(GradCase(case, wrt, cot, want, out_dtype))
    return grads


def with_fd_cases(g: GradCase) -> list[Case]:
    """For an f64 case: the forward runs at x +- h v along a random direction v. Only where the
    output is f64 too: rounding a narrower output hides a step of h."""
    if any(g.case.inputs[i].dtype != "f64" for i in g.wrt) or g.cotangent_dtype != "f64":
        return []
    rng = np.random.default_rng(zlib.crc32(("fd" + g.case.id).encode()))
    direction = [rng.normal(size=g.case.inputs[i].shape) for i in g.wrt]
    runs = []
    for sign in (1, -1):
        inputs = list(g.case.inputs)
        for i, v in zip(g.wrt, direction):
            inputs[i] = Operand(g.case.inputs[i].value() + sign * FD_STEP * v, "f64")
        runs.append(Case(g.case.op, inputs, g.case.attrs, id=f"{g.case.id}.fd{'+' if sign > 0 else '-'}"))
    g.fd = {"direction": direction, "cases": runs}
    return runs


@dataclasses.dataclass
class Run:
    by_op: dict[str, list[GradCase]]
    results: dict[str, dict]


@pytest.fixture(scope="session")
def run(opcheck, tmp_path_factory) -> Run:  # noqa: F811 (the fixture from test_ops_numpy)
    ops = [o["name"] for o in registry() if o["differentiable"]]
    probes: list[Case] = []
    for op in ops:
        check = base.CHECKS[op]
        n = 0
        for seed in SEEDS:
            rng = np.random.default_rng([seed, zlib.crc32(("grad" + op).encode())])
            for inputs, attrs in check.generate(rng, False):
                case = redraw(rng, Case(op, inputs, attrs))
                if not float_inputs(case):
                    continue
                case.id = f"{op}.{n}"
                n += 1
                probes.append(case)
    # One forward run tells which cases have float outputs, and their shapes.
    probe_results = base.run_batch(opcheck, tmp_path_factory.mktemp("grad-probe"), probes)
    grads = build(probe_results, probes)
    everything = []
    for g in grads:
        g.case.grad = {"wrt": g.wrt, "cotangent": (g.cotangent, output_dtype(g.case, probe_results[g.case.id]))}
        everything.append(g.case)
        everything += with_fd_cases(g)
    results = base.run_batch(opcheck, tmp_path_factory.mktemp("grad"), everything)
    by_op: dict[str, list[GradCase]] = {op: [] for op in ops}
    for g in grads:
        by_op[g.case.op].append(g)
    return Run(by_op, results)


def test_every_differentiable_op_has_a_jax_function():
    ops = registry()
    missing = sorted(o["name"] for o in ops if o["differentiable"] and o["name"] not in JAX_FUNCTIONS)
    assert not missing, f"differentiable ops without a JAX function: {missing}"
    stale = sorted(set(JAX_FUNCTIONS) - {o["name"] for o in ops if o["differentiable"]})
    assert not stale, f"JAX functions for ops that are not differentiable: {stale}"


def grad_mismatch(g: GradCase, result: dict) -> str | None:
    if not result["ok"]:
        return f"failed: {result['error']}"
    for k, (i, got, want) in enumerate(zip(g.wrt, result["grad_values"], g.want)):
        dtype = g.case.inputs[i].dtype
        meta = result["grads"][k]
        if meta["dtype"] != dtype or list(meta["shape"]) != list(want.shape):
            return f"grad of input {i} is {meta['dtype']}{meta['shape']}, expected {dtype}{list(want.shape)}"
        rtol, atol = GRAD_TOLERANCES[dtype]
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        bad = ~(np.abs(got - want) <= atol + rtol * scale)
        if np.any(bad):
            at = tuple(int(v) for v in np.argwhere(bad)[0])
            return (
                f"grad of input {i}: {int(bad.sum())} of {bad.size} elements differ from jax.vjp "
                f"(scale {scale:.3g}); first at {list(at)}: got {got[at]!r}, jax {want[at]!r}"
            )
    return None


def fd_mismatch(g: GradCase, result: dict, results: dict) -> str | None:
    plus, minus = (results[c.id] for c in g.fd["cases"])
    if not (plus["ok"] and minus["ok"]):
        return f"a perturbed forward run failed: {plus.get('error') or minus.get('error')}"
    loss = [float(np.sum(g.cotangent * r["values"][0])) for r in (plus, minus)]
    fd = (loss[0] - loss[1]) / (2 * FD_STEP)
    terms = [got * v for got, v in zip(result["grad_values"], g.fd["direction"])]
    analytic = float(sum(np.sum(t) for t in terms))
    scale = float(sum(np.sum(np.abs(t)) for t in terms)) + 1e-12
    if abs(fd - analytic) > FD_TOLERANCE * scale:
        return f"finite difference {fd!r} but the gradient gives {analytic!r} (scale {scale:.3g})"
    return None


DIFFERENTIABLE = sorted(JAX_FUNCTIONS)


@pytest.mark.parametrize("op", DIFFERENTIABLE)
def test_grad_matches_jax_and_finite_differences(run: Run, op: str):
    cases = run.by_op.get(op, [])
    assert cases, f"{op}: no case with a float output and float inputs"
    failures = []
    dtypes = set()
    for g in cases:
        result = run.results[g.case.id]
        problem = grad_mismatch(g, result)
        if problem is None and g.fd is not None:
            problem = fd_mismatch(g, result, run.results)
        if problem:
            failures.append(f"{g.case.describe()}: {problem}")
        dtypes.update(g.case.inputs[i].dtype for i in g.wrt)
    assert not failures, f"{len(failures)} of {len(cases)} cases fail:\n" + "\n".join(failures[:8])
    fd_checked = sum(g.fd is not None for g in cases)
    assert fd_checked, f"{op}: no f64 case, so no finite-difference check (dtypes seen: {sorted(dtypes)})"

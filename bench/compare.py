#!/usr/bin/env python3
"""neuronlab's kernels next to numpy and JAX on the same shapes, measured in one run.

For each case and each round, `neuronlab bench --json --filter <case>` runs in a subprocess,
then numpy, then JAX (XLA on CPU) run the same computation in this process, so all three see
the same machine state; each side warms up once, repeats for about BUDGET_S seconds and takes
its median, and the table shows the median over the rounds. ratio = numpy / neuronlab and
jax ratio = JAX / neuronlab (above 1: neuronlab is faster), each taken in each round from that
round's pair of times, the row showing the median of those ratios (so a slow phase of the
machine, which slows both sides of a pair, moves it less than it moves either time), except
where the row says otherwise:
  - bf16 matmul (numpy has no bf16): ratio is our f32 time / our bf16 time, the issue's
    ">= 0.8 of our own f32 speed"; the jax ratio is JAX's bf16 matmul against ours;
  - chain8 eager / compiled: our eager time / our compiled time, with a bound under the
    table: what the ratio could reach if the compiled chain paid nothing for memory, from the
    same chain on 256K f32 whose operands stay in cache, and a floor: the chain written by
    hand over the same element functions, with no executor;
  - the dispatch and cache-hit rows are judged by their time per call (targets in µs), and
    their ratios are of the medians;
  - mlp_train_step rows are judged by their jax ratio, and the memory row by a ratio of our
    own bytes (below).
numpy's side: `a @ b` with its default BLAS; the gelu tanh formula, softmax (max-subtracted),
layer_norm and rms_norm over the last dim and the 8-op chain written as numpy expressions;
the f32 -> bf16 cast with ml_dtypes (f32 -> f16 when ml_dtypes is missing, said in the output).
JAX's side, with x64 off (f32, as ours) and every timed call waiting for its result
(block_until_ready): the same expressions, written once over the array module, under
`jax.jit` compiled before timing, except beside our eager rows: the chain op by op without
jit, and `jnp.add` of two 0-d arrays per call beside the dispatch rows. The cache-hit row
calls a jitted 10-op chain on one element (JAX's own cache hit). The MLP training step
(f32[4096, 1024] -> 4096, gelu tanh -> 1024, mean squared error) is `jax.jit` of
`value_and_grad` of the loss plus torch's AdamW formula, the one our side writes as registry
ops, in one function whose parameters and moments are donated, so XLA updates them in place
as ours replaces them. "backward memory / saved" is our side's: the most bytes backward
allocated beyond what was held when it began (its temporaries and the gradients it made),
over the bytes autograd saved for it (counted by storage, so x and the weights the matmuls
keep are in it), from the case's last step.
JAX's times on some rows have been bimodal on this VM (its fused softmax and layer_norm took
about 0.7 ms in some runs and about 4.5 ms in others): the jax range column shows its fastest
and slowest round, a row whose range is wider than FAST_MODE is listed under the table with
its fast-mode ratio (over the rounds within FAST_MODE of JAX's fastest), and targets against
JAX are judged on that fast mode. JAX is optional: without it the numpy columns still run.
A case the binary does not have (a newer row, an older build) shows as not available.

A benchmark, not a test:  cargo build --release -p neuronlab-repl
                          pip install -r bench/requirements.txt
                          python3 bench/compare.py [--binary PATH] [--rounds 5] [--filter S]
Progress goes to stderr, the machine and the table to stdout. Run it on an idle machine: other
work slows multi-threaded code most (a BLAS call waits until its second thread is scheduled),
and the output prints the load average before and after.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]

try:
    import numpy as np
except ImportError:
    sys.exit("compare.py needs numpy: pip install -r tests/python/requirements.txt "
             "(or pip install -r bench/requirements.txt)")

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

# JAX on the CPU only, whatever else this machine has: the peer is XLA's CPU code.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
try:
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", False)
except ImportError:
    jax = jnp = None

# As `neuronlab bench`: one warm-up, then as many runs as fill BUDGET_S by the warm-up's time,
# within [MIN_REPS, MAX_REPS]; the median. Dispatch cases time DISPATCH_CALLS calls per run,
# JAX's JAX_DISPATCH_CALLS (each call is some ten times numpy's, and the runs fill the budget).
BUDGET_S = 0.6
MIN_REPS = 5
MAX_REPS = 5_000
DISPATCH_CALLS = 20_000
JAX_DISPATCH_CALLS = 2_000
# A JAX row whose slowest round is more than this times its fastest is bimodal here: its
# fast-mode ratio is over the rounds within this of the fastest.
FAST_MODE = 1.5

ELEMENTWISE_LEN = 4 << 20
# The chain on 256K f32 (operands in L2): 16 of it is the 4M chain without memory traffic.
CHAIN8_IN_CACHE = "chain8_f32_256k_compiled"
CHAIN8_IN_CACHE_SCALE = 16
CHAIN8_BY_HAND = "chain8_f32_4m_by_hand"
ROWS, COLS = 4096, 1024
# The MLP training step: batch, model width, hidden width (repl/src/bench/train.rs), and
# torch's AdamW defaults: lr, betas, eps, weight decay.
MLP_BATCH, MLP_D_MODEL, MLP_D_HIDDEN = 4096, 1024, 4096
ADAMW = (1e-3, (0.9, 0.999), 1e-8, 0.01)
# The bench's JSON figures of a training step's backward memory.
SAVED, BACKWARD_EXTRA, GRADS = "saved_peak_bytes", "backward_extra_bytes", "grad_bytes"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def measure(f: Callable[[], object], calls: int = 1) -> float:
    """Median seconds of one call of `f`, timed as neuronlab bench times its cases."""
    t = time.perf_counter()
    f()
    warm_up = max(time.perf_counter() - t, 1e-9)
    reps = min(max(int(BUDGET_S / warm_up), MIN_REPS), MAX_REPS)
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) / calls


def randn(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


# The computations, written once over the array module `xp` (numpy or jax.numpy).

def matmul(xp, a, b):
    return a @ b


def exp(xp, x):
    return xp.exp(x)


def add(xp, x, w):
    return x + w


def sum_lastdim(xp, x):
    return x.sum(axis=-1)


def gelu_tanh(xp, x):
    c = np.float32(np.sqrt(2.0 / np.pi))
    return np.float32(0.5) * x * (np.float32(1.0) + xp.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def softmax(xp, x):
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(xp, x, w, b, eps=np.float32(1e-5)):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / xp.sqrt(var + eps) * w + b


def rms_norm(xp, x, w, eps=np.float32(1e-6)):
    return x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def chain8(xp, x, y):
    # The bench's chain, op for op: x*0.5 + y -> gelu(tanh) -> -x -> exp -> *y -> tanh -> +x.
    t = x * np.float32(0.5)
    t = t + y
    t = gelu_tanh(xp, t)
    t = t - x
    t = xp.exp(t)
    t = t * y
    t = xp.tanh(t)
    return t + x


def cast_to(dtype):
    def cast(xp, x):
        return x.astype(dtype if xp is np else jnp.bfloat16)
    return cast


# The inputs of each computation, drawn afresh in each round (numpy arrays).

def vector(n: int = ELEMENTWISE_LEN):
    return lambda: [randn(n, 1)]


def two_vectors():
    return lambda: [randn(ELEMENTWISE_LEN, 1), randn(ELEMENTWISE_LEN, 2)]


def rows_and(extra: int):
    """[ROWS, COLS] with `extra` [COLS] vectors."""
    return lambda: [randn((ROWS, COLS), 1)] + [randn(COLS, 2 + i) for i in range(extra)]


def operands(a_shape, b_shape):
    return lambda: [randn(a_shape, 1), randn(b_shape, 2)]


# Each peer's side of a case: a setup that draws the inputs and returns the timed thunk.
Setup = Callable[[], Callable[[], object]]


def on_numpy(fn, inputs) -> Setup:
    def setup():
        arrays = inputs()
        return lambda: fn(np, *arrays)
    return setup


@functools.cache
def jitted(fn):
    return jax.jit(functools.partial(fn, jnp))


def on_jax(fn, inputs, dtype=None) -> Setup:
    """`fn` under jax.jit, compiled before the thunk is timed; inputs in `dtype` if given."""
    def setup():
        f = jitted(fn)
        args = [jnp.asarray(a, dtype=dtype) for a in inputs()]
        f(*args).block_until_ready()
        return lambda: f(*args).block_until_ready()
    return setup


def on_jax_eager(fn, inputs) -> Setup:
    """`fn` op by op, as JAX runs it outside jit."""
    def setup():
        args = [jnp.asarray(a) for a in inputs()]
        return lambda: fn(jnp, *args).block_until_ready()
    return setup


def np_tiny_add():
    one = np.ones((), dtype=np.float32)
    add = np.add

    def loop():
        for _ in range(DISPATCH_CALLS):
            add(one, one)
    return loop


def jax_tiny_add():
    one = jnp.ones((), dtype=jnp.float32)
    add = jnp.add

    def loop():
        for _ in range(JAX_DISPATCH_CALLS):
            add(one, one).block_until_ready()
    return loop


@functools.cache
def jax_ten_ops():
    """The bench's cache-hit graph: 10 unary ops, each on the previous result, jitted."""
    ops = (jnp.exp, jnp.tanh, jax.nn.sigmoid, jnp.negative, jnp.abs, jnp.sqrt, jax.nn.relu,
           jnp.sin, jnp.cos, jax.nn.silu)

    def ten_ops(x):
        for op in ops:
            x = op(x)
        return x
    return jax.jit(ten_ops)


def jax_cache_hit():
    f = jax_ten_ops()
    x = jnp.asarray(randn(1, 5))
    f(x).block_until_ready()

    def loop():
        for _ in range(JAX_DISPATCH_CALLS):
            f(x).block_until_ready()
    return loop


@functools.cache
def jax_mlp_step():
    """One jitted training step: value_and_grad of the MLP's loss, then AdamW as torch's
    (decoupled decay, bias-corrected moments, eps after the square root), as train.rs."""
    lr, (b1, b2), eps, wd = ADAMW

    def loss(params, x, y):
        w1, c1, w2, c2 = params
        pred = gelu_tanh(jnp, x @ w1 + c1) @ w2 + c2
        return jnp.mean(jnp.square(pred - y))

    def step(params, m, v, t, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        bias1, bias2_sqrt = 1 - b1 ** t, jnp.sqrt(1 - b2 ** t)
        new_p, new_m, new_v = [], [], []
        for p, g, mi, vi in zip(params, grads, m, v):
            p = p * (1 - lr * wd)
            mi = mi + (1 - b1) * (g - mi)
            vi = b2 * vi + (1 - b2) * g * g
            new_p.append(p - (lr / bias1) * mi / (jnp.sqrt(vi) / bias2_sqrt + eps))
            new_m.append(mi)
            new_v.append(vi)
        return value, new_p, new_m, new_v
    return jax.jit(step, donate_argnums=(0, 1, 2))


def jax_mlp_train():
    f = jax_mlp_step()
    x, y = (jnp.asarray(randn((MLP_BATCH, MLP_D_MODEL), s)) for s in (1, 2))
    shapes = [(MLP_D_MODEL, MLP_D_HIDDEN), (MLP_D_HIDDEN,), (MLP_D_HIDDEN, MLP_D_MODEL),
              (MLP_D_MODEL,)]
    # Weights scaled by 1/sqrt(fan_in), biases at 0, as train.rs.
    params = [jnp.asarray(randn(s, 3 + i) / np.float32(np.sqrt(s[0]))) if len(s) == 2
              else jnp.zeros(s, jnp.float32) for i, s in enumerate(shapes)]
    state = [params, [jnp.zeros_like(p) for p in params], [jnp.zeros_like(p) for p in params]]
    steps = 0

    def run():
        nonlocal state, steps
        steps += 1
        _, *state = jax.block_until_ready(f(*state, jnp.float32(steps), x, y))
    run()  # compiles
    return run


def cast_target():
    if ml_dtypes is not None:
        return ml_dtypes.bfloat16, "x.astype(ml_dtypes.bfloat16)"
    return np.float16, "x.astype(np.float16) (ml_dtypes missing: pip install ml_dtypes)"


@dataclass
class Row:
    """One table row: a neuronlab case and how it is judged."""
    case: str
    # Each peer's side, or None.
    numpy: Setup | None = None
    jax: Setup | None = None
    numpy_calls: int = 1
    jax_calls: int = 1
    # "numpy": ratio = numpy / ours; "jax": jax ratio = JAX / ours (on its fast mode);
    # "f32": ratio = our f32 sibling / ours; "eager": ratio = our eager sibling / ours;
    # "latency": judged by its own time; "memory": backward's bytes over the saved bytes;
    # "none": shown, not compared.
    judge: str = "numpy"
    sibling: str | None = None
    # (comparison, bound) on the judged figure (the ratio, or the seconds for "latency");
    # None: no target.
    target: tuple[str, float] | None = None
    label: str | None = None


def rows_table(cast_dtype) -> list[Row]:
    table = []
    for dt in ("f32", "bf16"):
        shapes = [(f"matmul_{dt}_{n}", (n, n), (n, n)) for n in (256, 1024, 2048)]
        shapes += [
            (f"matmul_{dt}_512x768x3072", (512, 768), (768, 3072)),
            (f"matmul_{dt}_512x3072x768", (512, 3072), (3072, 768)),
            (f"bmm_{dt}_16x128x64x128", (16, 128, 64), (16, 64, 128)),
        ]
        for case, a, b in shapes:
            ins = operands(a, b)
            if dt == "f32":
                big = case in ("matmul_f32_1024", "matmul_f32_2048")
                table.append(Row(case, on_numpy(matmul, ins), on_jax(matmul, ins),
                                 target=(">=", 0.8) if big else None))
            else:
                table.append(Row(case, jax=on_jax(matmul, ins, "bfloat16"), judge="f32",
                                 sibling=case.replace("bf16", "f32"), target=(">=", 0.8)))

    def both(case, fn, inputs, **kw):
        return Row(case, on_numpy(fn, inputs), on_jax(fn, inputs), **kw)
    cast = cast_to(cast_dtype)
    table += [
        both("add_bcast_f32_4096x1024", add, rows_and(1), target=(">=", 1.0)),
        both("exp_f32_4m", exp, vector(), target=(">=", 1.0)),
        both("gelu_tanh_f32_4m", gelu_tanh, vector(), target=(">=", 1.0)),
        both("cast_f32_bf16_4m", cast, vector(), target=(">=", 1.0)),
        both("sum_lastdim_f32_4096x1024", sum_lastdim, rows_and(0)),
        both("softmax_f32_4096x1024", softmax, rows_and(0), target=(">=", 1.5)),
        both("layer_norm_f32_4096x1024", layer_norm, rows_and(2), target=(">=", 1.5)),
        both("rms_norm_f32_4096x1024", rms_norm, rows_and(1), target=(">=", 1.5)),
        Row("chain8_f32_4m_eager", on_numpy(chain8, two_vectors()),
            on_jax_eager(chain8, two_vectors())),
        both("chain8_f32_4m_compiled", chain8, two_vectors(), target=(">=", 2.0)),
        Row("chain8_f32_4m_compiled", judge="eager", sibling="chain8_f32_4m_eager",
            target=(">=", 3.0), label="chain8 eager / compiled"),
        Row(CHAIN8_IN_CACHE, judge="none", label="chain8 compiled, 256K in cache"),
        Row(CHAIN8_BY_HAND, judge="none", label="chain8 by hand, no executor"),
        Row("mlp_train_step_eager", jax=jax_mlp_train, judge="jax", target=(">=", 0.5)),
        Row("mlp_train_step_compiled", jax=jax_mlp_train, judge="jax", target=(">=", 1.0)),
        Row("mlp_train_step_eager", judge="memory", target=("<=", 1.2),
            label="mlp backward memory / saved"),
        Row("dispatch_guest_tiny_op", np_tiny_add, jax_tiny_add, DISPATCH_CALLS,
            JAX_DISPATCH_CALLS, judge="latency", target=("<=", 1e-6)),
        Row("dispatch_host_tiny_op", np_tiny_add, jax_tiny_add, DISPATCH_CALLS,
            JAX_DISPATCH_CALLS, judge="latency"),
        Row("dispatch_guest_host_call", judge="latency"),
        # The bound for a cache hit: 2 µs plus 100 ns per graph node.
        Row("cache_hit_10op", jax=jax_cache_hit, jax_calls=JAX_DISPATCH_CALLS,
            judge="latency", target=("<=", 2e-6 + 10 * 100e-9)),
    ]
    return table


def neuronlab_case(binary: Path, case: str) -> dict | None:
    """Runs `neuronlab bench --json --filter case` and returns that case's entry, or None
    when this build has no case with that id."""
    out = subprocess.run([str(binary), "bench", "--json", "--filter", case], cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode != 0:
        if "no case matches" in out.stderr:
            return None
        sys.exit(f"neuronlab bench --filter {case} failed:\n{out.stderr}")
    doc = json.loads(out.stdout)
    for entry in doc["cases"]:
        if entry["id"] == case:
            return entry
    return None


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, scale in (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3)):
        if s / scale < 999.5:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"


def spread(*sides: list[float]) -> str:
    """How far apart the rounds' medians are: the largest max / min of any side."""
    ratios = [max(v) / min(v) for v in sides if len(v) > 1]
    return f"{max(ratios):.2f}" if ratios else "-"


def work_of(entry: dict) -> tuple[str, float] | None:
    """A case's work per call, from its JSON entry: ("GFLOP/s", flop) or ("GB/s", bytes)."""
    if "flop" in entry:
        return "GFLOP/s", entry["flop"]
    if "bytes" in entry:
        return "GB/s", entry["bytes"]
    return None


def rate(work: tuple[str, float] | None, seconds: float) -> str:
    """Throughput of one call taking `seconds`, in the unit of its kind of work."""
    if work is None:
        return ""
    unit, amount = work
    return f"{amount / seconds / 1e9:.{1 if unit == 'GFLOP/s' else 2}f} {unit}"


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        if pools:
            return "; ".join(
                f"{p.get('internal_api')} {p.get('version')} ({p.get('architecture')} kernels, "
                f"{p.get('num_threads')} threads, {p.get('threading_layer')})" for p in pools)
    except ImportError:
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return (f"{blas.get('name')} {blas.get('version')} (numpy's build config; "
                "pip install threadpoolctl for the runtime kernels and threads)")
    except (TypeError, KeyError):
        return "unknown (pip install threadpoolctl to see it)"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16"]
                return " ".join(f for f in wanted if f in flags) or "none of avx2/avx512"
    except OSError:
        pass
    return "unknown"


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def copy_bandwidth() -> float:
    """numpy's one-thread copy of 64 MiB: bytes read plus written per second."""
    src = np.ones(16 << 20, dtype=np.float32)
    dst = np.empty_like(src)
    return 2 * src.nbytes / measure(lambda: np.copyto(dst, src))


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def default_binary() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR")
    return (Path(target) if target else REPO / "target") / "release" / "neuronlab"


def jax_info() -> str:
    if jax is None:
        return "not installed (pip install -r bench/requirements.txt): the jax columns are empty"
    import jaxlib
    return (f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, backend "
            f"{jax.default_backend()}, x64 {'on' if jax.config.jax_enable_x64 else 'off'}")


def time_range(v: list[float]) -> str:
    """The fastest and the slowest of the rounds' medians."""
    return f"{fmt_time(min(v))}..{fmt_time(max(v))}" if v else "-"


def fast_rounds(v: list[float]) -> list[int]:
    """The rounds within FAST_MODE of the fastest."""
    return [i for i, s in enumerate(v) if s <= FAST_MODE * min(v)]


def mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, default=default_binary(),
                        help="the neuronlab binary (default: $CARGO_TARGET_DIR or target, "
                             "then release/neuronlab)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of (neuronlab, numpy, JAX) per case; the table shows "
                             "medians")
    parser.add_argument("--filter", default=None,
                        help="only rows whose case id contains this")
    args = parser.parse_args()
    if not args.binary.is_file():
        sys.exit(f"no binary at {args.binary}: cargo build --release -p neuronlab-repl "
                 "(or pass --binary PATH)")
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")
    if jax is None:
        log("JAX is not installed (pip install -r bench/requirements.txt): measuring "
            "neuronlab and numpy only")

    cast_dtype, cast_how = cast_target()
    every_row = rows_table(cast_dtype)
    if jax is None:
        for r in every_row:
            r.jax = None
    chosen = [args.filter is None or args.filter in r.case for r in every_row]
    if not any(chosen):
        sys.exit(f"no case matches --filter {args.filter!r}")
    # The siblings the ratios need are measured and shown too.
    siblings = {r.sibling for r, c in zip(every_row, chosen) if c and r.sibling is not None}
    table = [r for r, c in zip(every_row, chosen)
             if c or (r.case in siblings and r.judge in ("numpy", "latency"))]
    cases = list(dict.fromkeys(r.case for r in table))
    numpy_of = {r.case: r for r in reversed(table) if r.numpy is not None}
    jax_of = {r.case: r for r in reversed(table) if r.jax is not None}
    ours: dict[str, list[float]] = {c: [] for c in cases}
    theirs: dict[str, list[float]] = {c: [] for c in cases}
    jaxs: dict[str, list[float]] = {c: [] for c in cases}
    # Each case's JSON entry from the last round (its work per call, its figures).
    entries: dict[str, dict] = {}
    missing: set[str] = set()

    version = subprocess.run([str(args.binary), "--version"], capture_output=True,
                             text=True).stdout.strip()
    peers = "neuronlab, numpy and JAX" if jax is not None else "neuronlab and numpy"
    log(f"{len(cases)} cases x {args.rounds} rounds, alternating {peers}")
    load_before = os.getloadavg()[0]
    copy_gbps = copy_bandwidth() / 1e9
    for rnd in range(1, args.rounds + 1):
        for case in cases:
            if case in missing:
                continue
            entry = neuronlab_case(args.binary, case)
            if entry is None:
                missing.add(case)
                log(f"[round {rnd}/{args.rounds}] {case}: not available in this build")
                continue
            entries[case] = entry
            ours[case].append(entry["median_s"])
            msg = f"[round {rnd}/{args.rounds}] {case}: neuronlab {fmt_time(entry['median_s'])}"
            for peer, side, times in (("numpy", numpy_of, theirs), ("jax", jax_of, jaxs)):
                if case in side:
                    row = side[case]
                    setup = row.numpy if peer == "numpy" else row.jax
                    calls = row.numpy_calls if peer == "numpy" else row.jax_calls
                    thunk = setup()
                    times[case].append(measure(thunk, calls))
                    del thunk
                    msg += f", {peer} {fmt_time(times[case][-1])}"
            log(msg)

    load_after = os.getloadavg()[0]
    med = {c: statistics.median(v) for c, v in ours.items() if v}
    np_med = {c: statistics.median(v) for c, v in theirs.items() if v}
    jax_med = {c: statistics.median(v) for c, v in jaxs.items() if v}

    def paired(num: list[float], den: list[float], rounds: list[int] | None = None) -> float:
        """The median over rounds (all, or those given) of num / den, each round's pair
        measured back to back."""
        pairs = list(zip(num, den))
        return statistics.median(n / d for n, d in
                                 (pairs if rounds is None else [pairs[i] for i in rounds]))

    print("neuronlab vs numpy and JAX (bench/compare.py)")
    print(f"  commit: {git_commit()}; {version}")
    print(f"  CPU: {cpu_model()}, {os.cpu_count()} logical cores "
          f"({usable_cores()} usable); flags: {cpu_flags()}")
    print(f"  numpy {np.__version__}, BLAS: {blas_info()}; python {platform.python_version()}")
    print(f"  JAX: {jax_info()}")
    print(f"  load average (1 min) before and after the run: {load_before:.2f}, {load_after:.2f} "
          "(other work on the machine shows here)")
    if max(load_before, load_after) > os.cpu_count():
        print("  WARNING: the machine was busy during the run; multi-threaded code (numpy's BLAS, "
              "XLA, our matmul) suffers most. Re-run on an idle machine.")
    print(f"  memory copy, numpy one thread, 64 MiB: {copy_gbps:.1f} GB/s (read + write)")
    print(f"  numpy side of the cast: {cast_how}; of the dispatch rows: np.add on two 0-d f32 "
          "arrays, per call; JAX's: jnp.add on two 0-d arrays, block_until_ready, per call")
    print(f"  {args.rounds} rounds; each figure is the median over rounds of each round's "
          f"median (one warm-up, then runs filling ~{BUDGET_S} s, {MIN_REPS}..{MAX_REPS} runs)")
    print("  ratio: numpy / neuronlab, jax ratio: JAX / neuronlab (> 1: neuronlab faster); bf16 "
          "rows' ratio: our f32 / our bf16; eager / compiled row: our eager / our compiled; "
          "each the median over rounds of the round's own ratio (dispatch rows: of the "
          "medians); target: on the ratio, or with (JAX) on the jax ratio's fast mode")
    print("  spread: the largest max / min of the rounds' medians, of neuronlab or numpy; far "
          "above 1 means something else on the machine got in the way of that row; jax range: "
          "JAX's fastest and slowest round")
    header = ("case", "neuronlab", "numpy", "ratio", "jax", "jax ratio", "target", "met?",
              "spread", "jax range", "neuronlab rate")
    widths = (31, 10, 10, 7, 10, 9, 17, 4, 7, 21, 15)
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line.rstrip())
    print("-" * len(line.rstrip()))
    bimodal = []
    for r in table:
        if r.case in missing or (r.sibling in missing):
            print(f"{(r.label or r.case).ljust(widths[0])}  not available in this build")
            continue
        ours_s = med[r.case]
        their_s = np_med.get(r.case) if r.judge in ("numpy", "latency") else None
        jax_s = jax_med.get(r.case) if r.jax is not None else None
        jax_ratio = fast_ratio = None
        if jax_s is not None:
            times = jaxs[r.case]
            if r.judge == "latency":
                jax_ratio = fast_ratio = jax_s / ours_s
            else:
                jax_ratio = paired(times, ours[r.case])
                fast_ratio = paired(times, ours[r.case], fast_rounds(times))
            if max(times) > FAST_MODE * min(times):
                bimodal.append((r.case, times, fast_ratio, len(fast_rounds(times))))
        memory = None
        if r.judge == "numpy" and their_s:
            ratio = paired(theirs[r.case], ours[r.case])
        elif r.judge in ("f32", "eager"):
            ratio = paired(ours[r.sibling], ours[r.case])
        elif r.judge == "latency" and their_s:
            ratio = their_s / ours_s
        elif r.judge == "memory":
            figures = entries[r.case]
            memory = ratio = figures[BACKWARD_EXTRA] / figures[SAVED]
        else:
            ratio = None
        if r.target is None:
            target, met = "-", ""
        else:
            op, bound = r.target
            judged = {"latency": ours_s, "jax": fast_ratio}.get(r.judge, ratio)
            if judged is None:
                met = ""
            else:
                met = "yes" if (judged <= bound if op == "<=" else judged >= bound) else "no"
            if r.judge == "latency":
                target = f"{op} {fmt_time(bound)}"
            elif r.judge == "f32":
                target = f"{op} {bound:.1f} (vs f32)"
            elif r.judge == "eager":
                target = f"{op} {bound:.1f}x"
            elif r.judge == "jax":
                target = f"{op} {bound:.1f} (JAX)"
            else:
                target = f"{op} {bound:.1f}"
        timed = r.judge not in ("eager", "memory")
        cells = (
            r.label or r.case,
            fmt_time(ours_s) if timed else "-",
            fmt_time(their_s) if their_s is not None else "-",
            f"{ratio:.2f}" if ratio is not None else "-",
            fmt_time(jax_s) if jax_s is not None else "-",
            f"{jax_ratio:.2f}" if jax_ratio is not None else "-",
            target,
            met,
            spread(ours[r.case], theirs[r.case] if their_s is not None else [],
                   ours[r.sibling] if r.sibling is not None else []) if memory is None else "-",
            time_range(jaxs[r.case]) if jax_s is not None else "-",
            rate(work_of(entries[r.case]), ours_s) if timed else "",
        )
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
    for case, times, fast, n in bimodal:
        print(f"  bimodal JAX: {case}: rounds from {fmt_time(min(times))} to "
              f"{fmt_time(max(times))} ({', '.join(fmt_time(t) for t in times)}); on its fast "
              f"mode ({n} of {len(times)} rounds within {FAST_MODE}x of the fastest) the jax "
              f"ratio is {fast:.2f}")
    if "mlp_train_step_eager" in entries and SAVED in entries["mlp_train_step_eager"]:
        figures = entries["mlp_train_step_eager"]
        print(f"  mlp backward memory: autograd saved {mib(figures[SAVED])} for backward (by "
              f"storage: x and the weights the matmuls keep count); backward allocated at most "
              f"{mib(figures[BACKWARD_EXTRA])} beyond what was held when it began, "
              f"{mib(figures[GRADS])} of it the parameters' gradients")
    chain = ("chain8_f32_4m_eager", "chain8_f32_4m_compiled", CHAIN8_IN_CACHE)
    if all(c in med for c in chain):
        eager_s, compiled_s, cached_s = (med[c] for c in chain)
        floor_s = CHAIN8_IN_CACHE_SCALE * cached_s
        print(f"  chain8 bound: {CHAIN8_IN_CACHE_SCALE} x the compiled chain on 256K f32 in cache "
              f"takes {fmt_time(floor_s)}, the 4M chain's cost without memory traffic; the 4M "
              f"compiled chain takes {compiled_s / floor_s:.2f} x that, so with these kernels "
              f"eager / compiled could reach at most {eager_s / floor_s:.2f}")
    if all(c in med for c in (*chain[:2], CHAIN8_BY_HAND)):
        eager_s, compiled_s, by_hand_s = (med[c] for c in (*chain[:2], CHAIN8_BY_HAND))
        print(f"  chain8 floor: the same 8 steps written by hand over the runtime's element "
              f"functions (all steps per L1 tile, no executor) take {fmt_time(by_hand_s)} at 4M; "
              f"the compiled chain takes {compiled_s / by_hand_s:.2f} x that, and eager / by hand "
              f"is {eager_s / by_hand_s:.2f}, the most eager / compiled could reach with this "
              f"math and memory traffic")
    dispatch = ("dispatch_guest_tiny_op", "dispatch_host_tiny_op", "dispatch_guest_host_call")
    if all(c in med for c in dispatch):
        guest_s, host_s, crossing_s = (med[c] for c in dispatch)
        print(f"  dispatch: from a guest, add + drop takes {fmt_time(guest_s)}: the host API's "
              f"{fmt_time(host_s)}, two crossings into the host at {fmt_time(crossing_s)} each, "
              f"and {fmt_time(guest_s - host_s - 2 * crossing_s)} of handle-table and ABI work")

if __name__ == "__main__":
    main()

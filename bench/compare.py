#!/usr/bin/env python3
"""neuronlab's kernels next to numpy on the same shapes, measured in one run.

For each case and each round, `neuronlab bench --json --filter <case>` runs in a subprocess,
then numpy runs the same computation in this process, so both see the same machine state;
each side warms up once, repeats for about BUDGET_S seconds and takes its median, and the
table shows the median over the rounds. ratio = numpy / neuronlab (above 1: neuronlab is
faster), taken in each round from that round's pair of times, the row showing the median of
those ratios (so a slow phase of the machine, which slows both sides of a pair, moves it
less than it moves either time), except where the row says otherwise:
  - bf16 matmul (numpy has no bf16): our f32 time / our bf16 time, the issue's ">= 0.8 of our
    own f32 speed";
  - chain8 eager / compiled: our eager time / our compiled time, with a bound under the
    table: what the ratio could reach if the compiled chain paid nothing for memory, from the
    same chain on 256K f32 whose operands stay in cache, and a floor: the chain written by
    hand over the same element functions, with no executor;
  - the dispatch and cache-hit rows are judged by their time per call (targets in µs).
numpy's side: `a @ b` with its default BLAS; the gelu tanh formula, softmax (max-subtracted),
layer_norm and rms_norm over the last dim and the 8-op chain written as numpy expressions;
the f32 -> bf16 cast with ml_dtypes (f32 -> f16 when ml_dtypes is missing, said in the output).

A benchmark, not a test:  cargo build --release -p neuronlab-repl
                          pip install -r bench/requirements.txt
                          python3 bench/compare.py [--binary PATH] [--rounds 5] [--filter S]
Progress goes to stderr, the machine and the table to stdout. Run it on an idle machine: other
work slows multi-threaded code most (a BLAS call waits until its second thread is scheduled),
and the output prints the load average before and after.
"""

from __future__ import annotations

import argparse
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

# As `neuronlab bench`: one warm-up, then as many runs as fill BUDGET_S by the warm-up's time,
# within [MIN_REPS, MAX_REPS]; the median. Dispatch cases time DISPATCH_CALLS calls per run.
BUDGET_S = 0.6
MIN_REPS = 5
MAX_REPS = 5_000
DISPATCH_CALLS = 20_000

ELEMENTWISE_LEN = 4 << 20
# The chain on 256K f32 (operands in L2): 16 of it is the 4M chain without memory traffic.
CHAIN8_IN_CACHE = "chain8_f32_256k_compiled"
CHAIN8_IN_CACHE_SCALE = 16
CHAIN8_BY_HAND = "chain8_f32_4m_by_hand"
ROWS, COLS = 4096, 1024


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


# numpy's side of each case: a function that draws the inputs and returns the timed thunk.

def np_matmul(a_shape, b_shape):
    def setup():
        a, b = randn(a_shape, 1), randn(b_shape, 2)
        return lambda: a @ b
    return setup


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.float32(np.sqrt(2.0 / np.pi))
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x, w, b, eps=np.float32(1e-5)):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps=np.float32(1e-6)):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def chain8(x, y):
    # The bench's chain, op for op: x*0.5 + y -> gelu(tanh) -> -x -> exp -> *y -> tanh -> +x.
    t = x * np.float32(0.5)
    t = t + y
    t = gelu_tanh(t)
    t = t - x
    t = np.exp(t)
    t = t * y
    t = np.tanh(t)
    return t + x


def unary(fn):
    def setup():
        x = randn(ELEMENTWISE_LEN, 1)
        return lambda: fn(x)
    return setup


def rows(fn, extra: int):
    """`fn(x, w[, b])` on [ROWS, COLS] with `extra` [COLS] vectors."""
    def setup():
        x = randn((ROWS, COLS), 1)
        vecs = [randn(COLS, 2 + i) for i in range(extra)]
        return lambda: fn(x, *vecs)
    return setup


def np_add_bcast():
    x, w = randn((ROWS, COLS), 1), randn(COLS, 2)
    return lambda: x + w


def np_chain8():
    x, y = randn(ELEMENTWISE_LEN, 1), randn(ELEMENTWISE_LEN, 2)
    return lambda: chain8(x, y)


def np_tiny_add():
    one = np.ones((), dtype=np.float32)
    add = np.add

    def loop():
        for _ in range(DISPATCH_CALLS):
            add(one, one)
    return loop


def cast_target():
    if ml_dtypes is not None:
        return ml_dtypes.bfloat16, "x.astype(ml_dtypes.bfloat16)"
    return np.float16, "x.astype(np.float16) (ml_dtypes missing: pip install ml_dtypes)"


@dataclass
class Row:
    """One table row: a neuronlab case and how it is judged."""
    case: str
    # numpy's side (draws inputs, returns the thunk), or None.
    numpy: Callable[[], Callable[[], object]] | None = None
    numpy_calls: int = 1
    # "numpy": ratio = numpy / ours; "f32": ratio = our f32 sibling / ours;
    # "eager": ratio = our eager sibling / ours; "latency": judged by its own time;
    # "none": shown, not compared.
    judge: str = "numpy"
    sibling: str | None = None
    # (comparison, bound) on the ratio, or on the seconds for "latency"; None: no target.
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
            if dt == "f32":
                big = case in ("matmul_f32_1024", "matmul_f32_2048")
                table.append(Row(case, np_matmul(a, b), target=(">=", 0.8) if big else None))
            else:
                table.append(Row(case, judge="f32", sibling=case.replace("bf16", "f32"),
                                 target=(">=", 0.8)))
    table += [
        Row("add_bcast_f32_4096x1024", np_add_bcast, target=(">=", 1.0)),
        Row("exp_f32_4m", unary(np.exp), target=(">=", 1.0)),
        Row("gelu_tanh_f32_4m", unary(gelu_tanh), target=(">=", 1.0)),
        Row("cast_f32_bf16_4m", unary(lambda x: x.astype(cast_dtype)), target=(">=", 1.0)),
        Row("sum_lastdim_f32_4096x1024", rows(lambda x: x.sum(axis=-1), 0)),
        Row("softmax_f32_4096x1024", rows(softmax, 0), target=(">=", 1.5)),
        Row("layer_norm_f32_4096x1024", rows(layer_norm, 2), target=(">=", 1.5)),
        Row("rms_norm_f32_4096x1024", rows(rms_norm, 1), target=(">=", 1.5)),
        Row("chain8_f32_4m_eager", np_chain8),
        Row("chain8_f32_4m_compiled", np_chain8, target=(">=", 2.0)),
        Row("chain8_f32_4m_compiled", judge="eager", sibling="chain8_f32_4m_eager",
            target=(">=", 3.0), label="chain8 eager / compiled"),
        Row(CHAIN8_IN_CACHE, judge="none", label="chain8 compiled, 256K in cache"),
        Row(CHAIN8_BY_HAND, judge="none", label="chain8 by hand, no executor"),
        Row("dispatch_guest_tiny_op", np_tiny_add, DISPATCH_CALLS, judge="latency",
            target=("<=", 1e-6)),
        Row("dispatch_host_tiny_op", np_tiny_add, DISPATCH_CALLS, judge="latency"),
        Row("dispatch_guest_host_call", judge="latency"),
        # The bound for a cache hit: 2 µs plus 100 ns per graph node.
        Row("cache_hit_10op", judge="latency", target=("<=", 2e-6 + 10 * 100e-9)),
    ]
    return table


def neuronlab_case(binary: Path, case: str) -> dict:
    """Runs `neuronlab bench --json --filter case` and returns that case's entry."""
    out = subprocess.run([str(binary), "bench", "--json", "--filter", case], cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"neuronlab bench --filter {case} failed:\n{out.stderr}")
    doc = json.loads(out.stdout)
    for entry in doc["cases"]:
        if entry["id"] == case:
            return entry
    sys.exit(f"neuronlab bench --filter {case} printed no case with that id")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, default=default_binary(),
                        help="the neuronlab binary (default: $CARGO_TARGET_DIR or target, "
                             "then release/neuronlab)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of (neuronlab, numpy) per case; the table shows medians")
    parser.add_argument("--filter", default=None,
                        help="only rows whose case id contains this")
    args = parser.parse_args()
    if not args.binary.is_file():
        sys.exit(f"no binary at {args.binary}: cargo build --release -p neuronlab-repl "
                 "(or pass --binary PATH)")
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")

    cast_dtype, cast_how = cast_target()
    every_row = rows_table(cast_dtype)
    chosen = [args.filter is None or args.filter in r.case for r in every_row]
    if not any(chosen):
        sys.exit(f"no case matches --filter {args.filter!r}")
    # The siblings the ratios need are measured and shown too.
    siblings = {r.sibling for r, c in zip(every_row, chosen) if c and r.sibling is not None}
    table = [r for r, c in zip(every_row, chosen)
             if c or (r.case in siblings and r.judge in ("numpy", "latency"))]
    cases = list(dict.fromkeys(r.case for r in table))
    numpy_of = {r.case: r for r in table if r.numpy is not None}
    ours: dict[str, list[float]] = {c: [] for c in cases}
    theirs: dict[str, list[float]] = {c: [] for c in cases}
    # Each case's work per call, from its JSON entry: ("GFLOP/s", flop) or ("GB/s", bytes).
    work: dict[str, tuple[str, float]] = {}

    version = subprocess.run([str(args.binary), "--version"], capture_output=True,
                             text=True).stdout.strip()
    log(f"{len(cases)} cases x {args.rounds} rounds, alternating neuronlab and numpy")
    load_before = os.getloadavg()[0]
    copy_gbps = copy_bandwidth() / 1e9
    for rnd in range(1, args.rounds + 1):
        for case in cases:
            entry = neuronlab_case(args.binary, case)
            ours[case].append(entry["median_s"])
            if "flop" in entry:
                work[case] = ("GFLOP/s", entry["flop"])
            elif "bytes" in entry:
                work[case] = ("GB/s", entry["bytes"])
            msg = f"[round {rnd}/{args.rounds}] {case}: neuronlab {fmt_time(entry['median_s'])}"
            if case in numpy_of:
                row = numpy_of[case]
                thunk = row.numpy()
                theirs[case].append(measure(thunk, row.numpy_calls))
                del thunk
                msg += f", numpy {fmt_time(theirs[case][-1])}"
            log(msg)

    load_after = os.getloadavg()[0]
    med = {c: statistics.median(v) for c, v in ours.items()}
    np_med = {c: statistics.median(v) for c, v in theirs.items() if v}

    def paired(num: list[float], den: list[float]) -> float:
        """The median over rounds of num / den, each round's pair measured back to back."""
        return statistics.median(n / d for n, d in zip(num, den))

    print("neuronlab vs numpy (bench/compare.py)")
    print(f"  commit: {git_commit()}; {version}")
    print(f"  CPU: {cpu_model()}, {os.cpu_count()} logical cores "
          f"({usable_cores()} usable); flags: {cpu_flags()}")
    print(f"  numpy {np.__version__}, BLAS: {blas_info()}; python {platform.python_version()}")
    print(f"  load average (1 min) before and after the run: {load_before:.2f}, {load_after:.2f} "
          "(other work on the machine shows here)")
    if max(load_before, load_after) > os.cpu_count():
        print("  WARNING: the machine was busy during the run; multi-threaded code (numpy's BLAS, "
              "our matmul) suffers most. Re-run on an idle machine.")
    print(f"  memory copy, numpy one thread, 64 MiB: {copy_gbps:.1f} GB/s (read + write)")
    print(f"  numpy side of the cast: {cast_how}; of the dispatch rows: np.add on two 0-d f32 "
          "arrays, per call")
    print(f"  {args.rounds} rounds; each figure is the median over rounds of each round's "
          f"median (one warm-up, then runs filling ~{BUDGET_S} s, {MIN_REPS}..{MAX_REPS} runs)")
    print("  ratio: numpy / neuronlab (> 1: neuronlab faster); bf16 rows: our f32 / our bf16; "
          "eager / compiled row: our eager / our compiled; each the median over rounds of the "
          "round's own ratio (dispatch rows: of the medians)")
    print("  spread: the largest max / min of the rounds' medians, of either side; far above 1 "
          "means something else on the machine got in the way of that row")
    header = ("case", "neuronlab", "numpy", "ratio", "target", "met?", "spread",
              "neuronlab rate")
    widths = (31, 10, 10, 7, 17, 4, 7, 15)
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line.rstrip())
    print("-" * len(line.rstrip()))
    for r in table:
        ours_s = med[r.case]
        their_s = np_med.get(r.case) if r.judge in ("numpy", "latency") else None
        if r.judge == "numpy" and their_s:
            ratio = paired(theirs[r.case], ours[r.case])
        elif r.judge in ("f32", "eager"):
            ratio = paired(ours[r.sibling], ours[r.case])
        elif r.judge == "latency" and their_s:
            ratio = their_s / ours_s
        else:
            ratio = None
        if r.target is None:
            target, met = "-", ""
        else:
            op, bound = r.target
            judged = ours_s if r.judge == "latency" else ratio
            ok = judged <= bound if op == "<=" else judged >= bound
            met = "yes" if ok else "no"
            if r.judge == "latency":
                target = f"{op} {fmt_time(bound)}"
            elif r.judge == "f32":
                target = f"{op} {bound:.1f} (vs f32)"
            elif r.judge == "eager":
                target = f"{op} {bound:.1f}x"
            else:
                target = f"{op} {bound:.1f}"
        cells = (
            r.label or r.case,
            fmt_time(ours_s) if r.judge != "eager" else "-",
            fmt_time(their_s) if their_s is not None else "-",
            f"{ratio:.2f}" if ratio is not None else "-",
            target,
            met,
            spread(ours[r.case], theirs[r.case] if their_s is not None else [],
                   ours[r.sibling] if r.sibling is not None else []),
            rate(work.get(r.case), ours_s) if r.judge != "eager" else "",
        )
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
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

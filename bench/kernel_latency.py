#!/usr/bin/env python3
"""Latency of the neuronlab Jupyter kernel next to ipykernel, measured in one run.

Two measurements, alternating between the kernels so both see the same machine state:

1. start: wall time from before KernelManager.start_kernel to the first kernel_info_reply
   (start_kernel + client.start_channels + kernel_info, waiting for the reply);
2. execute: wall time from sending an execute_request to the kernel's idle status for it,
   median over --requests requests after a warm-up. neuronlab gets three rows: a magic cell
   (`%help load`, no build), a trivial Rust cell run again unchanged (`1 + 1`: the session
   reuses its build), and a small Rust cell that changes every time (`1 + N`, a new N per
   request: built for wasm32 each time); ipykernel runs `1 + 1`. Each request follows a
   pause (--pause, 0.5 s by default), as cells typed by a person do: the neuronlab kernel
   starts the next build's rustc when a build ends, and a pause lets that start finish.
   `--pause 0` sends the requests back to back.

A benchmark, not a test:  cargo build --release -p neuronlab-kernel
                          python3 bench/kernel_latency.py [--kernel-bin PATH] [-n 5] [--requests 20] [--pause 0.5]
Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty

import ipykernel
import jupyter_client
from jupyter_client.manager import KernelManager

REPO = Path(__file__).resolve().parents[1]
NEURONLAB = "neuronlab"
IPYKERNEL = "python3"
# The first Rust cell of a machine may build the standard library and the SDK.
BUILD_TIMEOUT = 600
TIMEOUT = 60


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def start(name: str, env: dict[str, str]) -> tuple[float, KernelManager, object]:
    """Starts kernel `name`; returns the seconds to its first kernel_info_reply, and it."""
    km = KernelManager(kernel_name=name)
    t0 = time.perf_counter()
    km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    msg_id = kc.kernel_info()
    deadline = t0 + TIMEOUT
    while True:
        reply = kc.get_shell_msg(timeout=max(0.0, deadline - time.perf_counter()))
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    elapsed = time.perf_counter() - t0
    assert reply["msg_type"] == "kernel_info_reply", reply["msg_type"]
    # Make sure iopub is subscribed before anything measures an idle status on it.
    kc.wait_for_ready(timeout=TIMEOUT)
    return elapsed, km, kc


def stop(km: KernelManager, kc) -> None:
    kc.stop_channels()
    km.shutdown_kernel(now=False)


def execute(kc, code: str, timeout: float = TIMEOUT) -> float:
    """Seconds from sending `code` to the kernel's idle status for it; checks the reply."""
    t0 = time.perf_counter()
    msg_id = kc.execute(code, store_history=False, allow_stdin=False)
    deadline = t0 + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.0, deadline - time.perf_counter()))
        if (
            msg["parent_header"].get("msg_id") == msg_id
            and msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
        ):
            break
    elapsed = time.perf_counter() - t0
    while True:
        reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.perf_counter()))
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    status = reply["content"]["status"]
    if status != "ok":
        raise RuntimeError(f"{code!r} failed: {reply['content']}")
    return elapsed


def drain_iopub(kc) -> None:
    while True:
        try:
            kc.get_iopub_msg(timeout=0.05)
        except Empty:
            return


def install_kernelspec(kernel_bin: Path, prefix: str) -> None:
    if not kernel_bin.is_file():
        sys.exit(f"no {kernel_bin}: run `cargo build --release -p neuronlab-kernel` first")
    subprocess.run([str(kernel_bin), "install", "--prefix", prefix], check=True, capture_output=True)
    data = os.path.join(prefix, "share", "jupyter")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [data, os.environ.get("JUPYTER_PATH")]))


def ms(seconds: list[float]) -> tuple[float, float]:
    return statistics.median(seconds) * 1e3, min(seconds) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel-bin", type=Path, default=REPO / "target" / "release" / "neuronlab-kernel")
    ap.add_argument("-n", type=int, default=5, help="kernel starts of each kernel (default 5)")
    ap.add_argument("--requests", type=int, default=20, help="execute requests per row (default 20)")
    ap.add_argument("--pause", type=float, default=0.5,
                    help="seconds between execute requests, not timed (default 0.5)")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="neuronlab-bench-")
    try:
        install_kernelspec(args.kernel_bin.resolve(), os.path.join(tmp, "prefix"))
        # Each kernel's history goes to a temporary data folder, not the user's.
        env = {**os.environ, "XDG_DATA_HOME": os.path.join(tmp, "data")}
        run(args, env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, env: dict[str, str]) -> None:
    starts: dict[str, list[float]] = {NEURONLAB: [], IPYKERNEL: []}
    for i in range(args.n):
        # Alternate which kernel goes first.
        order = (NEURONLAB, IPYKERNEL) if i % 2 == 0 else (IPYKERNEL, NEURONLAB)
        for name in order:
            elapsed, km, kc = start(name, env)
            stop(km, kc)
            starts[name].append(elapsed)
            log(f"start {i + 1}/{args.n} {name}: {elapsed * 1e3:.1f} ms")

    # `{n}` in a cell is replaced by a number no earlier request of the row used.
    rows = {
        "neuronlab  %help load": (NEURONLAB, "%help load"),
        "neuronlab  1 + 1 (Rust, unchanged)": (NEURONLAB, "1 + 1"),
        "neuronlab  1 + N (Rust, changed)": (NEURONLAB, "1 + {n}"),
        "ipykernel  1 + 1": (IPYKERNEL, "1 + 1"),
    }

    def cell(code: str, n: int) -> str:
        return code.replace("{n}", str(1000 + n))

    kernels = {}
    try:
        for name in (NEURONLAB, IPYKERNEL):
            _, km, kc = start(name, env)
            kernels[name] = (km, kc)
        log("warm-up (the first Rust cell may build the standard library)")
        for label, (name, code) in rows.items():
            kc = kernels[name][1]
            execute(kc, cell(code, -2), timeout=BUILD_TIMEOUT)
            execute(kc, cell(code, -1))
            drain_iopub(kc)
        times: dict[str, list[float]] = {label: [] for label in rows}
        for r in range(args.requests):
            for label, (name, code) in rows.items():
                time.sleep(args.pause)
                times[label].append(execute(kernels[name][1], cell(code, r)))
            log(f"execute {r + 1}/{args.requests}: "
                + ", ".join(f"{' '.join(label.split())} {t[-1] * 1e3:.1f} ms" for label, t in times.items()))
    finally:
        for km, kc in kernels.values():
            stop(km, kc)

    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores")
    print(f"jupyter_client {jupyter_client.__version__}, ipykernel {ipykernel.__version__}, "
          f"Python {sys.version.split()[0]}")
    print(f"kernel: {args.kernel_bin}")
    print()
    header = f"{'measurement':<52}{'median ms':>11}{'min ms':>10}{'vs ipykernel':>14}"
    print(header)
    print("-" * len(header))
    ipy_start = ms(starts[IPYKERNEL])
    ipy_exec = ms(times["ipykernel  1 + 1"])
    for name, label in ((NEURONLAB, "neuronlab"), (IPYKERNEL, "ipykernel")):
        med, lo = ms(starts[name])
        ratio = f"{med / ipy_start[0]:.2f}x" if name == NEURONLAB else ""
        print(f"{'start to kernel_info_reply  ' + label:<52}{med:>11.1f}{lo:>10.1f}{ratio:>14}")
    for label in rows:
        med, lo = ms(times[label])
        ratio = "" if label.startswith("ipykernel") else f"{med / ipy_exec[0]:.2f}x"
        print(f"{'execute to idle  ' + label:<52}{med:>11.1f}{lo:>10.1f}{ratio:>14}")
    print()
    print(f"start: median and min of {args.n} starts each; execute: of {args.requests} requests "
          f"each after a warm-up, {args.pause} s apart; ratio = median neuronlab / median ipykernel")


if __name__ == "__main__":
    main()

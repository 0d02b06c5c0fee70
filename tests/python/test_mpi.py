"""Ranks across processes over MPI: `mpirun -n P neuronlab run X --nproc T` runs a world of
P x T ranks, rank = process * T + thread, and prints what `neuronlab run X --nproc P*T`
prints in one process, bit for bit (every process computes each collective from the same
inputs in the same group order).

NEURONLAB_MPI_BIN names a `neuronlab` built with `--features mpi` (scripts/test builds one);
without it these tests are skipped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from test_experiments import module

MPI_BIN = os.environ.get("NEURONLAB_MPI_BIN")
FIXTURES = Path(__file__).resolve().parents[2] / "crates" / "sandbox" / "tests" / "fixtures"

pytestmark = pytest.mark.skipif(
    not MPI_BIN, reason="NEURONLAB_MPI_BIN names an MPI build of neuronlab (scripts/test sets it)"
)

# As root, OpenMPI refuses to start without --allow-run-as-root; --oversubscribe lets more
# processes than cores run on this 2-core machine.
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root"]


def env() -> dict[str, str]:
    cache = tempfile.mkdtemp(prefix="neuronlab-mpi-cache-")
    return {**os.environ, "NEURONLAB_CACHE_DIR": cache}


def neuronlab(*args: str, processes: int | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    assert MPI_BIN and Path(MPI_BIN).is_file(), f"{MPI_BIN} is missing"
    command = [MPI_BIN, "run", *args]
    if processes is not None:
        command = [*MPIRUN, "-n", str(processes), *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env())


@pytest.mark.parametrize(
    "experiment,processes,per_process",
    [("tp-mlp", 4, 1), ("tp-mlp", 2, 2), ("mesh-4x8", 4, 8)],
)
def test_a_world_across_processes_prints_what_one_process_prints(experiment, processes, per_process):
    path = str(module(experiment))
    one = neuronlab(path, "--nproc", str(processes * per_process))
    assert one.returncode == 0, one.stdout + one.stderr
    spread = neuronlab(path, "--nproc", str(per_process), processes=processes)
    assert spread.returncode == 0, spread.stdout + spread.stderr
    assert spread.stdout == one.stdout
    assert f"run as {processes * per_process} ranks" in spread.stderr, spread.stderr


@pytest.mark.parametrize("processes,per_process", [(2, 2), (4, 1)])
def test_wide_inputs_arrive_bit_for_bit_in_every_dtype(processes, per_process):
    """Inputs of 64 to 256 KiB travel as a message of their own, sent from the tensor's
    memory (MPI_Send within the eager limit, MPI_Isend above it) and received into the
    result's buffer; a strided input and bool go inline. Every rank's digest of every
    collective's result must be what the one-process world prints."""
    path = str(module("wide-collectives"))
    one = neuronlab(path, "--nproc", str(processes * per_process), "--all-ranks")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "bf16 all_to_all" in one.stdout and "bool broadcast" in one.stdout, one.stdout
    spread = neuronlab(path, "--nproc", str(per_process), "--all-ranks", processes=processes)
    assert spread.returncode == 0, spread.stdout + spread.stderr
    assert spread.stdout == one.stdout


def test_a_long_run_through_mpirun_prints_no_terminal_codes():
    """OpenMPI gives each process a pseudo-terminal for its stdout, whatever mpirun's own
    stdout is, so a process cannot tell a terminal from a file: under mpirun, neuronlab draws
    no progress line and no colour. A run long enough for progress (over 2 s) prints what
    the one-process run prints."""
    path = str(module("sft"))
    args = ["--", "--tp", "4", "--fsdp", "2", "--steps", "3", "--batch", "16"]
    one = neuronlab(path, "--nproc", "8", *args)
    assert one.returncode == 0, one.stdout + one.stderr
    spread = neuronlab(path, "--nproc", "4", *args, processes=2)
    assert spread.returncode == 0, spread.stdout + spread.stderr
    assert "\x1b" not in spread.stdout and "\r" not in spread.stdout, repr(spread.stdout[:400])
    assert spread.stdout == one.stdout
    assert "step 3 loss" in spread.stdout, spread.stdout


def test_the_summary_and_trace_cover_every_process():
    """mesh-4x8 as 4 processes x 8 ranks: process 0's summary counts the collectives of all
    32 ranks, as the one-process run does, and `--trace` writes one Chrome trace with a
    modeled track for each of the 32 cores."""
    path = str(module("mesh-4x8"))
    trace_dir = Path(tempfile.mkdtemp(prefix="neuronlab-mpi-trace-"))
    one = neuronlab(path, "--nproc", "32", "--trace", str(trace_dir / "one.json"))
    spread = neuronlab(path, "--nproc", "8", "--trace", str(trace_dir / "spread.json"), processes=4)
    assert one.returncode == spread.returncode == 0, spread.stderr
    collectives = lambda err: re.search(r"collectives (\d+)", err).group(1)
    assert collectives(spread.stderr) == collectives(one.stderr), spread.stderr
    assert "32 cores" in spread.stderr, spread.stderr

    def modeled_tracks(trace: Path) -> set[int]:
        events = json.loads(trace.read_text())
        events = events["traceEvents"] if isinstance(events, dict) else events
        return {e["tid"] for e in events if e.get("ph") == "X" and e.get("pid") == 2}

    # Each core's device track, and its collectives' track beside it (tid 2^20 + core).
    tracks = modeled_tracks(trace_dir / "spread.json")
    assert tracks == modeled_tracks(trace_dir / "one.json")
    assert tracks == set(range(32)) | {(1 << 20) + core for core in range(32)}, tracks


def test_every_rank_shows_across_processes():
    path = str(module("tp-mlp"))
    one = neuronlab(path, "--nproc", "4", "--all-ranks")
    spread = neuronlab(path, "--nproc", "2", "--all-ranks", processes=2)
    assert one.returncode == spread.returncode == 0, spread.stdout + spread.stderr
    assert spread.stdout == one.stdout
    assert "[rank3]" in spread.stdout or "ranks 0-3" in spread.stdout, spread.stdout


def test_a_rank_that_traps_fails_the_ranks_of_other_processes_by_name():
    """last_rank_traps.wat: rank 3 traps while ranks 0-2 wait for it at a barrier; rank 2 runs
    in the other process and learns of it at once, not at the collective timeout."""
    started = time.monotonic()
    r = neuronlab(str(FIXTURES / "last_rank_traps.wat"), "--nproc", "2", processes=2)
    assert r.returncode != 0
    assert "cannot complete: rank 3 stopped with an error" in r.stderr, r.stderr
    assert "error: ranks 0, 1, 2: GuestTrap" in r.stderr, r.stderr
    assert "-- 2 processes x 2 ranks: process 0 runs ranks 0-1, process 1 runs ranks 2-3" in r.stderr
    assert time.monotonic() - started < 60


def pid_of_process(n: int, command: str, within: float = 60) -> int:
    """The pid of MPI process `n` of a running `neuronlab run`."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline and cmdline[0].decode(errors="replace") == command and (
                f"OMPI_COMM_WORLD_RANK={n}".encode() in environ
            ):
                return int(entry.name)
        time.sleep(0.1)
    raise AssertionError(f"no MPI process {n} of {command} started")


def kill_mid_run(*mpirun_options: str) -> tuple[subprocess.CompletedProcess, float]:
    """Starts last_rank_traps.wat's `spin` (barriers for a long time) as 2 processes x 2
    ranks, kills process 1 once both run, and waits for mpirun."""
    command = [*MPIRUN, *mpirun_options, "-n", "2", MPI_BIN, "run", str(FIXTURES / "last_rank_traps.wat"),
               "--entry", "spin", "--nproc", "2", "--deadline", "600", "--collective-timeout", "2"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    victim = pid_of_process(1, MPI_BIN)
    pid_of_process(0, MPI_BIN)
    time.sleep(1.5)
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    try:
        out, err = child.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        raise AssertionError(f"mpirun hangs after a process was killed:\n{err}")
    return subprocess.CompletedProcess(command, child.returncode, out, err), time.monotonic() - killed


def test_a_killed_process_ends_the_launch_without_a_hang():
    """Plain mpirun ends the job when a process dies and exits non-zero, naming the MPI
    process. It interrupts the survivors and kills them a second later: before that, process
    0 reports that its ranks were waiting for the dead process's ranks, and that process 1's
    ranks never reported."""
    r, took = kill_mid_run()
    assert r.returncode != 0, r.stderr
    assert "process 1 runs ranks 2-3" in r.stderr and "process rank 1" in r.stderr, r.stderr
    # Either of the dead process's ranks may have reached the last barrier before it died.
    assert re.search(r"ranks 0, 1: Interrupted: the guest was interrupted while waiting in "
                     r"barrier #\d+ on group \[0, 1, 2, 3\] for rank\(s\) (2|3|2, 3)\n", r.stderr), r.stderr
    assert "ranks 2, 3: Interrupted: process 1 (ranks 2-3) had not reported" in r.stderr, r.stderr
    assert took < 30


def test_a_killed_process_under_recovery_is_named_within_the_timeout():
    """With --enable-recovery mpirun lets the others run on: their barrier fails at the
    collective timeout naming the ranks that never arrived, and process 0 reports the dead
    process's ranks as lost instead of waiting for them. (OpenMPI's mpirun then exits 0 in
    this mode whatever the processes return; process 0 itself exits 1.)"""
    r, took = kill_mid_run("--enable-recovery")
    # Either of the dead process's ranks may have reached the last barrier before it died.
    assert re.search(r"timed out after 2\.0 s: rank\(s\) (2|3|2, 3) never arrived", r.stderr), r.stderr
    assert "ranks 2, 3: HostError: process 1 (ranks 2-3) stopped answering" in r.stderr, r.stderr
    assert took < 30


def test_bad_nproc_under_mpirun_is_a_clear_error():
    r = neuronlab(str(module("tp-mlp")), "--nproc", "40", processes=2)
    assert r.returncode != 0
    assert "cannot start 80 rank(s)" in r.stdout + r.stderr, r.stdout + r.stderr

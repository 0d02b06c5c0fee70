"""Every notebook in notebooks/ runs top to bottom in a fresh neuronlab kernel (nbclient), with
assertions on its key outputs. Cells tagged `raises-exception` must fail; every other cell
must succeed. The notebooks are stored without outputs.

The kernelspec comes from test_kernel's setup (scripts/test installs it into a temporary
prefix; run alone, the module installs one itself).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import test_kernel  # noqa: F401  (puts the kernelspec on Jupyter's path)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def run_notebook(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    for cell in nb.cells:
        assert not cell.get("outputs"), f"{name}: outputs must be stripped in the repository"
    client = NotebookClient(
        nb,
        kernel_name="neuronlab",
        timeout=test_kernel.BUILD_TIMEOUT,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute(env=test_kernel.kernel_env())
    return nb


def text(cell: nbformat.NotebookNode) -> str:
    """Everything a cell showed as text: streams, results, displays, errors."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.data.get("text/plain", ""))
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "\n".join(parts)


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code"]


def result(cell: nbformat.NotebookNode) -> str:
    return next(o.data["text/plain"] for o in cell.outputs if o.output_type == "execute_result")


def test_01_eager_basics():
    cells = code_cells(run_notebook("01-eager-basics"))
    first = cells[0]
    html = next(o.data["text/html"] for o in first.outputs if o.output_type == "execute_result")
    assert "<table" in html and "f32[2, 3]" in html
    assert result(cells[1]) == "21"  # (np.arange(6).reshape(2, 3) + np.arange(3)).sum()
    assert "caught: " in text(cells[2]) and "inner dims differ" in text(cells[2])
    assert result(cells[4]) == "30"  # kept item `scaled` doubles sum(arange(6))
    assert re.search(r"^a\s+Tensor\s+\[2, 3\]\s+f32", text(cells[5]), re.M)
    # %timeline, after magic cells, draws the last cell that ran ops, as SVG.
    assert_timeline_svg(cells[-1], "neuron:0")


def assert_timeline_svg(cell: nbformat.NotebookNode, core: str) -> None:
    [display] = [o.data for o in cell.outputs if "image/svg+xml" in o.get("data", {})]
    assert "the last that did device work" in display["text/plain"], display["text/plain"]
    assert core in display["image/svg+xml"] and "modeled" in display["image/svg+xml"]


def test_02_recompilation_lab_counts_its_compiles():
    cells = code_cells(run_notebook("02-recompilation-lab"))
    # The plot of compiles per token: SVG with its labels; its text says where each way ends.
    [plot] = [o.data for o in cells[0].outputs if "image/svg+xml" in o.get("data", {})]
    for label in ("compiles so far", "tokens in the context", "growing input", "padded cache"):
        assert label in plot["image/svg+xml"], label
    assert re.search(r"growing input +\S+ +1 … 9, 12 points", plot["text/plain"]), plot
    assert re.search(r"padded cache +\S+ +1 … 1, 12 points", plot["text/plain"]), plot
    # generation-cache: 8 recompiles of the growing step, then one compile of the padded one.
    assert "10 compiles, 8 of them recompiles" in text(cells[1])
    assert "input 0 'tokens' shape changed: expected [4, 64], got [5, 64]" in text(cells[1])
    # bucketing adds 10 exact-length versions and 3 buckets.
    assert "compiled graphs: exact lengths 10 version(s), buckets 3 version(s)" in text(cells[2])
    assert "23 compiles" in text(cells[3])


def test_03_collectives():
    cells = code_cells(run_notebook("03-collectives"))
    assert "[rank0]: tp-mlp: OK" in text(cells[0])
    assert "all_reduce" in text(cells[1])
    assert "[rank0]: mesh-4x8: OK" in text(cells[2])
    assert "[rank0]: rank 0: [4.0, 4.0]" in text(cells[3])
    assert "[4., 4.]" in result(cells[4])
    # The timeline of the %%spmd cell's all_reduce, not of `total` (no device work).
    assert_timeline_svg(cells[5], "neuron:3")


def test_04_sandbox_failures_leave_the_session_intact():
    cells = code_cells(run_notebook("04-sandbox"))
    failing = [c for c in cells if "raises-exception" in c.metadata.get("tags", [])]
    for c in failing:
        assert any(o.output_type == "error" for o in c.outputs), c.source
    assert "Out" not in text(cells[2]) and "-2" in text(cells[2])  # ERR_HANDLE returned by `run`
    assert "LinkError" in text(cells[3]) and "wasi_snapshot_preview1::fd_write" in text(cells[3])
    assert "index out of bounds" in text(cells[4])
    assert "mismatched types" in text(cells[5])
    assert "still here" in text(cells[6]) and result(cells[6]) == "4"


def test_07_training_shows_the_backward_pass():
    cells = code_cells(run_notebook("07-training"))
    # train-mlp: 20 steps whose loss falls at every step.
    steps = re.findall(r"^step (\d+) loss (\S+)$", text(cells[0]), re.M)
    assert [int(n) for n, _ in steps] == list(range(1, 21)), text(cells[0])
    losses = [float(loss) for _, loss in steps]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.5 * losses[0], losses

    # %events backward: only backward ops, in the phase column.
    events = text(cells[1])
    rows = [line.split() for line in events.splitlines() if re.match(r"^\s*\d+\s+op\s", line)]
    assert len(rows) == 8 and all(row[2] == "backward" for row in rows), events
    assert re.search(r"the last 8 of \d+ backward ops in cell \[1\]", events), events

    # %timeline: the backward ops have their own row (text) and lane (SVG), and a legend line.
    assert_timeline_svg(cells[2], "neuron:0 backward")
    [timeline] = [o.data for o in cells[2].outputs if "image/svg+xml" in o.get("data", {})]
    assert re.search(r"^neuron:0 backward \|.*[A-H].*\| ", timeline["text/plain"], re.M), timeline
    assert "neuron:N backward: the ops backward ran on that core" in timeline["text/plain"]

    # The loss curve: the same loop in a cell gives train-mlp's losses, plotted.
    [plot] = [o.data for o in cells[3].outputs if "image/svg+xml" in o.get("data", {})]
    for label in ("train-mlp, eager: loss per step", "step", "mean squared error"):
        assert label in plot["image/svg+xml"], label
    assert re.search(r"AdamW, lr 0.01 +\S+ +\S+ … \S+, 20 points", plot["text/plain"]), plot
    first, last = re.search(r"loss (\S+) at step 1, (\S+) at step 20", text(cells[3])).groups()
    assert (float(first), float(last)) == (losses[0], losses[-1]), text(cells[3])

    # %mem: the autograd heading; the four parameters keep 196 B of gradients
    # (4x8 + 8 + 8x1 + 1 f32), and nothing stays saved after backward.
    mem = text(cells[4])
    heading = "autograd (part of the HBM in use): activations saved for backward"
    assert heading in mem, mem
    autograd = mem.split(heading, 1)[1]
    # At the peak the core held the four parameters and, from the first backward on, their
    # gradients: 196 B each.
    by_role = mem.split("by role", 1)[1].split(heading, 1)[0]
    assert re.search(r"^neuron:0\s+196 B\s+196 B\s", by_role, re.M), mem
    assert re.search(r"^neuron:0\s+0 B\s+\S+ \S*B\s+0\s+196 B$", autograd, re.M), mem
    [html] = [o.data["text/html"] for o in cells[4].outputs if "text/html" in o.get("data", {})]
    # Three tables: the cores now, what each core's peak held by role, autograd.
    assert html.count("<table>") == 3 and "<b>autograd" in html, html
    assert "by role" in html and "<th" in html and "gradients</th>" in html, html

    # The compiled step: one compile, the eager losses bit for bit, the joint graph's parts.
    compiled = text(cells[5])
    compiled_steps = re.findall(r"^step (\d+) loss (\S+)$", compiled, re.M)
    assert compiled_steps == steps, compiled
    assert "train_step: 20 calls, 1 compile(s), 19 cache hits" in compiled, compiled
    assert re.search(r"parts: forward \d+ ops, backward \d+ ops, update \d+ ops", compiled), compiled
    # Its program's backward kernels run as backward: they have the timeline's backward row.
    assert_timeline_svg(cells[6], "neuron:0 backward")


def test_05_generation_compiles_once_with_a_static_cache():
    cells = code_cells(run_notebook("05-generation"))
    assert "granted" in text(cells[0]) and "(read-write)" in text(cells[0]), text(cells[0])
    saved = text(cells[1])
    assert re.search(r"saved 39 tensors \(\d+ parameters\)", saved), saved
    assert "model.embed_tokens.weight: bf16 [512, 256]" in saved, saved

    run = text(cells[2])
    assert "same tokens: true" in run, run
    assert re.search(r"static cache: prefill 1 compile\(s\); decode 23 calls, 1 compile\(s\), 22 cache hits, 0 eager", run), run
    assert re.search(r"dynamic cache: prefill 1 compile\(s\); decode 23 calls, 9 compile\(s\), 0 cache hits, 14 eager", run), run
    assert "reached its recompile limit (8)" in run, run
    compiles_plot, time_plot = [o.data for o in cells[2].outputs if "image/svg+xml" in o.get("data", {})]
    for label in ("Compiles so far, per generated token", "static cache", "dynamic cache"):
        assert label in compiles_plot["image/svg+xml"], label
    assert "Modeled device time per generated token" in time_plot["image/svg+xml"]
    static_us, dynamic_us = map(float, re.search(
        r"modeled decode time per token: static (\d+) us, dynamic (\d+) us", run).groups())
    assert 0 < static_us < dynamic_us, run

    assert "past_key_values.0.key" in text(cells[3]), text(cells[3])

    buckets = text(cells[4])
    for line in (
        "prompt of   5 tokens -> bucket 128: prefill compiled anew",
        "prompt of 100 tokens -> bucket 128: prefill compiled no (cache hit)",
        "prompt of 130 tokens -> bucket 256: prefill compiled anew",
        "decode: 21 calls, 1 compile(s), 20 cache hits",
    ):
        assert line in buckets, buckets


def test_06_fine_tuning_on_a_mesh():
    cells = code_cells(run_notebook("06-fine-tuning"))
    run = text(cells[0])
    losses = [float(x) for x in re.findall(r"^\[rank0\]: step \d+ loss (\S+)$", run, re.M)]
    assert len(losses) == 40 and losses[-1] < 0.6 * losses[0], run
    assert "sft_step: eager (8 ranks: collectives are graph breaks)" in run, run
    [plot] = [o.data for o in cells[0].outputs if "image/svg+xml" in o.get("data", {})]
    assert "sft on [fsdp 2, tp 4]: loss per step" in plot["image/svg+xml"]

    mem = text(cells[1])
    for core in range(8):
        assert re.search(rf"^neuron:{core} ", mem, re.M), mem

    events = text(cells[2])
    assert "(mesh dim tp)" in events or "(mesh dim fsdp)" in events, events
    assert_timeline_svg(cells[3], "neuron:7")
    # Each core's collectives have a row beside its compute, where the clock ran them.
    [timeline] = [o.data for o in cells[3].outputs if "image/svg+xml" in o.get("data", {})]
    assert "neuron:7 collectives" in timeline["image/svg+xml"], timeline["text/plain"]
    assert re.search(r"^neuron:0 collectives \|.*[A-H.].*\| ", timeline["text/plain"], re.M), timeline

    wrapped, none = text(cells[4]), text(cells[5])
    assert "batch shapes: [2, 128]" in wrapped and "sft_step: 6 calls, 1 compile(s)" in wrapped, wrapped
    shapes = re.search(r"^batch shapes: (.*)$", none, re.M).group(1)
    compiles = int(re.search(r"^sft_step: 6 calls, (\d+) compile\(s\)", none, re.M).group(1))
    assert compiles == len(re.findall(r"\[2, \d+\]", shapes)) >= 2, none

"""Gradients through collectives, end to end: the dist-grad guest (tests/guests/dist-grad) runs
as N ranks under `neuronlab run --nproc N` and compares, on every rank, a sharded computation's
loss and gradients with the same model computed whole.

Tolerances: the sharded and whole computations sum the same f32 products in different orders
(a matmul split over ranks, then reduced in group order), so they agree to a few ulps of the
values involved: 1e-5 absolute on losses and gradients of size O(1).
"""

from __future__ import annotations

import json

import pytest

from test_experiments import module, run


def lines(nproc: int, entry: str) -> list[dict]:
    r = run(module("dist-grad"), "--nproc", str(nproc), "--all-ranks", "--", entry)
    assert r.returncode == 0, r.stdout + r.stderr
    out = [json.loads(line[line.index("{"):]) for line in r.stdout.splitlines() if "{\"entry\"" in line]
    assert out, r.stdout
    return out


@pytest.mark.parametrize("nproc", [2, 4])
def test_tensor_parallel_mlp_matches_one_rank(nproc):
    out = lines(nproc, "tp")
    assert sorted(o["rank"] for o in out) == list(range(nproc))
    for o in out:
        assert abs(o["loss"] - o["loss_whole"]) < 1e-5, o
        assert o["w1"] < 1e-5 and o["w2"] < 1e-5, o


@pytest.mark.parametrize("nproc", [2, 4])
def test_fsdp_mlp_matches_one_rank(nproc):
    out = lines(nproc, "fsdp")
    assert sorted(o["rank"] for o in out) == list(range(nproc))
    for o in out:
        assert abs(o["loss"] - o["loss_whole"]) < 1e-5, o
        assert o["w1"] < 1e-5 and o["w2"] < 1e-5, o


def test_each_collectives_gradient_is_its_adjoint():
    out = lines(4, "adjoints")
    ops = {o["op"] for o in out}
    assert ops == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}, ops
    for o in out:
        assert o["diff"] < 1e-5, o

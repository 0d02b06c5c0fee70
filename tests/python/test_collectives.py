"""End-to-end: the collective experiments run as N ranks through `neuronlab run --nproc N`.

tp-mlp's tensor-parallel result must not depend on how many ranks split it, and every rank must
hold the same bits after the all_reduce. mesh-4x8's layout (coordinates and groups of every one
of its 32 ranks) is checked against numpy's `arange(32).reshape(8, 4)`, which is how torch's
DeviceMesh lays ranks out.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from test_experiments import module, run, tensor_after

# `[rank3]: ` for one rank, `[ranks 0-2, 5]: ` for a line several ranks printed alike.
PREFIX = re.compile(r"^\[ranks? ?([\d, -]+)\]: ", re.MULTILINE)


def ranks_of(label: str) -> list[int]:
    """The ranks a prefix names: `3`, or `0-2, 5` (ranges and single ranks)."""
    ranks = []
    for part in label.split(", "):
        first, _, last = part.partition("-")
        ranks.extend(range(int(first), int(last or first) + 1))
    return ranks


def by_rank(stdout: str) -> dict[int, str]:
    """Each rank's output with its `[rankN]: ` and `[ranks ...]: ` prefixes removed."""
    lines: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        m = PREFIX.match(line)
        assert m, f"an unprefixed line in a multi-rank run: {line!r}"
        for rank in ranks_of(m.group(1)):
            lines.setdefault(rank, []).append(line[m.end() :])
    return {rank: "\n".join(ls) + "\n" for rank, ls in lines.items()}


def tp_mlp(nproc: int, *flags: str) -> dict[int, str]:
    r = run(module("tp-mlp"), "--nproc", str(nproc), *flags)
    assert r.returncode == 0, r.stderr
    if nproc == 1:
        assert not PREFIX.search(r.stdout), "a single rank prints without prefixes"
        return {0: r.stdout}
    return by_rank(r.stdout)


def test_tp_mlp_result_does_not_depend_on_the_number_of_ranks():
    results = {}
    for nproc in [1, 2, 3, 4, 8]:
        out = tp_mlp(nproc)
        assert list(out) == [0], "only rank 0 prints by default"
        text = out[0]
        assert "tp-mlp: OK" in text, text
        # The column-parallel shard of W1 [16, 64] on rank 0 follows torch.chunk.
        cols = -(-64 // nproc)
        assert f"W1 [16, 64] as Shard(1), column-parallel: local shard [16, {cols}]" in text
        diff = float(re.search(r"max \|y_tp - y_ref\| = (\S+)", text).group(1))
        y = tensor_after(text, "y = relu")
        assert y.size == 8 * 16
        assert diff <= 1e-5 * np.abs(y).max()
        results[nproc] = y
    for nproc, y in results.items():
        # Splitting changes only the order of the float sums.
        np.testing.assert_allclose(y, results[1], rtol=1e-4, atol=1e-4, err_msg=f"nproc {nproc}")


def test_tp_mlp_every_rank_holds_the_same_result():
    out = tp_mlp(4, "--all-ranks")
    assert sorted(out) == [0, 1, 2, 3]
    ys = [out[r].split("y = relu", 1)[1].split("the forward pass")[0] for r in range(4)]
    for r, y in enumerate(ys):
        assert f"device=neuron:{r})" in y, "each rank's result lives on its own core"
    # The all_reduce gives every rank the same bits, so the printed values are identical.
    ys = [re.sub(r"device=neuron:\d+", "", y) for y in ys]
    assert ys[1:] == ys[:1] * 3
    for r in range(4):
        assert "tp-mlp: OK" in out[r]


def test_mesh_4x8_lays_out_32_ranks_like_torch_and_moves_exact_data():
    r = run(module("mesh-4x8"), "--nproc", "32", "--all-ranks")
    assert r.returncode == 0, r.stderr
    out = by_rank(r.stdout)
    assert sorted(out) == list(range(32))
    mesh = np.arange(32).reshape(8, 4)  # dims ("fsdp", "tp")
    for rank, text in out.items():
        fsdp, tp = map(int, np.argwhere(mesh == rank)[0])
        assert f"rank {rank} of 32: coordinates fsdp={fsdp}, tp={tp}" in text, text
        tp_group = ", ".join(map(str, mesh[fsdp, :]))
        fsdp_group = ", ".join(map(str, mesh[:, tp]))
        assert f"tp group: group tp [{tp_group}]" in text, text
        assert f"fsdp group: group fsdp [{fsdp_group}]" in text, text
        # FSDP shards P [64, 32] by rows over the 8 fsdp ranks: 8 rows each.
        assert "local shard [8, 32]" in text
        assert "all-gather of the sharded parameter: exact" in text
        assert "reduce-scatter of the gradient: exact" in text
        expected = [float(mesh[fsdp, :].sum()), 4.0]
        assert f"over the tp group: {expected}" in text, text
        assert "mesh-4x8: OK" in text
    # What all 32 ranks print alike shows once, with the ranks that printed it.
    assert r.stdout.count("mesh-4x8: OK") == 1, r.stdout
    assert "[ranks 0-31]: mesh-4x8: OK" in r.stdout, r.stdout
    # Every rank's collectives are counted in the summary on stderr.
    m = re.search(r"collectives (\d+)", r.stderr)
    assert m and int(m.group(1)) % 32 == 0, r.stderr


def test_mesh_4x8_refuses_a_world_of_the_wrong_size():
    r = run(module("mesh-4x8"), "--nproc", "8")
    assert r.returncode != 0
    assert "run it with `neuronlab run mesh-4x8.wasm --nproc 32`" in r.stdout
    assert "all 8 ranks" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--nproc", "65"], "cannot start 65 rank(s)"),
        (["--nproc", "2", "--collective-timeout", "soon"], "--collective-timeout: 'soon' is not a timeout"),
    ],
)
def test_bad_launch_options_say_what_to_do(flags, message):
    r = run(module("tp-mlp"), *flags)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr

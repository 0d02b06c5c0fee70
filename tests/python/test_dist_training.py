"""Gradients through collectives, end to end: the dist-grad guest (tests/guests/dist-grad) runs
as N ranks under `neuronlab run --nproc N` and compares, on every rank, a sharded computation's
loss and gradients with the same model computed whole.

Tolerances: the sharded and whole computations sum the same f32 products in different orders
(a matmul split over ranks, then reduced in group order), so they agree to a few ulps of the
values involved: 1e-5 absolute on losses and gradients of size O(1).
"""

from __future__ import annotations

import json
import re

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


STEPS = 20


@pytest.fixture(scope="module")
def tp_model(tmp_path_factory):
    """A tiny Llama whose heads (8, kv 4), MLP width (96) and vocabulary (128) split over 4
    tensor-parallel ranks, the batch (8 sequences) over 8 FSDP ranks, and its 1-rank losses."""
    import numpy as np

    import llama_reference as ref

    root = tmp_path_factory.mktemp("sharded")
    c = ref.config(vocab_size=128, hidden_size=64, intermediate_size=96, num_attention_heads=8, num_key_value_heads=4)
    weights = ref.random_weights(c, 41)
    ref.write_folder(root / "m", c, weights, "f32")
    (root / "out").mkdir()
    rng = np.random.default_rng(41)
    ids = ";".join(",".join(str(int(t)) for t in rng.integers(0, 128, size=10)) for _ in range(8))
    r = run(module("model-check"), "--dir", str(root / "m"), "--dir-rw", str(root / "out"), "--", "train", ids, str(STEPS), "out/one")
    assert r.returncode == 0, r.stdout + r.stderr
    losses = [float(x) for x in re.findall(r"^eager step \d+ loss (\S+)$", r.stdout, re.M)]
    assert len(losses) == STEPS and losses[-1] < 0.5 * losses[0], r.stdout
    return root, c, ids, losses


@pytest.mark.parametrize("tp,fsdp", [(4, 1), (1, 8), (4, 8)])
def test_sharded_fine_tuning_matches_one_rank(tp_model, tp, fsdp):
    """The same model, data and seed on tp x fsdp ranks: the loss per step equals the 1-rank
    run's within 2e-5 relative. Both compute in f32; the sharded run splits matmuls over the
    tensor-parallel ranks and averages the FSDP ranks' gradients, so sums are ordered
    differently (a few ulps per step, which AdamW's normalized steps do not amplify over 20
    steps at this size). The consolidated checkpoint has every tensor whole, and its logits
    are the 1-rank model's after the same steps."""
    import numpy as np
    from safetensors.numpy import load_file

    import llama_reference as ref

    root, c, ids, losses = tp_model
    out = f"out/tp{tp}-fsdp{fsdp}"
    r = run(
        module("model-check"), "--nproc", str(tp * fsdp), "--dir", str(root / "m"), "--dir-rw", str(root / "out"),
        "--", "sharded", ids, str(STEPS), out, "--tp", str(tp), "--fsdp", str(fsdp),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    sharded = [float(x) for x in re.findall(r"^(?:\[rank0\]: )?sharded step \d+ loss (\S+)$", r.stdout, re.M)]
    assert len(sharded) == STEPS, r.stdout
    np.testing.assert_allclose(sharded, losses, rtol=2e-5)

    one = load_file(root / "out" / "one" / "model.safetensors")
    tuned = load_file(root / "out" / f"tp{tp}-fsdp{fsdp}" / "model.safetensors")
    assert sorted(tuned) == sorted(one)
    for name in one:
        assert tuned[name].shape == one[name].shape, name
    seq = [int(t) for t in ids.split(";")[0].split(",")]
    np.testing.assert_allclose(ref.logits(c, tuned, seq, "f32"), ref.logits(c, one, seq, "f32"), atol=1e-3)

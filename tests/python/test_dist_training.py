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


UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9, "B": 1, "KiB": 1024, "MiB": 1024**2}
# trn2.48xlarge at LNC=2: 4 logical cores per chip; on-chip DMA 3.5 TB/s over 4 cores,
# NeuronLink 1.28 TB/s per chip over 4 cores; 2 µs per ring step.
ON_CHIP, NEURONLINK, STEP = 3.5e12 / 4, 1.28e12 / 4, 2e-6


def test_one_steps_collectives_are_megatrons_and_fsdps_with_ring_costs(tp_model):
    """One training step on a [2, 4] mesh (TP over the 4 cores of a chip, FSDP across the two
    chips): per rank, Megatron's all-reduces of [batch, seq, hidden] activations (the
    vocabulary-parallel embedding and two per layer forward; two per layer and the LM head's
    input backward), the LM head's logits all-gathered, one FSDP all-gather per parameter use
    in forward and, as FSDP2 reshards the decoder layers after forward, one more for each
    layer parameter in backward (the root's embedding, final norm and LM head stay gathered),
    a reduce-scatter per parameter in backward, and the loss averaged; each modeled time is the ring
    formula of its bytes over its slowest link (on-chip for TP, NeuronLink for FSDP). At
    these sizes the ring's step latency dominates the bandwidth term."""
    root, c, ids, _ = tp_model
    tp, fsdp = 4, 2
    r = run(
        module("model-check"), "--nproc", str(tp * fsdp), "--dir", str(root / "m"), "--dir-rw", str(root / "out"),
        "--", "sharded", ids, "1", "-", "--tp", str(tp), "--fsdp", str(fsdp), env={"NEURONLAB_LOGS": "collectives"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    pattern = (r"^\[collectives\] neuron:0 (\w+) over (tp|fsdp) \[[\d, ]+\]: ([\d.]+) (B|KiB|MiB), "
               r"host \S+ \S+, modeled ([\d.]+) (s|ms|µs|ns)$")
    calls = [(op, dim, float(b) * UNITS[bu], float(t) * UNITS[tu])
             for op, dim, b, bu, t, tu in re.findall(pattern, r.stderr, re.M)]
    assert calls, r.stderr

    layers, hidden, vocab = c["num_hidden_layers"], c["hidden_size"], c["vocab_size"]
    batch = len(ids.split(";")) // fsdp
    seq = len(ids.split(";")[0].split(","))
    activation = batch * seq * hidden * 4
    d = c["hidden_size"] // c["num_attention_heads"]
    q, kv, inter = c["num_attention_heads"] * d, c["num_key_value_heads"] * d, c["intermediate_size"]
    # Each parameter's tensor-parallel slice, then padded to equal FSDP chunks of dim 0.
    slices = [(q // tp, hidden), (kv // tp, hidden), (kv // tp, hidden), (hidden, q // tp),
              (inter // tp, hidden), (inter // tp, hidden), (hidden, inter // tp), (hidden,), (hidden,)] * layers
    slices += [(vocab // tp, hidden), (hidden,), (vocab // tp, hidden)]
    padded = [(-(-s[0] // fsdp) * fsdp) * (s[1] if len(s) > 1 else 1) * 4 for s in slices]

    by_kind = {}
    for op, dim, nbytes, _ in calls:
        by_kind.setdefault((op, dim), []).append(nbytes)
    assert by_kind[("all_reduce", "tp")] == [activation] * (4 * layers + 2), by_kind
    # Events count each rank's input bytes; an all-gather's ring moves its output.
    assert by_kind[("all_gather", "tp")] == [batch * seq * vocab // tp * 4]
    gathered = padded + padded[: 9 * layers]
    assert sorted(by_kind[("all_gather", "fsdp")]) == sorted(p // fsdp for p in gathered)
    assert sorted(by_kind[("reduce_scatter", "fsdp")]) == sorted(padded)
    assert by_kind[("all_reduce", "fsdp")] == [4]  # the loss, averaged for printing

    for op, dim, nbytes, modeled in calls:
        n, bandwidth = (tp, ON_CHIP) if dim == "tp" else (fsdp, NEURONLINK)
        if op == "all_reduce":
            expected = 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * STEP
        elif op == "all_gather":
            expected = (n - 1) / n * (n * nbytes) / bandwidth + (n - 1) * STEP
        else:
            expected = (n - 1) / n * nbytes / bandwidth + (n - 1) * STEP
        # The log prints three significant digits.
        assert abs(modeled - expected) <= 0.006 * expected, (op, dim, nbytes, modeled, expected)

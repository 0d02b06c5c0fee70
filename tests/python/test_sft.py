"""The sft experiment end to end (notebooks/experiments/sft): a tiny Llama fine-tuned on
one-digit addition written as text, on one rank (its step compiled) and sharded over a
device mesh, with TRL's three ways to batch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from test_experiments import module, run


def sft_run(*args: str, nproc: int = 1, grant: Path | None = None):
    granted = ["--dir-rw", str(grant)] if grant else []
    return run(module("sft"), "--nproc", str(nproc), "--deadline", "600", *granted, "--", *args)


def sft(*args: str, nproc: int = 1, grant: Path | None = None) -> str:
    r = sft_run(*args, nproc=nproc, grant=grant)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"^(?:\[rank0\]: )?step \d+ loss (\S+)$", stdout, re.M)]


def test_the_model_learns_addition():
    out = sft("--steps", "100", "--batch", "32", "--packing", "none", "--lr", "5e-3")
    curve = losses(out)
    assert len(curve) == 100 and curve[-1] < 0.3 * curve[0], out
    before = float(re.search(r"^accuracy before: ([\d.]+)$", out, re.M).group(1))
    after = float(re.search(r"^accuracy after: ([\d.]+)$", out, re.M).group(1))
    # All 100 sums, answered greedily: about chance before, most of them after.
    assert before <= 0.05 and after >= 0.5, out
    assert "sft_step: 100 calls, 1 compile(s), 99 cache hits" in out


@pytest.mark.parametrize("tp,fsdp", [(2, 2), (4, 8)])
def test_sharded_sft_matches_one_rank(tp, fsdp):
    """The same batches on tp x fsdp ranks give the 1-rank losses within 1e-5 relative
    (f32; sums ordered differently). The loss is each rank's token sum over the whole batch's
    token count, so ranks with fewer labelled tokens weigh no more than one rank would."""
    args = ["--steps", "6", "--batch", "8", "--packing", "none", "--lr", "5e-3"]
    one = losses(sft(*args))
    sharded = losses(sft(*args, "--tp", str(tp), "--fsdp", str(fsdp), nproc=tp * fsdp))
    assert len(one) == len(sharded) == 6
    np.testing.assert_allclose(sharded, one, rtol=1e-5)


def test_bf16_mixed_precision_fsdp_8_matches_one_rank_with_the_same_policy():
    """FSDP2's mixed precision (param_dtype bf16, reduce_dtype f32): 20 steps at FSDP 8 give
    the losses of the 1-rank run under the same policy within 2e-3 relative. The f32 shards
    and f32 gradient reductions agree to f32 rounding, but each forward rounds the parameters
    to bf16 (unit roundoff 2^-9, about 2e-3), so a parameter an f32 ulp either side of a bf16
    rounding boundary computes one bf16 ulp apart; 2e-3 is that one ulp. The policy is really
    applied: its first loss differs from the f32 run's, and the MFU is against the BF16 peak."""
    args = ["--steps", "20", "--batch", "8", "--packing", "none", "--mixed-precision", "bf16"]
    one_out = sft(*args)
    one = losses(one_out)
    sharded = losses(sft(*args, "--fsdp", "8", nproc=8))
    f32 = losses(sft("--steps", "1", "--batch", "8", "--packing", "none"))
    assert len(one) == len(sharded) == 20
    np.testing.assert_allclose(sharded, one, rtol=2e-3)
    assert one[-1] < 0.6 * one[0], one
    assert f32[0] != one[0] and abs(f32[0] - one[0]) < 1e-2 * f32[0], (f32[0], one[0])
    assert "(BF16, the dtype the model computes in)" in one_out, one_out


def test_packing_decides_the_compile_count():
    """Wrapped packing and padding to 128 give one batch shape, so one compile; padding to
    each batch's longest example compiles once per length seen."""
    counts = {}
    for packing in ("wrapped", "pad128", "none"):
        out = sft("--steps", "6", "--batch", "2", "--packing", packing)
        shapes = re.search(r"^batch shapes: (.*)$", out, re.M).group(1)
        compiles = int(re.search(r"^sft_step: 6 calls, (\d+) compile\(s\)", out, re.M).group(1))
        counts[packing] = (shapes, compiles)
    assert counts["wrapped"] == ("[2, 128]", 1)
    assert counts["pad128"] == ("[2, 128]", 1)
    shapes, compiles = counts["none"]
    assert compiles == len(re.findall(r"\[2, \d+\]", shapes)) >= 2, counts


def test_sequence_parallelism_gives_tps_losses_and_shards_the_activations():
    """`--sequence-parallel` (Megatron's, torch's SequenceParallel) on TP 4: between the
    blocks each rank holds a quarter of the sequence, the norms run on it, and TP's
    all-reduces become an all-gather before the column-parallel layers and a reduce-scatter
    after the row-parallel ones. The same sums in the same fold order, so the same losses
    (within 1e-6, relative); and each core's activations at its peak are fewer."""
    args = ["--steps", "4", "--batch", "8", "--tp", "4"]
    tp = sft(*args, nproc=4)
    sp = sft(*args, "--sequence-parallel", nproc=4)
    assert len(losses(sp)) == 4 and losses(sp) == pytest.approx(losses(tp), rel=1e-6), (tp, sp)
    tp_peak, sp_peak = peak_table(tp), peak_table(sp)
    assert sorted(sp_peak) == list(range(4)), sp
    for core in range(4):
        assert sp_peak[core]["activations"] < tp_peak[core]["activations"], (core, tp_peak, sp_peak)
        assert sp_peak[core]["parameters"] == tp_peak[core]["parameters"], (core, tp_peak, sp_peak)


def test_the_eager_one_rank_step_gives_the_compiled_steps_losses():
    """`--eager` runs the one-rank step as the sharded steps run, op by op: the same losses,
    bit for bit, as the compiled step (fusion keeps each op's rounding)."""
    compiled = sft("--steps", "4")
    eager = sft("--steps", "4", "--eager")
    assert "sft_step: eager (--eager)" in eager, eager
    assert "sft_step: 4 calls, 1 compile(s), 3 cache hits" in compiled, compiled
    assert len(losses(eager)) == 4 and losses(eager) == losses(compiled), (eager, compiled)


def test_bad_arguments_are_clear_errors():
    r = run(module("sft"), "--nproc", "2", "--", "--tp", "4")
    assert r.returncode != 0
    assert "--tp 4 --fsdp 1 needs 4 ranks, and this run has 2; give --nproc 4" in r.stdout + r.stderr


def state_table(stdout: str) -> dict[int, tuple[int, int, int]]:
    rows = re.findall(r"^(?:\[rank0\]: )?neuron:(\d+) +(\d+) +(\d+) +(\d+)$", stdout, re.M)
    return {int(r): (int(p), int(g), int(o)) for r, p, g, o in rows}


def test_fsdp_8_holds_an_eighth_of_the_training_state_per_core():
    """Per core at FSDP 8, parameters and gradients are 1/8 of the unsharded run's (every
    dim 0 of this model divides by 8, so torch.chunk's padding is 0), and AdamW's moments
    too; its 0-d step counts (f64, one per parameter) and learning rate stay whole on every
    rank, as in torch's FSDP2."""
    args = ["--steps", "1", "--batch", "8", "--packing", "none"]
    one = state_table(sft(*args))
    sharded = state_table(sft(*args, "--fsdp", "8", nproc=8))
    assert list(one) == [0] and sorted(sharded) == list(range(8))
    params, grads, state = one[0]
    n_params = 2 * 9 + 3  # 9 per decoder layer, the embedding, the final norm, the LM head
    scalars = 8 * (n_params + 1)
    assert state == 2 * params + scalars
    for core, (p, g, o) in sharded.items():
        assert (p, g) == (params // 8, grads // 8), core
        assert o == (state - scalars) // 8 + scalars, core


def step_cost(stdout: str) -> dict[str, float]:
    step = re.search(
        r"^(?:\[rank0\]: )?modeled step: ([\d.]+) ms on the slowest rank = compute ([\d.]+) ms "
        r"\+ exposed communication ([\d.]+) ms \(communication ([\d.]+) ms, ([\d.]+) ms of it "
        r"overlapping compute\)",
        stdout,
        re.M,
    )
    rate = re.search(
        r"^(?:\[rank0\]: )?modeled throughput: (\d+) tokens/s; MFU ([\d.]+)% of (\d+) core\(s\) "
        r"at ([\d.]+) TFLOPS each",
        stdout,
        re.M,
    )
    assert step and rate, stdout
    return {
        "step_ms": float(step.group(1)),
        "compute_ms": float(step.group(2)),
        "exposed_ms": float(step.group(3)),
        "comm_ms": float(step.group(4)),
        "overlap_ms": float(step.group(5)),
        "tokens_per_s": float(rate.group(1)),
        "mfu": float(rate.group(2)) / 100,
        "cores": int(rate.group(3)),
        "tflops": float(rate.group(4)),
    }


def test_step_time_throughput_and_mfu_follow_from_the_model():
    """Wrapped packing trains on batch x 128 tokens a step. tokens/s is those tokens over the
    modeled step; MFU is PaLM's model FLOPs per token (6 per matmul parameter: 84,288 minus
    the 16 x 64 embedding lookup; plus 12 x layers x heads x head dim x 128 for attention)
    times tokens/s over the cores' FP32 peak (Trainium2: 181 TFLOPS a chip, 4 logical cores at
    LNC=2). The step is compute plus the communication that overlapped none of it. One rank
    communicates nothing; TP over 4 ranks does, and its all-reduces sit between the ops that
    produce and read them, so nearly all of it is exposed; FSDP over 8 ranks prefetches each
    layer's all-gathers during the layer before, so most of its communication overlaps."""
    flops_per_token = 6 * (84288 - 16 * 64) + 12 * 2 * 4 * 16 * 128
    for nproc, args in ((1, []), (4, ["--tp", "4"]), (8, ["--fsdp", "8"])):
        out = sft("--steps", "3", "--batch", "8", *args, nproc=nproc)
        c = step_cost(out)
        assert c["cores"] == nproc and c["tflops"] == pytest.approx(181 / 4, abs=0.05), c
        assert c["step_ms"] == pytest.approx(c["compute_ms"] + c["exposed_ms"], abs=2e-3), c
        assert c["comm_ms"] == pytest.approx(c["exposed_ms"] + c["overlap_ms"], abs=2e-3), c
        assert 0 <= c["exposed_ms"] <= c["comm_ms"], c
        assert c["tokens_per_s"] == pytest.approx(8 * 128 / (c["step_ms"] / 1e3), rel=1e-3), c
        peak = c["cores"] * 181e12 / 4
        # MFU prints to 4 decimals of a percent.
        want = flops_per_token * c["tokens_per_s"] / peak
        assert c["mfu"] == pytest.approx(want, rel=1e-3, abs=5e-7), c
        assert (c["comm_ms"] > 0) == (nproc > 1), c
        if nproc == 8:
            assert c["overlap_ms"] > c["exposed_ms"], c


@pytest.mark.parametrize("tp,fsdp", [(1, 1), (2, 2)])
def test_a_sharded_save_resumes_with_the_same_losses(tmp_path, tp, fsdp):
    """Four steps, a sharded save (each rank its own shards and AdamW state, as
    torch.distributed.checkpoint), and a resume to step 8 give exactly the losses of 8 steps
    in one go: the same data (the stream replayed to the saved step), parameters, moments and
    step counts. On one rank the resumed step compiles once, as the first run's did."""
    out = tmp_path / "out"
    out.mkdir()
    args = ["--batch", "8", "--lr", "5e-3", "--tp", str(tp), "--fsdp", str(fsdp)]
    n = tp * fsdp
    straight = losses(sft("--steps", "8", *args, nproc=n))
    first = sft("--steps", "4", *args, "--save-sharded", "out/state", nproc=n, grant=out)
    resumed_out = sft("--steps", "8", *args, "--resume", "out/state", nproc=n, grant=out)
    assert "resumed from out/state at step 4" in resumed_out, resumed_out
    assert losses(first) == straight[:4]
    assert losses(resumed_out) == straight[4:], (straight, resumed_out)
    if n == 1:
        assert "sft_step: 4 calls, 1 compile(s), 3 cache hits" in resumed_out, resumed_out
    # Standard safetensors files, one per rank, that Python reads.
    files = sorted((out / "state").iterdir())
    assert [f.name for f in files] == [f"rank-{r:05}-of-{n:05}.safetensors" for r in range(n)]
    with safe_open(files[-1], "np") as f:
        meta = f.metadata()
        names = list(f.keys())
        q = f.get_tensor("model.model.layers.0.self_attn.q_proj.weight")
        moment = f.get_tensor("optim.state.0.exp_avg")
        step = f.get_tensor("optim.state.0.step")
    assert meta["step"] == "4" and meta["mesh"] == f"[fsdp {fsdp}, tp {tp}]", meta
    # q_proj is [64, 64], column-parallel over tp, then its rows sharded over fsdp.
    assert q.shape == (64 // n, 64) and q.dtype == np.float32
    assert step.shape == () and step == 4.0 and moment.dtype == np.float32
    assert "optim.param_groups.0.lr" in names


def test_a_resume_on_another_mesh_or_at_its_own_step_is_a_clear_error(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    sft("--steps", "2", "--tp", "2", "--fsdp", "2", "--save-sharded", "out/s", nproc=4, grant=out)
    cases = [
        (4, ["--tp", "4", "--steps", "4"], "saved with mesh [fsdp 2, tp 2] and this run has [fsdp 1, tp 4]"),
        (1, ["--steps", "4"], "the state was saved by 4 ranks and this run has 1"),
        (4, ["--tp", "2", "--fsdp", "2", "--steps", "2"], "the state is at step 2, so --steps 2 leaves nothing"),
        (4, ["--tp", "2", "--fsdp", "2", "--steps", "4", "--seed", "3"], "saved with seed 0 and this run has 3"),
    ]
    for nproc, args, message in cases:
        r = sft_run(*args, "--resume", "out/s", nproc=nproc, grant=out)
        assert r.returncode != 0 and message in r.stdout + r.stderr, (args, r.stdout + r.stderr)


def test_save_writes_a_hugging_face_folder_python_reads(tmp_path):
    """`--save` on the sharded run writes the consolidated model: config.json and
    model.safetensors with every parameter whole under its Hugging Face name."""
    out = tmp_path / "out"
    out.mkdir()
    sft("--steps", "2", "--tp", "2", "--fsdp", "2", "--save", "out/ckpt", nproc=4, grant=out)
    config = json.loads((out / "ckpt" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["hidden_size"] == 64
    with safe_open(out / "ckpt" / "model.safetensors", "np") as f:
        assert f.metadata() == {"format": "pt"}
        shapes = {k: f.get_slice(k).get_shape() for k in f.keys()}
    assert len(shapes) == 2 * 9 + 3
    assert shapes["model.embed_tokens.weight"] == [16, 64]
    assert shapes["model.layers.1.mlp.down_proj.weight"] == [64, 128]
    assert shapes["lm_head.weight"] == [16, 64]


def peak_table(stdout: str) -> dict[int, dict[str, int]]:
    roles = ["parameters", "gradients", "optimizer state", "activations", "collective buffers", "other", "peak"]
    rows = re.findall(r"^(?:\[rank0\]: )?neuron:(\d+)((?: +\d+){7})$", stdout, re.M)
    return {int(r): dict(zip(roles, map(int, v.split()))) for r, v in rows}


def test_each_cores_peak_by_role_is_the_hosts_accounting():
    """The host counts every byte of a core under one role. At FSDP 8 each core's peak holds
    an eighth of the parameters and of AdamW's moments (their whole 0-d step counts and
    learning rate aside, as the state table's test states), the activations saved for
    backward, and the all-gathered parameters as collective buffers. The roles sum to the
    peak.

    With FSDP2's reshard_after_forward (the default) a decoder layer's gathered parameters
    are freed after its forward and gathered again for its backward, one parameter ahead of
    the walk, so a core's gathered parameters at its peak are at most the root's (embedding,
    LM head, final norm: 2 x 16 x 64 + 64 f32, never resharded) and one decoder layer's
    (4 x 64 x 64 + 3 x 64 x 128 + 2 x 64 f32). Without it every gathered copy lives until
    backward: all of the parameters. Either way the losses are the same bits, and resharding
    costs one more all-gather per decoder-layer parameter (9 per layer, 2 layers) per step
    on each of the 8 ranks."""
    args = ["--steps", "2", "--batch", "8", "--packing", "none"]
    one_out = sft(*args)
    eight_run = sft_run(*args, "--fsdp", "8", nproc=8)
    kept_run = sft_run(*args, "--fsdp", "8", "--reshard-after-forward", "false", nproc=8)
    assert eight_run.returncode == kept_run.returncode == 0, eight_run.stderr + kept_run.stderr
    eight_out, kept_out = eight_run.stdout, kept_run.stdout
    one, eight, kept = peak_table(one_out), peak_table(eight_out), peak_table(kept_out)
    assert list(one) == [0] and sorted(eight) == sorted(kept) == list(range(8)), eight_out
    params, _, state = state_table(one_out)[0]
    assert one[0]["parameters"] == params and one[0]["optimizer state"] == state, one_out
    scalars = 8 * (2 * 9 + 3 + 1)
    root = 4 * (2 * 16 * 64 + 64)
    layer = 4 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64)
    assert params == root + 2 * layer, (params, root, layer)
    for core in range(8):
        for table in (eight, kept):
            row = table[core]
            assert sum(v for k, v in row.items() if k != "peak") == row["peak"], row
            assert row["parameters"] == params // 8, (core, row)
            assert row["optimizer state"] == (state - scalars) // 8 + scalars, (core, row)
            assert row["activations"] > 0, (core, row)
        assert eight[core]["collective buffers"] <= root + layer, (core, eight[core])
        assert kept[core]["collective buffers"] >= params, (core, kept[core])
    assert losses(eight_out) == losses(kept_out), (eight_out, kept_out)

    def collectives(r) -> int:
        summary = re.search(r"^-- collectives (\d+)", r.stdout + r.stderr, re.M)
        assert summary, r.stdout + r.stderr
        return int(summary.group(1))

    assert collectives(eight_run) - collectives(kept_run) == 2 * 9 * 2 * 8

"""End-to-end: Llama-family causal LMs loaded from Hub-style checkpoint folders by the
`generate` experiment (a real wasm guest on `neuronlab run`), checked against an independent
numpy Llama (tests/python/llama_reference.py) on random tiny checkpoints written with Python's
safetensors package.

Each step's next-token logits (`--dump`) are compared with the reference's logits for the
same sequence, for several configs (grouped-query and not, tied and untied embeddings, odd
sizes, an explicit head_dim, llama3 rope scaling, a sharded folder), in f32 and bf16, with a
static and a dynamic cache. Tolerances: f32 logits within 2e-5 of the reference (both sides
compute in f32 or better; logits are O(1)); bf16 within 6% of the logits' scale plus argmax
agreement where the reference's top two differ by more than that (every op rounds to bf16,
and the two sides may round at different points in an accumulation).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import llama_reference as ref
from test_experiments import module, run

CONFIGS = {
    "gqa": ref.config(),
    "mha-tied": ref.config(
        vocab_size=128, hidden_size=48, intermediate_size=100, num_hidden_layers=3,
        num_attention_heads=3, num_key_value_heads=3, tie_word_embeddings=True,
    ),
    "mqa-odd-head-dim": ref.config(
        vocab_size=61, hidden_size=40, intermediate_size=70, num_attention_heads=4,
        num_key_value_heads=1, head_dim=6, rms_norm_eps=1e-6, rope_theta=500000.0,
    ),
    "llama3-rope": ref.config(
        rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8,
        },
    ),
}


def generate(folder: Path, out: Path, *args: str) -> tuple[str, list[int]]:
    """Runs the generate experiment on `folder`; its output (stdout, then stderr) and the
    generated tokens."""
    r = run(module("generate"), "--dir", str(folder), "--dir-rw", str(out), "--", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^tokens: ([\d,]*)$", r.stdout, re.M)
    assert m, r.stdout
    return r.stdout + r.stderr, [int(t) for t in m.group(1).split(",") if t]


def compiles(stdout: str, part: str) -> dict[str, int]:
    m = re.search(
        rf"^{part} \((\w+) cache\): (\d+) calls, (\d+) compile\(s\), (\d+) cache hits, (\d+) eager calls$",
        stdout, re.M,
    )
    assert m, stdout
    return dict(zip(["calls", "compiles", "cache_hits", "eager_calls"], map(int, m.groups()[1:])))


def check_against_reference(c, weights, dtype, prompt, tokens, dumped):
    """Teacher-forced on our tokens: each step's logits against the reference's."""
    seq = list(prompt)
    assert len(dumped) == len(tokens)
    for step, token in enumerate(tokens):
        expected = ref.logits(c, weights, seq, dtype)[-1]
        got = dumped[f"step.{step}"]
        assert got.dtype == np.float32 and got.shape == (c["vocab_size"],)
        if dtype == "f32":
            np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5, err_msg=f"step {step}")
            assert token == int(np.argmax(got))
        else:
            scale = float(np.abs(expected).max())
            np.testing.assert_allclose(got, expected, rtol=0, atol=0.06 * scale, err_msg=f"step {step}")
            top2 = np.sort(expected)[-2:]
            if top2[1] - top2[0] > 0.06 * scale:
                assert token == int(np.argmax(expected)), f"step {step}"
        seq.append(token)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_logits_match_the_numpy_reference(tmp_path, name, dtype):
    c = CONFIGS[name]
    seed = sorted(CONFIGS).index(name) * 10 + (dtype == "bf16")
    weights = ref.random_weights(c, seed)
    folder = tmp_path / "tiny-llama"
    # One config goes as a sharded folder with an index.
    ref.write_folder(folder, c, weights, dtype, shard_bytes=20000 if name == "gqa" else 0)
    out = tmp_path / "out"
    out.mkdir()
    rng = np.random.default_rng(seed)
    prompt = [int(t) for t in rng.integers(0, c["vocab_size"], size=int(rng.integers(1, 9)))]
    results = {}
    for cache in ["static", "dynamic"]:
        stdout, tokens = generate(
            folder, out, "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", "5",
            "--cache", cache, "--dump", f"out/{cache}.safetensors",
        )
        assert len(tokens) == 5 or tokens[-1] == c["eos_token_id"], stdout
        check_against_reference(c, weights, dtype, prompt, tokens, load_file(out / f"{cache}.safetensors"))
        results[cache] = tokens
    assert results["static"] == results["dynamic"]


def test_a_prompt_across_a_bucket_boundary_matches_the_reference(tmp_path):
    """A 130-token prompt pads to a 256-token prefill bucket in the static cache."""
    c = CONFIGS["gqa"]
    weights = ref.random_weights(c, 7)
    ref.write_folder(tmp_path / "m", c, weights, "f32")
    (tmp_path / "out").mkdir()
    prompt = [int(t) for t in np.random.default_rng(7).integers(3, c["vocab_size"], size=130)]
    stdout, tokens = generate(
        tmp_path / "m", tmp_path / "out", "--prompt-ids", ",".join(map(str, prompt)),
        "--max-new-tokens", "3", "--cache", "static", "--dump", "out/l.safetensors",
    )
    check_against_reference(c, weights, "f32", prompt, tokens, load_file(tmp_path / "out" / "l.safetensors"))
    assert compiles(stdout, "decode")["compiles"] == 1


def test_static_compiles_once_and_dynamic_recompiles_per_token(tmp_path):
    c = CONFIGS["gqa"]
    ref.write_folder(tmp_path / "m", c, ref.random_weights(c, 3), "f32")
    (tmp_path / "out").mkdir()
    outs = {}
    for cache in ["static", "dynamic"]:
        stdout, tokens = generate(
            tmp_path / "m", tmp_path / "out", "--prompt-ids", "1,5,9,3", "--max-new-tokens", "12",
            "--cache", cache,
        )
        outs[cache] = (stdout, tokens)
    static, dynamic = outs["static"][0], outs["dynamic"][0]
    assert outs["static"][1] == outs["dynamic"][1]
    assert len(outs["static"][1]) == 12
    assert compiles(static, "prefill") == {"calls": 1, "compiles": 1, "cache_hits": 0, "eager_calls": 0}
    assert compiles(static, "decode") == {"calls": 11, "compiles": 1, "cache_hits": 10, "eager_calls": 0}
    # Every decode step is a new cache length: the first compile, 8 recompiles (the limit),
    # then eager calls.
    assert compiles(dynamic, "decode") == {"calls": 11, "compiles": 9, "cache_hits": 0, "eager_calls": 2}
    assert "'decode (dynamic cache)' reached its recompile limit (8); it runs eagerly" in dynamic
    assert "input 3 'past_key_values.0.key' shape changed" in dynamic
    assert "recompile limit" not in static


def test_prefill_compiles_once_per_128_token_bucket(tmp_path):
    """Prompts of 5 and 100 tokens share the 128 bucket; 130 tokens needs the 256 one. One
    static cache length serves all three, so decode compiles once."""
    c = CONFIGS["gqa"]
    weights = ref.random_weights(c, 9)
    ref.write_folder(tmp_path / "m", c, weights, "f32")
    (tmp_path / "out").mkdir()
    rng = np.random.default_rng(9)
    prompts = [[int(t) for t in rng.integers(3, c["vocab_size"], size=n)] for n in (5, 100, 130)]
    args = [a for p in prompts for a in ("--prompt-ids", ",".join(map(str, p)))]
    stdout, _ = generate(tmp_path / "m", tmp_path / "out", *args, "--max-new-tokens", "3", "--dump", "out/l.safetensors")
    assert compiles(stdout, "prefill") == {"calls": 3, "compiles": 2, "cache_hits": 1, "eager_calls": 0}
    assert compiles(stdout, "decode") == {"calls": 6, "compiles": 1, "cache_hits": 5, "eager_calls": 0}
    dumped = load_file(tmp_path / "out" / "l.safetensors")
    lines = re.findall(r"^tokens: ([\d,]*)$", stdout, re.M)
    for p, (prompt, line) in enumerate(zip(prompts, lines)):
        tokens = [int(t) for t in line.split(",")]
        steps = {f"step.{i}": dumped[f"prompt.{p}.step.{i}"] for i in range(len(tokens))}
        check_against_reference(c, weights, "f32", prompt, tokens, steps)


def test_seeded_sampling_is_reproducible_and_top_k_1_is_greedy(tmp_path):
    c = CONFIGS["mha-tied"]
    ref.write_folder(tmp_path / "m", c, ref.random_weights(c, 5), "f32")
    (tmp_path / "out").mkdir()
    args = ["--prompt-ids", "4,8,15", "--max-new-tokens", "10"]

    def tokens(*extra):
        return generate(tmp_path / "m", tmp_path / "out", *args, *extra)[1]

    sampled = tokens("--sample", "--temperature", "1.5", "--top-p", "0.95", "--seed", "11")
    assert sampled == tokens("--sample", "--temperature", "1.5", "--top-p", "0.95", "--seed", "11")
    assert sampled == tokens(
        "--sample", "--temperature", "1.5", "--top-p", "0.95", "--seed", "11", "--cache", "dynamic"
    )
    others = [tokens("--sample", "--temperature", "1.5", "--seed", str(s)) for s in range(12, 16)]
    assert any(o != sampled for o in others)
    assert tokens("--sample", "--top-k", "1", "--seed", "3") == tokens()


def failing(folder: Path, out: Path, *args: str) -> str:
    r = run(module("generate"), "--dir", str(folder), "--dir-rw", str(out), "--", *args)
    assert r.returncode != 0, r.stdout
    text = r.stdout + r.stderr
    # One error, named after its kind (InvalidArgument, FsError, OpError, ...), at the source
    # line that made it (the experiment's, or the SDK's for an error made inside a loader).
    assert re.search(r"^error: [A-Z][A-Za-z]+: ", text, re.M), text
    assert re.search(r"^  at \S+\.rs:\d+:\d+$", text, re.M), text
    assert "host panic" not in text and "wasm backtrace" not in text, text
    return text


def test_bad_checkpoints_and_arguments_are_clear_errors(tmp_path):
    c = CONFIGS["gqa"]
    weights = ref.random_weights(c, 2)
    (tmp_path / "out").mkdir()
    prompt = ["--prompt-ids", "1,2,3", "--max-new-tokens", "2"]

    missing = {k: v for k, v in weights.items() if k != "model.layers.1.mlp.up_proj.weight"}
    ref.write_folder(tmp_path / "missing", c, missing, "f32")
    text = failing(tmp_path / "missing", tmp_path / "out", *prompt)
    assert "model.layers.1.mlp.up_proj.weight" in text and "expected shape [88, 64]" in text

    ref.write_folder(tmp_path / "shape", {**c, "intermediate_size": 90}, weights, "f32")
    assert "has shape [88, 64], but the config gives [90, 64]" in failing(tmp_path / "shape", tmp_path / "out", *prompt)

    extra = {**weights, "model.layers.9.extra.weight": np.zeros(3, np.float32)}
    ref.write_folder(tmp_path / "extra", c, extra, "f32")
    assert "model.layers.9.extra.weight" in failing(tmp_path / "extra", tmp_path / "out", *prompt)

    ref.write_folder(tmp_path / "config", c, weights, "f32")
    (tmp_path / "config" / "config.json").write_text(json.dumps({**c, "hidden_size": "big"}))
    assert "`hidden_size` must be an integer" in failing(tmp_path / "config", tmp_path / "out", *prompt)
    (tmp_path / "config" / "config.json").write_text('{"hidden_size": 64,')
    assert "config.json is not valid JSON" in failing(tmp_path / "config", tmp_path / "out", *prompt)

    ref.write_folder(tmp_path / "ok", c, weights, "f32")
    assert "outside the vocabulary" in failing(tmp_path / "ok", tmp_path / "out", "--prompt-ids", "1,500")
    assert "fewer than the prompt" in failing(
        tmp_path / "ok", tmp_path / "out", *prompt[:2], "--max-new-tokens", "300", "--max-cache-len", "128"
    )
    assert "unknown argument `--bogus`" in failing(tmp_path / "ok", tmp_path / "out", *prompt, "--bogus")


UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}
# trn2.48xlarge at LNC=2 (the default instance): 2.9 TB/s of HBM per chip over 4 logical cores.
HBM_BYTES_PER_S = 2.9e12 / 4
LAUNCH_S = 10e-6


def launched_ops(stdout_and_logs: str) -> list[float]:
    """The modeled seconds of every op and kernel the `ops` log shows, views (free) left out."""
    times = []
    for value, unit in re.findall(r"^\[ops\] .*, modeled ([\d.]+) (s|ms|µs|ns) \(", stdout_and_logs, re.M):
        t = float(value) * UNITS[unit]
        if t > 0:
            times.append(t)
    return times


def test_decode_time_matches_the_weights_and_kv_roofline(tmp_path):
    """One decode step with a static cache reads every weight once (one embedding row) and
    the KV cache; at batch 1 each matmul is memory-bound, so its modeled time is launches
    plus bytes over HBM bandwidth. The step is the difference between runs of 3 and 2 new
    tokens (the same prompt and cache, so the same compiled programs)."""
    c = ref.config(
        vocab_size=4096, hidden_size=1024, intermediate_size=2816, num_hidden_layers=1,
        num_attention_heads=16, num_key_value_heads=4, tie_word_embeddings=False,
    )
    weights = ref.random_weights(c, 4)
    ref.write_folder(tmp_path / "m", c, weights, "bf16")
    (tmp_path / "out").mkdir()
    runs = {}
    for n in (2, 3):
        r = run(
            module("generate"), "--dir", str(tmp_path / "m"), "--", "--prompt-ids", "1,5,9,3",
            "--max-new-tokens", str(n), "--max-cache-len", "128", env={"NEURONLAB_LOGS": "ops"},
        )
        assert r.returncode == 0, r.stdout + r.stderr
        runs[n] = (launched_ops(r.stdout + r.stderr), r.stdout)
    step = runs[3][0][len(runs[2][0]):]
    assert runs[3][0][: len(runs[2][0])] == runs[2][0], "the first two tokens ran the same ops"
    modeled = sum(step)
    launches = len(step)

    weight_bytes = 2 * sum(a.size for n, a in weights.items() if n != "model.embed_tokens.weight")
    embedding_row = 2 * c["hidden_size"]
    d = ref.head_dim(c)
    kv_bytes = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * 128 * d * 2  # K and V, bf16
    roofline = (weight_bytes + embedding_row + kv_bytes) / HBM_BYTES_PER_S
    memory_term = modeled - launches * LAUNCH_S
    # The rest of the traffic (activations, the cache written at its position) is about 2%.
    print(f"decode step: {launches} launches, memory term {memory_term * 1e6:.2f} us, roofline {roofline * 1e6:.2f} us")
    assert roofline <= memory_term <= 1.04 * roofline, (memory_term, roofline, launches)

    # The experiment's own figure, from the guest's device clock, is the same step.
    m = re.search(r"^modeled time per token: prefill [\d.]+ us, decode ([\d.]+) us over 2 steps$", runs[3][1], re.M)
    assert m, runs[3][1]
    first_decode = re.search(r"decode ([\d.]+) us over 1 steps$", runs[2][1], re.M)
    assert first_decode, runs[2][1]
    # Mean of two identical decode steps = the one measured above.
    assert abs(float(m.group(1)) * 1e-6 - modeled) < 0.2e-6 + 1e-3 * modeled


def model_check(folder: Path, out: Path, *args: str) -> str:
    r = run(module("model-check"), "--dir", str(folder), "--dir-rw", str(out), "--", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("name", ["gqa", "mha-tied"])
def test_loss_gradients_match_jax(tmp_path, name):
    """The causal-LM loss and every parameter's gradient against jax.grad of the reference
    (f32; relative to each gradient's largest entry: 1e-4)."""
    import jax
    import jax.numpy as jnp

    c = CONFIGS[name]
    weights = ref.random_weights(c, 21)
    ref.write_folder(tmp_path / "m", c, weights, "f32")
    (tmp_path / "out").mkdir()
    ids = [int(t) for t in np.random.default_rng(21).integers(0, c["vocab_size"], size=11)]
    model_check(tmp_path / "m", tmp_path / "out", "grads", ",".join(map(str, ids)), "out/grads.safetensors")
    got = load_file(tmp_path / "out" / "grads.safetensors")

    loss, grads = jax.value_and_grad(lambda w: ref.causal_lm_loss(c, w, ids, jnp))(
        {n: jnp.asarray(a) for n, a in weights.items()}
    )
    np.testing.assert_allclose(got.pop("loss"), np.asarray(loss), rtol=1e-5)
    # Tied embeddings have one parameter, so one gradient: the embedding's and the head's.
    assert sorted(got) == sorted(grads), sorted(set(got) ^ set(grads))
    for n, g in grads.items():
        g = np.asarray(g)
        np.testing.assert_allclose(got[n], g, rtol=0, atol=1e-4 * np.abs(g).max() + 1e-7, err_msg=n)


def test_finetuning_compiled_equals_eager_and_saves_a_standard_checkpoint(tmp_path):
    c = CONFIGS["gqa"]
    weights = ref.random_weights(c, 22)
    ref.write_folder(tmp_path / "m", c, weights, "f32")
    (tmp_path / "out").mkdir()
    ids = [int(t) for t in np.random.default_rng(22).integers(0, c["vocab_size"], size=12)]
    stdout = model_check(tmp_path / "m", tmp_path / "out", "train", ",".join(map(str, ids)), "6", "out/ft")
    eager = [float(x) for x in re.findall(r"^eager step \d+ loss (\S+)$", stdout, re.M)]
    compiled = [float(x) for x in re.findall(r"^compiled step \d+ loss (\S+)$", stdout, re.M)]
    assert len(eager) == 6 and eager[-1] < 0.5 * eager[0], stdout
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    assert "finetune_step: 6 calls, 1 compile(s), 5 cache hits" in stdout

    # The first loss is the reference's; the saved weights load in Python with the Hub names,
    # and the reference's loss on them is below the last step's (one more update was made).
    np.testing.assert_allclose(eager[0], ref.causal_lm_loss(c, weights, ids), rtol=1e-5)
    tuned = load_file(tmp_path / "out" / "ft" / "model.safetensors")
    assert sorted(tuned) == sorted(weights)
    assert json.loads((tmp_path / "out" / "ft" / "config.json").read_text()) == json.loads(
        (tmp_path / "m" / "config.json").read_text()
    )
    assert ref.causal_lm_loss(c, tuned, ids) < compiled[-1]


def test_text_prompts_go_through_the_folders_tokenizer(tmp_path):
    """A folder with tokenizer.json (a Llama-3-style byte-level BPE trained here): `--prompt`
    is encoded as Python's tokenizers encodes it, and the tokens are decoded as it decodes
    them."""
    from test_tokenizers import llama3

    tok = llama3()
    c = ref.config(vocab_size=tok.get_vocab_size(), eos_token_id=tok.token_to_id("<|end_of_text|>"))
    weights = ref.random_weights(c, 31)
    ref.write_folder(tmp_path / "m", c, weights, "f32")
    tok.save(str(tmp_path / "m" / "tokenizer.json"))
    (tmp_path / "out").mkdir()
    text = "Grüße, the model says: 12 + 30 = 42 🤖"
    stdout, tokens = generate(tmp_path / "m", tmp_path / "out", "--prompt", text, "--max-new-tokens", "6")
    prompt = tok.encode(text).ids
    assert re.search(rf"^prompt ids: {','.join(map(str, prompt))}$", stdout, re.M), stdout
    assert prompt[0] == tok.token_to_id("<|begin_of_text|>")
    # The text may hold newlines: it runs up to the next line the experiment prints.
    decoded = re.search(r"^text: (.*?)\nmodeled time per token:", stdout, re.M | re.S)
    assert decoded and decoded.group(1) == tok.decode(tokens, skip_special_tokens=True), stdout
    # The greedy tokens are the reference's.
    seq = list(prompt)
    for t in tokens:
        assert t == int(np.argmax(ref.logits(c, weights, seq, "f32")[-1]))
        seq.append(t)

    no_tok = tmp_path / "bare"
    ref.write_folder(no_tok, c, weights, "f32")
    assert "has no tokenizer.json; give --prompt-ids" in failing(no_tok, tmp_path / "out", "--prompt", "hi")

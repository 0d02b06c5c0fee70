"""An independent numpy Llama, written from the published semantics (Hugging Face
transformers' modeling_llama): embeddings, RMSNorm computed in float32 then cast back and
scaled, rotate-half RoPE, grouped-query attention by repeat_kv, softmax in float32, the
SiLU-gated MLP, tied or untied lm_head. It rounds to bfloat16 after every op a bf16 model
runs in bf16, as torch on CPU does. And tiny random checkpoint folders written with Python's
safetensors package.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import safetensors


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest, ties to even), back as float32."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def config(**overrides) -> dict:
    """A tiny Llama config.json, by transformers' field names."""
    base = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "vocab_size": 97,
        "hidden_size": 64,
        "intermediate_size": 88,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
        "rope_scaling": None,
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    base.update(overrides)
    return base


def head_dim(c: dict) -> int:
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def random_weights(c: dict, seed: int) -> dict[str, np.ndarray]:
    """float32 weights with transformers' state-dict names; norms near one."""
    rng = np.random.default_rng(seed)
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = head_dim(c)
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d

    def mat(o, n):
        return (rng.standard_normal((o, n)) / np.sqrt(n)).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((v, h)).astype(np.float32)}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        w[f"{p}.input_layernorm.weight"] = norm()
        w[f"{p}.self_attn.q_proj.weight"] = mat(q, h)
        w[f"{p}.self_attn.k_proj.weight"] = mat(kv, h)
        w[f"{p}.self_attn.v_proj.weight"] = mat(kv, h)
        w[f"{p}.self_attn.o_proj.weight"] = mat(h, q)
        w[f"{p}.post_attention_layernorm.weight"] = norm()
        w[f"{p}.mlp.gate_proj.weight"] = mat(i, h)
        w[f"{p}.mlp.up_proj.weight"] = mat(i, h)
        w[f"{p}.mlp.down_proj.weight"] = mat(h, i)
    w["model.norm.weight"] = norm()
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(v, h)
    return w


def write_folder(folder: Path, c: dict, weights: dict[str, np.ndarray], dtype: str, shard_bytes: int = 0):
    """A Hub-style checkpoint folder: config.json and model.safetensors, or shards and
    model.safetensors.index.json when `shard_bytes` is set. `dtype` is "f32" or "bf16"."""
    folder.mkdir(parents=True, exist_ok=True)
    c = {**c, "torch_dtype": "bfloat16" if dtype == "bf16" else "float32"}
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    stored = {
        name: (a.astype(ml_dtypes.bfloat16).view(np.uint16) if dtype == "bf16" else a)
        for name, a in weights.items()
    }
    st_dtype = "bfloat16" if dtype == "bf16" else "float32"

    def save(path: Path, names: list[str]):
        arrays = {n: np.ascontiguousarray(stored[n]) for n in names}
        specs = {
            n: safetensors.TensorSpec(
                dtype=st_dtype, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes
            )
            for n, a in arrays.items()
        }
        safetensors.serialize_file(specs, str(path), metadata={"format": "pt"})

    names = list(stored)
    if not shard_bytes:
        save(folder / "model.safetensors", names)
        return
    shards, current, size = [], [], 0
    for n in names:
        if current and size + stored[n].nbytes > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(n)
        size += stored[n].nbytes
    shards.append(current)
    weight_map = {}
    for k, shard in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save(folder / file, shard)
        weight_map.update({n: file for n in shard})
    total = sum(a.nbytes for a in stored.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def inv_freq(c: dict) -> np.ndarray:
    d = head_dim(c)
    inv = 1.0 / (np.float32(c["rope_theta"]) ** (np.arange(0, d, 2, dtype=np.float32) / np.float32(d)))
    inv = inv.astype(np.float32)
    s = c.get("rope_scaling")
    if s and s.get("rope_type", s.get("type")) == "llama3":
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        scaled = np.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        inv = np.where(medium, smoothed, scaled).astype(np.float32)
    return inv


def logits(c: dict, weights: dict, ids: list[int], dtype: str, xp=np):
    """The model's logits [seq, vocab] for one sequence, from position 0, as float32.

    `xp` is numpy (float64 accumulation, bf16 rounding after each op) or jax.numpy (float32,
    for gradients by jax.grad; f32 only)."""
    if xp is np:
        r = bf16 if dtype == "bf16" else f32
        wide = np.float64
    else:
        assert dtype == "f32", "the JAX reference is float32"
        r = lambda x: x.astype(xp.float32)  # noqa: E731
        wide = xp.float32
    w = {n: r(a) for n, a in weights.items()}
    eps = c["rms_norm_eps"]
    nh, nkv, d = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    seq = len(ids)

    def rms_norm(x, weight):
        x32 = x.astype(xp.float32)
        var = xp.mean(x32.astype(wide) ** 2, axis=-1, keepdims=True)
        h = r(x32 / xp.sqrt(var + eps))
        return r(weight * h)

    def linear(x, weight):
        return r(x.astype(wide) @ weight.astype(wide).T)

    def rotate_half(x):
        half = x.shape[-1] // 2
        return xp.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    angles = np.arange(seq, dtype=np.float32)[:, None] * inv_freq(c)[None, :]
    emb = np.concatenate([angles, angles], axis=-1).astype(np.float32)
    cos, sin = r(np.cos(emb.astype(np.float64))), r(np.sin(emb.astype(np.float64)))

    def rope(x):  # [heads, seq, d]
        return r(r(x * cos) + r(rotate_half(x) * sin))

    causal = np.tril(np.ones((seq, seq), dtype=bool))
    x = w["model.embed_tokens.weight"][np.array(ids)]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        h = rms_norm(x, w[f"{p}.input_layernorm.weight"])
        q = linear(h, w[f"{p}.self_attn.q_proj.weight"]).reshape(seq, nh, d).transpose(1, 0, 2)
        k = linear(h, w[f"{p}.self_attn.k_proj.weight"]).reshape(seq, nkv, d).transpose(1, 0, 2)
        v = linear(h, w[f"{p}.self_attn.v_proj.weight"]).reshape(seq, nkv, d).transpose(1, 0, 2)
        q, k = rope(q), rope(k)
        k = xp.repeat(k, nh // nkv, axis=0)  # repeat_kv
        v = xp.repeat(v, nh // nkv, axis=0)
        scores = r(r(q.astype(wide) @ k.astype(wide).transpose(0, 2, 1)) * d**-0.5)
        scores = xp.where(causal, scores, -xp.inf).astype(wide)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = r(xp.exp(scores) / xp.exp(scores).sum(axis=-1, keepdims=True))
        out = r(probs.astype(wide) @ v.astype(wide))
        out = out.transpose(1, 0, 2).reshape(seq, nh * d)
        x = r(x + linear(out, w[f"{p}.self_attn.o_proj.weight"]))
        h = rms_norm(x, w[f"{p}.post_attention_layernorm.weight"])
        gate = linear(h, w[f"{p}.mlp.gate_proj.weight"])
        silu = r(gate / (1.0 + xp.exp(-gate.astype(wide))))
        up = linear(h, w[f"{p}.mlp.up_proj.weight"])
        x = r(x + linear(r(silu * up), w[f"{p}.mlp.down_proj.weight"]))
    x = rms_norm(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return linear(x, head).astype(xp.float32)


def causal_lm_loss(c: dict, weights: dict, ids: list[int], xp=np):
    """transformers' causal-LM loss: mean cross entropy of position t predicting token t + 1."""
    z = logits(c, weights, ids, "f32", xp)[:-1]
    z = z - z.max(axis=-1, keepdims=True)
    log_probs = z - xp.log(xp.exp(z).sum(axis=-1, keepdims=True))
    return -log_probs[np.arange(len(ids) - 1), np.array(ids[1:])].mean()

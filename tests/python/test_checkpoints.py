"""End-to-end: safetensors checkpoints between Python's `safetensors` and a real Rust guest
(tests/guests/ckpt-check) run by `neuronlab run` with granted folders (`--dir`, `--dir-rw`)
and arguments after `--`.

Random tensors of every dtype neuronlab has are written by Python's safetensors and loaded by
the guest with equal bits; the guest saves files and sharded folders that Python reads back
with equal bits and metadata; and every way out of a grant is refused with a clear error
while the guest keeps running.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import safetensors
from safetensors.numpy import load_file, save_file

from test_experiments import module, run

# safetensors dtype: (TensorSpec dtype, numpy dtype holding the bits, neuronlab's name).
DTYPES = {
    "F32": ("float32", np.float32, "f32"),
    "BF16": ("bfloat16", np.uint16, "bf16"),
    "F16": ("float16", np.float16, "f16"),
    "F64": ("float64", np.float64, "f64"),
    "I64": ("int64", np.int64, "i64"),
    "I32": ("int32", np.int32, "i32"),
    "U8": ("uint8", np.uint8, "u8"),
    "BOOL": ("bool", np.bool_, "bool"),
}

SHAPES = [(3, 4), (), (5,), (0, 2), (2, 1, 3)]


def random_array(rng: np.random.Generator, dtype: str, shape: tuple) -> np.ndarray:
    """Random bits of the dtype: every float pattern (NaNs and infinities included)."""
    bits = DTYPES[dtype][1]
    n = int(np.prod(shape))
    if dtype == "BOOL":
        return rng.integers(0, 2, size=n).astype(np.bool_).reshape(shape)
    width = np.dtype(bits).itemsize
    raw = rng.integers(0, 256, size=n * width, dtype=np.uint8)
    return raw.view(bits).reshape(shape)


def random_tensors(seed: int) -> dict[str, tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = {}
    for dtype in DTYPES:
        for k, shape in enumerate(SHAPES):
            out[f"layers.{k}.{dtype.lower()}.weight ü"] = (dtype, random_array(rng, dtype, shape))
    return out


def write(path: Path, tensors: dict[str, tuple[str, np.ndarray]], metadata: dict[str, str] | None):
    """Python's safetensors writes any dtype from raw bytes (TensorSpec), bf16 included."""
    arrays = {name: np.ascontiguousarray(a) for name, (_, a) in tensors.items()}
    specs = {
        name: safetensors.TensorSpec(
            dtype=DTYPES[dtype][0],
            shape=list(arrays[name].shape),
            data_ptr=arrays[name].ctypes.data,
            data_len=arrays[name].nbytes,
        )
        for name, (dtype, _) in tensors.items()
    }
    safetensors.serialize_file(specs, str(path), metadata=metadata)


def read(path: Path) -> tuple[dict[str, tuple[str, list[int], bytes]], dict[str, str]]:
    """Python's safetensors' reading of a file: every tensor's dtype, shape and bytes, and the
    metadata."""
    tensors = {
        name: (info["dtype"], list(info["shape"]), bytes(info["data"]))
        for name, info in safetensors.deserialize(path.read_bytes())
    }
    with safetensors.safe_open(str(path), framework="numpy") as f:
        metadata = f.metadata() or {}
    return tensors, metadata


def expected(tensors: dict[str, tuple[str, np.ndarray]]) -> dict[str, tuple[str, list[int], bytes]]:
    return {name: (dtype, list(a.shape), a.tobytes()) for name, (dtype, a) in tensors.items()}


def written(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """What Python's safetensors reads of the checkpoint at `path` (a file or a sharded
    folder). Its raw writer stores a 0-d tensor as shape [1], so files it wrote are compared
    with its own reading of them."""
    if path.is_file():
        return read(path)[0]
    index = json.loads((path / "model.safetensors.index.json").read_text())
    union = {}
    for file in sorted(set(index["weight_map"].values())):
        union.update(read(path / file)[0])
    return union


def loaded(stdout: str) -> dict[str, tuple[str, list[int], bytes]]:
    """The guest's `tensor <name>\\t<dtype>\\t<shape>\\t<hex>` lines, as safetensors dtypes."""
    by_name = {v[2]: k for k, v in DTYPES.items()}
    out = {}
    for line in stdout.splitlines():
        if line.startswith("tensor "):
            name, dtype, shape, hexed = line[len("tensor ") :].split("\t")
            out[name] = (by_name[dtype], json.loads(shape), bytes.fromhex(hexed))
    return out


def meta_lines(stdout: str) -> dict[str, str]:
    return dict(line[5:].split("=", 1) for line in stdout.splitlines() if line.startswith("meta "))


def errors(stdout: str) -> list[str]:
    return [line[len("error: ") :] for line in stdout.splitlines() if line.startswith("error: ")]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path, Path]:
    """`models` (granted read-only) holding Python's checkpoints, `out` (read-write), and a
    secret beside them that no grant covers."""
    root = tmp_path_factory.mktemp("ckpt")
    models, out = root / "models", root / "out"
    models.mkdir()
    out.mkdir()
    write(models / "all.safetensors", random_tensors(1), {"format": "pt", "note": "ü"})
    save_file(
        {name: a for name, (dtype, a) in random_tensors(2).items() if dtype != "BF16"},
        str(models / "numpy.safetensors"),
        metadata={"framework": "numpy"},
    )
    write_sharded(models / "sharded", random_tensors(3), shards=3)
    (models / "ok.txt").write_text("inside the grant\n")
    write(root / "secret.safetensors", random_tensors(4), None)
    (root / "secret.txt").write_text("outside every grant\n")
    os.symlink(root / "secret.safetensors", models / "leak.safetensors")
    os.symlink(root, models / "up")
    # A sharded folder whose index names a shard outside it, and one whose shard is a symlink
    # out of the grant.
    (models / "evil-index").mkdir()
    (models / "evil-index" / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {"w": "../../secret.safetensors"}})
    )
    (models / "evil-shard").mkdir()
    os.symlink(root / "secret.safetensors", models / "evil-shard" / "model-00001-of-00001.safetensors")
    (models / "evil-shard" / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {"w": "model-00001-of-00001.safetensors"}})
    )
    big = np.zeros(1 << 19, dtype=np.float32)  # 2 MiB
    save_file({"big": big}, str(models / "big.safetensors"))
    good = (models / "numpy.safetensors").read_bytes()
    (models / "truncated.safetensors").write_bytes(good[:-3])
    return root, models, out


def write_sharded(folder: Path, tensors: dict[str, tuple[str, np.ndarray]], shards: int):
    """A sharded checkpoint as `transformers` writes one: shards and an index."""
    folder.mkdir()
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        write(folder / file, part, {"format": "pt"})
        weight_map.update({n: file for n in part})
    total = sum(a.nbytes for _, a in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def guest(folders, *commands: str, env: dict[str, str] | None = None):
    root, models, out = folders
    result = run(
        module("ckpt-check"), "--dir", str(models), "--dir-rw", str(out), "--", *commands, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("done"), result.stdout
    return result.stdout


def test_arguments_after_the_double_dash_reach_the_guest(folders):
    stdout = guest(folders, "args", "two words", "--flag")
    assert [line for line in stdout.splitlines() if line.startswith("arg: ")] == [
        "arg: args",
        "arg: two words",
        "arg: --flag",
    ]


def test_the_guest_loads_what_python_wrote_with_equal_bits(folders):
    _, models, _ = folders
    stdout = guest(folders, "load", "models/all.safetensors")
    assert errors(stdout) == []
    assert loaded(stdout) == written(models / "all.safetensors")
    assert meta_lines(stdout) == {"format": "pt", "note": "ü"}
    stdout = guest(folders, "load", "models/numpy.safetensors")
    want = {n: t for n, t in expected(random_tensors(2)).items() if t[0] != "BF16"}
    assert loaded(stdout) == want
    assert meta_lines(stdout) == {"framework": "numpy"}


def test_python_reads_what_the_guest_saved_with_equal_bits(folders):
    _, models, out = folders
    stdout = guest(folders, "copy", "models/all.safetensors", "out/copy.safetensors")
    assert "saved out/copy.safetensors" in stdout, stdout
    tensors, metadata = read(out / "copy.safetensors")
    assert tensors == written(models / "all.safetensors")
    assert metadata == {"format": "pt", "note": "ü", "copied_by": "neuronlab"}
    # The numpy framework reads it too (every dtype numpy has).
    guest(folders, "copy", "models/numpy.safetensors", "out/numpy.safetensors")
    arrays = load_file(str(out / "numpy.safetensors"))
    for name, (dtype, a) in random_tensors(2).items():
        if dtype != "BF16":
            assert arrays[name].dtype == a.dtype and arrays[name].tobytes() == a.tobytes(), name


def test_sharded_folders_both_ways(folders):
    _, models, out = folders
    stdout = guest(folders, "load", "models/sharded")
    assert loaded(stdout) == written(models / "sharded")
    total = sum(a.nbytes for _, a in random_tensors(3).values())
    assert meta_lines(stdout) == {"total_size": str(total)}
    # The index file itself names the checkpoint too.
    stdout = guest(folders, "load", "models/sharded/model.safetensors.index.json")
    assert loaded(stdout) == written(models / "sharded")

    stdout = guest(folders, "shard", "models/all.safetensors", "out/sharded", "256")
    assert "saved out/sharded in " in stdout, stdout
    index = json.loads((out / "sharded" / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors", files
    assert index["metadata"]["total_size"] == sum(a.nbytes for _, a in random_tensors(1).values())
    assert index["metadata"]["copied_by"] == "neuronlab"
    union = {}
    for file in files:
        tensors, metadata = read(out / "sharded" / file)
        assert metadata == {"format": "pt", "note": "ü", "copied_by": "neuronlab"}
        assert all(index["weight_map"][n] == file for n in tensors), file
        union.update(tensors)
    assert union == written(models / "all.safetensors")


ESCAPES = {
    "absolute": ("load {root}/secret.safetensors", "absolute paths are refused"),
    "dotdot": ("load models/../secret.safetensors", "`..` climbs out of the granted folder `models`"),
    "dotdot-deep": ("load models/sharded/../../secret.txt", "climbs out"),
    "symlink-file": ("load models/leak.safetensors", "leads outside the granted folder `models`"),
    "symlink-folder": ("read models/up/secret.txt", "leads outside the granted folder `models`"),
    "no-grant": ("load elsewhere/x.safetensors", "no folder is granted as `elsewhere`"),
    "read-only": ("write models/new.txt", "`models` is granted read-only"),
    "save-read-only": ("copy models/all.safetensors models/copy.safetensors", "granted read-only"),
    "index-outside": ("load models/evil-index", "not a file beside the index"),
    "shard-symlink": ("load models/evil-shard", "leads outside the granted folder `models`"),
}


@pytest.mark.parametrize("case", ESCAPES)
def test_a_grant_escape_is_refused_and_the_guest_keeps_running(folders, case):
    root, models, _ = folders
    command, message = ESCAPES[case]
    words = command.format(root=root).split()
    stdout = guest(folders, *words, "read", "models/ok.txt")
    assert len(errors(stdout)) == 1, stdout
    error = errors(stdout)[0]
    assert error.startswith("ERR_FS: ") and message in error, error
    # The guest goes on, and still reads inside its grant.
    assert "read inside the grant" in stdout, stdout
    assert not (models / "new.txt").exists() and not (models / "copy.safetensors").exists()
    assert (root / "secret.txt").read_text() == "outside every grant\n"


def test_a_checkpoint_larger_than_the_host_limit_fails_before_it_is_read(folders):
    stdout = guest(folders, "load", "models/big.safetensors", env={"NEURONLAB_HOST_MEM_LIMIT": "1MiB"})
    [error] = errors(stdout)
    assert error.startswith("ERR_MEMORY: `models/big.safetensors` holds 2.00 MiB (2097152 bytes) of tensors"), error
    assert "NEURONLAB_HOST_MEM_LIMIT" in error and "nothing was read" in error, error


def test_a_truncated_file_is_a_clear_error(folders):
    stdout = guest(folders, "load", "models/truncated.safetensors", "list", "models/sharded")
    [error] = errors(stdout)
    assert error.startswith("ERR_FS: `models/truncated.safetensors` is not a valid safetensors file: it is truncated"), error
    assert "list model-00001-of-00003.safetensors model-00002-of-00003.safetensors" in stdout, stdout


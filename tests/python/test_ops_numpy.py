"""Cross-checks every op in neuronlab's registry against numpy.

How it works:
- CHECKS (below) maps each op name to a case generator and a numpy reference. Generators draw
  random shapes and values from seeded numpy Generators and cover every dtype the op supports,
  broadcasting, non-contiguous views, negative dims, keepdim and the op's attribute variants.
- Every case of the suite goes through ONE `opcheck run` (tests/src/bin/opcheck.rs) in a
  session-scoped fixture; each op is then one pytest item. Inputs travel as dense base arrays;
  the case's "views" (registry view ops: transpose, permute, strided slice, expand, unsqueeze)
  are applied by the bridge before the op, and the same views are applied to the numpy array
  the reference sees.
- References compute in float64 (int64 for integers, with two's-complement wrapping) from the
  exact input values, then round once to the output dtype. Output dtypes follow PyTorch's type
  promotion (torch.result_type) and are checked exactly, as are shapes. The fused optimizer
  steps are the exception: their references round after each of torch's in-place ops, as the
  ops do, and ops with several outputs are compared output by output.
- rand and randn cannot match numpy's generator: they are checked for shape, dtype, determinism
  and distribution statistics (RANDOM_TOLERANCES).

The opcheck binary is NEURONLAB_OPCHECK, else <repo>/target/debug/opcheck
(`cargo build -p neuronlab-tests --bin opcheck`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import subprocess
import zlib
from typing import Callable, Iterator

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

SEEDS = (0, 1, 2, 3)  # each generator runs once per seed with small shapes ...
LARGE_SEED = 1000  # ... and once with shapes above 32768 elements (the parallel kernels)

# ---------------------------------------------------------------------------------------------
# Tolerances. A float output passes when, elementwise,
#     |got - want| <= atol + rtol * max(|want|, scale)
# where `want` is the float64 reference rounded to the output dtype, and `scale` is the sum of
# the magnitudes that fed the value (reductions, matmul, norms; 0 for elementwise ops), so
# cancellation is judged against the size of the terms. NaN must match NaN, infinities must
# match exactly. Integer and bool outputs always compare exactly.
TOLERANCES = {
    #                    f64             f32            bf16 (~1-2 ulps)  f16 (~2 ulps)
    "exact": {"f64": (0, 0), "f32": (0, 0), "bf16": (0, 0), "f16": (0, 0)},
    "elementwise": {"f64": (1e-12, 1e-14), "f32": (1e-5, 1e-6), "bf16": (1e-2, 1e-3), "f16": (2e-3, 1e-4)},
    # exp, log, tanh, erf, gelu, ...: libm f32 results are within a few ulps; the f32 atol
    # covers results near zero from cancellation inside the formula (gelu at x < -3).
    "transcendental": {"f64": (1e-12, 1e-14), "f32": (2e-5, 1e-6), "bf16": (1e-2, 1e-3), "f16": (2e-3, 1e-4)},
    # Reductions, matmul, softmax, norms, losses.
    "reduction": {"f64": (1e-10, 1e-12), "f32": (1e-4, 1e-5), "bf16": (1e-2, 1e-3), "f16": (2e-3, 1e-4)},
}

# rand/randn: N draws per dtype; every bound is at least 5 standard errors of its statistic.
RANDOM_DRAWS = 120_000
RANDOM_TOLERANCES = {
    "rand": {
        "mean": (0.5, 0.005),  # std error 0.289/sqrt(N) = 8.3e-4
        "var": (1 / 12, 0.0015),  # std error 2.2e-4
        "bins": 16,  # equal bins over [0, 1) (edges exact in every float dtype); each count
        "bin_sigmas": 5,  # within 5 binomial standard deviations of N/16
    },
    "randn": {
        "mean": (0.0, 0.015),  # std error 1/sqrt(N) = 2.9e-3
        "var": (1.0, 0.025),  # std error sqrt(2/N) = 4.1e-3
        "cdf_points": (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0),
        "cdf": 0.007,  # |empirical CDF - Phi| at those points; std error <= 1.5e-3
    },
    # Two different seeds may agree by chance on a few elements (bf16 has 256 levels in [0, 1)).
    "max_equal_fraction_across_seeds": 0.02,
}

# ---------------------------------------------------------------------------------------------
# Dtypes. Values are held in a "natural" numpy form: float64 for the float dtypes (holding values
# exactly representable in the dtype), int64 for the integer dtypes, bool for bool.

DTYPES = ("f32", "bf16", "f16", "f64", "i64", "i32", "u8", "bool")
FLOATS = ("f32", "bf16", "f16", "f64")
INTS = ("i64", "i32", "u8")
NUMERIC = FLOATS + INTS
STORAGE = {
    "f32": "<f4", "bf16": "<u2", "f16": "<f2", "f64": "<f8", "i64": "<i8", "i32": "<i4", "u8": "u1", "bool": "u1"
}
NP_INT = {"i64": np.int64, "i32": np.int32, "u8": np.uint8}
INT_RANGE = {d: (int(np.iinfo(t).min), int(np.iinfo(t).max)) for d, t in NP_INT.items()}
SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0)


def category(dtype: str) -> int:
    """PyTorch's promotion categories: bool < integer < float."""
    return 0 if dtype == "bool" else 1 if dtype in INTS else 2


def promote(a: str, b: str) -> str:
    """torch.promote_types for these dtypes."""
    if a == b:
        return a
    if category(a) != category(b):
        return a if category(a) > category(b) else b
    if {a, b} == {"f16", "bf16"}:
        return "f32"  # neither half type holds the other
    order = ("bool", "u8", "i32", "i64", "f16", "bf16", "f32", "f64")
    return max(a, b, key=order.index)


def result_type(operands: list[tuple[str, bool]]) -> str:
    """torch.result_type for tensors given as (dtype, is_zero_dim); ATen's combine_categories:
    a zero-dim operand only matters when its category is higher, and then promotes with the
    dimensioned result (int32 tensor + float64 zero-dim tensor is float64)."""

    def fold(zero_dim: bool) -> str | None:
        dts = [d for d, z in operands if z == zero_dim]
        out = dts[0] if dts else None
        for d in dts[1:]:
            out = promote(out, d)
        return out

    dim, zero = fold(False), fold(True)
    if dim is None:
        return zero
    if zero is None or category(dim) == 2:
        return dim
    if dim == "bool" or category(zero) == 2:
        return promote(dim, zero)
    return dim


def to_float(dtype: str) -> str:
    """The dtype an op that computes in floating point gives (int inputs: the default f32)."""
    return dtype if dtype in FLOATS else "f32"


def f32_bits_to_bf16_bits(bits32: np.ndarray) -> np.ndarray:
    """f32 bit patterns to bf16 bit patterns, round to nearest even; NaN stays a quiet NaN."""
    bits = bits32.astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)


def f64_to_bf16_bits(x) -> np.ndarray:
    """float64 to bf16 bits, correctly rounded: first to f32 rounding to odd (truncate, and set
    the last bit when inexact), which keeps the second rounding to bf16 exact."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float32)
        r64 = r.astype(np.float64)
        bits = r.view(np.uint32)
        inexact = (r64 != x) & ~np.isnan(x)
        away = np.abs(r64) > np.abs(x)
    bits = np.where(inexact & away, bits - np.uint32(1), bits)
    bits = np.where(inexact, bits | np.uint32(1), bits)
    return f32_bits_to_bf16_bits(bits.astype(np.uint32))


def bf16_bits_to_f64(bits) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_to(x, dtype: str) -> np.ndarray:
    """Natural values converted to `dtype` as PyTorch casts: floats round to nearest even,
    floats to integers truncate toward zero, integers wrap, anything to bool tests != 0."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        if dtype == "bool":
            return x != 0
        if dtype in INTS:
            if x.dtype.kind == "f":
                x = np.trunc(x)
            return x.astype(NP_INT[dtype]).astype(np.int64)
        x = x.astype(np.float64)
        if dtype == "f32":
            return x.astype(np.float32).astype(np.float64)
        if dtype == "f16":
            return x.astype(np.float16).astype(np.float64)
        if dtype == "bf16":
            return bf16_bits_to_f64(f64_to_bf16_bits(x))
        return x


def encode(values: np.ndarray, dtype: str) -> bytes:
    """Natural values as the raw little-endian bytes the bridge reads."""
    if dtype == "bf16":
        return f64_to_bf16_bits(values).astype("<u2").tobytes()
    return np.ascontiguousarray(np.asarray(values).astype(STORAGE[dtype])).tobytes()


def decode(raw: bytes, dtype: str, shape: list[int]) -> np.ndarray:
    a = np.frombuffer(raw, STORAGE[dtype])
    if dtype == "bf16":
        a = bf16_bits_to_f64(a)
    elif dtype == "bool":
        assert set(np.unique(a)) <= {0, 1}, "bool output holds bytes other than 0 and 1"
        a = a != 0
    elif dtype in FLOATS:
        a = a.astype(np.float64)
    else:
        a = a.astype(np.int64)
    return a.reshape(shape)


# ---------------------------------------------------------------------------------------------
# Operands and cases.

# The registry view ops, in numpy. Cases list them to make non-contiguous operands; the
# references of the view ops themselves use them too.
def _np_slice(a, at):
    index = [slice(None)] * a.ndim
    index[at.get("dim", 0)] = slice(at.get("start", 0), at.get("end"), at.get("step", 1))
    return a[tuple(index)]


def _np_expand(a, at):
    shape = at["shape"]
    lead = len(shape) - a.ndim
    return np.broadcast_to(a, [a.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)])


def _np_unsqueeze(a, at):
    d = at["dim"]
    return np.expand_dims(a, d if d >= 0 else d + a.ndim + 1)


NUMPY_VIEWS = {
    "transpose": lambda a, at: np.swapaxes(a, at.get("dim0", -2), at.get("dim1", -1)),
    "permute": lambda a, at: np.transpose(a, at["dims"]),
    "slice": _np_slice,
    "expand": _np_expand,
    "unsqueeze": _np_unsqueeze,
}


@dataclasses.dataclass
class Operand:
    """A dense base array (natural values) seen through registry view ops."""

    base: np.ndarray
    dtype: str
    views: list[tuple[str, dict]] = dataclasses.field(default_factory=list)

    def value(self) -> np.ndarray:
        a = self.base
        for op, attrs in self.views:
            a = NUMPY_VIEWS[op](a, attrs)
        return a

    @property
    def shape(self) -> list[int]:
        return list(self.value().shape)

    def describe(self) -> str:
        text = f"{self.dtype}{self.shape}"
        if self.views:
            steps = " -> ".join(f"{op}{json.dumps(at)}" for op, at in self.views)
            text += f" (from {list(self.base.shape)} via {steps})"
        return text


@dataclasses.dataclass
class Case:
    op: str
    inputs: list[Operand]
    attrs: dict
    id: str = ""
    # A gradient request (tests/python/test_grad_jax.py): {"wrt": [input indices],
    # "cotangent": (natural values, dtype)}.
    grad: dict | None = None

    def describe(self) -> str:
        args = ", ".join(o.describe() for o in self.inputs)
        return f"[{self.id}] {self.op}({args}; {json.dumps(self.attrs)})"


@dataclasses.dataclass
class Expect:
    """A reference result: natural values before rounding, the output dtype, and optionally
    the magnitude of the terms behind each value (see TOLERANCES)."""

    values: np.ndarray
    dtype: str
    scale: np.ndarray | None = None


# ---------------------------------------------------------------------------------------------
# Random shapes, layouts and values.


def small_shape(rng, min_rank=0, max_rank=4, max_dim=7) -> list[int]:
    rank = int(rng.integers(min_rank, max_rank + 1))
    return [int(d) for d in rng.integers(1, max_dim + 1, size=rank)]


def large_shape(rng, min_rank=1, max_rank=3) -> list[int]:
    """40k to 75k elements: above the runtime's 32768-element parallel threshold."""
    rank = int(rng.integers(max(min_rank, 1), max_rank + 1))
    dims = [int(d) for d in rng.integers(2, 24, size=rank - 1)]
    return dims + [-(-40_000 // math.prod(dims)) + int(rng.integers(0, 64))]


def shape_for(rng, large: bool, min_rank=0, max_rank=4) -> list[int]:
    return large_shape(rng, min_rank, min(max_rank, 3)) if large else small_shape(rng, min_rank, max_rank)


def signed_dim(rng, d: int, rank: int) -> int:
    """`d` or its negative form, at random."""
    return int(d - rank) if rng.random() < 0.5 else int(d)


# Each layout maker takes the shape the op must see and returns (base shape, view) so that the
# view applied to a dense base of that shape gives it, or None when it does not apply.
def _transposed(rng, shape):
    r = len(shape)
    if r < 2:
        return None
    i, j = (int(v) for v in rng.choice(r, 2, replace=False))
    base = list(shape)
    base[i], base[j] = base[j], base[i]
    return base, ("transpose", {"dim0": signed_dim(rng, i, r), "dim1": signed_dim(rng, j, r)})


def _transposed_last(rng, shape):
    r = len(shape)
    if r < 2:
        return None
    base = shape[:-2] + [shape[-1], shape[-2]]
    return base, ("transpose", {"dim0": -1, "dim1": r - 2})


def _permuted(rng, shape):
    r = len(shape)
    if r < 2:
        return None
    perm = [int(p) for p in rng.permutation(r)]
    base = [0] * r
    for k, p in enumerate(perm):
        base[p] = shape[k]
    return base, ("permute", {"dims": [signed_dim(rng, p, r) for p in perm]})


def _strided(rng, shape):
    r = len(shape)
    if r == 0:
        return None
    d = int(rng.integers(r))
    n, step, start = shape[d], int(rng.integers(2, 4)), int(rng.integers(0, 3))
    end = start + (n - 1) * step + 1
    size = end + int(rng.integers(0, step))  # trailing elements the slice skips
    base = list(shape)
    base[d] = size
    attrs = {"dim": signed_dim(rng, d, r), "step": step}
    attrs["start"] = start - size if rng.random() < 0.3 else start
    if rng.random() < 0.5:
        attrs["end"] = end - size if end < size and rng.random() < 0.5 else end
    return base, ("slice", attrs)


def _expanded(rng, shape):
    r = len(shape)
    if r == 0:
        return None
    lead = int(rng.integers(0, min(r, 2) + 1))  # new leading dims
    kept = shape[lead:]
    base = [1 if rng.random() < 0.5 else s for s in kept]
    target = shape[:lead] + [-1 if b == s and rng.random() < 0.5 else s for b, s in zip(base, kept)]
    return base, ("expand", {"shape": target})


def _unsqueezed(rng, shape):
    ones = [d for d, s in enumerate(shape) if s == 1]
    if not ones:
        return None
    d = int(rng.choice(ones))
    return shape[:d] + shape[d + 1 :], ("unsqueeze", {"dim": signed_dim(rng, d, len(shape))})


LAYOUTS = {
    "transposed": _transposed,
    "transposed_last": _transposed_last,
    "permuted": _permuted,
    "strided": _strided,
    "expanded": _expanded,
    "unsqueezed": _unsqueezed,
}


def make_layout(rng, shape: list[int], style: str = "random") -> tuple[list[int], list]:
    """A base shape and views that give `shape`: dense, one named layout, or ("random") dense
    about a third of the time, else one or two random layouts chained."""
    shape = list(shape)
    if style == "dense" or 0 in shape:
        return shape, []
    if style != "random":
        made = LAYOUTS[style](rng, shape)
        return (shape, []) if made is None else (made[0], [made[1]])
    if rng.random() < 0.35:
        return shape, []
    views = []
    for _ in range(2 if rng.random() < 0.3 else 1):
        names = ["transposed", "permuted", "strided", "expanded", "unsqueezed"]
        rng.shuffle(names)
        for name in names:
            made = LAYOUTS[name](rng, shape)
            if made is not None:
                shape, view = made
                views.insert(0, view)
                break
    return shape, views


def draw(rng, shape, dtype, lo=-4.0, hi=4.0, ints=(-20, 20), grid=False, specials=0.0) -> np.ndarray:
    """Random natural values of `dtype`: floats uniform in [lo, hi] (or on a half-integer grid,
    to make ties), a fraction `specials` replaced by NaN, +-inf or +-0; integers in `ints`
    clipped to the dtype's range; bools fair."""
    shape = tuple(shape)
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype in INTS:
        ilo, ihi = max(ints[0], INT_RANGE[dtype][0]), min(ints[1], INT_RANGE[dtype][1])
        return np.asarray(rng.integers(ilo, ihi, size=shape, dtype=np.int64, endpoint=True))
    if grid:
        x = rng.integers(int(2 * lo), int(2 * hi), size=shape, endpoint=True) / 2.0
    else:
        x = rng.uniform(lo, hi, size=shape)
    x = np.asarray(x, np.float64)
    if specials:
        x = np.where(rng.random(shape) < specials, rng.choice(SPECIALS, size=shape), x)
    return round_to(x, dtype)


def operand(rng, shape, dtype, layout="random", **values) -> Operand:
    base_shape, views = make_layout(rng, shape, layout)
    return Operand(draw(rng, base_shape, dtype, **values), dtype, views)


def dense(values, dtype) -> Operand:
    return Operand(round_to(np.asarray(values), dtype), dtype)


def broadcast_shapes_from(rng, out_shape: list[int], n: int) -> list[list[int]]:
    """n operand shapes that broadcast to (a shape within) `out_shape`: leading dims dropped and
    dims set to 1 at random; sometimes a zero-dim operand."""
    shapes = []
    for _ in range(n):
        if rng.random() < 0.12:
            shapes.append([])
            continue
        drop = int(rng.integers(0, len(out_shape) + 1)) if rng.random() < 0.4 else 0
        shapes.append([1 if rng.random() < 0.25 else s for s in out_shape[drop:]])
    return shapes


def dtype_pairs(rng, allowed=DTYPES, mixed=4, same_except=()) -> list[tuple[str, str]]:
    """Every same-dtype pair (except `same_except`), plus `mixed` random mixed pairs."""
    pairs = [(d, d) for d in allowed if d not in same_except]
    mixes = [(a, b) for a in allowed for b in allowed if a != b]
    pairs += [mixes[int(i)] for i in rng.choice(len(mixes), size=min(mixed, len(mixes)), replace=False)]
    return pairs


# ---------------------------------------------------------------------------------------------
# Generators: (rng, large) -> iterable of (inputs, attrs). `large` asks for inputs above the
# parallel threshold; generators then keep to their first dtypes to stay fast.

Calls = Iterator[tuple[list[Operand], dict]]


def gen_unary(dtypes=DTYPES, lo=-4.0, hi=4.0, ints=(-10, 10), specials=0.05, attrs=({},)):
    def gen(rng, large) -> Calls:
        for dtype in dtypes[:2] if large else dtypes:
            for at in attrs:
                shape = shape_for(rng, large)
                yield [operand(rng, shape, dtype, lo=lo, hi=hi, ints=ints, specials=specials)], dict(at)

    return gen


def gen_binary(
    allowed=DTYPES, same_except=(), lo=-4.0, hi=4.0, ints=(-20, 20), b_values=None, grid=False, specials=0.05
):
    """Two broadcast operands of each dtype pair; `b_values` overrides the second operand's
    value ranges (pow exponents)."""

    def gen(rng, large) -> Calls:
        pairs = dtype_pairs(rng, allowed, same_except=same_except)
        for da, db in pairs[:2] if large else pairs:
            out = shape_for(rng, large)
            sa, sb = broadcast_shapes_from(rng, out, 2)
            if large:  # a full-size output
                sa = out
            va = dict(lo=lo, hi=hi, ints=ints, grid=grid, specials=specials)
            vb = dict(va, **(b_values or {}))
            yield [operand(rng, sa, da, **va), operand(rng, sb, db, **vb)], {}
        if not large:  # integer wrap-around over the full range
            for dtype in ("i64", "i32", "u8"):
                if dtype in allowed and not b_values:
                    shape = small_shape(rng, 1)
                    yield [operand(rng, shape, dtype, ints=INT_RANGE[dtype]) for _ in range(2)], {}

    return gen


def gen_where(rng, large) -> Calls:
    for da, db in dtype_pairs(rng)[:2] if large else dtype_pairs(rng):
        out = shape_for(rng, large)
        sc, sa, sb = broadcast_shapes_from(rng, out, 3)
        if large:  # a full-size output
            sc = out
        a, b = operand(rng, sa, da, specials=0.05), operand(rng, sb, db, specials=0.05)
        yield [operand(rng, sc, "bool"), a, b], {}


def gen_clamp(rng, large) -> Calls:
    for dtype in ("f32", "i64") if large else NUMERIC:
        for bounds in ("min", "max", "both", "crossed"):
            lo, hi = sorted(rng.integers(-10 if dtype != "u8" else 0, 11, size=2))
            if dtype in FLOATS:
                lo, hi = round(float(lo) * 0.37, 2), round(float(hi) * 0.37 + 0.01, 2)
            at = {"min": lo, "max": hi}
            if bounds == "min":
                del at["max"]
            elif bounds == "max":
                del at["min"]
            elif bounds == "crossed":  # torch.clamp with min > max gives max everywhere
                at = {"min": hi, "max": lo}
            shape = shape_for(rng, large)
            at = {k: (int(v) if dtype in INTS else v) for k, v in at.items()}
            yield [operand(rng, shape, dtype, ints=(-12, 12), specials=0.05)], at


def gen_cast(rng, large) -> Calls:
    pairs = [("f32", "bf16"), ("f64", "f16")] if large else [(a, b) for a in DTYPES for b in DTYPES]
    for src, dst in pairs:
        shape = shape_for(rng, large)
        if src in FLOATS and dst in INTS:
            # In range for the target (out-of-range float to int casts are undefined in torch).
            lo, hi = (0.0, 255.9) if dst == "u8" else (-6e4, 6e4) if src == "f16" else (-1e6, 1e6)
            values = dict(lo=lo, hi=hi)
        elif src in FLOATS:
            values = dict(lo=-7e4, hi=7e4, specials=0.1)  # beyond f16's range, and specials
        else:
            values = dict(ints=(-(2**40), 2**40))  # wraps into i32 and u8
        x = operand(rng, shape, src, **values)
        if src in FLOATS and dst in FLOATS and not large:
            # Tiny, huge and half-way values for the float-to-float roundings.
            extra = np.array([1e-7, -3e-5, 6e-8, 65519.0, 65520.0, 1e39, 1 + 2**-8, 1 + 3 * 2**-9, 2**-133])
            x = Operand(np.concatenate([x.value().ravel(), round_to(extra, src)]), src)
        yield [x], {"dtype": dst}


def reduce_dims(rng, rank: int) -> list[int]:
    """[] (all dims) or a random subset of dims, some negative."""
    if rank == 0 or rng.random() < 0.25:
        return []
    k = int(rng.integers(1, rank + 1))
    return [signed_dim(rng, int(d), rank) for d in rng.choice(rank, size=k, replace=False)]


def gen_reduce(
    dtypes=DTYPES, lo=-4.0, hi=4.0, ints=(-20, 20), grid=False, specials=0.02, corrections=(None,)
):
    def gen(rng, large) -> Calls:
        for dtype in dtypes[:2] if large else dtypes:
            for correction in corrections:
                shape = shape_for(rng, large)
                at = {"dims": reduce_dims(rng, len(shape)), "keepdim": int(rng.integers(0, 2))}
                if correction is not None:
                    at["correction"] = correction
                yield [operand(rng, shape, dtype, lo=lo, hi=hi, ints=ints, grid=grid, specials=specials)], at
        if not large and "i64" in dtypes:  # wrapping over the full integer range
            yield [operand(rng, small_shape(rng, 1), "i64", ints=INT_RANGE["i64"])], {"dims": [-1]}

    return gen


def gen_arg(rng, large) -> Calls:
    for dtype in ("f32", "i64") if large else DTYPES:
        shape = shape_for(rng, large)
        at = {"keepdim": int(rng.integers(0, 2))}
        if shape and rng.random() < 0.7:
            at["dim"] = signed_dim(rng, int(rng.integers(len(shape))), len(shape))
        yield [operand(rng, shape, dtype, lo=-2, hi=2, ints=(-3, 3), grid=True, specials=0.03)], at


def gen_matmul(rng, large) -> Calls:
    def mm_shapes():
        m, k, n = (int(v) for v in rng.integers(1, 8, size=3))
        batch = small_shape(rng, 0, 2, 4)
        ba = [1 if rng.random() < 0.3 else b for b in batch][int(rng.integers(0, len(batch) + 1)) :]
        bb = [1 if rng.random() < 0.3 else b for b in batch]
        options = [
            ([k], [k]),
            ([k], [k, n]),
            ([m, k], [k]),
            ([m, k], [k, n]),
            (ba + [m, k], bb + [k, n]),
            (ba + [m, k], [k]),
            ([k], bb + [k, n]),
        ]
        return options[int(rng.integers(len(options)))]

    if large:
        # One product big enough for gemm's own threads, batches of smaller ones, integers.
        big = (("f32", [300, 200], [200, 160]), ("bf16", [6, 100, 64], [64, 96]), ("i32", [2, 130, 40], [40, 140]))
        for dtype, sa, sb in big:
            values = dict(lo=-1, hi=1, ints=(-4, 4))
            yield [operand(rng, sa, dtype, layout="transposed_last", **values), operand(rng, sb, dtype, **values)], {}
        return
    pairs = [(d, d) for d in NUMERIC]
    pairs += [("f32", "bf16"), ("f16", "f64"), ("i32", "f32"), ("u8", "i64"), ("bool", "i32")]
    for da, db in pairs:
        for _ in range(2):
            sa, sb = mm_shapes()
            ints = (0, 9) if "u8" in (da, db) else (-6, 6)
            la, lb = (str(la) for la in rng.choice(["random", "transposed_last", "dense"], size=2))
            yield [operand(rng, sa, da, layout=la, ints=ints), operand(rng, sb, db, layout=lb, ints=ints)], {}
    yield [operand(rng, [3, 0], "f32"), operand(rng, [0, 4], "f32")], {}  # k = 0: zeros


def gen_softmax(rng, large) -> Calls:
    for dtype in FLOATS[:2] if large else FLOATS:
        for specials in (0.0, 0.04):
            shape = shape_for(rng, large)
            at = {}
            if shape and rng.random() < 0.8:
                at["dim"] = signed_dim(rng, int(rng.integers(len(shape))), len(shape))
            x = operand(rng, shape, dtype, lo=-6, hi=6, specials=specials)
            if rng.random() < 0.5:  # masked rows, as attention does
                x.base = np.where(rng.random(x.base.shape) < 0.2, -np.inf, x.base)
            yield [x], at


def gen_norm(with_bias: bool):
    def gen(rng, large) -> Calls:
        for dtype in FLOATS[:2] if large else FLOATS:
            for affine in range(3 if with_bias else 2):  # none, weight, weight and bias
                shape = shape_for(rng, large, min_rank=1)
                k = int(rng.integers(0, len(shape) + 1))
                at = {"normalized_shape": shape[len(shape) - k :]} if k or rng.random() < 0.5 else {}
                if rng.random() < 0.6:
                    at["eps"] = float(rng.choice([1e-5, 1e-3, 0.1]))
                ns = at.get("normalized_shape") or shape[-1:]
                wdtype = "f32" if dtype == "bf16" and rng.random() < 0.3 else dtype
                inputs = [operand(rng, shape, dtype, lo=-3, hi=5)]
                inputs += [operand(rng, ns, wdtype, lo=-2, hi=2) for _ in range(affine)]
                yield inputs, at

    return gen


def gen_cross_entropy(rng, large) -> Calls:
    for dtype in FLOATS[:1] if large else FLOATS:
        for tdtype in ("i64",) if large else INTS:
            for reduction in ("mean", "sum", "none"):
                n, c = (1000, 50) if large else (int(rng.integers(1, 8)), int(rng.integers(1, 8)))
                one_row = not large and rng.random() < 0.2
                logits = operand(rng, [c] if one_row else [n, c], dtype, lo=-5, hi=5)
                target = draw(rng, [] if one_row else [n], tdtype, ints=(0, c - 1))
                at = {"reduction": reduction}
                if rng.random() < 0.4 and tdtype != "u8":  # the default ignore_index (-100)
                    target = np.where(rng.random(target.shape) < 0.3, -100, target)
                elif rng.random() < 0.4:
                    at["ignore_index"] = int(rng.integers(0, c))
                yield [logits, Operand(target, tdtype)], at
    if not large:  # every target ignored: mean is NaN (0/0), as torch
        yield [operand(rng, [3, 4], "f32"), dense([-100, -100, -100], "i64")], {}


def gen_adam(rng, large) -> Calls:
    """A parameter, its gradient and moments (the second moment non-negative) of one shape and
    dtype, each in its own layout; the learning rate and the step count as 0-d tensors."""
    for dtype in FLOATS[:2] if large else FLOATS:
        shape = shape_for(rng, large)
        at = {
            "beta1": float(rng.uniform(0.8, 0.95)),
            "beta2": float(rng.uniform(0.99, 0.9999)),
            "eps": float(rng.choice([1e-8, 1e-6])),
            "weight_decay": float(rng.choice([0.0, 0.01, 0.1])),
        }
        state = [
            operand(rng, shape, dtype),
            operand(rng, shape, dtype, lo=-1, hi=1),
            operand(rng, shape, dtype, lo=-0.5, hi=0.5),
            operand(rng, shape, dtype, lo=0, hi=0.3),
        ]
        lr = dense(float(rng.uniform(1e-4, 0.1)), str(rng.choice(["f64", "f32"])))
        step = dense(float(rng.integers(1, 50)), "f64")
        yield [*state, lr, step], at


def gen_embedding(rng, large) -> Calls:
    for dtype in ("f32", "bf16") if large else DTYPES:
        v, d = (500, 96) if large else (int(rng.integers(1, 8)), int(rng.integers(1, 8)))
        idx_shape = [40, 12] if large else small_shape(rng, 0, 3)
        idx = operand(rng, idx_shape, str(rng.choice(INTS)), ints=(0, v - 1))
        yield [idx, operand(rng, [v, d], dtype)], {}


def gen_index_select(rng, large) -> Calls:
    for dtype in ("f32", "i64") if large else DTYPES:
        shape = shape_for(rng, large, min_rank=1)
        d = int(rng.integers(len(shape)))
        n = 0 if not large and rng.random() < 0.1 else int(rng.integers(1, 9))
        index = operand(rng, [n], str(rng.choice(INTS)), ints=(0, shape[d] - 1))
        yield [operand(rng, shape, dtype), index], {"dim": signed_dim(rng, d, len(shape))}


def gen_gather(rng, large) -> Calls:
    for dtype in ("f32", "i64") if large else DTYPES:
        shape = shape_for(rng, large, min_rank=1)
        d = int(rng.integers(len(shape)))
        ishape = [int(rng.integers(1, (s if k != d else 7) + 1)) for k, s in enumerate(shape)]
        index = operand(rng, ishape, str(rng.choice(INTS)), ints=(0, shape[d] - 1))
        yield [operand(rng, shape, dtype), index], {"dim": signed_dim(rng, d, len(shape))}


def gen_scatter_add(rng, large) -> Calls:
    for dtype in ("f32", "bf16") if large else FLOATS:
        shape = shape_for(rng, large, min_rank=1)
        d = int(rng.integers(len(shape)))
        ishape = [int(rng.integers(1, (s if k != d else 7) + 1)) for k, s in enumerate(shape)]
        index = operand(rng, ishape, str(rng.choice(INTS)), ints=(0, shape[d] - 1))
        src = operand(rng, ishape, dtype)
        yield [operand(rng, shape, dtype), index, src], {"dim": signed_dim(rng, d, len(shape))}


def gen_cat(rng, large) -> Calls:
    for dtype in ("f32", "bf16") if large else DTYPES:
        shape = shape_for(rng, large, min_rank=1)
        d = int(rng.integers(len(shape)))
        parts = []
        for _ in range(int(rng.integers(1, 5))):
            part = list(shape)
            part[d] = int(rng.integers(0, 5)) if not large else shape[d]
            pdtype = dtype if rng.random() < 0.7 else str(rng.choice(DTYPES))
            parts.append(operand(rng, part, pdtype, specials=0.05))
        yield parts, {"dim": signed_dim(rng, d, len(shape))}


def gen_stack(rng, large) -> Calls:
    for dtype in ("f32", "bf16") if large else DTYPES:
        shape = shape_for(rng, large, max_rank=3)
        n = int(rng.integers(1, 5))
        dtypes = [dtype if rng.random() < 0.7 else str(rng.choice(DTYPES)) for _ in range(n)]
        d = int(rng.integers(len(shape) + 1))
        yield [operand(rng, shape, t) for t in dtypes], {"dim": signed_dim(rng, d, len(shape) + 1)}


def gen_pad(rng, large) -> Calls:
    for dtype in ("f32", "u8") if large else DTYPES:
        shape = shape_for(rng, large)
        pairs = int(rng.integers(0, len(shape) + 1))
        at = {"pad": [int(p) for p in rng.integers(0, 4, size=2 * pairs)]}
        if rng.random() < 0.7 and dtype in FLOATS:
            at["value"] = float(rng.choice([-1.5, 2.25, 7.0]))
        elif rng.random() < 0.7:
            at["value"] = int(rng.integers(0, 2 if dtype == "bool" else 9))
        yield [operand(rng, shape, dtype)], at


def gen_tri(rng, large) -> Calls:
    for dtype in ("f32", "i32") if large else DTYPES:
        shape = shape_for(rng, large, min_rank=2)
        at = {} if rng.random() < 0.2 else {"diagonal": int(rng.integers(-4, 5))}
        yield [operand(rng, shape, dtype)], at


# Shape (view) ops: every dtype, on non-contiguous inputs.
def gen_view_op(make_attrs, min_rank=0, layout="random"):
    def gen(rng, large) -> Calls:
        for dtype in ("f32", "bf16") if large else DTYPES:
            shape = shape_for(rng, large, min_rank=min_rank)
            x = operand(rng, shape, dtype, layout=layout)
            yield [x], make_attrs(rng, x.shape)

    return gen


def random_reshape(rng, shape) -> dict:
    """The elements' small prime factors dealt out over 1 to 4 dims, maybe one of them -1."""
    numel = math.prod(shape)
    factors = [p for p in (2, 3, 5, 7) for k in range(1, 20) if numel % p**k == 0]
    dims = [1] * int(rng.integers(1, 5))
    for f in factors:
        dims[int(rng.integers(len(dims)))] *= f
    dims[int(rng.integers(len(dims)))] *= numel // math.prod(dims)
    if rng.random() < 0.5:
        dims[int(rng.integers(len(dims)))] = -1
    return {"shape": dims}


def random_flatten(rng, shape) -> dict:
    r = len(shape)
    if r == 0:
        return {}
    s = int(rng.integers(r))
    e = int(rng.integers(s, r))
    return {"start_dim": signed_dim(rng, s, r), "end_dim": signed_dim(rng, e, r)}


def random_slice(rng, shape) -> dict:
    r = len(shape)
    d = int(rng.integers(r))
    at = {"dim": signed_dim(rng, d, r), "start": int(rng.integers(-shape[d] - 2, shape[d] + 2))}
    at["step"] = int(rng.integers(1, 4))
    if rng.random() < 0.6:
        at["end"] = int(rng.integers(-shape[d] - 2, shape[d] + 3))
    return at


def random_narrow(rng, shape) -> dict:
    r = len(shape)
    d = int(rng.integers(r))
    start = int(rng.integers(0, shape[d] + 1))
    length = int(rng.integers(0, shape[d] - start + 1))
    if start < shape[d] and rng.random() < 0.4:
        start -= shape[d]  # counted from the end
    return {"dim": signed_dim(rng, d, r), "start": start, "length": length}


def random_expand(rng, shape) -> dict:
    lead = [int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 3)))]
    kept = [(int(rng.integers(1, 6)) if s == 1 else s) if rng.random() < 0.7 else -1 for s in shape]
    return {"shape": lead + kept}


def random_squeeze(rng, shape) -> dict:
    r = len(shape)
    if r == 0 or rng.random() < 0.4:
        return {}
    dims = rng.choice(r, size=int(rng.integers(1, r + 1)), replace=False)
    return {"dims": [signed_dim(rng, int(d), r) for d in dims]}


def random_unsqueeze(rng, shape) -> dict:
    r = len(shape)
    return {"dim": signed_dim(rng, int(rng.integers(r + 1)), r + 1)}


def random_permutation(rng, shape) -> dict:
    r = len(shape)
    return {"dims": [signed_dim(rng, int(p), r) for p in rng.permutation(r)]}


def random_transpose(rng, shape) -> dict:
    r = len(shape)
    if rng.random() < 0.15:
        return {}  # defaults: the last two dims
    return {"dim0": signed_dim(rng, int(rng.integers(r)), r), "dim1": signed_dim(rng, int(rng.integers(r)), r)}


def gen_squeezable(rng, large) -> Calls:
    """Inputs with several size-1 dims, for squeeze."""
    for dtype in ("f32",) if large else DTYPES:
        shape = shape_for(rng, large, max_rank=3)
        for _ in range(int(rng.integers(1, 3))):
            shape.insert(int(rng.integers(len(shape) + 1)), 1)
        x = operand(rng, shape, dtype)
        yield [x], random_squeeze(rng, x.shape)


def gen_expandable(rng, large) -> Calls:
    for dtype in ("f32",) if large else DTYPES:
        shape = [1 if rng.random() < 0.5 else s for s in small_shape(rng, 0, 3)]
        x = operand(rng, shape, dtype)
        yield [x], random_expand(rng, x.shape)


# Creation ops.
def gen_filled(with_value: bool):
    def gen(rng, large) -> Calls:
        for dtype in ("f32",) if large else DTYPES:
            shape = large_shape(rng) if large else small_shape(rng)
            at = {"shape": shape, "dtype": dtype}
            if with_value and dtype in FLOATS:
                at["value"] = float(rng.choice([-2.5, 0.1, 3.0, 1e10]))
            elif with_value:
                at["value"] = int(rng.integers(0, 2 if dtype == "bool" else 100))
            if dtype == "f32" and rng.random() < 0.5:
                del at["dtype"]  # the default is f32
            yield [], at

    return gen


def gen_arange(rng, large) -> Calls:
    if large:
        yield [], {"end": 50_000}
        return
    for _ in range(3):
        start, n, step = int(rng.integers(-20, 20)), int(rng.integers(0, 30)), int(rng.choice([-3, -1, 1, 2, 5]))
        end = start + n * step - int(rng.integers(0, abs(step))) * int(np.sign(step))  # not always on the grid
        yield [], {"start": start, "end": end, "step": step}
    yield [], {"end": int(rng.integers(0, 20))}
    yield [], {"start": 0.5, "end": float(rng.uniform(1, 9)), "step": 0.25}  # fractional: f32
    yield [], {"start": -1.0, "end": 1.0, "step": 0.1}
    for dtype in ("f64", "bf16", "f16", "i32", "u8", "f32"):
        yield [], {"start": 1, "end": int(rng.integers(2, 40)), "step": int(rng.integers(1, 4)), "dtype": dtype}


# ---------------------------------------------------------------------------------------------
# References: (case, *input values) -> Expect. Input values are the natural numpy arrays the op
# sees (after views).


def binary_type(case: Case) -> str:
    return result_type([(o.dtype, not o.shape) for o in case.inputs])


def ref_unary_float(fn):
    def ref(case, x):
        out = to_float(case.inputs[0].dtype)
        return Expect(fn(round_to(x, out), case.attrs), out)

    return ref


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(x, attrs):
    if attrs.get("approximate", "none") == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_slope(x, attrs):
    """d/dx gelu(x), with its limits at +-inf (1 and 0)."""
    with np.errstate(all="ignore"):
        if attrs.get("approximate", "none") == "tanh":
            k = math.sqrt(2 / math.pi)
            t = np.tanh(k * (x + 0.044715 * x**3))
            slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
        else:
            slope = 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        return np.where(np.isinf(x), (x > 0).astype(np.float64), slope)


def ref_gelu_backward(case, grad, x):
    out = to_float(binary_type(case))
    grad, x = round_to(grad, out), round_to(x, out)
    with np.errstate(all="ignore"):
        return Expect(grad * _gelu_slope(x, case.attrs), out)


def gen_variants(gen, variants):
    """`gen`'s calls, each with every attribute variant."""

    def variant_gen(rng, large) -> Calls:
        for inputs, attrs in gen(rng, large):
            for v in variants:
                yield inputs, dict(attrs, **v)

    return variant_gen


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def ref_unary_numeric(fn):
    def ref(case, x):
        return Expect(fn(x), case.inputs[0].dtype)

    return ref


def ref_arith(float_fn, int_fn, always_float=False):
    def ref(case, a, b):
        out = binary_type(case)
        if always_float:
            out = to_float(out)
        a, b = round_to(a, out), round_to(b, out)
        if out in FLOATS:
            return Expect(float_fn(a, b), out)
        # Integers in int64 with wrap-around; bools as 0/1, so add is `or` and mul is `and`.
        return Expect(int_fn(a.astype(np.int64), b.astype(np.int64)), out)

    return ref


def c_pow(a, b):
    """C's pow elementwise (torch's CPU tensor-tensor pow). numpy turns a scalar exponent of 0.5
    into sqrt, which differs at -inf; broadcasting both to full arrays avoids that shortcut."""
    a, b = np.broadcast_arrays(a, b)
    return np.power(np.atleast_1d(a).copy(), np.atleast_1d(b).copy()).reshape(a.shape)


def ref_compare(fn):
    def ref(case, a, b):
        common = binary_type(case)  # compared in the promoted dtype, as torch
        return Expect(fn(round_to(a, common), round_to(b, common)), "bool")

    return ref


def ref_logical(fn):
    return lambda case, a, b: Expect(fn(a != 0, b != 0), "bool")


def ref_where(case, cond, a, b):
    out = result_type([(o.dtype, not o.shape) for o in case.inputs[1:]])
    return Expect(np.where(cond, round_to(a, out), round_to(b, out)), out)


def ref_clamp(case, x):
    lo, hi = case.attrs.get("min", -np.inf), case.attrs.get("max", np.inf)
    return Expect(np.minimum(np.maximum(x, lo), hi), case.inputs[0].dtype)  # NaN propagates


def ref_cast(case, x):
    return Expect(round_to(x, case.attrs["dtype"]), case.attrs["dtype"])


def axes_of(case, x) -> tuple | None:
    dims = case.attrs.get("dims", [])
    return tuple(d % x.ndim for d in dims) if dims else None


def ref_sum(case, x):
    axes, keep = axes_of(case, x), bool(case.attrs.get("keepdim", 0))
    dtype = case.inputs[0].dtype
    if dtype in FLOATS:
        return Expect(np.sum(x, axes, keepdims=keep), dtype, np.sum(np.abs(x), axes, keepdims=keep))
    return Expect(np.sum(x.astype(np.int64), axes, keepdims=keep), "i64")


def ref_prod(case, x):
    axes, keep = axes_of(case, x), bool(case.attrs.get("keepdim", 0))
    dtype = case.inputs[0].dtype
    if dtype in FLOATS:
        return Expect(np.prod(x, axes, keepdims=keep), dtype)
    return Expect(np.prod(x.astype(np.int64), axes, keepdims=keep), "i64")


def ref_mean(case, x):
    axes, keep = axes_of(case, x), bool(case.attrs.get("keepdim", 0))
    scale = np.mean(np.abs(x), axes, keepdims=keep)
    return Expect(np.mean(x, axes, keepdims=keep), case.inputs[0].dtype, scale)


def ref_var(take_sqrt: bool):
    def ref(case, x):
        axes, keep = axes_of(case, x), bool(case.attrs.get("keepdim", 0))
        n = x.size if axes is None else math.prod(x.shape[a] for a in axes)
        correction = case.attrs.get("correction", 1)  # torch.var's default (Bessel)
        mean = np.mean(x, axes, keepdims=True)
        var = np.sum((x - mean) ** 2, axes, keepdims=keep) / max(0, n - correction)
        return Expect(np.sqrt(var) if take_sqrt else var, case.inputs[0].dtype)

    return ref


def ref_extreme(fn):
    def ref(case, x):
        axes, keep = axes_of(case, x), bool(case.attrs.get("keepdim", 0))
        return Expect(fn(x, axes, keepdims=keep), case.inputs[0].dtype)  # NaN propagates

    return ref


def ref_arg(fn):
    """torch.argmax/argmin: the first extreme, a NaN counting as the extreme (numpy agrees);
    without dim, the index into the flattened tensor."""

    def ref(case, x):
        keep = bool(case.attrs.get("keepdim", 0))
        if "dim" not in case.attrs:
            out = np.asarray(fn(x.ravel()))
            return Expect(out.reshape([1] * x.ndim) if keep else out, "i64")
        return Expect(fn(x, case.attrs["dim"], keepdims=keep), "i64")

    return ref


def ref_matmul(case, a, b):
    out = promote(case.inputs[0].dtype, case.inputs[1].dtype)
    a, b = round_to(a, out), round_to(b, out)
    if out in FLOATS:
        return Expect(np.matmul(a, b), out, np.matmul(np.abs(a), np.abs(b)))
    return Expect(np.matmul(a.astype(np.int64), b.astype(np.int64)), out)


def ref_softmax(log: bool):
    def ref(case, x):
        dtype = case.inputs[0].dtype
        if x.ndim == 0:
            return Expect(np.asarray(0.0 if log else 1.0), dtype)
        d = case.attrs.get("dim", -1)
        z = x - np.max(x, axis=d, keepdims=True)  # rows with NaN, +inf or only -inf give NaN, as torch
        s = np.sum(np.exp(z), axis=d, keepdims=True)
        return Expect(z - np.log(s) if log else np.exp(z) / s, dtype)

    return ref


def ref_norm(center: bool, default_eps: float):
    def ref(case, x, *affine):
        ns = case.attrs.get("normalized_shape") or [x.shape[-1]]
        axes = tuple(range(x.ndim - len(ns), x.ndim))
        mean = np.mean(x, axes, keepdims=True) if center else 0.0
        rstd = 1 / np.sqrt(np.mean((x - mean) ** 2, axes, keepdims=True) + case.attrs.get("eps", default_eps))
        y, scale = (x - mean) * rstd, (np.abs(x) + np.abs(mean)) * rstd
        if affine:
            y, scale = y * affine[0], scale * np.abs(affine[0])
        if len(affine) > 1:
            y, scale = y + affine[1], scale + np.abs(affine[1])
        return Expect(y, case.inputs[0].dtype, scale)

    return ref


def ref_cross_entropy(case, logits, target):
    rows = logits.reshape(-1, logits.shape[-1])
    t = target.reshape(-1).astype(np.int64)
    keep = t != case.attrs.get("ignore_index", -100)
    m = np.max(rows, axis=1)
    lse = m + np.log(np.sum(np.exp(rows - m[:, None]), axis=1))
    picked = rows[np.arange(len(t)), np.where(keep, t, 0)]
    loss = np.where(keep, lse - picked, 0.0)
    terms = np.where(keep, np.abs(lse) + np.abs(picked), 0.0)
    dtype = case.inputs[0].dtype
    reduction = case.attrs.get("reduction", "mean")
    if reduction == "none":
        return Expect(loss.reshape(target.shape), dtype, terms.reshape(target.shape))
    if reduction == "sum":
        return Expect(loss.sum(), dtype, terms.sum())
    # The mean over the targets not ignored; NaN when every target is.
    return Expect(np.float64(loss.sum()) / keep.sum(), dtype, np.float64(terms.sum()) / keep.sum())


def ref_adam(decoupled: bool):
    """torch's single-tensor Adam / AdamW step: each in-place op computes in f32 (f64 for f64)
    and rounds to the parameter's dtype; the step's scalars are Python floats (f64)."""

    def ref(case, param, grad, exp_avg, exp_avg_sq, lr, step):
        at, dtype = case.attrs, case.inputs[0].dtype
        c = np.float64 if dtype == "f64" else np.float32
        lr, step = float(lr), float(step)
        b1, b2, eps, wd = at["beta1"], at["beta2"], at["eps"], at["weight_decay"]

        def store(x):  # an in-place op's result, rounded to the parameter's dtype
            return round_to(x, dtype).astype(c)

        p, g, m, v = (np.asarray(x).astype(c) for x in (param, grad, exp_avg, exp_avg_sq))
        if decoupled:
            p = store(p * c(1.0 - lr * wd))
        elif wd != 0.0:
            g = store(g + p * c(wd))
        m = store(m + (g - m) * c(1.0 - b1))
        v = store(store(v * c(b2)) + g * c(1.0 - b2) * g)
        bias1, bias2 = 1.0 - b1**step, 1.0 - b2**step
        denom = store(store(store(np.sqrt(v)) / c(math.sqrt(bias2))) + c(eps))
        p = store(p + c(-(lr / bias1)) * (m / denom))
        return [Expect(x.astype(np.float64), dtype) for x in (p, m, v)]

    return ref


def ref_embedding(case, indices, weight):
    return Expect(weight[indices], case.inputs[1].dtype)


def ref_index_select(case, x, index):
    return Expect(np.take(x, index, axis=case.attrs.get("dim", 0)), case.inputs[0].dtype)


def ref_gather(case, x, index):
    """torch.gather: out[i][j] = x[i][index[i][j]] (dim 1); outside dim, index may be smaller
    than x, which then reads x's leading part."""
    d = case.attrs.get("dim", 0) % x.ndim
    lead = tuple(slice(0, n) if k != d else slice(None) for k, n in enumerate(index.shape))
    return Expect(np.take_along_axis(x[lead], index, axis=d), case.inputs[0].dtype)


def ref_scatter_add(case, x, index, src):
    """torch.scatter_add: out[i][index[i][j]] += src[i][j] (dim 1), summed exactly (f64)
    and rounded once."""
    d = case.attrs.get("dim", 0) % x.ndim
    out = np.array(x, dtype=np.float64)
    positions = np.indices(index.shape)
    target = [positions[k] if k != d else index for k in range(x.ndim)]
    np.add.at(out, tuple(target), src)
    scale = np.abs(np.array(x, dtype=np.float64))
    np.add.at(scale, tuple(target), np.abs(src))
    return Expect(out, case.inputs[0].dtype, scale=scale)


def promote_all(case) -> str:
    out = case.inputs[0].dtype
    for o in case.inputs[1:]:
        out = promote(out, o.dtype)
    return out


def ref_cat(case, *parts):
    out = promote_all(case)
    return Expect(np.concatenate([round_to(p, out) for p in parts], axis=case.attrs.get("dim", 0)), out)


def ref_stack(case, *parts):
    out = promote_all(case)
    return Expect(np.stack([round_to(p, out) for p in parts], axis=case.attrs.get("dim", 0)), out)


def ref_pad(case, x):
    """F.pad: (before, after) pairs from the last dim backwards."""
    p = case.attrs["pad"]
    widths = [(0, 0)] * x.ndim
    for k in range(len(p) // 2):
        widths[x.ndim - 1 - k] = (p[2 * k], p[2 * k + 1])
    dtype = case.inputs[0].dtype
    value = round_to(case.attrs.get("value", 0.0), dtype)
    return Expect(np.pad(x, widths, constant_values=value) if x.ndim else x, dtype)


def ref_same_dtype(fn):
    """References of ops that keep the input's dtype: fn(x, attrs) -> values."""
    return lambda case, x: Expect(fn(x, case.attrs), case.inputs[0].dtype)


def np_flatten(x, at):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = at.get("start_dim", 0) % x.ndim, at.get("end_dim", -1) % x.ndim
    return x.reshape(x.shape[:s] + (math.prod(x.shape[s : e + 1]),) + x.shape[e + 1 :])


def np_narrow(x, at):
    d = at["dim"]
    start = at["start"] + x.shape[d] if at["start"] < 0 else at["start"]
    return _np_slice(x, {"dim": d, "start": start, "end": start + at["length"]})


def np_squeeze(x, at):
    dims = at.get("dims") or range(x.ndim)
    return np.squeeze(x, axis=tuple(d % x.ndim for d in dims if x.shape[d] == 1))


def ref_filled(value):
    """zeros/ones/full: `value` is a number or an attribute name."""

    def ref(case):
        dtype = case.attrs.get("dtype", "f32")
        v = case.attrs[value] if isinstance(value, str) else value
        return Expect(np.full(case.attrs["shape"], v, np.float64 if isinstance(v, float) else np.int64), dtype)

    return ref


def ref_arange(case):
    start, end, step = (case.attrs.get(k, d) for k, d in (("start", 0), ("end", None), ("step", 1)))
    n = max(0, math.ceil((end - start) / step))
    # Integral start, end and step give i64 (the registry's rule; the attributes are floats,
    # so torch's "Python int vs float" distinction is made on the values).
    default = "i64" if all(float(v).is_integer() for v in (start, end, step)) else "f32"
    return Expect(start + np.arange(n, dtype=np.float64) * step, case.attrs.get("dtype", default))


# ---------------------------------------------------------------------------------------------
# The table: every registry op -> how to make its cases and what numpy says.


@dataclasses.dataclass(frozen=True)
class OpCheck:
    generate: Callable  # (rng, large) -> iterable of (inputs, attrs)
    reference: Callable  # (case, *input values) -> Expect
    tolerance: str = "exact"


@dataclasses.dataclass(frozen=True)
class RandomCheck:
    """rand/randn: shape, dtype, determinism and statistics (see RANDOM_TOLERANCES)."""

    kind: str


POSITIVE = dict(lo=-0.5, hi=9.0)  # mostly in the domain; some negatives and zeros give NaN/inf

CHECKS: dict[str, OpCheck | RandomCheck] = {
    # creation
    "zeros": OpCheck(gen_filled(False), ref_filled(0)),
    "ones": OpCheck(gen_filled(False), ref_filled(1)),
    "full": OpCheck(gen_filled(True), ref_filled("value")),
    "arange": OpCheck(gen_arange, ref_arange),
    "rand": RandomCheck("rand"),
    "randn": RandomCheck("randn"),
    # shape (views)
    "reshape": OpCheck(gen_view_op(random_reshape), ref_same_dtype(lambda x, at: x.reshape(at["shape"]))),
    "view": OpCheck(gen_view_op(random_reshape, layout="dense"), ref_same_dtype(lambda x, at: x.reshape(at["shape"]))),
    "flatten": OpCheck(gen_view_op(random_flatten), ref_same_dtype(np_flatten)),
    "transpose": OpCheck(gen_view_op(random_transpose, min_rank=2), ref_same_dtype(NUMPY_VIEWS["transpose"])),
    "permute": OpCheck(gen_view_op(random_permutation), ref_same_dtype(NUMPY_VIEWS["permute"])),
    "slice": OpCheck(gen_view_op(random_slice, min_rank=1), ref_same_dtype(_np_slice)),
    "narrow": OpCheck(gen_view_op(random_narrow, min_rank=1), ref_same_dtype(np_narrow)),
    "expand": OpCheck(gen_expandable, ref_same_dtype(_np_expand)),
    "squeeze": OpCheck(gen_squeezable, ref_same_dtype(np_squeeze)),
    "unsqueeze": OpCheck(gen_view_op(random_unsqueeze), ref_same_dtype(_np_unsqueeze)),
    "contiguous": OpCheck(gen_view_op(lambda rng, shape: {}), ref_same_dtype(lambda x, at: x)),
    # elementwise, computed in floating point
    "exp": OpCheck(gen_unary(lo=-10, hi=10), ref_unary_float(lambda x, at: np.exp(x)), "transcendental"),
    "log": OpCheck(gen_unary(**POSITIVE, ints=(-1, 30)), ref_unary_float(lambda x, at: np.log(x)), "transcendental"),
    "sqrt": OpCheck(gen_unary(**POSITIVE, ints=(-1, 30)), ref_unary_float(lambda x, at: np.sqrt(x)), "elementwise"),
    "rsqrt": OpCheck(gen_unary(**POSITIVE, ints=(-1, 30)), ref_unary_float(lambda x, at: 1 / np.sqrt(x)), "elementwise"),
    "reciprocal": OpCheck(gen_unary(ints=(-5, 5)), ref_unary_float(lambda x, at: 1 / x), "elementwise"),
    "tanh": OpCheck(gen_unary(), ref_unary_float(lambda x, at: np.tanh(x)), "transcendental"),
    "sigmoid": OpCheck(gen_unary(lo=-20, hi=20), ref_unary_float(lambda x, at: _sigmoid(x)), "transcendental"),
    "silu": OpCheck(gen_unary(lo=-20, hi=20), ref_unary_float(lambda x, at: x * _sigmoid(x)), "transcendental"),
    "sin": OpCheck(gen_unary(lo=-10, hi=10), ref_unary_float(lambda x, at: np.sin(x)), "transcendental"),
    "cos": OpCheck(gen_unary(lo=-10, hi=10), ref_unary_float(lambda x, at: np.cos(x)), "transcendental"),
    "erf": OpCheck(gen_unary(), ref_unary_float(lambda x, at: _erf(x)), "transcendental"),
    "gelu": OpCheck(
        gen_unary(lo=-6, hi=6, attrs=({}, {"approximate": "none"}, {"approximate": "tanh"})),
        ref_unary_float(_gelu),
        "transcendental",
    ),
    "gelu_backward": OpCheck(
        gen_variants(gen_binary(lo=-6, hi=6), ({}, {"approximate": "tanh"})),
        ref_gelu_backward,
        "transcendental",
    ),
    # elementwise, keeping the dtype
    "neg": OpCheck(gen_unary(dtypes=NUMERIC, ints=(-(2**62), 2**62)), ref_unary_numeric(lambda x: -x)),
    "abs": OpCheck(gen_unary(dtypes=NUMERIC, ints=(-(2**62), 2**62)), ref_unary_numeric(np.abs)),
    "relu": OpCheck(gen_unary(dtypes=NUMERIC), ref_unary_numeric(lambda x: np.where((x > 0) | (x != x), x, 0))),  # NaN stays
    "square": OpCheck(gen_unary(dtypes=NUMERIC, ints=(-(2**40), 2**40)), ref_unary_numeric(lambda x: x * x), "elementwise"),
    # binary arithmetic
    "add": OpCheck(gen_binary(), ref_arith(np.add, np.add), "elementwise"),
    "sub": OpCheck(gen_binary(same_except=("bool",)), ref_arith(np.subtract, np.subtract), "elementwise"),
    "mul": OpCheck(gen_binary(), ref_arith(np.multiply, np.multiply), "elementwise"),
    "div": OpCheck(gen_binary(ints=(-5, 5)), ref_arith(np.divide, None, always_float=True), "elementwise"),
    "maximum": OpCheck(gen_binary(grid=True), ref_arith(np.maximum, np.maximum)),
    "minimum": OpCheck(gen_binary(grid=True), ref_arith(np.minimum, np.minimum)),
    "pow": OpCheck(
        gen_binary(same_except=("bool",), lo=-3, hi=3, ints=(-6, 6), b_values=dict(lo=-3, hi=3, ints=(0, 6), grid=True)),
        ref_arith(c_pow, np.power),
        "transcendental",
    ),
    # comparisons and logic
    "eq": OpCheck(gen_binary(grid=True), ref_compare(np.equal)),
    "ne": OpCheck(gen_binary(grid=True), ref_compare(np.not_equal)),
    "lt": OpCheck(gen_binary(grid=True), ref_compare(np.less)),
    "le": OpCheck(gen_binary(grid=True), ref_compare(np.less_equal)),
    "gt": OpCheck(gen_binary(grid=True), ref_compare(np.greater)),
    "ge": OpCheck(gen_binary(grid=True), ref_compare(np.greater_equal)),
    "logical_and": OpCheck(gen_binary(grid=True, lo=-1, hi=1, ints=(-1, 1)), ref_logical(np.logical_and)),
    "logical_or": OpCheck(gen_binary(grid=True, lo=-1, hi=1, ints=(-1, 1)), ref_logical(np.logical_or)),
    "logical_xor": OpCheck(gen_binary(grid=True, lo=-1, hi=1, ints=(-1, 1)), ref_logical(np.logical_xor)),
    "logical_not": OpCheck(gen_unary(lo=-1, hi=1, ints=(-1, 1)), lambda case, x: Expect(x == 0, "bool")),
    "where": OpCheck(gen_where, ref_where),
    "clamp": OpCheck(gen_clamp, ref_clamp, "elementwise"),
    "cast": OpCheck(gen_cast, ref_cast),
    # reductions
    "sum": OpCheck(gen_reduce(), ref_sum, "reduction"),
    "prod": OpCheck(gen_reduce(lo=0.6, hi=1.5, ints=(-3, 3)), ref_prod, "reduction"),
    "mean": OpCheck(gen_reduce(dtypes=FLOATS), ref_mean, "reduction"),
    "var": OpCheck(gen_reduce(dtypes=FLOATS, corrections=(None, 0, 2)), ref_var(False), "reduction"),
    "std": OpCheck(gen_reduce(dtypes=FLOATS, corrections=(None, 0, 2)), ref_var(True), "reduction"),
    "max": OpCheck(gen_reduce(grid=True, specials=0.03), ref_extreme(np.max)),
    "min": OpCheck(gen_reduce(grid=True, specials=0.03), ref_extreme(np.min)),
    "argmax": OpCheck(gen_arg, ref_arg(np.argmax)),
    "argmin": OpCheck(gen_arg, ref_arg(np.argmin)),
    # matmul, nn, loss
    "matmul": OpCheck(gen_matmul, ref_matmul, "reduction"),
    "softmax": OpCheck(gen_softmax, ref_softmax(log=False), "reduction"),
    "log_softmax": OpCheck(gen_softmax, ref_softmax(log=True), "reduction"),
    "layer_norm": OpCheck(gen_norm(with_bias=True), ref_norm(center=True, default_eps=1e-5), "reduction"),
    # The registry's default eps is 1e-6 (torch's rms_norm defaults to finfo(dtype).eps).
    "rms_norm": OpCheck(gen_norm(with_bias=False), ref_norm(center=False, default_eps=1e-6), "reduction"),
    "cross_entropy": OpCheck(gen_cross_entropy, ref_cross_entropy, "reduction"),
    # optimizer updates (three outputs: param, exp_avg, exp_avg_sq); the reference rounds
    # where torch's in-place ops do, in IEEE arithmetic, so the results are exact
    "adam_step": OpCheck(gen_adam, ref_adam(decoupled=False), "exact"),
    "adamw_step": OpCheck(gen_adam, ref_adam(decoupled=True), "exact"),
    # indexing
    "embedding": OpCheck(gen_embedding, ref_embedding),
    "index_select": OpCheck(gen_index_select, ref_index_select),
    "gather": OpCheck(gen_gather, ref_gather),
    "scatter_add": OpCheck(gen_scatter_add, ref_scatter_add, "reduction"),
    "cat": OpCheck(gen_cat, ref_cat),
    "stack": OpCheck(gen_stack, ref_stack),
    "pad": OpCheck(gen_pad, ref_pad),
    "triu": OpCheck(gen_tri, ref_same_dtype(lambda x, at: np.triu(x, at.get("diagonal", 0)))),
    "tril": OpCheck(gen_tri, ref_same_dtype(lambda x, at: np.tril(x, at.get("diagonal", 0)))),
}


# ---------------------------------------------------------------------------------------------
# Cases outside the table: random ops, errors, zero-dim promotion.


def random_cases(op: str) -> list[Case]:
    """Per float dtype: N draws, the same seed again, another seed, and the same draws in 2-D
    (values depend only on seed and position); plus small shapes and the default dtype."""
    cases = []
    for dtype in FLOATS:
        flat, two_d = [RANDOM_DRAWS], [300, RANDOM_DRAWS // 300]
        for seed, shape in ((11, flat), (11, flat), (12, flat), (11, two_d)):
            cases.append(Case(op, [], {"shape": shape, "seed": seed, "dtype": dtype}))
    for shape in ([], [0], [2, 3, 4], [1, 5, 1, 2]):
        cases.append(Case(op, [], {"shape": shape}))
    return cases


def error_cases() -> dict[str, tuple[Case, str]]:
    """Calls that must fail: name -> (case, a fragment the message must hold). Every message
    must also start with the op's name and name each operand as dtype[shape]."""
    f32 = lambda shape: dense(np.ones(shape), "f32")
    transposed = Operand(np.ones([2, 3]), "f32", [("transpose", {})])
    return {
        "add_shape_mismatch": (Case("add", [f32([2, 3]), f32([4])], {}), "cannot be broadcast"),
        "where_not_broadcastable": (
            Case("where", [dense(np.ones([2, 3]), "bool"), f32([4, 3]), f32([3])], {}),
            "cannot be broadcast",
        ),
        "matmul_inner_dims": (Case("matmul", [f32([2, 3]), f32([4, 5])], {}), "inner dims"),
        "matmul_batch_dims": (Case("matmul", [f32([2, 3, 4]), f32([3, 4, 5])], {}), "broadcast"),
        "sum_bad_dim": (Case("sum", [f32([2, 3])], {"dims": [2]}), "out of range"),
        "softmax_bad_dim": (Case("softmax", [f32([2, 3])], {"dim": -3}), "out of range"),
        "embedding_index_out_of_range": (Case("embedding", [dense([0, 5, 1], "i64"), f32([5, 3])], {}), "out of range"),
        "embedding_negative_index": (Case("embedding", [dense([-1], "i32"), f32([5, 3])], {}), "out of range"),
        "gather_index_out_of_range": (
            Case("gather", [f32([3, 4]), dense([[0, 4], [1, 2]], "i64")], {"dim": 1}),
            "out of range",
        ),
        "index_select_out_of_range": (Case("index_select", [f32([3, 4]), dense([3], "i64")], {"dim": 0}), "out of range"),
        "cross_entropy_target_out_of_range": (
            Case("cross_entropy", [f32([2, 3]), dense([0, 3], "i64")], {}),
            "out of range",
        ),
        "cat_shape_mismatch": (Case("cat", [f32([2, 3]), f32([2, 4])], {"dim": 0}), "must match"),
        "pow_negative_int_exponent": (Case("pow", [dense([2, 3], "i64"), dense([-1, 2], "i64")], {}), "negative"),
        "mean_of_integers": (Case("mean", [dense([1, 2], "i32")], {}), "floating"),
        "neg_of_bool": (Case("neg", [dense([True], "bool")], {}), "bool"),
        "sub_of_bools": (Case("sub", [dense([True], "bool"), dense([False], "bool")], {}), "bool"),
        "where_condition_not_bool": (Case("where", [f32([2]), f32([2]), f32([2])], {}), "bool"),
        "view_of_transposed": (Case("view", [transposed], {"shape": [6]}), "cannot be viewed"),
        "layer_norm_weight_shape": (Case("layer_norm", [f32([2, 3]), f32([2])], {}), "weight"),
        "max_over_empty_dim": (Case("max", [f32([2, 0])], {"dims": [1]}), "empty"),
        "clamp_without_bounds": (Case("clamp", [f32([2])], {}), "min and max"),
        "rand_of_int_dtype": (Case("rand", [], {"shape": [2], "dtype": "i64"}), "floating"),
    }


def promotion_cases() -> list[Case]:
    """add(dimensioned tensor, zero-dim tensor) for every dtype pair, both orders."""
    cases = []
    for dim_dtype in DTYPES:
        for zero_dtype in DTYPES:
            a, b = dense([1, 0, 2], dim_dtype), dense(1, zero_dtype)
            cases += [Case("add", [a, b], {}), Case("add", [b, a], {})]
    return cases


# ---------------------------------------------------------------------------------------------
# Running the batch.


def opcheck_path() -> pathlib.Path:
    return pathlib.Path(os.environ.get("NEURONLAB_OPCHECK", REPO / "target" / "debug" / "opcheck"))


@pytest.fixture(scope="session")
def opcheck() -> pathlib.Path:
    path = opcheck_path()
    if not path.is_file():
        pytest.fail(
            f"opcheck binary not found at {path}; "
            "run `cargo build -p neuronlab-tests --bin opcheck` (or set NEURONLAB_OPCHECK)"
        )
    return path


def run_batch(binary: pathlib.Path, directory: pathlib.Path, cases: list[Case], env=None) -> dict[str, dict]:
    """Writes the cases and their inputs to `directory`, runs `opcheck run` once, and returns
    results by case id, with decoded outputs under "values"."""
    specs = []
    for case in cases:
        inputs = []
        for k, o in enumerate(case.inputs):
            file = f"{case.id}.in{k}.bin"
            (directory / file).write_bytes(encode(o.base, o.dtype))
            views = [{"op": op, "attrs": at} for op, at in o.views]
            inputs.append({"file": file, "dtype": o.dtype, "shape": list(o.base.shape), "views": views})
        spec = {"id": case.id, "op": case.op, "inputs": inputs, "attrs": case.attrs}
        if case.grad is not None:
            values, dtype = case.grad["cotangent"]
            file = f"{case.id}.cotangent.bin"
            (directory / file).write_bytes(encode(values, dtype))
            cotangent = {"file": file, "dtype": dtype, "shape": list(np.shape(values))}
            spec["grad"] = {"wrt": case.grad["wrt"], "cotangent": cotangent}
        specs.append(spec)
    (directory / "cases.json").write_text(json.dumps(specs))
    proc = subprocess.run([str(binary), "run", str(directory)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"opcheck run failed ({proc.returncode}): {proc.stderr}"
    results = {r["id"]: r for r in json.loads((directory / "results.json").read_text())}
    for r in results.values():
        if r["ok"]:
            r["raw"] = [(directory / o["file"]).read_bytes() for o in r["outputs"]]
            r["values"] = [decode(raw, o["dtype"], o["shape"]) for raw, o in zip(r["raw"], r["outputs"])]
            r["grad_values"] = [
                decode((directory / g["file"]).read_bytes(), g["dtype"], g["shape"]) for g in r.get("grads", [])
            ]
    return results


@dataclasses.dataclass
class Batch:
    cases: dict[str, list[Case]]  # by op (table cases), plus "error.*" and "promotion" groups
    errors: dict[str, tuple[Case, str]]
    results: dict[str, dict]


def build_cases() -> tuple[dict[str, list[Case]], dict[str, tuple[Case, str]]]:
    by_op: dict[str, list[Case]] = {}
    for op, check in CHECKS.items():
        cases = by_op.setdefault(op, [])
        if isinstance(check, RandomCheck):
            cases += random_cases(op)
            continue
        for seed, large in [(s, False) for s in SEEDS] + [(LARGE_SEED, True)]:
            rng = np.random.default_rng([seed, zlib.crc32(op.encode())])  # a stream per op and seed
            cases += [Case(op, inputs, attrs) for inputs, attrs in check.generate(rng, large)]
    for op, cases in by_op.items():
        for n, case in enumerate(cases):
            case.id = f"{op}.{n}"
    errors = error_cases()
    for name, (case, _) in errors.items():
        case.id = f"error.{name}"
    promotion = promotion_cases()
    for n, case in enumerate(promotion):
        case.id = f"promotion.{n}"
    by_op["promotion"] = promotion
    return by_op, errors


@pytest.fixture(scope="session")
def batch(opcheck, tmp_path_factory) -> Batch:
    by_op, errors = build_cases()
    everything = [c for cases in by_op.values() for c in cases] + [c for c, _ in errors.values()]
    results = run_batch(opcheck, tmp_path_factory.mktemp("opcheck"), everything)
    return Batch(by_op, errors, results)


# ---------------------------------------------------------------------------------------------
# Comparison.


def mismatch(case: Case, result: dict, expect: Expect | list[Expect], tolerance: str) -> str | None:
    """None when the outputs match the reference (one Expect per output), else what differs."""
    if not result["ok"]:
        return f"failed: {result['error']}"
    expects = expect if isinstance(expect, list) else [expect]
    if len(result["values"]) != len(expects):
        return f"{len(result['values'])} outputs, expected {len(expects)}"
    for i, (got, out, e) in enumerate(zip(result["values"], result["outputs"], expects)):
        problem = output_mismatch(got, out, e, tolerance)
        if problem:
            return f"output {i}: {problem}" if len(expects) > 1 else problem
    return None


def output_mismatch(got: np.ndarray, out: dict, expect: Expect, tolerance: str) -> str | None:
    want = np.asarray(expect.values)
    if out["dtype"] != expect.dtype or list(out["shape"]) != list(want.shape):
        return f"output is {out['dtype']}{out['shape']}, expected {expect.dtype}{list(want.shape)}"
    want = round_to(want, expect.dtype)
    if expect.dtype not in FLOATS:
        bad = got != want
    else:
        rtol, atol = TOLERANCES[tolerance][expect.dtype]
        scale = np.abs(want)
        if expect.scale is not None:
            scale = np.maximum(scale, np.nan_to_num(np.abs(expect.scale), posinf=0.0))
        finite = np.isfinite(got) & np.isfinite(want)
        with np.errstate(invalid="ignore"):
            close = np.abs(got - want) <= atol + rtol * scale
        same_special = (np.isnan(got) & np.isnan(want)) | (~np.isnan(got) & ~np.isnan(want) & (got == want))
        bad = np.where(finite, ~close, ~same_special)
    if not np.any(bad):
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    return (
        f"{int(np.sum(bad))} of {bad.size} elements differ (tolerance '{tolerance}'); "
        f"first at {list(where)}: got {got[where]!r}, expected {want[where]!r}"
    )


def check_random(op: str, cases: list[Case], results: dict[str, dict]) -> list[str]:
    """Problems with rand/randn outputs (see RANDOM_TOLERANCES)."""
    tol, problems = RANDOM_TOLERANCES[op], []
    by_key: dict[tuple, list] = {}
    for case in cases:
        r = results[case.id]
        dtype = case.attrs.get("dtype", "f32")
        if not r["ok"]:
            problems.append(f"{case.describe()}: failed: {r['error']}")
            continue
        out = r["outputs"][0]
        if out["dtype"] != dtype or out["shape"] != case.attrs["shape"]:
            problems.append(f"{case.describe()}: output is {out['dtype']}{out['shape']}")
        by_key.setdefault((dtype, case.attrs.get("seed")), []).append(r)
    for dtype in FLOATS:
        first, again, flat2d = by_key[(dtype, 11)]
        (other,) = by_key[(dtype, 12)]
        x = first["values"][0]
        where = f"{op} {dtype} seed 11"
        if first["raw"] != again["raw"]:
            problems.append(f"{where}: the same seed gave different values")
        if flat2d["raw"] != first["raw"]:
            problems.append(f"{where}: shape [300, {RANDOM_DRAWS // 300}] gave other values than [{RANDOM_DRAWS}]")
        equal = float(np.mean(other["values"][0] == x))
        if equal > RANDOM_TOLERANCES["max_equal_fraction_across_seeds"]:
            problems.append(f"{where}: seed 12 repeats {equal:.1%} of the values")
        if not np.all(np.isfinite(x)):
            problems.append(f"{where}: non-finite values")
        stats = {"mean": float(np.mean(x)), "var": float(np.var(x))}
        for name, value in stats.items():
            target, bound = tol[name]
            if abs(value - target) > bound:
                problems.append(f"{where}: {name} {value:.5f}, expected {target:.5f} +- {bound}")
        if op == "rand":
            if x.min() < 0 or x.max() >= 1:
                problems.append(f"{where}: values outside [0, 1): min {x.min()!r}, max {x.max()!r} ({int(np.sum(x >= 1))} >= 1)")
            counts = np.histogram(x, bins=tol["bins"], range=(0, 1))[0]
            p = 1 / tol["bins"]
            sigma = math.sqrt(len(x) * p * (1 - p))
            worst = float(np.max(np.abs(counts - len(x) * p)))
            if worst > tol["bin_sigmas"] * sigma:
                bound = tol["bin_sigmas"] * sigma
                problems.append(f"{where}: a histogram bin is off by {worst:.0f} (> {tol['bin_sigmas']} sigma = {bound:.0f})")
        else:
            for t in tol["cdf_points"]:
                empirical, phi = float(np.mean(x <= t)), 0.5 * (1 + math.erf(t / math.sqrt(2)))
                if abs(empirical - phi) > tol["cdf"]:
                    problems.append(f"{where}: P(x <= {t}) = {empirical:.4f}, normal CDF {phi:.4f}")
    return problems


# ---------------------------------------------------------------------------------------------
# Tests.


def test_every_registry_op_has_a_numpy_check(opcheck):
    proc = subprocess.run([str(opcheck), "list"], capture_output=True, text=True, check=True)
    registry = {op["name"] for op in json.loads(proc.stdout)}
    missing, unknown = sorted(registry - set(CHECKS)), sorted(set(CHECKS) - registry)
    assert not missing, f"ops without a numpy check: {missing}"
    assert not unknown, f"numpy checks for ops not in the registry: {unknown}"


@pytest.mark.parametrize("op", sorted(CHECKS))
@np.errstate(all="ignore")  # references compute NaN and inf on purpose
def test_op_matches_numpy(op, batch):
    check, cases = CHECKS[op], batch.cases[op]
    assert cases, f"the generator for {op} made no cases"
    if isinstance(check, RandomCheck):
        problems = check_random(op, cases, batch.results)
    else:
        problems = []
        for case in cases:
            expect = check.reference(case, *[o.value() for o in case.inputs])
            problem = mismatch(case, batch.results[case.id], expect, check.tolerance)
            if problem:
                problems.append(f"{case.describe()}\n    {problem}")
    shown = "\n".join(problems[:6])
    assert not problems, f"{len(problems)} of {len(cases)} {op} cases disagree with numpy:\n{shown}"


@pytest.mark.parametrize("name", sorted(error_cases()))
def test_bad_calls_fail_with_a_clear_message(name, batch):
    case, fragment = batch.errors[name]
    result = batch.results[case.id]
    assert not result["ok"], f"{case.describe()} succeeded; expected an error mentioning '{fragment}'"
    message = result["error"]
    assert message.startswith(f"{case.op}("), f"the message does not start with the op name: {message}"
    for o in case.inputs:
        assert f"{o.dtype}{o.shape}" in message, f"the message does not name operand {o.dtype}{o.shape}: {message}"
    assert fragment in message, f"the message does not mention '{fragment}': {message}"


@np.errstate(all="ignore")
def test_zero_dim_operands_promote_like_torch(batch):
    """add(tensor, zero-dim tensor) for every dtype pair: torch.result_type decides the dtype."""
    wrong = []
    for case in batch.cases["promotion"]:
        expect = CHECKS["add"].reference(case, *[o.value() for o in case.inputs])
        problem = mismatch(case, batch.results[case.id], expect, "elementwise")
        if problem:
            wrong.append(f"{case.describe()}: {problem}")
    assert not wrong, f"{len(wrong)} dtype pairs promote unlike torch:\n" + "\n".join(wrong)


def test_random_ops_do_not_depend_on_thread_count(opcheck, batch, tmp_path):
    """rand/randn are counter-based: one thread gives the same bytes as the pool."""
    cases = [c for op in ("rand", "randn") for c in batch.cases[op] if c.attrs.get("seed") == 11]
    single = run_batch(opcheck, tmp_path, cases, env=dict(os.environ, RAYON_NUM_THREADS="1"))
    differ = [c.id for c in cases if single[c.id].get("raw") != batch.results[c.id].get("raw")]
    assert not differ, f"outputs change with RAYON_NUM_THREADS=1: {differ}"


def test_reference_helpers():
    """The suite's own bf16 rounding (ties to even, NaN kept, f64 rounded once) and promotion."""
    f32 = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, np.nan, np.inf, 3.4e38], np.float32)
    assert list(f32_bits_to_bf16_bits(f32.view(np.uint32))[:3]) == [0x3F80, 0x3F80, 0x3F82]
    assert np.isnan(bf16_bits_to_f64(f32_bits_to_bf16_bits(f32.view(np.uint32)))[3])
    assert list(bf16_bits_to_f64(f64_to_bf16_bits([np.inf, 3.4e38]))) == [np.inf, np.inf]
    # Just above a tie: a double rounding through f32 (ties to even) would give 1.0.
    assert bf16_bits_to_f64(f64_to_bf16_bits(1 + 2**-8 + 2**-40)) == 1 + 2**-7
    assert result_type([("i32", False), ("f64", True)]) == "f64"
    assert result_type([("f16", False), ("f64", True)]) == "f16"
    assert result_type([("bool", False), ("i64", True)]) == "i64"
    assert result_type([("i32", False), ("i64", True)]) == "i32"

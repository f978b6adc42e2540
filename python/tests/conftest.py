"""Shared fixtures of the engram_offload tests: a NumPy re-implementation of the row decoder (format.hpp)
that the lookups are compared with, and small tables on fresh random content."""
import os

import numpy as np
import pytest

import engram_offload as eo


def fp8_e4m3_to_f64(codes):
    """Exact values of FP8 E4M3 ('fn') codes; NaN for S.1111.111."""
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    exp = (c >> 3) & 0xF
    mant = c & 0x7
    normal = (1.0 + mant / 8.0) * np.exp2(exp - 7.0)
    sub = mant * 2.0 ** -9
    v = sign * np.where(exp == 0, sub, normal)
    return np.where((exp == 0xF) & (mant == 7), np.nan, v)


def ue8m0_to_f64(codes):
    """2^(code-127); code 0 is 2^-127, code 255 NaN (OCP MX)."""
    c = codes.astype(np.float64)
    return np.where(codes == 0xFF, np.nan, np.exp2(c - 127.0))


def f32_to_bf16_rne(f32):
    bits = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), r)


def numpy_decode(payload, scales):
    """payload uint8 [..., d], scales uint8 [..., d/32] -> bf16 bits uint16 [..., d]."""
    d = payload.shape[-1]
    s = np.repeat(ue8m0_to_f64(scales), 32, axis=-1)[..., :d]
    with np.errstate(over="ignore", invalid="ignore"):
        prod = (fp8_e4m3_to_f64(payload) * s).astype(np.float32)  # exact product, or +-inf on overflow
    return f32_to_bf16_rne(prod)


def table_rows(table, layer_index):
    """(payload [rows, d], scales [rows, d/32]) copies of a layer's memory, either row format."""
    lay = table.layout
    d = lay.d
    mem = table.memory(layer_index)
    if lay.format == "fused":
        rec = mem[0]
        return rec[:, :d].copy(), rec[:, d:d + d // 32].copy()
    return mem[0].copy(), mem[1].copy()


def reference_lookup(table, layer_index, ids):
    """NumPy lookup: zero rows for negative ids and ids >= rows, decoded rows otherwise."""
    payload, scales = table_rows(table, layer_index)
    rows = payload.shape[0]
    valid = (ids >= 0) & (ids < rows)
    safe = np.where(valid, ids, 0)
    out = numpy_decode(payload[safe], scales[safe])
    out[~valid] = 0
    return out


@pytest.fixture
def rng():
    seed = int.from_bytes(os.urandom(8), "little")
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(params=["fused", "split"])
def random_table(request, rng):
    """A tiny-preset memfd table whose bytes are fresh random values (every code pair can occur: NaN fp8,
    scale 0 and 255, overflowing products)."""
    layout = eo.Layout.preset("tiny", format=request.param)
    table = eo.SharedTable.create(layout)
    for i in range(layout.n_layers):
        for m in table.memory(i, writable=True):
            m[...] = rng.integers(0, 256, size=m.shape, dtype=np.uint8)
    return table


def random_ids(rng, layout, layer_index, tokens, dead_fraction=0.2):
    """[tokens, heads] int64: each head's ids inside its own head range, some -1 (dead)."""
    offs = np.asarray(layout.head_offsets[layer_index])
    lo, hi = offs[:-1], offs[1:]
    ids = lo + (rng.random((tokens, layout.heads)) * (hi - lo)).astype(np.int64)
    ids[rng.random(ids.shape) < dead_fraction] = -1
    return ids.astype(np.int64)

import numpy as np
import pytest

import engram_offload as eo


def numpy_hash(hasher, layout, tokens, layer_index):
    """Independent re-implementation of the reference N-gram hash for precompressed ids (global row ids)."""
    m = np.asarray(hasher.multipliers[layer_index], dtype=np.int64)
    n_max = layout.max_ngram
    pad = np.full(n_max - 1, hasher.compressed_pad_id, dtype=np.int64)
    x = np.concatenate([pad, np.asarray(tokens, dtype=np.int64)])
    T = len(tokens)
    out = np.empty((T, layout.heads), dtype=np.int64)
    rows = layout.head_rows[layer_index]
    offs = layout.head_offsets[layer_index]
    h = 0
    with np.errstate(over="ignore"):
        for n in range(2, n_max + 1):
            mix = np.zeros(T, dtype=np.int64)
            for k in range(n):
                mix ^= x[n_max - 1 - k: n_max - 1 - k + T] * m[k]
            for j in range(layout.heads_per_order):
                out[:, h] = offs[h] + np.mod(mix, np.int64(rows[h]))
                h += 1
    return out


@pytest.fixture
def layout():
    return eo.Layout.preset("v41-flash-mini", table_size="16MiB")


def test_hash_matches_numpy_reference(layout, rng):
    V = int(rng.integers(1000, 200000))
    h = eo.Hasher(layout, compression_table=None, seed=int(rng.integers(0, 1000)), compressed_vocab=V, pad_id=2)
    tokens = rng.integers(0, V, size=int(rng.integers(1, 500)))
    for li in range(layout.n_layers):
        ids = h.hash(tokens, li)
        assert ids.dtype == np.int64 and ids.shape == (len(tokens), layout.heads)
        np.testing.assert_array_equal(ids, numpy_hash(h, layout, tokens, li))
        offs = np.asarray(layout.head_offsets[li])
        assert ((ids >= offs[:-1]) & (ids < offs[1:])).all()
        local = h.hash(tokens, li, global_ids=False)
        np.testing.assert_array_equal(local + offs[:-1], ids)


def test_chunks_equal_whole_sequence_and_rollback(layout, rng):
    V = 50000
    h = eo.Hasher(layout, compressed_vocab=V)
    tokens = rng.integers(0, V, size=200)
    whole = np.stack([h.hash(tokens, li) for li in range(layout.n_layers)])
    seq = h.begin_sequence()
    parts, pos = [], 0
    while pos < len(tokens):
        n = int(rng.integers(1, 20))
        parts.append(h.hash_chunk(seq, tokens[pos:pos + n]))
        pos += n
    assert seq.position == len(tokens)
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), whole)
    # Speculative draft rejected: roll back 3 tokens and re-hash them.
    seq.rollback(3)
    np.testing.assert_array_equal(h.hash_chunk(seq, tokens[-3:]), whole[:, -3:])
    # Prefix-cache hit and snapshot restore give the same continuation.
    cut = int(rng.integers(1, len(tokens) - 1))
    resumed = h.resume(tokens[:cut])
    np.testing.assert_array_equal(h.hash_chunk(resumed, tokens[cut:]), whole[:, cut:])
    snap = h.resume(tokens[:cut]).snapshot()
    restored = h.restore(snap)
    assert restored.position == cut
    np.testing.assert_array_equal(h.hash_chunk(restored, tokens[cut:]), whole[:, cut:])
    with pytest.raises(eo.EngramError) as e:
        h.begin_sequence().rollback(1)
    assert e.value.code == "invalid_argument"


def test_hash_errors(layout):
    h = eo.Hasher(layout, compressed_vocab=100)
    with pytest.raises(eo.EngramError) as e:
        h.hash([1, 2, 100], 0)
    assert e.value.code == "invalid_argument"
    with pytest.raises(eo.EngramError) as e:
        h.hash([1, 2], layout.n_layers)
    assert e.value.code == "invalid_argument"
    with pytest.raises(eo.EngramError):
        eo.Hasher(layout, compressed_vocab=0)


def test_default_compression_table(layout, rng):
    import os
    path = eo.default_compression_table_path()
    if not os.path.exists(path):
        pytest.skip(f"committed compression table {path} not present")
    h = eo.Hasher(layout, compression_table="default")
    assert h.vocab_size > h.compressed_vocab > 0
    tokens = rng.integers(0, h.vocab_size, size=64)
    ids = h.hash(tokens, 0)
    assert ids.shape == (64, layout.heads)
    with pytest.raises(eo.EngramError) as e:
        h.hash([h.vocab_size], 0)
    assert e.value.code == "invalid_argument"


def test_hash_feeds_lookup(layout, rng):
    t = eo.SharedTable.create(layout)
    t.fill_synthetic(7)
    h = eo.Hasher(layout, compressed_vocab=1000)
    ids = h.hash(rng.integers(0, 1000, size=32), 1)
    out, st = eo.lookup(t, 1, ids, checked=True, return_stats=True)
    assert st["dead_rows"] == 0 and st["invalid_ids"] == 0 and out.shape == (32, layout.heads, layout.d)

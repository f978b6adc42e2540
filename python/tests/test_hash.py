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


def numpy_hash_dead(hasher, layout, tokens, dead, layer_index):
    """The DEAD rule of the device kernel's dead_mask (core/hash_batch.hpp), position by position: walking an
    n-gram back from its newest token, the first DEAD token and every older one count as the pad, as positions
    before the sequence start do."""
    m = np.asarray(hasher.multipliers[layer_index], dtype=np.int64)
    rows = layout.head_rows[layer_index]
    offs = layout.head_offsets[layer_index]
    pad = np.int64(hasher.compressed_pad_id)
    out = np.empty((len(tokens), layout.heads), dtype=np.int64)
    with np.errstate(over="ignore"):
        for t in range(len(tokens)):
            window, stopped = [], False
            for k in range(layout.max_ngram):
                p = t - k
                stopped = stopped or p < 0 or bool(dead[p])
                window.append(pad if stopped else np.int64(tokens[p]))
            h = 0
            for n in range(2, layout.max_ngram + 1):
                mix = np.int64(0)
                for k in range(n):
                    mix ^= window[k] * m[k]
                for _ in range(layout.heads_per_order):
                    out[t, h] = offs[h] + np.mod(mix, np.int64(rows[h]))
                    h += 1
    return out


def test_dead_tokens_block_ngrams(layout, rng):
    V = 5000
    h = eo.Hasher(layout, compressed_vocab=V, pad_id=2)
    tokens = rng.integers(0, V, size=40)
    dead = np.zeros(40, dtype=bool)
    dead[[7, 8, 20]] = True
    for li in range(layout.n_layers):
        ids = h.hash(tokens, li, dead=dead)
        np.testing.assert_array_equal(ids, numpy_hash_dead(h, layout, tokens, dead, li))
        # The same as hashing the pieces around the DEAD tokens as sequences of their own ...
        np.testing.assert_array_equal(ids[:7], h.hash(tokens[:7], li))
        np.testing.assert_array_equal(ids[9:20], h.hash(tokens[9:20], li))
        np.testing.assert_array_equal(ids[21:], h.hash(tokens[21:], li))
        # ... and a DEAD position gets the all-pad n-grams: those of a lone pad token at a sequence start.
        for p in (7, 8, 20):
            np.testing.assert_array_equal(ids[p], h.hash([2], li)[0])
        # An integer mask and a mask of nothing DEAD.
        np.testing.assert_array_equal(h.hash(tokens, li, dead=dead.astype(np.uint8)), ids)
        np.testing.assert_array_equal(h.hash(tokens, li, dead=np.zeros(40, dtype=bool)), h.hash(tokens, li))
    # Chunks carry the DEAD tokens in the sequence's look-back.
    seq = h.begin_sequence()
    parts = [h.hash_chunk(seq, tokens[:8], dead=dead[:8]), h.hash_chunk(seq, tokens[8:21], dead=dead[8:21]),
             h.hash_chunk(seq, tokens[21:])]
    whole = np.stack([h.hash(tokens, li, dead=dead) for li in range(layout.n_layers)])
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), whole)
    with pytest.raises(eo.EngramError) as e:
        h.hash(tokens, 0, dead=dead[:5])
    assert e.value.code == "invalid_argument"

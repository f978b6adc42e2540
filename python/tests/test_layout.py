import numpy as np
import pytest

import engram_offload as eo


def test_tiny_preset_shape():
    lay = eo.Layout.preset("tiny")
    assert lay.d == 64
    assert lay.heads == (lay.max_ngram - 1) * lay.heads_per_order
    assert lay.n_layers == len(lay.layer_ids)
    for i in range(lay.n_layers):
        offs = lay.head_offsets[i]
        assert len(offs) == lay.heads + 1
        assert offs[0] == 0
        assert list(np.diff(offs)) == lay.head_rows[i]
        assert lay.rows[i] == offs[-1]
    assert lay.total_rows == sum(lay.rows)
    assert lay.total_bytes == lay.total_rows * lay.row_stride_bytes
    assert lay.source_bytes_per_row == lay.d + lay.d // 32
    assert lay.format == "fused"
    assert lay.row_stride_bytes % 16 == 0


def test_primes_are_distinct_across_layers():
    lay = eo.Layout.preset("v41-flash-mini", table_size="64MiB")
    assert lay.layer_ids == [1, 14]
    primes = [p for layer in lay.head_rows for p in layer]
    assert len(set(primes)) == len(primes)
    assert abs(lay.total_bytes - (64 << 20)) < 0.05 * (64 << 20)
    assert lay.layer_index(14) == 1 and lay.layer_index(3) == -1


def test_table_size_int_and_string_agree():
    a = eo.Layout.preset("v41-flash-mini", table_size=32 << 20)
    b = eo.Layout.preset("v41-flash-mini", table_size="32MiB")
    assert a.head_rows == b.head_rows


def test_split_format():
    lay = eo.Layout.preset("tiny", format="split")
    assert lay.format == "split" and lay.row_stride_bytes == lay.d + lay.d // 32


def test_unknown_preset_raises():
    with pytest.raises(eo.EngramError) as e:
        eo.Layout.preset("no-such-model")
    assert e.value.code == "invalid_argument"
    assert "no-such-model" in e.value.message


def test_from_checkpoint_round_trip(tmp_path, rng):
    lay = eo.Layout.preset("tiny")
    t = eo.SharedTable.create(lay)
    t.fill_synthetic(int(rng.integers(1, 1 << 62)))
    path = str(tmp_path / "tiny.safetensors")
    t.save(path)
    back = eo.Layout.from_checkpoint(path)
    assert back.head_rows == lay.head_rows and back.d == lay.d and back.layer_ids == lay.layer_ids
    split = eo.Layout.from_checkpoint(path, format="split")
    assert split.format == "split"


def test_from_checkpoint_missing_file(tmp_path):
    with pytest.raises(eo.EngramError) as e:
        eo.Layout.from_checkpoint(str(tmp_path / "missing.safetensors"))
    assert e.value.code == "not_found"


def test_from_checkpoint_garbage(tmp_path, rng):
    p = tmp_path / "garbage.safetensors"
    p.write_bytes(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(eo.EngramError) as e:
        eo.Layout.from_checkpoint(str(p))
    assert e.value.code == "invalid_argument"

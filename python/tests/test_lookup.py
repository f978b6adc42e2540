import numpy as np
import pytest

import engram_offload as eo
from conftest import numpy_decode, random_ids, reference_lookup, table_rows


def test_numpy_decoder_matches_bound_reference_on_all_code_pairs():
    # Every (fp8, scale) pair once: 256 rows of d=256 (row r has scale code r in every block).
    payload = np.tile(np.arange(256, dtype=np.uint8), (256, 1))
    scales = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 8, axis=1)
    ours = numpy_decode(payload, scales)
    ref = eo.decode_rows(payload, scales)
    assert ref.dtype == np.uint16 and ref.shape == (256, 256)
    np.testing.assert_array_equal(ours, ref)
    assert (ref[:, 0x7F] == 0x7FC0).all() and (ref[255] == 0x7FC0).all()


def test_lookup_bit_identical_to_numpy_decoder(random_table, rng):
    lay = random_table.layout
    for layer in range(lay.n_layers):
        ids = random_ids(rng, lay, layer, tokens=int(rng.integers(1, 300)))
        out, stats = eo.lookup(random_table, layer, ids, return_stats=True)
        assert out.dtype == np.uint16 and out.shape == ids.shape + (lay.d,)
        np.testing.assert_array_equal(out, reference_lookup(random_table, layer, ids))
        assert stats["rows"] == ids.size
        assert stats["dead_rows"] == int((ids < 0).sum())
        assert stats["invalid_ids"] == 0


def test_single_thread_and_pool_agree(random_table, rng):
    lay = random_table.layout
    ids = random_ids(rng, lay, 0, 257)
    np.testing.assert_array_equal(eo.lookup(random_table, 0, ids, threads=1), eo.lookup(random_table, 0, ids, threads=0))


def test_synthetic_table_matches_synth_rows(rng):
    lay = eo.Layout.preset("tiny")
    t = eo.SharedTable.create(lay)
    seed = int(rng.integers(1, 1 << 62))
    t.fill_synthetic(seed)
    ids = random_ids(rng, lay, 0, 64, dead_fraction=0.0)
    payload, scales = eo.synth_rows(seed, 0, ids.ravel(), lay.d)
    expect = eo.decode_rows(payload, scales).reshape(ids.shape + (lay.d,))
    np.testing.assert_array_equal(eo.lookup(t, 0, ids), expect)


def test_out_is_written_in_place(random_table, rng):
    lay = random_table.layout
    ids = random_ids(rng, lay, 0, 33)
    out = np.full(ids.shape + (lay.d,), 0xABCD, dtype=np.uint16)
    res = eo.lookup(random_table, 0, ids, out=out)
    assert res is out
    np.testing.assert_array_equal(out, reference_lookup(random_table, 0, ids))


def test_other_integer_dtypes_are_accepted(random_table, rng):
    lay = random_table.layout
    ids = random_ids(rng, lay, 0, 20, dead_fraction=0.0)
    np.testing.assert_array_equal(eo.lookup(random_table, 0, ids.astype(np.int32)), eo.lookup(random_table, 0, ids))
    # Non-contiguous int64 view (every other token).
    wide = random_ids(rng, lay, 0, 40)
    np.testing.assert_array_equal(eo.lookup(random_table, 0, wide[::2]), reference_lookup(random_table, 0, wide[::2]))


class DlpackOnly:
    """An array producer that only speaks DLPack (as a PyTorch CPU tensor would)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_input(random_table, rng):
    lay = random_table.layout
    ids = random_ids(rng, lay, 0, 17)
    np.testing.assert_array_equal(eo.lookup(random_table, 0, DlpackOnly(ids)), reference_lookup(random_table, 0, ids))


def test_out_of_range_ids_unchecked_give_zero_rows(random_table, rng):
    lay = random_table.layout
    ids = random_ids(rng, lay, 0, 50, dead_fraction=0.0)
    bad = rng.random(ids.shape) < 0.3
    ids[bad] = lay.rows[0] + rng.integers(0, 1 << 40, size=int(bad.sum()))
    out, stats = eo.lookup(random_table, 0, ids, return_stats=True)
    assert stats["invalid_ids"] == int(bad.sum())
    assert (out[bad] == 0).all()
    np.testing.assert_array_equal(out, reference_lookup(random_table, 0, ids))


def test_checked_lookup_rejects_before_writing(random_table, rng):
    lay = random_table.layout
    ids = random_ids(rng, lay, 0, 10, dead_fraction=0.0)
    ids[int(rng.integers(0, 10)), int(rng.integers(0, lay.heads))] = lay.rows[0]
    out = np.full(ids.shape + (lay.d,), 0x1234, dtype=np.uint16)
    with pytest.raises(eo.EngramError) as e:
        eo.lookup(random_table, 0, ids, out=out, checked=True)
    assert e.value.code == "invalid_argument"
    assert (out == 0x1234).all()


@pytest.mark.parametrize("bad", ["float", "heads", "dims", "layer", "out_dtype", "out_shape"])
def test_bad_arguments_raise(random_table, rng, bad):
    lay = random_table.layout
    ids = random_ids(rng, lay, 0, 8)
    out = None
    layer = 0
    if bad == "float":
        ids = ids.astype(np.float64)
    elif bad == "heads":
        ids = ids[:, :-1].copy()
    elif bad == "dims":
        ids = ids.reshape(-1)
    elif bad == "layer":
        layer = lay.n_layers
    elif bad == "out_dtype":
        out = np.zeros(ids.shape + (lay.d,), dtype=np.float32)
    elif bad == "out_shape":
        out = np.zeros(ids.shape + (lay.d + 32,), dtype=np.uint16)
    with pytest.raises(eo.EngramError) as e:
        eo.lookup(random_table, layer, ids, out=out)
    assert e.value.code == "invalid_argument"
    assert isinstance(e.value, RuntimeError) and e.value.message


def test_save_load_round_trip(tmp_path, random_table, rng):
    lay = random_table.layout
    path = str(tmp_path / "t.safetensors")
    random_table.save(path)
    with pytest.raises(eo.EngramError) as e:
        random_table.save(path)  # exists, no overwrite
    assert e.value.code == "invalid_argument"
    other = eo.SharedTable.create(eo.Layout.from_checkpoint(path, format=lay.format))
    seen = []
    other.load(path, on_progress=lambda done, total, s: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1]
    for i in range(lay.n_layers):
        a, b = table_rows(random_table, i), table_rows(other, i)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    ids = random_ids(rng, lay, 0, 40)
    np.testing.assert_array_equal(eo.lookup(other, 0, ids), eo.lookup(random_table, 0, ids))


def test_load_progress_line(tmp_path, capfd):
    """progress=True draws the load's line on stderr (a pipe here: whole lines, the last one at 100%) and still
    calls on_progress."""
    table = eo.SharedTable.create(eo.Layout.preset("tiny"))
    table.fill_synthetic(3)
    path = str(tmp_path / "p.safetensors")
    table.save(path)
    capfd.readouterr()
    seen = []
    table.load(path, progress=True, on_progress=lambda done, total, s: seen.append((done, total)))
    err = capfd.readouterr().err
    assert seen and seen[-1][0] == seen[-1][1]
    last = err.strip().splitlines()[-1]
    assert last.startswith("load " + path + ": ") and "(100%)" in last and "\r" not in err, err


def test_load_layout_mismatch(tmp_path, rng):
    small = eo.SharedTable.create(eo.Layout.preset("tiny"))
    small.fill_synthetic(1)
    path = str(tmp_path / "tiny.safetensors")
    small.save(path)
    big = eo.SharedTable.create(eo.Layout.preset("v41-flash-mini", table_size="8MiB"))
    with pytest.raises(eo.EngramError) as e:
        big.load(path)
    assert e.value.code == "invalid_argument"


def test_table_info_and_census():
    lay = eo.Layout.preset("tiny")
    t = eo.SharedTable.create(lay, backing="memfd", placement="none")
    v = t.view(0)
    assert v["rows"] == lay.rows[0] and v["d"] == lay.d and v["stride_bytes"] == lay.row_stride_bytes
    b = t.backing(0)
    assert b["fd"] >= 0 and b["size_bytes"] >= lay.rows[0] * lay.row_stride_bytes
    assert "engram:layer=" in b["identity"]
    cs = t.census("after_placement")
    assert len(cs) == lay.n_layers
    assert isinstance(cs[0], dict)
    # node numbers are ints, as Python indexes them
    nodes = cs[0]["pages_per_node"]
    assert nodes and all(isinstance(n, int) and isinstance(p, int) and p >= 0 for n, p in nodes.items()), nodes
    assert eo.SharedTable.allocate(lay).backing(0) is None
    with pytest.raises(eo.EngramError) as e:
        t.census("whenever")
    assert e.value.code == "invalid_argument"


def test_bad_table_options():
    lay = eo.Layout.preset("tiny")
    for kw in ({"backing": "floppy"}, {"placement": "bind:9999"}):
        with pytest.raises(eo.EngramError) as e:
            eo.SharedTable.create(lay, **kw)
        assert e.value.code == "invalid_argument", kw


def test_memory_views_keep_table_alive(rng):
    lay = eo.Layout.preset("tiny")
    t = eo.SharedTable.create(lay)
    seed = int(rng.integers(1, 1 << 62))
    t.fill_synthetic(seed)
    (rec,) = t.memory(0)
    del t
    p, s = eo.synth_rows(seed, 0, [0, 5], lay.d)
    np.testing.assert_array_equal(rec[[0, 5], :lay.d], p)
    assert not rec.flags.writeable

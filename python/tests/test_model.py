"""A Hugging Face model directory from Python: Layout.from_model reads the layout from config.json, SharedTable.load_model
streams the rows into a table (both row formats), Engine(layout, model=DIR) builds its table from the directory, and
every row equals the generator's synthetic rows of the directory's seed; bad directories and tensor names raise."""
import os
import subprocess

import numpy as np
import pytest

import engram_offload as eo
from conftest import table_rows
from test_engine import _engram_cli


@pytest.fixture
def model_dir(tmp_path, rng):
    cli = _engram_cli()
    if cli is None:
        pytest.skip("the engram CLI is not next to this build of the module (set ENGRAM_BUILD_DIR)")
    seed = int(rng.integers(1, 1 << 30))
    out = str(tmp_path / "model")
    r = subprocess.run([cli, "table", "create", "--format", "hf-model", "--layout", "v41-flash-mini", "--table-size",
                        "2MiB", "--extra-rows", "3", "--seed", str(seed), "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"table create --format hf-model failed here: {r.stderr.strip()[-200:]}")
    return out, seed


def _expect_synthetic_rows(table, seed):
    lay = table.layout
    for li in range(lay.n_layers):
        payload, scales = table_rows(table, li)
        want_p, want_s = eo.synth_rows(seed, li, np.arange(lay.rows[li]), lay.d)
        assert np.array_equal(payload, want_p), f"layer index {li}"
        assert np.array_equal(scales, want_s), f"layer index {li}"


@pytest.mark.parametrize("fmt", ["fused", "split"])
def test_layout_and_load_model(model_dir, fmt):
    path, seed = model_dir
    layout = eo.Layout.from_model(path, format=fmt)
    assert layout.layer_ids == [1, 14]
    assert layout.d == 256 and layout.format == fmt
    table = eo.SharedTable.create(layout)
    seen = []
    table.load_model(path, threads=2, on_progress=lambda done, total, s: seen.append((done, total)))
    _expect_synthetic_rows(table, seed)
    if seen:
        assert seen[-1][0] == seen[-1][1]


def test_engine_builds_its_table_from_the_model(model_dir, rng):
    path, seed = model_dir
    layout = eo.Layout.from_model(path)
    engine = eo.Engine(layout, model=path, backend="cpu")
    _expect_synthetic_rows(engine.table, seed)


def test_bad_model_directories_and_names_raise(model_dir, tmp_path):
    path, _ = model_dir
    with pytest.raises(eo.EngramError):
        eo.Layout.from_model(str(tmp_path / "absent"))
    with pytest.raises(eo.EngramError) as e:
        eo.Layout.from_model(path, tensor_names="a.{L}.w,a.{L}.s")
    assert "a.1.w" in str(e.value)
    other = eo.Layout.preset("tiny")
    table = eo.SharedTable.create(other)
    with pytest.raises(eo.EngramError):
        table.load_model(path)


def test_hasher_from_a_released_model_directory(tmp_path, monkeypatch):
    """A directory without a compression table: Hasher.from_model builds it from tokenizer.json (cached under
    XDG_CACHE_HOME, nothing written into the directory) and hashes as the committed table does."""
    cli = _engram_cli()
    if cli is None:
        pytest.skip("the engram CLI is not next to this build of the module (set ENGRAM_BUILD_DIR)")
    tokenizer = eo._engram._bundled_tokenizer_json_path()
    if not os.path.exists(tokenizer):
        pytest.skip(f"no {tokenizer} (scripts/setup runs npm ci in tools/tokenize)")
    out = str(tmp_path / "model")
    r = subprocess.run([cli, "table", "create", "--format", "hf-model", "--layout", "v41-flash-mini", "--table-size",
                        "1MiB", "--seed", "3", "--compression-table", "none", "--compressed-vocab-size", "98627",
                        "--tokenizer-json", tokenizer, "--out", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    before = sorted(os.listdir(out))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ENGRAM_CACHE_DIR", raising=False)
    h = eo.Hasher.from_model(out)
    assert h.compressed_vocab == 98627 and h.vocab_size == 128815 and h.pad_id == 2
    assert h.compression_table.startswith(str(tmp_path / "cache"))
    assert h.compression_table_source == "built"
    assert sorted(os.listdir(out)) == before
    again = eo.Hasher.from_model(out)
    assert again.compression_table_source == "cache"
    ref = eo.Hasher(h.layout, compression_table="default")
    tokens = np.arange(0, 128815, 997)
    dead = (tokens % 5) == 0
    for li in range(h.layout.n_layers):
        np.testing.assert_array_equal(h.hash(tokens, li), ref.hash(tokens, li))
        np.testing.assert_array_equal(h.hash(tokens, li, dead=dead), ref.hash(tokens, li, dead=dead))

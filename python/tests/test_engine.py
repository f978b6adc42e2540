"""engram_offload.Engine: the library's engine from Python. The conformance matrix (row layout x fast path x cache)
on fresh random tables -- through Prefetcher(engine) and engine.lookup -- into poisoned buffers, compared with the
NumPy reference decoder; CUDA cases skip with the reason without a GPU or without torch. A Python peer attaches to
an `engram serve-table` leader and reads its rows. Options are parsed by the library (a bad value is an
InvalidArgumentError, also a ValueError)."""
import os
import signal
import subprocess
import json

import numpy as np
import pytest

import engram_offload as eo
from conftest import random_ids, reference_lookup

MATRIX = [(fmt, fp, cache) for fmt in ("fused", "split") for fp in ("planner", "plain", "off") for cache in (False, True)]


def _fill_random(table, rng):
    for i in range(table.n_layers):
        for m in table.memory(i, writable=True):
            m[...] = rng.integers(0, 256, size=m.shape, dtype=np.uint8)


def _options(fp, cache):
    o = {"fast_path": fp, "content": "zero", "max_tokens": 64, "lookup_threads": 2}
    if cache:
        o.update({"cache_size": "20%", "cache_warmup": 1, "cache_update": "every=1,rows=32"})
    return o


@pytest.mark.parametrize("fmt,fp,cache", MATRIX)
def test_cpu_engine_matches_reference(rng, fmt, fp, cache):
    layout = eo.Layout.preset("tiny", format=fmt)
    engine = eo.Engine(layout, backend="cpu", **_options(fp, cache))
    assert engine.backend == "cpu" and engine.device == -1
    _fill_random(engine.table, rng)
    pf = eo.Prefetcher(engine)
    for step in range(5):
        tokens = int(rng.integers(1, 64))
        ids = [random_ids(rng, layout, li, tokens) for li in range(layout.n_layers)]
        pf.begin_step(step)
        for li in range(layout.n_layers):
            pf.prepare(li, ids[li])
        for li in range(layout.n_layers):
            np.testing.assert_array_equal(pf.consume(li), reference_lookup(engine.table, li, ids[li]))
        pf.end_step()
        for li in range(layout.n_layers):
            out = np.full((tokens, layout.heads, layout.d), 0xFFFF, dtype=np.uint16)
            res, stats = engine.lookup(li, ids[li], out=out, return_stats=True)
            assert res is out and stats["rows"] == tokens * layout.heads
            np.testing.assert_array_equal(out, reference_lookup(engine.table, li, ids[li]))
    d = engine.describe()
    assert d["backend"] == "cpu"
    assert (d["cache_note"] is not None) == cache  # the cpu backend says once that the cache is CUDA-only
    lines = engine.describe_lines()
    assert any(line.startswith("Cache") for line in lines) == cache


@pytest.mark.parametrize("fmt,fp,cache", MATRIX)
def test_cuda_engine_matches_reference(rng, fmt, fp, cache):
    if not eo.cuda_backend_built():
        pytest.skip("built without the CUDA backend")
    torch = pytest.importorskip("torch", reason="the CUDA cases read staging through torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    layout = eo.Layout.preset("tiny", format=fmt)
    engine = eo.Engine(layout, backend="cuda", device=0, **_options(fp, cache))
    assert engine.backend == "cuda"
    _fill_random(engine.table, rng)
    pf = eo.Prefetcher(engine)
    for step in range(6):
        tokens = int(rng.integers(1, 64))
        ids = [random_ids(rng, layout, li, tokens) for li in range(layout.n_layers)]
        pf.begin_step(step)
        for li in range(layout.n_layers):
            pf.prepare(li, ids[li])
        got = [pf.consume(li).clone() for li in range(layout.n_layers)]
        pf.end_step()
        for li in range(layout.n_layers):
            bits = got[li].view(torch.int16).cpu().numpy().view(np.uint16)
            np.testing.assert_array_equal(bits, reference_lookup(engine.table, li, ids[li]))
            dev_ids = torch.from_numpy(ids[li]).cuda()
            out = torch.full((tokens, layout.heads, layout.d), -1, dtype=torch.int16, device="cuda")
            engine.lookup(li, dev_ids, out=out)
            torch.cuda.synchronize()
            np.testing.assert_array_equal(out.cpu().numpy().view(np.uint16), reference_lookup(engine.table, li, ids[li]))
    lines = engine.describe_lines()
    if fp == "off":
        assert any("plain UVA gather" in line for line in lines), lines
    else:
        assert any(line.startswith("Path") for line in lines), lines
        if cache and fp == "planner":
            assert any(line.startswith("Cache") and ": fp8 rows" in line for line in lines), lines


def test_engine_options_are_checked_by_the_library():
    layout = eo.Layout.preset("tiny")
    with pytest.raises(eo.EngramError) as e:
        eo.Engine(layout, backend="cpu", fast_path="sometimes")
    assert e.value.code == "invalid_argument" and "fast_path" in e.value.message
    assert isinstance(e.value, ValueError)
    with pytest.raises(ValueError):
        eo.Engine(layout, backend="cpu", no_such_option=1)
    keys = dict(eo.engine_option_keys())
    assert "cache_size" in keys and "placement" in keys
    # The planner's learning switch takes a boolean (Python's or text) and nothing else.
    assert "planner_learn" in keys
    with pytest.raises(eo.EngramError) as e:
        eo.Engine(layout, backend="cpu", planner_learn="sometimes")
    assert e.value.code == "invalid_argument" and "planner_learn" in e.value.message
    for value in (False, "false"):
        engine = eo.Engine(layout, backend="cpu", content="zero", max_tokens=8, lookup_threads=1, planner_learn=value)
        assert engine.describe()["backend"] == "cpu"


def test_engine_backend_auto_says_why():
    engine = eo.Engine(eo.Layout.preset("tiny"))
    assert engine.backend in ("cpu", "cuda")
    if engine.backend == "cpu":
        assert "cuda not used" in engine.backend_note


def _engram_cli():
    build = os.environ.get("ENGRAM_BUILD_DIR") or os.path.join(os.path.dirname(eo.__file__), "..", "..")
    path = os.path.abspath(os.path.join(build, "bin", "engram"))
    return path if os.access(path, os.X_OK) else None


def test_python_peer_attaches_to_serve_table(rng):
    cli = _engram_cli()
    if cli is None:
        pytest.skip("the engram CLI is not next to this build of the module (set ENGRAM_BUILD_DIR)")
    seed = int(rng.integers(1, 1 << 30))
    proc = subprocess.Popen([cli, "serve-table", "--layout", "tiny", "--seed", str(seed), "--group", "pyg",
                             "--peers", "1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready", ready
        channel = eo.UnixGroupChannel.connect(ready["socket"], "pyg", 20.0)
        table = eo.SharedTable.attach(channel)
        assert table.group_rank == 1 and table.read_only
        layout = table.layout
        for li in range(layout.n_layers):
            ids = random_ids(rng, layout, li, 8)
            flat = ids.ravel()
            p, s = eo.synth_rows(seed, li, np.where(flat >= 0, flat, 0), layout.d)
            want = eo.decode_rows(p, s)
            want[flat < 0] = 0
            np.testing.assert_array_equal(eo.lookup(table, li, ids, threads=1), want.reshape(ids.shape + (layout.d,)))
        steps = [s["step"] for s in table.group_steps()]
        assert steps[0] == "describe" and steps[-1] == "census after load"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)

import numpy as np
import pytest

import engram_offload as eo
from conftest import random_ids, reference_lookup


@pytest.fixture
def table(rng):
    lay = eo.Layout.preset("v41-flash-mini", table_size="8MiB")
    t = eo.SharedTable.create(lay)
    t.fill_synthetic(int(rng.integers(1, 1 << 62)))
    return t


def run_steps(table, mode, batches):
    lay = table.layout
    p = eo.Prefetcher(table, mode=mode, threads=2)
    assert p.mode == mode
    staged = []
    for step, ids_per_layer in enumerate(batches):
        p.begin_step(step)
        for li in range(lay.n_layers):
            p.prepare(li, ids_per_layer[li])
        for li in range(lay.n_layers):
            staged.append(p.consume(li))
        p.end_step()
    return p, staged


def test_early_and_on_demand_stage_the_same(table, rng):
    lay = table.layout
    batches = [[random_ids(rng, lay, li, int(rng.integers(1, 64))) for li in range(lay.n_layers)] for _ in range(4)]
    early, a = run_steps(table, "early", batches)
    lazy, b = run_steps(table, "on_demand", batches)
    assert len(a) == len(b) == 4 * lay.n_layers
    for i, (x, y) in enumerate(zip(a, b)):
        ids = batches[i // lay.n_layers][i % lay.n_layers]
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, reference_lookup(table, i % lay.n_layers, ids))
    assert early.totals() == lazy.totals()
    assert early.totals()["rows"] == sum(ids.size for batch in batches for ids in batch)
    tl = early.timeline()
    assert tl["unit"] == "ns" and len(tl["rows"]) == 4 * lay.n_layers
    for r in tl["rows"]:
        assert r["layer_id"] in lay.layer_ids
        assert r["r_ns"] <= r["submit_ns"] <= r["s_ns"] <= r["f_ns"] <= r["wait_end_ns"]
        assert r["c_ns"] <= r["wait_end_ns"]
    # early: every layer of a step is submitted before the first consumer arrives; on_demand: a layer is
    # submitted only after the previous layer's consumer was released.
    for rows in (tl["rows"], lazy.timeline()["rows"]):
        for r in rows:
            assert r["r_ns"] <= r["c_ns"]
    for step in range(4):
        e = [r for r in tl["rows"] if r["step"] == step]
        o = [r for r in lazy.timeline()["rows"] if r["step"] == step]
        assert max(r["r_ns"] for r in e) <= min(r["c_ns"] for r in e)
        for prev, nxt in zip(o, o[1:]):
            assert nxt["r_ns"] >= prev["wait_end_ns"]
    trace = early.chrome_trace()
    assert "traceEvents" in trace and len(trace["traceEvents"]) > 0
    summary = early.summary()
    assert set(summary) == set(lay.layer_ids)
    assert all(s["lookups"] == 4 for s in summary.values())
    assert len(early.analyze()) == lay.n_layers


def test_zero_copy_consume(table, rng):
    lay = table.layout
    p = eo.Prefetcher(table)
    ids = random_ids(rng, lay, 0, 9)
    p.begin_step(0)
    p.prepare(0, ids)
    view = p.consume(0, copy=False)
    assert not view.flags.writeable and not view.flags.owndata
    np.testing.assert_array_equal(view, reference_lookup(table, 0, ids))
    p.end_step()


def test_injected_clock(table, rng):
    ticks = iter(range(0, 10**9, 1000))
    p = eo.Prefetcher(table, clock_ns=lambda: float(next(ticks)))
    p.begin_step(0)
    p.prepare(1, random_ids(rng, table.layout, 1, 4))
    p.consume(1)
    p.end_step()
    (row,) = p.timeline()["rows"]
    assert all(row[k] % 1000 == 0 for k in ("r_ns", "submit_ns", "s_ns", "f_ns", "c_ns", "wait_end_ns"))


def test_prefetch_errors(table, rng):
    with pytest.raises(eo.EngramError) as e:
        eo.Prefetcher(table, mode="sometimes")
    assert e.value.code == "invalid_argument"
    lazy = eo.Prefetcher(table, mode="on_demand")
    lazy.begin_step(0)
    with pytest.raises(eo.EngramError) as e:
        lazy.consume(0)
    assert e.value.code == "invalid_argument"
    early = eo.Prefetcher(table, checked=True)
    early.begin_step(0)
    ids = random_ids(rng, table.layout, 0, 3, dead_fraction=0.0)
    ids[0, 0] = table.layout.rows[0] + 5
    with pytest.raises(eo.EngramError) as e:
        early.prepare(0, ids)
        early.consume(0)
    assert e.value.code == "invalid_argument"
    with pytest.raises(eo.EngramError) as e:
        early.prepare(table.layout.n_layers, ids)
    assert e.value.code == "invalid_argument"

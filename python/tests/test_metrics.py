"""engram_offload.metrics: an engine's serving metrics from Python -- the snapshot dict agrees with what the queue
did, the Prometheus text comes from the C++ writer, and the prometheus_client collector registers and renders
(skipped with the reason when prometheus_client is not installed)."""
import json
import math
import os
import signal
import subprocess
import urllib.request

import pytest

import engram_offload as eo
from conftest import random_ids


def _run_steps(rng, steps=3, tokens=4):
    layout = eo.Layout.preset("tiny")
    engine = eo.Engine(layout, backend="cpu", content="zero", max_tokens=64, lookup_threads=1)
    pf = eo.Prefetcher(engine)
    for step in range(steps):
        pf.begin_step(step)
        for li in range(layout.n_layers):
            pf.prepare(li, random_ids(rng, layout, li, tokens))
        for li in range(layout.n_layers):
            pf.consume(li)
        pf.end_step()
    return layout, engine, pf


def _total(snap, name):
    fam = snap[name]
    if fam["type"] == "histogram":
        return sum(s["count"] for s in fam["samples"])
    return sum(s["value"] for s in fam["samples"])


def test_snapshot_counts_the_queue(rng):
    layout, engine, pf = _run_steps(rng)
    snap = engine.metrics()
    assert pf.metrics() == snap  # the prefetcher reads its engine's; nothing ran in between
    assert snap["engram_lookups_total"]["type"] == "counter"
    assert _total(snap, "engram_lookups_total") == 3 * layout.n_layers
    assert _total(snap, "engram_lookup_rows_total") == 3 * 4 * layout.heads * layout.n_layers
    assert _total(snap, "engram_lookup_duration_seconds") == 3 * layout.n_layers
    sample = snap["engram_lookups_total"]["samples"][0]
    assert sample["labels"] == {"rank": "0", "layer": str(layout.layer_ids[0])}
    hist = snap["engram_exposed_wait_seconds"]["samples"][0]
    assert hist["buckets"][-1] == (math.inf, hist["count"])
    counts = [c for _, c in hist["buckets"]]
    assert counts == sorted(counts)  # cumulative
    # The cpu backend has no hot-row cache and no planner: those families are absent, not 0.
    assert "engram_cache_hits_total" not in snap
    assert "engram_plan_predicted_seconds" not in snap


def test_prometheus_text_is_the_library_writer(rng):
    _, engine, _ = _run_steps(rng)
    text = engine.prometheus_text()
    assert "# TYPE engram_lookups_total counter" in text
    assert 'engram_exposed_wait_seconds_bucket{rank="0",layer="1",le="+Inf"} 3' in text
    assert eo.metrics.prometheus_text(engine) == text


def test_collector_registers_and_renders(rng):
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed (Debian package python3-prometheus-client)")
    layout, engine, _ = _run_steps(rng)
    registry = prometheus_client.CollectorRegistry()
    registry.register(eo.metrics.Collector(engine))
    text = prometheus_client.generate_latest(registry).decode()
    assert 'engram_lookups_total{layer="1",rank="0"} 3.0' in text  # prometheus_client sorts labels
    assert "# TYPE engram_lookup_duration_seconds histogram" in text
    assert registry.get_sample_value("engram_lookups_total", {"rank": "0", "layer": "1"}) == 3
    assert registry.get_sample_value("engram_lookup_duration_seconds_count", {"rank": "0", "layer": "1"}) == 3
    assert registry.get_sample_value("engram_table_bytes", {"layer": "1"}) > 0


def test_collector_rejects_other_objects():
    with pytest.raises(TypeError):
        eo.metrics.Collector(object())


def _engram_cli():
    build = os.environ.get("ENGRAM_BUILD_DIR") or os.path.join(os.path.dirname(eo.__file__), "..", "..")
    path = os.path.abspath(os.path.join(build, "bin", "engram"))
    return path if os.access(path, os.X_OK) else None


def _sample(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_serve_table_metrics_count_an_attached_peer(tmp_path):
    cli = _engram_cli()
    if cli is None:
        pytest.skip("the engram CLI is not next to this build of the module (set ENGRAM_BUILD_DIR)")
    final = tmp_path / "serve.prom"
    proc = subprocess.Popen([cli, "serve-table", "--layout", "tiny", "--group", "pym", "--peers", "1", "--json",
                             "--metrics-port", "0", "--metrics-file", str(final)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "metrics at http://127.0.0.1:" in line, line
        url = line.strip().split("metrics at ", 1)[1]
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready", ready
        before = urllib.request.urlopen(url, timeout=10).read().decode()
        assert _sample(before, "engram_group_ranks") == 1
        assert _sample(before, "engram_group_peers_attached_total") is None  # no round yet: not written
        table = eo.SharedTable.attach(eo.UnixGroupChannel.connect(ready["socket"], "pym", 20.0))
        assert json.loads(proc.stdout.readline())["event"] == "round"
        after = urllib.request.urlopen(url, timeout=10).read().decode()
        assert _sample(after, "engram_group_ranks") == 2
        assert _sample(after, "engram_group_peers_attached_total") == 1
        assert _sample(after, 'engram_table_bytes{layer="1"}') == table.layout.total_bytes  # tiny: one layer
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert proc.returncode == 0
    assert _sample(final.read_text(), "engram_group_peers_attached_total") == 1

"""Serving metrics of an Engine or Prefetcher, for Prometheus.

The engine counts as it serves (docs/metrics.md): lookups, rows, bytes and the lookup / exposed-wait / queue-time
histograms per Engram layer, table bytes, load time, pages per NUMA node at the last census, errors by kind; on
CUDA also the planner's paths and the hot-row cache as of the last ``describe_lines()``. A figure the backend does
not measure has no sample (never a 0).

    engine.metrics()            # {name: {"type", "help", "samples": [...]}} (also Prefetcher.metrics())
    engine.prometheus_text()    # the Prometheus text exposition format 0.0.4, written by the C++ library
    prometheus_client.REGISTRY.register(engram_offload.metrics.Collector(engine))

A snapshot is a copy: taking one never waits for a device and is safe from a thread other than the one that
drives the engine (a metrics server's).
"""

import math

__all__ = ["Collector", "prometheus_text", "snapshot"]


def _native(source):
    """The C++ object behind an Engine or Prefetcher."""
    for attr in ("_e", "_q"):
        obj = getattr(source, attr, None)
        if obj is not None and hasattr(obj, "_metrics"):
            return obj
    if hasattr(source, "_metrics"):
        return source
    raise TypeError("engram_offload.metrics: expected an Engine or a Prefetcher, got %r" % type(source).__name__)


def snapshot(source):
    """The metrics of ``source`` (Engine or Prefetcher) now, as a dict: name -> {"type": "counter" | "gauge" |
    "histogram", "help": str, "samples": [{"labels": {name: value}, "value": float}] (histograms: "buckets":
    [(upper bound, cumulative count)] ending with (inf, count), "count", "sum")}. Names carry their unit."""
    return _native(source)._metrics().as_dict()


def prometheus_text(source):
    """The metrics of ``source`` in the Prometheus text exposition format 0.0.4 (the C++ library's writer)."""
    return _native(source)._metrics().prometheus_text()


def _le(bound):
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class Collector:
    """A prometheus_client collector of an Engine's or Prefetcher's metrics: one snapshot per scrape.

    ``prometheus_client.REGISTRY.register(Collector(engine))`` adds them to a serving process's own registry.
    Needs the ``prometheus_client`` package (Debian: python3-prometheus-client) when collected, not to import this
    module."""

    def __init__(self, source):
        _native(source)  # fail now, not at the first scrape
        self._source = source

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        for name, fam in snapshot(self._source).items():
            samples = fam["samples"]
            label_names = list(samples[0]["labels"].keys()) if samples else []
            kind = fam["type"]
            if kind == "counter":
                out = CounterMetricFamily(name, fam["help"], labels=label_names)
            elif kind == "gauge":
                out = GaugeMetricFamily(name, fam["help"], labels=label_names)
            else:
                out = HistogramMetricFamily(name, fam["help"], labels=label_names)
            for s in samples:
                values = [s["labels"].get(k, "") for k in label_names]
                if kind == "histogram":
                    out.add_metric(values, buckets=[(_le(b), c) for b, c in s["buckets"]], sum_value=s["sum"])
                else:
                    out.add_metric(values, s["value"])
            yield out


def _install(engine_cls, prefetcher_cls):
    """Engine.metrics() / .prometheus_text() and the same on Prefetcher."""
    for cls in (engine_cls, prefetcher_cls):
        def metrics(self):
            return snapshot(self)

        def text(self):
            return prometheus_text(self)

        metrics.__doc__ = snapshot.__doc__
        text.__doc__ = prometheus_text.__doc__
        cls.metrics = metrics
        cls.prometheus_text = text


# The package imports this module last, once Engine and Prefetcher exist.
from . import Engine as _Engine, Prefetcher as _Prefetcher  # noqa: E402

_install(_Engine, _Prefetcher)

// _MetricsSnapshot: an engine's serving metrics (engram/metrics.hpp) from Python, as a dict (engram_offload.metrics
// turns it into prometheus_client families) or as the Prometheus text the C++ writer gives. _Engine._metrics() is
// attached here; _Prefetcher._metrics() is bound with the prefetcher (it reads its engine's).
#include <pybind11/pybind11.h>

#include <limits>

#include "common.hpp"
#include "engram/metrics.hpp"
#include "py_engine.hpp"

namespace engram::py_bind {
namespace {

// {name: {"type", "help", "samples": [{"labels": {..}, "value"} | {"labels", "buckets": [(le, cumulative)], "count",
// "sum"}]}}; le is the upper bound as a float (+inf last).
py::dict metrics_dict(const MetricsSnapshot& s) {
  py::dict out;
  for (const MetricFamily& f : s.families) {
    if (f.samples.empty()) continue;
    py::list samples;
    for (const MetricSample& x : f.samples) {
      py::dict d;
      py::dict labels;
      for (const auto& [k, v] : x.labels) labels[py::str(k)] = v;
      d["labels"] = labels;
      if (f.type == MetricType::kHistogram) {
        py::list buckets;
        for (size_t i = 0; i < x.bucket_bounds.size(); ++i)
          buckets.append(py::make_tuple(x.bucket_bounds[i], x.bucket_cumulative[i]));
        buckets.append(py::make_tuple(std::numeric_limits<double>::infinity(), x.count));
        d["buckets"] = buckets;
        d["count"] = x.count;
        d["sum"] = x.sum;
      } else {
        d["value"] = x.value;
      }
      samples.append(d);
    }
    py::dict fam;
    fam["type"] = metric_type_name(f.type);
    fam["help"] = f.help;
    fam["samples"] = samples;
    out[py::str(f.name)] = fam;
  }
  return out;
}

}  // namespace

void bind_metrics(py::module_& m) {
  py::class_<MetricsSnapshot>(m, "_MetricsSnapshot")
      .def("as_dict", &metrics_dict, "{name: {type, help, samples}}: families with at least one sample")
      .def("prometheus_text", [](const MetricsSnapshot& s) { return prometheus_text(s); },
           "The Prometheus text exposition format 0.0.4");
  py::object engine_cls = m.attr("_Engine");
  engine_cls.attr("_metrics") = py::cpp_function([](const PyEngine& e) { return e.engine->metrics(); },
                                                 py::is_method(engine_cls), py::name("_metrics"),
                                                 "The engine's metrics now (a copy; never waits for a device)");
}

}  // namespace engram::py_bind

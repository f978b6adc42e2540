// _Prefetcher: a rank's serial prefetch queue from Python — the queue of an Engine (Prefetcher(engine)) or of an
// engine built over a SharedTable for this prefetcher (Prefetcher(table, device=...)): either way the engine's
// queue, so CUDA prefetches take the planner's fast path and the hot-row cache when the options ask for them.
// Layer indices are the table's; `layers` restricts which ones this prefetcher serves. on_demand mode keeps the
// ids until consume() submits them (the B1 baseline: same queue, same lookup, same staging).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>

#include "common.hpp"
#include "py_engine.hpp"
#include "engram/prefetch_queue.hpp"
#include "engram/timeline.hpp"

namespace engram::py_bind {
namespace {

struct PyPrefetcher {
  py::object owner;                 // the PyEngine or SharedTable kept alive
  std::unique_ptr<Engine> own;      // an engine built for this prefetcher (over a table)
  Engine* engine = nullptr;
  PrefetchMode mode = PrefetchMode::kEarly;
  int heads = 0, d = 0, n_table_layers = 0;
  std::vector<int> layers;          // table layer indices served
  std::vector<bool> served;         // [table layer index]
  // on_demand: ids held until consume() submits them (host copy, or a device address the caller keeps alive).
  std::vector<std::optional<std::vector<int64_t>>> held;
  std::vector<uintptr_t> held_device;
  std::vector<int64_t> held_tokens;

  bool on_cuda() const { return engine->device() >= 0; }
  int slot(int layer_index) const {
    if (layer_index < 0 || layer_index >= n_table_layers)
      invalid("layer index " + std::to_string(layer_index) + " out of range [0, " + std::to_string(n_table_layers) +
              ") (an index into layout.layer_ids, not a model layer id)");
    if (!served[static_cast<size_t>(layer_index)])
      invalid("layer index " + std::to_string(layer_index) + " is not served by this Prefetcher (layers=" +
              py::str(py::cast(layers)).cast<std::string>() + ")");
    return layer_index;
  }
  void init(std::vector<int> ls, const std::string& mode_text) {
    mode = take(parse_prefetch_mode(mode_text));
    const EngramLayout& l = engine->layout();
    heads = l.heads();
    d = l.d;
    n_table_layers = l.n_layers();
    if (ls.empty())
      for (int i = 0; i < n_table_layers; ++i) ls.push_back(i);
    served.assign(static_cast<size_t>(n_table_layers), false);
    for (int li : ls) {
      if (li < 0 || li >= n_table_layers)
        invalid("layer index " + std::to_string(li) + " out of range [0, " + std::to_string(n_table_layers) + ")");
      if (served[static_cast<size_t>(li)]) invalid("layers: index " + std::to_string(li) + " given twice");
      served[static_cast<size_t>(li)] = true;
    }
    layers = std::move(ls);
    held.assign(static_cast<size_t>(n_table_layers), std::nullopt);
    held_device.assign(static_cast<size_t>(n_table_layers), 0);
    held_tokens.assign(static_cast<size_t>(n_table_layers), 0);
  }
};

py::dict dist(const Distribution& d) {
  py::dict x;
  x["median"] = d.median;
  x["p5"] = d.p5;
  x["p95"] = d.p95;
  x["p99"] = d.p99;
  x["n"] = d.n;
  return x;
}

}  // namespace

void bind_prefetcher(py::module_& m) {
  py::class_<PyPrefetcher>(m, "_Prefetcher")
      .def("_metrics", [](const PyPrefetcher& p) { return p.engine->metrics(); })  // bind_metrics.cpp
      .def_static(
          "over_table",
          [](py::object table_obj, std::vector<int> layers, const std::string& mode, py::dict options,
             uintptr_t main_stream, std::optional<std::function<double()>> clock_ns) {
            PyTable& t = table_obj.cast<PyTable&>();
            EngineOptions o;
            apply_options(o, options);
            o.main_stream = reinterpret_cast<void*>(main_stream == 1 ? 0 : main_stream);
            if (clock_ns) {
              auto fn = *clock_ns;
              o.clock_ns = [fn]() {
                py::gil_scoped_acquire acquire;
                return fn();
              };
            }
            auto p = std::make_unique<PyPrefetcher>();
            p->owner = table_obj;
            Result<std::unique_ptr<Engine>> r = Status(Code::kInternal, "Prefetcher did not run");
            {
              py::gil_scoped_release release;
              r = Engine::over_table(t.table, o);
            }
            p->own = take(std::move(r));
            p->engine = p->own.get();
            p->init(std::move(layers), mode);
            return p;
          },
          py::arg("table"), py::arg("layers"), py::arg("mode"), py::arg("options"), py::arg("main_stream"),
          py::arg("clock_ns"))
      .def_static(
          "of_engine",
          [](py::object engine_obj, std::vector<int> layers, const std::string& mode) {
            auto p = std::make_unique<PyPrefetcher>();
            p->owner = engine_obj;
            p->engine = engine_obj.cast<PyEngine&>().engine.get();
            p->init(std::move(layers), mode);
            return p;
          },
          py::arg("engine"), py::arg("layers"), py::arg("mode"))
      .def_property_readonly("mode", [](const PyPrefetcher& p) { return std::string(prefetch_mode_name(p.mode)); })
      .def_property_readonly("backend", [](const PyPrefetcher& p) { return std::string(p.engine->backend_name()); })
      .def_property_readonly("layers", [](const PyPrefetcher& p) { return p.layers; })
      .def_property_readonly("device", [](const PyPrefetcher& p) { return p.engine->device(); })
      .def_property_readonly("streams", [](const PyPrefetcher& p) -> py::object {
        if (!p.on_cuda()) return py::none();
        return py::make_tuple(reinterpret_cast<uintptr_t>(p.engine->main_stream()),
                              reinterpret_cast<uintptr_t>(p.engine->prefetch_stream()));
      }, "(main stream, prefetch stream) raw cudaStream_t handles of a CUDA prefetcher; None on the CPU.")
      .def("begin_step", [](PyPrefetcher& p, int64_t step) { p.engine->queue().begin_step(step); }, py::arg("step"))
      .def("end_step", [](PyPrefetcher& p) {
        Status s;
        {
          py::gil_scoped_release release;
          s = p.engine->queue().end_step();
        }
        check(s);
      })
      .def("order_after", [](PyPrefetcher& p, uintptr_t stream) {
        if (!p.on_cuda()) return;
        check(cuda_stream_wait(p.engine->main_stream(), reinterpret_cast<void*>(stream), p.engine->device()));
      }, py::arg("stream"),
         "CUDA: the queue's main stream waits (on the GPU) for what `stream` (raw cudaStream_t; 0 or 1 = the legacy "
         "default stream) has enqueued so far.")
      .def("order_before", [](PyPrefetcher& p, uintptr_t stream) {
        if (!p.on_cuda()) return;
        check(cuda_stream_wait(reinterpret_cast<void*>(stream), p.engine->main_stream(), p.engine->device()));
      }, py::arg("stream"),
         "CUDA: `stream` waits (on the GPU) for what the queue's main stream has enqueued so far.")
      .def("wait_event", [](PyPrefetcher& p, uintptr_t event) {
        if (!p.on_cuda()) invalid("after_event: only a CUDA Prefetcher waits on CUDA events");
        if (event == 0) invalid("after_event: the event was never recorded (raw handle 0)");
        check(p.engine->main_wait_event(reinterpret_cast<void*>(event)));
      }, py::arg("event"))
      .def("prepare", [](PyPrefetcher& p, int layer_index, py::object ids_obj) {
        const int slot = p.slot(layer_index);
        auto ids = ids_array(ids_obj, p.heads, "prepare");
        const int64_t tokens = ids.shape(0);
        if (p.mode == PrefetchMode::kOnDemand) {
          p.held[static_cast<size_t>(slot)] = std::vector<int64_t>(ids.data(), ids.data() + ids.size());
          p.held_device[static_cast<size_t>(slot)] = 0;
          p.held_tokens[static_cast<size_t>(slot)] = tokens;
          return;
        }
        Status s;
        {
          py::gil_scoped_release release;
          s = p.engine->queue().prepare(slot, ids.data(), tokens);
        }
        check(s);
      }, py::arg("layer_index"), py::arg("ids"))
      .def("prepare_device", [](PyPrefetcher& p, int layer_index, uintptr_t ids_ptr, int64_t tokens) {
        const int slot = p.slot(layer_index);
        if (!p.on_cuda()) invalid("prepare: device ids need a CUDA Prefetcher");
        if (p.mode == PrefetchMode::kOnDemand) {
          p.held[static_cast<size_t>(slot)].reset();
          p.held_device[static_cast<size_t>(slot)] = ids_ptr;
          p.held_tokens[static_cast<size_t>(slot)] = tokens;
          return;
        }
        check(p.engine->prepare_device(slot, reinterpret_cast<const int64_t*>(ids_ptr), tokens));
      }, py::arg("layer_index"), py::arg("ids_ptr"), py::arg("tokens"))
      .def("write_ids", [](PyPrefetcher& p, int layer_index, py::object ids_obj) {
        const int slot = p.slot(layer_index);
        auto ids = ids_array(ids_obj, p.heads, "write_ids");
        if (!p.on_cuda()) invalid("write_ids: only a CUDA Prefetcher replays captured steps");
        Status s;
        {
          py::gil_scoped_release release;
          s = p.engine->write_ids(slot, ids.data(), ids.shape(0));
        }
        check(s);
      }, py::arg("layer_index"), py::arg("ids"))
      .def("last_launch", [](const PyPrefetcher& p, int layer_index) -> py::object {
        const int slot = p.slot(layer_index);
        if (!p.on_cuda()) return py::none();
        return launch_dict(take(p.engine->last_launch(slot)));
      }, py::arg("layer_index"))
      .def("consume", [](py::object self, int layer_index, bool copy) -> py::object {
        PyPrefetcher& p = self.cast<PyPrefetcher&>();
        const int slot = p.slot(layer_index);
        const auto k = static_cast<size_t>(slot);
        Result<StagingView> r = Status(Code::kInternal, "consume did not run");
        Status s;
        std::optional<std::vector<int64_t>> held;
        uintptr_t held_dev = 0;
        if (p.mode == PrefetchMode::kOnDemand) {
          if (!p.held[k] && p.held_device[k] == 0)
            invalid("consume(" + std::to_string(layer_index) + "): no ids prepared for this layer");
          held = std::move(p.held[k]);
          held_dev = p.held_device[k];
          p.held[k].reset();
          p.held_device[k] = 0;
        }
        {
          py::gil_scoped_release release;
          if (held) s = p.engine->queue().prepare(slot, held->data(), p.held_tokens[k]);
          if (held_dev) s = p.engine->prepare_device(slot, reinterpret_cast<const int64_t*>(held_dev), p.held_tokens[k]);
          if (s.is_ok()) r = p.engine->queue().consume(slot);
        }
        check(s);
        StagingView v = take(std::move(r));
        if (p.on_cuda()) {
          DeviceArray a;
          a.ptr = reinterpret_cast<uintptr_t>(v.data);
          a.shape = {v.tokens, v.heads, v.d};
          a.device = p.engine->device();
          a.ready_stream = reinterpret_cast<uintptr_t>(p.engine->main_stream());
          a.owner = self;
          return py::cast(std::move(a));
        }
        const std::vector<py::ssize_t> shape{v.tokens, v.heads, v.d};
        if (copy) {
          py::array_t<uint16_t> out(shape);
          std::memcpy(out.mutable_data(), v.data, static_cast<size_t>(v.tokens) * v.heads * v.d * sizeof(uint16_t));
          return py::array(out);
        }
        py::array a(py::dtype::of<uint16_t>(), shape,
                    {static_cast<py::ssize_t>(v.heads) * v.d * 2, static_cast<py::ssize_t>(v.d) * 2, py::ssize_t{2}},
                    v.data, self);
        py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
        return a;
      }, py::arg("layer_index"), py::arg("copy") = true)
      .def("timeline_json", [](PyPrefetcher& p) { return json_to_py(p.engine->queue().timeline().to_json()); })
      .def("chrome_trace", [](PyPrefetcher& p) { return json_to_py(p.engine->queue().timeline().to_chrome_trace()); })
      .def("totals", [](PyPrefetcher& p) { return stats_dict(p.engine->queue().totals()); })
      .def("describe", [](PyPrefetcher& p) {
        nlohmann::json j;
        {
          py::gil_scoped_release release;
          j = p.engine->describe();
        }
        return json_to_py(j);
      }, "The engine's report: backend, registration, per layer the paths the planner took, why, and the cache.")
      .def("describe_lines", [](PyPrefetcher& p) {
        std::vector<std::string> lines;
        {
          py::gil_scoped_release release;
          lines = p.engine->describe_lines();
        }
        return lines;
      }, "The Path / Cache lines `engram run` prints for the same engine.")
      .def("analyze", [](PyPrefetcher& p) {
        py::list out;
        for (const LayerAnalysis& a : analyze_timeline(p.engine->queue().timeline())) {
          py::dict d;
          d["rank"] = a.rank;
          d["layer_id"] = a.layer_id;
          d["queue_ns"] = dist(a.queue_ns);
          d["lookup_ns"] = dist(a.lookup_ns);
          d["exposed_wait_ns"] = dist(a.exposed_wait_ns);
          d["measured_wait_ns"] = dist(a.measured_wait_ns);
          d["lead_ns"] = dist(a.lead_ns);
          d["total_exposed_wait_ns"] = a.total_exposed_wait_ns;
          out.append(d);
        }
        return out;
      });
}

}  // namespace engram::py_bind

// engram_offload.Engine: the library's Engine from Python — a table, its backend (cpu or cuda), the registration
// and the prefetch queue with the fast path, planner, hot-row cache and online updates behind it, exactly as
// `engram run` assembles them. Made for one process (create), over an existing SharedTable (over_table), or as
// the leader / a peer of a shared group (lead, join).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "common.hpp"
#include "py_channel.hpp"
#include "py_engine.hpp"

namespace engram::py_bind {
namespace {

py::object table_of(Engine& e, const std::string& backing, const std::string& placement) {
  auto t = std::make_unique<PyTable>();
  t->table = e.shared_table();
  t->backing = backing;
  t->placement = placement;
  return py::cast(std::move(t));
}

std::unique_ptr<PyEngine> wrap(Result<std::unique_ptr<Engine>> r) {
  auto p = std::make_unique<PyEngine>();
  p->engine = take(std::move(r));
  const EngineOptions& o = p->engine->options();
  p->table = table_of(*p->engine, o.table.backing.to_string(), o.table.placement.to_string());
  return p;
}

EngineOptions options_of(const py::dict& options, uintptr_t main_stream) {
  EngineOptions o;
  apply_options(o, options);
  o.main_stream = reinterpret_cast<void*>(main_stream == 1 ? 0 : main_stream);
  return o;
}

}  // namespace

void bind_engine(py::module_& m) {
  py::class_<PyEngine>(m, "_Engine")
      .def_static(
          "create",
          [](const EngramLayout& layout, py::dict options, uintptr_t main_stream) {
            const EngineOptions o = options_of(options, main_stream);
            Result<std::unique_ptr<Engine>> r = Status(Code::kInternal, "create did not run");
            {
              py::gil_scoped_release release;
              r = Engine::create_local(layout, o);
            }
            return wrap(std::move(r));
          },
          py::arg("layout"), py::arg("options"), py::arg("main_stream") = 0)
      .def_static(
          "over_table",
          [](py::object table_obj, py::dict options, uintptr_t main_stream) {
            PyTable& t = table_obj.cast<PyTable&>();
            const EngineOptions o = options_of(options, main_stream);
            Result<std::unique_ptr<Engine>> r = Status(Code::kInternal, "over_table did not run");
            {
              py::gil_scoped_release release;
              r = Engine::over_table(t.table, o);
            }
            auto p = std::make_unique<PyEngine>();
            p->engine = take(std::move(r));
            p->table = table_obj;
            return p;
          },
          py::arg("table"), py::arg("options"), py::arg("main_stream") = 0)
      .def_static(
          "lead",
          [](const EngramLayout& layout, py::object channel_obj, const std::string& job, py::dict options,
             uintptr_t main_stream) {
            std::unique_ptr<PyCallbackChannel> holder;
            host::GroupChannel& ch = channel_of(channel_obj, holder);
            const EngineOptions o = options_of(options, main_stream);
            Result<std::unique_ptr<Engine>> r = Status(Code::kInternal, "lead did not run");
            {
              py::gil_scoped_release release;
              r = Engine::lead_group(layout, o, ch, job);
            }
            return wrap(std::move(r));
          },
          py::arg("layout"), py::arg("channel"), py::arg("job"), py::arg("options"), py::arg("main_stream") = 0)
      .def_static(
          "join",
          [](py::object channel_obj, py::dict options, uintptr_t main_stream) {
            std::unique_ptr<PyCallbackChannel> holder;
            host::GroupChannel& ch = channel_of(channel_obj, holder);
            const EngineOptions o = options_of(options, main_stream);
            Result<std::unique_ptr<Engine>> r = Status(Code::kInternal, "join did not run");
            {
              py::gil_scoped_release release;
              r = Engine::join_group(o, ch);
            }
            return wrap(std::move(r));
          },
          py::arg("channel"), py::arg("options"), py::arg("main_stream") = 0)
      .def_property_readonly("layout", [](const PyEngine& p) { return p.engine->layout(); })
      .def_property_readonly("table", [](const PyEngine& p) { return p.table; })
      .def_property_readonly("backend", [](const PyEngine& p) { return std::string(p.engine->backend_name()); })
      .def_property_readonly("backend_note", [](const PyEngine& p) { return p.engine->backend_note(); })
      .def_property_readonly("device", [](const PyEngine& p) { return p.engine->device(); })
      .def_property_readonly("staging_heads", [](const PyEngine& p) { return p.engine->staging_heads(); })
      .def_property_readonly("streams", [](const PyEngine& p) -> py::object {
        if (p.engine->device() < 0) return py::none();
        return py::make_tuple(reinterpret_cast<uintptr_t>(p.engine->main_stream()),
                              reinterpret_cast<uintptr_t>(p.engine->prefetch_stream()));
      })
      .def_property_readonly("group_rank", [](const PyEngine& p) { return p.engine->group_rank(); })
      .def_property_readonly("group_world_size", [](const PyEngine& p) { return p.engine->group_world_size(); })
      .def_property_readonly("group_job", [](const PyEngine& p) { return p.engine->group_job(); })
      .def("describe", [](const PyEngine& p) {
        nlohmann::json j;
        {
          py::gil_scoped_release release;
          j = p.engine->describe();
        }
        return json_to_py(j);
      })
      .def("describe_lines", [](const PyEngine& p) {
        std::vector<std::string> lines;
        {
          py::gil_scoped_release release;
          lines = p.engine->describe_lines();
        }
        return lines;
      })
      .def("censuses", [](const PyEngine& p) {
        py::list out;
        for (const auto& c : p.engine->censuses()) out.append(census_to_py(c));
        return out;
      })
      .def("census", [](const PyEngine& p, const std::string& point, uint64_t max_samples) {
        const CensusPoint pt = parse_census_point(point);
        std::vector<PageCensus> cs;
        {
          py::gil_scoped_release release;
          cs = p.engine->census(pt, max_samples);
        }
        py::list out;
        for (const auto& c : cs) out.append(census_to_py(c));
        return out;
      }, py::arg("point") = "on_demand", py::arg("max_samples") = uint64_t{1} << 20)
      .def("_host_lookup", [](PyEngine& p, int layer_index, py::object ids, py::object out, bool checked) {
        return host_lookup(*p.engine, layer_index, ids, out, checked);
      }, py::arg("layer_index"), py::arg("ids"), py::arg("out"), py::arg("checked"))
      .def("_device_lookup",
           [](PyEngine& p, int layer_index, uintptr_t ids, int64_t tokens, uintptr_t out, uintptr_t stream,
              const py::dict& grid, bool checked) {
             return device_lookup(*p.engine, layer_index, ids, tokens, out, stream, grid, checked);
           },
           py::arg("layer_index"), py::arg("ids"), py::arg("tokens"), py::arg("out"), py::arg("stream"),
           py::arg("grid"), py::arg("checked"))
      .def("synchronize", [](PyEngine& p) {
        Status s;
        {
          py::gil_scoped_release release;
          s = p.engine->synchronize();
        }
        check(s);
      });

  m.def("engine_option_keys", &engine_option_keys,
        "(key, description) of every engine option a keyword argument may set.");
}

}  // namespace engram::py_bind

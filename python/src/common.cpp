// Shared helpers of the bindings (see common.hpp) and PyTable's engines.
#include "common.hpp"

#include <pybind11/stl.h>

#include "engram/units.hpp"

namespace engram::py_bind {

[[noreturn]] void raise(Status s) { throw StatusError{std::move(s)}; }
[[noreturn]] void invalid(const std::string& message) { raise(Status(Code::kInvalidArgument, message)); }

py::object json_to_py(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

py::array_t<int64_t, py::array::c_style> ids_array(const py::handle& obj, int heads, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) invalid(std::string(what) + ": expected an array of int64 ids");
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    invalid(std::string(what) + ": ids must have an integer dtype, got " + std::string(py::str(a.dtype())));
  auto ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!ids) invalid(std::string(what) + ": cannot view ids as int64");
  if (ids.ndim() == 1 && heads == 1) ids = ids.reshape({ids.shape(0), py::ssize_t{1}});
  if (ids.ndim() != 2)
    invalid(std::string(what) + ": ids must be 2-D [tokens, heads], got " + std::to_string(ids.ndim()) + " dims");
  if (ids.shape(1) != heads)
    invalid(std::string(what) + ": ids have " + std::to_string(ids.shape(1)) + " heads, the layout has " +
            std::to_string(heads));
  return ids;
}

py::object census_to_py(const PageCensus& c) {
  nlohmann::json j = c.to_json();
  py::object d = json_to_py(j);
  if (j["pages_per_node"].is_object()) {
    py::dict nodes;
    for (const auto& [node, pages] : j["pages_per_node"].items()) nodes[py::int_(std::stoi(node))] = pages.get<int64_t>();
    d["pages_per_node"] = nodes;
  }
  return d;
}

std::vector<int64_t> int_vector(const py::handle& obj, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) invalid(std::string(what) + ": expected a sequence of integers");
  const char kind = a.dtype().kind();
  if (a.size() > 0 && kind != 'i' && kind != 'u')
    invalid(std::string(what) + ": expected integers, got dtype " + std::string(py::str(a.dtype())));
  auto v = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  return std::vector<int64_t>(v.data(), v.data() + v.size());
}

int64_t size_arg(const py::object& v, const char* what) {
  if (py::isinstance<py::str>(v)) return take(parse_size_bytes(v.cast<std::string>()));
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  invalid(std::string(what) + ": expected bytes as an int or a size string like '512MiB'");
}

py::dict stats_dict(const LookupStats& s) {
  py::dict d;
  d["rows"] = s.rows;
  d["dead_rows"] = s.dead_rows;
  d["invalid_ids"] = s.invalid_ids;
  return d;
}

py::dict launch_dict(const LaunchShape& l) {
  py::dict d;
  d["rows"] = l.rows;
  d["tiles"] = l.tiles;
  d["grid"] = l.grid;
  d["cap"] = l.cap;
  d["block_threads"] = l.block_threads;
  d["tile_rows"] = l.tile_rows;
  d["lanes_per_row"] = l.lanes_per_row;
  d["rows_in_flight"] = l.rows_in_flight;
  d["path"] = l.path;
  return d;
}

CensusPoint parse_census_point(const std::string& s) {
  using P = CensusPoint;
  for (P p : {P::kAfterPlacement, P::kAfterRegistration, P::kAfterLoad, P::kAfterReplay, P::kOnDemand}) {
    std::string name = census_point_name(p);
    std::string underscored = name;
    for (char& c : underscored) c = c == ' ' ? '_' : c;
    if (s == name || s == underscored) return p;
  }
  invalid("census point '" + s + "': expected after_placement, after_registration, after_load, after_replay or "
          "on_demand");
}

void apply_options(EngineOptions& o, const py::dict& options) {
  for (auto item : options) {
    const std::string key = py::str(item.first);
    std::string value;
    if (py::isinstance<py::bool_>(item.second)) value = item.second.cast<bool>() ? "true" : "false";
    else value = py::str(item.second);
    check(set_engine_option(o, key, value));
  }
}

py::tuple host_lookup(Engine& e, int layer_index, const py::object& ids_obj, const py::object& out_obj, bool checked) {
  const int d = e.layout().d;
  auto ids = ids_array(ids_obj, e.layout().heads(), "lookup");
  const int64_t tokens = ids.shape(0);
  const int heads = e.staging_heads();  // out: the layout's heads, or a TP slice's local heads
  py::array_t<uint16_t, py::array::c_style> out;
  if (out_obj.is_none()) {
    out = py::array_t<uint16_t, py::array::c_style>({tokens, static_cast<int64_t>(heads), static_cast<int64_t>(d)});
  } else {
    py::array a = py::array::ensure(out_obj);
    if (!a || a.dtype().kind() != 'u' || a.itemsize() != 2 || !(a.flags() & py::array::c_style) || !a.writeable())
      invalid("lookup: out must be a writable C-contiguous uint16 array (bf16 bits)");
    if (a.ndim() != 3 || a.shape(0) != tokens || a.shape(1) != heads || a.shape(2) != d)
      invalid("lookup: out must have shape [" + std::to_string(tokens) + ", " + std::to_string(heads) + ", " +
              std::to_string(d) + "]");
    out = py::reinterpret_borrow<py::array_t<uint16_t, py::array::c_style>>(a);
  }
  Result<LookupResult> r = Status(Code::kInternal, "lookup did not run");
  {
    py::gil_scoped_release release;
    LookupCall call;
    call.checked = checked;
    r = e.lookup(layer_index, ids.data(), tokens, out.mutable_data(), call);
  }
  return py::make_tuple(out, stats_dict(take(std::move(r)).stats));
}

py::dict device_lookup(Engine& e, int layer_index, uintptr_t ids, int64_t tokens, uintptr_t out, uintptr_t stream,
                       const py::dict& grid, bool checked) {
  if (e.device() < 0) invalid("lookup: CUDA arrays need an engine on a CUDA device (this one is on the cpu backend)");
  LookupCall call;
  if (!grid.empty()) {
    EngineOptions cap;
    apply_options(cap, grid);
    call.grid_cap = cap.grid_cap;
  }
  call.stream = reinterpret_cast<void*>(stream == 1 ? 0 : stream);  // 1: the legacy default stream (DLPack)
  call.checked = checked;
  Result<LookupResult> r = Status(Code::kInternal, "lookup did not run");
  {
    py::gil_scoped_release release;
    r = e.lookup(layer_index, reinterpret_cast<const int64_t*>(ids), tokens, reinterpret_cast<uint16_t*>(out), call);
  }
  return launch_dict(take(std::move(r)).launch);
}

int PyTable::layer_index_checked(int layer_index) const {
  if (layer_index < 0 || layer_index >= n_layers())
    invalid("layer index " + std::to_string(layer_index) + " out of range [0, " + std::to_string(n_layers()) +
            ") (an index into layout.layer_ids, not a model layer id)");
  return layer_index;
}

void PyTable::check_writable(const char* what) const {
  if (table->read_only()) raise(Status(Code::kPermission, std::string(what) + ": the table was attached read-only"));
}

Engine& PyTable::cpu_engine(int threads) {
  std::lock_guard<std::mutex> lock(mu);
  auto& e = engines[{-1, threads}];
  if (!e) {
    EngineOptions o;
    o.backend = BackendKind::kCpu;
    check(set_engine_option(o, "lookup_threads", std::to_string(threads)));
    e = take(Engine::over_table(table, o));
  }
  return *e;
}

Engine* PyTable::cuda_engine(int device) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = engines.find({device, 0});
  if (it != engines.end()) return it->second.get();
  if (group && group->backend() == BackendKind::kCuda && group->device() == device) return group.get();
  return nullptr;
}

Engine& PyTable::register_cuda(int device, const EngineOptions& options) {
  if (Engine* e = cuda_engine(device)) return *e;
  EngineOptions o = options;
  o.backend = BackendKind::kCuda;
  o.device = device;
  Result<std::unique_ptr<Engine>> r = Status(Code::kInternal, "register_cuda did not run");
  {
    py::gil_scoped_release release;
    r = Engine::over_table(table, o);
  }
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = engines[{device, 0}];
  slot = take(std::move(r));
  return *slot;
}

std::vector<int> PyTable::cuda_devices() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<int> d;
  for (const auto& [key, e] : engines)
    if (key.first >= 0) d.push_back(key.first);
  if (group && group->backend() == BackendKind::kCuda) d.push_back(group->device());
  return d;
}

}  // namespace engram::py_bind

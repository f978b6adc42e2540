// What every binding file of the _engram extension shares: Status -> EngramError, argument conversion, and the
// PyTable that SharedTable, Engine, lookup and Prefetcher all hold.
//
// The extension is a thin layer over include/engram: the library's Engine assembles every table, backend,
// registration and queue; a binding converts arguments, releases the GIL around work that can take time, and
// turns a non-OK Status into EngramError (.code, .message, .sys_error). No CUDA API is called here: device work
// goes through the Engine.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/census.hpp"
#include "engram/engine.hpp"
#include "engram/group_channel.hpp"
#include "engram/layout.hpp"
#include "engram/lookup.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram::py_bind {

namespace py = pybind11;

// A non-OK Status on its way to Python (translated by the module's translator).
struct StatusError {
  Status status;
};

[[noreturn]] void raise(Status s);
inline void check(const Status& s) {
  if (!s.is_ok()) raise(s);
}
template <typename T>
T take(Result<T> r) {
  if (!r.is_ok()) raise(r.status());
  return std::move(r).value();
}
[[noreturn]] void invalid(const std::string& message);

py::object json_to_py(const nlohmann::json& j);
// A page census as a dict (PageCensus::to_json), pages_per_node keyed by the node number (int), as Python indexes it.
py::object census_to_py(const PageCensus& c);

// ids as a C-contiguous int64 [tokens, heads] array: read in place when already so; other integer dtypes are
// converted (a copy); non-integer dtypes are an error (never a silent float -> id cast).
py::array_t<int64_t, py::array::c_style> ids_array(const py::handle& obj, int heads, const char* what);
std::vector<int64_t> int_vector(const py::handle& obj, const char* what);
// Bytes as an int or a size string ("512MiB").
int64_t size_arg(const py::object& v, const char* what);
py::dict stats_dict(const LookupStats& s);
py::dict launch_dict(const LaunchShape& l);
CensusPoint parse_census_point(const std::string& s);
// Engine options from Python keyword arguments: each key=value through set_engine_option (values as text:
// str(value), booleans as true/false).
void apply_options(EngineOptions& o, const py::dict& options);

// A table's host memory, and the engines built over it: the group engine of a shared table (it keeps the group's
// protocol state; leader or peer), and one engine per device for direct lookups (-1: the cpu backend, keyed also by
// its thread count). Engines over one table share its registration (Engine's rule), so register_cuda(N) followed by
// a Prefetcher on N registers the memory once.
struct PyTable {
  std::shared_ptr<HostTable> table;
  std::unique_ptr<Engine> group;          // shared group: its engine (rank group_rank)
  std::string backing;                    // "private" for allocate(), "shared" for attach()
  std::string placement;
  std::mutex mu;
  std::map<std::pair<int, int>, std::unique_ptr<Engine>> engines;  // (device, cpu threads) -> engine

  const EngramLayout& layout() const { return table->layout(); }
  int n_layers() const { return table->n_layers(); }
  int layer_index_checked(int layer_index) const;
  void check_writable(const char* what) const;
  // The engine for direct CPU lookups with `threads` gather threads (0 = CPUs - 1); made on first use.
  Engine& cpu_engine(int threads);
  // The engine of CUDA device `device`, or nullptr when the table is not registered for it.
  Engine* cuda_engine(int device);
  // Registers for `device` (idempotent) with the given options and returns the device's engine.
  Engine& register_cuda(int device, const EngineOptions& options);
  std::vector<int> cuda_devices();
};

// A lookup through an engine: host arrays (CPU backend; returns (out, stats)) or device pointers (CUDA; enqueued
// on `stream`, returns the launch dict). Shared by the module's lookup functions and Engine.lookup.
py::tuple host_lookup(Engine& e, int layer_index, const py::object& ids_obj, const py::object& out_obj, bool checked);
// grid: the lookup's grid cap as engine options ({} = every SM; {"grid_fraction": F} or {"grid_blocks": N}), parsed
// and checked by the engine's options table like every other option.
py::dict device_lookup(Engine& e, int layer_index, uintptr_t ids, int64_t tokens, uintptr_t out, uintptr_t stream,
                       const py::dict& grid, bool checked);

// Bindings, one file per class.
void bind_layout(py::module_& m);
void bind_table(py::module_& m);
void bind_engine(py::module_& m);
void bind_prefetcher(py::module_& m);
void bind_hasher(py::module_& m);
void bind_dlpack(py::module_& m);
void bind_channel(py::module_& m);
void bind_ids(py::module_& m);
void bind_metrics(py::module_& m);  // after bind_engine: attaches _Engine._metrics

// The group channel argument: a bound C++ channel (UnixGroupChannel, _CallbackChannel) or a Python object with
// the callback interface (wrapped; the wrapper lives in `holder` for the call).
class PyCallbackChannel;
host::GroupChannel& channel_of(const py::object& obj, std::unique_ptr<PyCallbackChannel>& holder);

// DLPack: a device array the module hands out (CUDA staging), with the object that keeps it alive.
struct DeviceArray {
  uintptr_t ptr = 0;
  std::vector<int64_t> shape;
  uint8_t dtype_code = 4, dtype_bits = 16;  // bf16
  int device = 0;
  uintptr_t ready_stream = 0;  // the data is valid in this stream's order (cudaStream_t)
  py::object owner;
};

}  // namespace engram::py_bind

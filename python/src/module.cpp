// _engram: the pybind11 extension behind the engram_offload Python package.
//
// A thin layer over the C++ library: every binding converts arguments, releases the GIL around work that
// can take time (lookups, fills, loads, waits on the prefetch queue) and turns a non-OK Status into the
// Python exception EngramError carrying the status code name (.code), the message (.message) and the raw
// errno / CUDA error number (.sys_error). Arrays cross as NumPy arrays through the buffer protocol: ids
// are read in place when they are C-contiguous int64, outputs are written in place when the caller gives
// a C-contiguous uint16 array, and arrays returned over table memory or staging keep their owner alive
// through the array's base object (zero copy). DLPack producers (PyTorch CPU tensors) are turned into
// NumPy arrays by the Python package (numpy.from_dlpack) before they reach this file. Tables are the
// library's HostTable (shared memfd backings by default), lookups the CPU backend, prefetch the CPU
// serial prefetch queue; names follow design.md (layout, table, ids, staging, census, timeline).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/ngram_hash.hpp"
#include "core/units.hpp"
#include "cpu/lookup.hpp"
#include "cpu/prefetch.hpp"
#include "cpu/thread_pool.hpp"
#include "engram/format.hpp"
#include "engram/layout.hpp"
#include "engram/lookup.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"
#include "host/census.hpp"
#include "host/checkpoint.hpp"
#include "host/group.hpp"
#include "host/placement.hpp"
#include "host/token_io.hpp"
#include "replay/cuda_backend_factory.hpp"
#include "replay/multi_rank.hpp"
#include "sys/process.hpp"
#include "sched/prefetch_queue.hpp"
#include "sched/timeline.hpp"

#if ENGRAM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/backend.cuh"
#include "cuda/device.cuh"
#include "cuda/lookup_kernel.cuh"
#include "cuda/prefetch.cuh"
#include "cuda/registration.cuh"
#endif

namespace py = pybind11;
using namespace engram;

namespace {

// ---- errors -------------------------------------------------------------------------------------

// A non-OK Status on its way to Python (translated by the registered translator below).
struct StatusError {
  Status status;
};

PyObject* g_engram_error = nullptr;  // the EngramError class (owned by the module)

[[noreturn]] void raise(Status s) { throw StatusError{std::move(s)}; }
void check(const Status& s) {
  if (!s.is_ok()) raise(s);
}
template <typename T>
T take(Result<T> r) {
  if (!r.is_ok()) raise(r.status());
  return std::move(r).value();
}
[[noreturn]] void invalid(const std::string& message) { raise(Status(Code::kInvalidArgument, message)); }

py::object json_to_py(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

// ---- arrays -------------------------------------------------------------------------------------

// ids as a C-contiguous int64 [tokens, heads] array: read in place when already so; other integer dtypes
// are converted (a copy); non-integer dtypes are an error (never a silent float -> id cast).
py::array_t<int64_t, py::array::c_style> ids_array(const py::handle& obj, int heads, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) invalid(std::string(what) + ": expected an array of int64 ids");
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    invalid(std::string(what) + ": ids must have an integer dtype, got " + std::string(py::str(a.dtype())));
  }
  auto ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!ids) invalid(std::string(what) + ": cannot view ids as int64");
  if (ids.ndim() == 1 && heads == 1) ids = ids.reshape({ids.shape(0), py::ssize_t{1}});
  if (ids.ndim() != 2) {
    invalid(std::string(what) + ": ids must be 2-D [tokens, heads], got " + std::to_string(ids.ndim()) + " dims");
  }
  if (ids.shape(1) != heads) {
    invalid(std::string(what) + ": ids have " + std::to_string(ids.shape(1)) + " heads, the layout has " +
            std::to_string(heads));
  }
  return ids;
}

std::vector<int64_t> int_vector(const py::handle& obj, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) invalid(std::string(what) + ": expected a sequence of integers");
  const char kind = a.dtype().kind();
  if (a.size() > 0 && kind != 'i' && kind != 'u') {
    invalid(std::string(what) + ": expected integers, got dtype " + std::string(py::str(a.dtype())));
  }
  auto v = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  return std::vector<int64_t>(v.data(), v.data() + v.size());
}

int64_t size_arg(const py::object& v, const char* what) {
  if (py::isinstance<py::str>(v)) return take(parse_size_bytes(v.cast<std::string>()));
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  invalid(std::string(what) + ": expected bytes as an int or a size string like '512MiB'");
}

// ---- table --------------------------------------------------------------------------------------

#if ENGRAM_HAVE_CUDA
// A table's host memory as one device reads it: the registrations (made once, Portable, for the first
// device registered) and one UvaTable per Engram layer.
struct CudaRegistration {
  int device = 0;
  int sm_count = 0;
  std::vector<cuda::HostRegistration> regs;  // empty for a second device (the first one's are reused)
  std::vector<cuda::UvaTable> tables;        // [layer]
  int64_t bytes = 0;
  int chunks = 0;
  double prefault_ns = 0;
  double register_ns = 0;
};
#endif

// A table's host memory plus the thread pool its lookups run on (one lookup at a time per table pool).
// The memory is a HostTable (create / allocate) or the segments of a shared group (create with a channel,
// attach): group tables keep the SharedTableGroup (it owns the backings) and spans over its segments.
// CUDA registrations (register_cuda) are declared last so they are released before the memory.
struct PyTable {
  std::unique_ptr<HostTable> table;               // create() / allocate()
  std::unique_ptr<host::SharedTableGroup> group;  // create(group=channel) / attach()
  EngramLayout group_layout;
  std::vector<TableSpan> group_spans;             // [layer]
  bool read_only = false;                         // attach(read_only=True): PROT_READ mapping
  int group_rank = -1;                            // rank in the shared group (-1: not a group table)
  int group_world = 0;
  std::string backing;    // "private" for allocate()
  std::string placement;
  std::mutex pool_mu;
  std::unique_ptr<ThreadPool> pool;
  int pool_threads = 0;
#if ENGRAM_HAVE_CUDA
  std::vector<std::unique_ptr<CudaRegistration>> cuda;  // one per device, registrations in the first
#endif

  const EngramLayout& layout() const { return table ? table->layout() : group_layout; }
  int n_layers() const { return layout().n_layers(); }
  TableView view(int layer_index) const { return table ? table->view(layer_index) : group_spans.at(layer_index).view(); }
  TableSpan span(int layer_index) const { return table ? table->span(layer_index) : group_spans.at(layer_index); }
  int layer_index_checked(int layer_index) const {
    if (layer_index < 0 || layer_index >= n_layers()) {
      invalid("layer index " + std::to_string(layer_index) + " out of range [0, " +
              std::to_string(n_layers()) + ") (an index into layout.layer_ids, not a model layer id)");
    }
    return layer_index;
  }
  void check_writable(const char* what) const {
    if (read_only) raise(Status(Code::kPermission, std::string(what) + ": the table was attached read-only"));
  }
};

host::CensusPoint parse_census_point(const std::string& s) {
  using P = host::CensusPoint;
  for (P p : {P::kAfterPlacement, P::kAfterRegistration, P::kAfterLoad, P::kAfterReplay, P::kOnDemand}) {
    std::string name = host::census_point_name(p);
    std::string underscored = name;
    for (char& c : underscored) c = c == ' ' ? '_' : c;
    if (s == name || s == underscored) return p;
  }
  invalid("census point '" + s + "': expected after_placement, after_registration, after_load, after_replay or "
          "on_demand");
}

// Lookup into `out` (already validated) with the GIL released.
LookupStats run_lookup(PyTable& t, int layer_index, const int64_t* ids, int64_t tokens, uint16_t* out, bool checked,
                       int threads) {
  const TableView view = t.view(layer_index);
  LookupRequest req;
  req.ids = ids;
  req.tokens = tokens;
  req.heads = t.layout().heads();
  req.out = out;
  req.checked = checked;
  Result<LookupStats> r = Status(Code::kInternal, "lookup did not run");
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(t.pool_mu);
    if (threads == 1) {
      r = cpu::lookup(view, req, nullptr);
    } else {
      if (!t.pool || t.pool_threads != threads) {
        t.pool = std::make_unique<ThreadPool>(threads);
        t.pool_threads = threads;
      }
      r = cpu::lookup(view, req, t.pool.get());
    }
  }
  return take(std::move(r));
}

py::dict stats_dict(const LookupStats& s) {
  py::dict d;
  d["rows"] = s.rows;
  d["dead_rows"] = s.dead_rows;
  d["invalid_ids"] = s.invalid_ids;
  return d;
}

// ---- shared groups ------------------------------------------------------------------------------

void fill_group_synthetic(PyTable& t, uint64_t seed, int /*threads*/) {
  RankJob job;  // synthetic rows (synth_row), every replica: what `engram run --ranks` writes
  job.seed = seed;
  check(load_shared_table(job, t.group_layout, t.group->segments()));
}

// The layout travels to the peers as the group's job text (JSON); the peer recomputes the prime walk and
// checks it gives the leader's row counts.
nlohmann::json layout_to_json(const EngramLayout& l) {
  return {{"engram_offload_python", 1},
          {"name", l.name},
          {"layer_ids", l.layer_ids},
          {"max_ngram", l.max_ngram},
          {"heads_per_order", l.heads_per_order},
          {"vocab_size_per_order", l.vocab_size_per_order},
          {"d", l.d},
          {"format", row_format_name(l.format)},
          {"head_rows", l.head_rows}};
}

Result<EngramLayout> layout_from_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("engram_offload_python"))
    return Status(Code::kInvalidArgument, "shared group job is not an engram_offload layout (was the leader an "
                                          "engram_offload.SharedTable?): " + text.substr(0, 120));
  try {
    EngramLayout l;
    l.name = j.at("name").get<std::string>();
    l.layer_ids = j.at("layer_ids").get<std::vector<int>>();
    l.max_ngram = j.at("max_ngram").get<int>();
    l.heads_per_order = j.at("heads_per_order").get<int>();
    l.vocab_size_per_order = j.at("vocab_size_per_order").get<std::vector<int64_t>>();
    l.d = j.at("d").get<int>();
    ENGRAM_ASSIGN_OR_RETURN(l.format, parse_row_format(j.at("format").get<std::string>()));
    ENGRAM_RETURN_IF_ERROR(l.finalize());
    if (l.head_rows != j.at("head_rows").get<std::vector<std::vector<int64_t>>>())
      return Status(Code::kInvalidArgument, "shared group layout: the leader's head rows differ from the prime walk here");
    return l;
  } catch (const nlohmann::json::exception& e) {
    return Status(Code::kInvalidArgument, std::string("shared group layout: ") + e.what());
  }
}

Code code_from_name(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c)
    if (name == code_name(static_cast<Code>(c))) return static_cast<Code>(c);
  return Code::kInternal;
}

// A GroupChannel whose operations are Python methods (engram_offload.GroupChannel subclasses such as
// TorchGroupChannel). The protocol runs with the GIL released; each call takes it back. A Python
// exception becomes kIo on this rank naming the step (the protocol then fails with that step and rank).
//   impl.broadcast(step, data: bytes | None, fds: list[int], timeout_s) -> (bytes, list[int])
//   impl.all_gather(step, entry: dict, timeout_s) -> list[dict]   (dict: rank, pid, code, sys_error,
//                                                                  status_message, message)
class PyCallbackChannel final : public host::GroupChannel {
 public:
  explicit PyCallbackChannel(py::object impl) : impl_(std::move(impl)) {
    rank_ = impl_.attr("rank").cast<int>();
    world_ = impl_.attr("world_size").cast<int>();
    fds_ = impl_.attr("can_pass_fds").cast<bool>();
    desc_ = py::str(impl_.attr("describe")()).cast<std::string>();
  }
  ~PyCallbackChannel() override {
    py::gil_scoped_acquire acquire;
    impl_ = py::object();
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  bool can_pass_fds() const override { return fds_; }
  std::string describe() const override { return desc_; }

  Status broadcast(const std::string& step, std::string* bytes, std::vector<int>* fds, host::Millis timeout) override {
    if (fds && !fds->empty() && !fds_)
      return Status(Code::kUnsupported, "channel " + desc_ + " cannot pass descriptors");
    py::gil_scoped_acquire acquire;
    try {
      py::object data = rank_ == 0 ? py::object(py::bytes(*bytes)) : py::object(py::none());
      py::list fd_list;
      if (rank_ == 0 && fds)
        for (int fd : *fds) fd_list.append(fd);
      py::object r = impl_.attr("broadcast")(step, data, fd_list, timeout.count() / 1e3);
      if (rank_ != 0) {
        auto t = r.cast<py::tuple>();
        *bytes = t[0].cast<std::string>();
        if (fds) {
          fds->clear();
          for (auto h : t[1].cast<py::list>()) fds->push_back(h.cast<int>());
        }
      }
      return Status::ok();
    } catch (py::error_already_set& e) {
      return Status(Code::kIo, "channel " + desc_ + ", broadcast '" + step + "': " + e.what());
    } catch (const py::cast_error& e) {
      return Status(Code::kInvalidArgument, "channel " + desc_ + ", broadcast '" + step + "' returned " + e.what());
    }
  }

  Result<std::vector<host::RankEntry>> all_gather(const std::string& step, const host::RankEntry& mine,
                                                  host::Millis timeout) override {
    py::gil_scoped_acquire acquire;
    try {
      py::dict d;
      d["rank"] = mine.rank;
      d["pid"] = mine.pid;
      d["code"] = code_name(mine.status.code());
      d["sys_error"] = mine.status.sys_error();
      d["status_message"] = mine.status.message();
      d["message"] = py::bytes(mine.message);
      py::object r = impl_.attr("all_gather")(step, d, timeout.count() / 1e3);
      std::vector<host::RankEntry> out;
      for (auto h : r.cast<py::list>()) {
        auto e = h.cast<py::dict>();
        host::RankEntry x;
        x.rank = e["rank"].cast<int>();
        x.pid = e["pid"].cast<int>();
        const Code c = code_from_name(e["code"].cast<std::string>());
        if (c != Code::kOk) x.status = Status(c, e["status_message"].cast<std::string>(), e["sys_error"].cast<int>());
        x.message = e["message"].cast<std::string>();
        out.push_back(std::move(x));
      }
      if (static_cast<int>(out.size()) != world_)
        return Status(Code::kInvalidArgument, "channel " + desc_ + ", all_gather '" + step + "': " +
                                                  std::to_string(out.size()) + " entries for " +
                                                  std::to_string(world_) + " ranks");
      return out;
    } catch (py::error_already_set& e) {
      return Status(Code::kIo, "channel " + desc_ + ", all_gather '" + step + "': " + e.what());
    } catch (const py::cast_error& e) {
      return Status(Code::kInvalidArgument, "channel " + desc_ + ", all_gather '" + step + "' returned " + e.what());
    }
  }

 private:
  py::object impl_;
  int rank_ = 0, world_ = 1;
  bool fds_ = false;
  std::string desc_;
};

// A channel argument: a bound C++ channel (UnixGroupChannel, _CallbackChannel) or a Python object with the
// callback interface (wrapped here; the wrapper lives for the call).
host::GroupChannel& channel_of(const py::object& obj, std::unique_ptr<PyCallbackChannel>& holder) {
  try {
    return obj.cast<host::GroupChannel&>();
  } catch (const py::cast_error&) {
  }
  if (!py::hasattr(obj, "broadcast") || !py::hasattr(obj, "all_gather"))
    invalid("group: expected a GroupChannel (UnixGroupChannel, TorchGroupChannel or a GroupChannel subclass)");
  holder = std::make_unique<PyCallbackChannel>(obj);
  return *holder;
}

host::ProtocolTimeouts timeouts_of(double step_timeout_s, double load_timeout_s) {
  host::ProtocolTimeouts t;
  t.step = host::Millis(static_cast<int64_t>(step_timeout_s * 1e3));
  t.load = host::Millis(static_cast<int64_t>(load_timeout_s * 1e3));
  return t;
}

py::list step_records(const std::vector<host::StepRecord>& steps) {
  py::list out;
  for (const auto& s : steps) {
    py::dict d;
    d["step"] = s.step;
    d["seconds"] = s.seconds;
    py::list ranks;
    for (const auto& e : s.entries) {
      py::dict x;
      x["rank"] = e.rank;
      x["pid"] = e.pid;
      x["status"] = e.status.to_string();
      x["message"] = e.message;
      ranks.append(x);
    }
    d["entries"] = ranks;
    out.append(d);
  }
  return out;
}

// ---- DLPack -------------------------------------------------------------------------------------
// The DLPack ABI (dmlc/dlpack dlpack.h, v0.8 "unversioned" capsules named "dltensor"): stable since 2017,
// declared here because Debian ships no dlpack header. Only what a capsule producer/consumer touches.
namespace dl {
struct Device {
  int32_t device_type;  // 1 = kDLCPU, 2 = kDLCUDA, 3 = kDLCUDAHost
  int32_t device_id;
};
struct DataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; nullptr = compact row-major
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};
constexpr int32_t kCPU = 1, kCUDA = 2;
}  // namespace dl

// A device array the module hands out (prefetch staging): pointer, shape, dtype, device, and the Python
// object that keeps the memory alive. Exposes __dlpack__ / __dlpack_device__ / __cuda_array_interface__.
struct DeviceArray {
  uintptr_t ptr = 0;
  std::vector<int64_t> shape;
  dl::DataType dtype{4, 16, 1};  // bf16
  int device = 0;
  uintptr_t ready_stream = 0;    // the data is valid in this stream's order (cudaStream_t)
  py::object owner;
};

struct DlContext {
  dl::ManagedTensor managed{};
  std::vector<int64_t> shape, strides;
  PyObject* owner = nullptr;
};

void dl_deleter(dl::ManagedTensor* m) {
  auto* ctx = static_cast<DlContext*>(m->manager_ctx);
  if (ctx->owner) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(ctx->owner);
    PyGILState_Release(g);
  }
  delete ctx;
}

py::capsule make_dlpack_capsule(const DeviceArray& a, py::handle owner) {
  auto* ctx = new DlContext;
  ctx->shape = a.shape;
  ctx->strides.assign(a.shape.size(), 1);
  for (int i = static_cast<int>(a.shape.size()) - 2; i >= 0; --i) ctx->strides[i] = ctx->strides[i + 1] * a.shape[i + 1];
  ctx->owner = owner.ptr();
  Py_INCREF(ctx->owner);
  dl::Tensor& t = ctx->managed.dl_tensor;
  t.data = reinterpret_cast<void*>(a.ptr);
  t.device = {dl::kCUDA, a.device};
  t.ndim = static_cast<int32_t>(a.shape.size());
  t.dtype = a.dtype;
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = &dl_deleter;
  // The capsule's destructor frees the tensor only if no consumer took it (renamed "used_dltensor").
  PyObject* cap = PyCapsule_New(&ctx->managed, "dltensor", [](PyObject* c) {
    if (PyCapsule_IsValid(c, "dltensor")) {
      auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    }
  });
  return py::reinterpret_steal<py::capsule>(cap);
}

// Consumes a "dltensor" capsule: (data_ptr, device_type, device_id, shape, strides or None, (code, bits, lanes),
// holder). The holder calls the producer's deleter when it is collected: keep it until the device is done.
py::tuple read_dlpack_capsule(py::object capsule) {
  PyObject* c = capsule.ptr();
  if (!PyCapsule_IsValid(c, "dltensor"))
    invalid("DLPack: expected an unconsumed 'dltensor' capsule (versioned DLPack 1.x capsules are not read here)");
  auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
  PyCapsule_SetName(c, "used_dltensor");
  py::capsule holder(m, [](void* p) {
    auto* mt = static_cast<dl::ManagedTensor*>(p);
    if (mt->deleter) mt->deleter(mt);
  });
  const dl::Tensor& t = m->dl_tensor;
  py::list shape, strides;
  for (int i = 0; i < t.ndim; ++i) {
    shape.append(t.shape[i]);
    if (t.strides) strides.append(t.strides[i]);
  }
  return py::make_tuple(reinterpret_cast<uintptr_t>(t.data) + t.byte_offset, t.device.device_type, t.device.device_id,
                        shape, t.strides ? py::object(strides) : py::object(py::none()),
                        py::make_tuple(t.dtype.code, t.dtype.bits, t.dtype.lanes), holder);
}

// ---- hasher -------------------------------------------------------------------------------------

struct PySequence {
  std::shared_ptr<const NgramHasher> hasher;
  SequenceState state;
};

// ---- prefetcher ---------------------------------------------------------------------------------

// One rank's prefetch queue over a subset of a table's Engram layers (all by default): the CPU queue or the
// CUDA queue. Layer indices are the table's; slot_of maps them to the queue's own positions.
struct PyPrefetcher {
  py::object table_ref;  // keeps the PyTable (and its memory, registrations) alive
  PyTable* table = nullptr;
  PrefetchMode mode = PrefetchMode::kEarly;
  std::unique_ptr<PrefetchQueue> queue;
  int heads = 0, d = 0;
  std::vector<int> layers;   // table layer indices served, in queue order
  std::vector<int> slot_of;  // [table layer index] -> queue slot, -1 when not served
  // on_demand: ids held until consume() submits them (host copy, or a device address the caller keeps alive).
  std::vector<std::optional<std::vector<int64_t>>> held;
  std::vector<uintptr_t> held_device;
  std::vector<int64_t> held_tokens;
  int device = -1;  // CUDA ordinal; -1 for the CPU queue
#if ENGRAM_HAVE_CUDA
  cuda::CudaPrefetchQueue* cuda_queue = nullptr;  // queue.get() when device >= 0
#endif

  int slot(int layer_index) const {
    table->layer_index_checked(layer_index);
    const int s = slot_of[static_cast<size_t>(layer_index)];
    if (s < 0) invalid("layer index " + std::to_string(layer_index) + " is not served by this Prefetcher (layers=" +
                       py::str(py::cast(layers)).cast<std::string>() + ")");
    return s;
  }
  void set_layers(std::vector<int> ls) {
    if (ls.empty()) {
      for (int i = 0; i < table->n_layers(); ++i) ls.push_back(i);
    }
    slot_of.assign(static_cast<size_t>(table->n_layers()), -1);
    for (size_t i = 0; i < ls.size(); ++i) {
      table->layer_index_checked(ls[i]);
      if (slot_of[static_cast<size_t>(ls[i])] >= 0) invalid("layers: index " + std::to_string(ls[i]) + " given twice");
      slot_of[static_cast<size_t>(ls[i])] = static_cast<int>(i);
    }
    layers = std::move(ls);
    held.assign(layers.size(), std::nullopt);
    held_device.assign(layers.size(), 0);
    held_tokens.assign(layers.size(), 0);
  }
  std::vector<int> layer_ids() const {
    std::vector<int> ids;
    for (int li : layers) ids.push_back(table->layout().layer_ids[static_cast<size_t>(li)]);
    return ids;
  }
};

Result<PrefetchMode> parse_prefetch_mode_arg(const std::string& mode) {
  if (mode == "early") return PrefetchMode::kEarly;
  if (mode == "on_demand") return PrefetchMode::kOnDemand;
  return Status(Code::kInvalidArgument, "prefetch mode '" + mode + "': expected early or on_demand");
}

#if ENGRAM_HAVE_CUDA
// ---- CUDA ---------------------------------------------------------------------------------------

Status cuda_error(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();  // clear the pending (non-sticky) error
  return Status(e == cudaErrorMemoryAllocation ? Code::kOutOfMemory : Code::kCuda,
                what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")", static_cast<int>(e));
}

// Makes `device` current for a scope and restores the caller's device after (PyTorch keeps its own).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      (void)cudaGetLastError();
      prev_ = -1;
    }
    if (prev_ != device) check(cuda_error(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")"));
  }
  ~ScopedDevice() {
    int now = -1;
    if (prev_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev_) (void)cudaSetDevice(prev_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int prev_ = -1;
};

cudaStream_t as_stream(uintptr_t h) { return reinterpret_cast<cudaStream_t>(h); }
// DLPack / CUDA array interface stream numbers: 1 is the legacy default stream, 2 the per-thread one.
uintptr_t canonical_stream(uintptr_t h) { return h == 1 ? 0 : h; }

CudaRegistration* find_registration(PyTable& t, int device) {
  for (auto& r : t.cuda)
    if (r->device == device) return r.get();
  return nullptr;
}

CudaRegistration& require_registration(PyTable& t, int device) {
  CudaRegistration* r = find_registration(t, device);
  if (!r) invalid("the table is not registered for cuda:" + std::to_string(device) + " (call table.register_cuda(" +
                  std::to_string(device) + ") first)");
  return *r;
}

// Registers the table's host memory (home replica) for UVA once and describes each layer to the kernel for
// `device`. Idempotent per device. Nothing is copied to the device: the only device memory is UvaTable's small
// segment table when the device cannot use host pointers directly.
CudaRegistration& register_table_cuda(PyTable& t, int device) {
  if (CudaRegistration* r = find_registration(t, device)) return *r;
  cuda::DeviceInfo info = take(cuda::device_info(device));
  ScopedDevice scoped(device);
  auto reg = std::make_unique<CudaRegistration>();
  reg->device = device;
  reg->sm_count = info.sm_count;
  const CudaRegistration* first = t.cuda.empty() ? nullptr : t.cuda.front().get();
  if (first) {
    for (const auto& r : first->regs)
      if (!r.device_equals_host())
        raise(Status(Code::kUnsupported, "register_cuda(" + std::to_string(device) + "): the table was registered for cuda:" +
                                             std::to_string(first->device) +
                                             " with device addresses that differ from host addresses; a second device "
                                             "cannot reuse them"));
  }
  {
    py::gil_scoped_release release;
    if (!first) {
      for (int li = 0; li < t.n_layers(); ++li) {
        for (const cuda::HostRange& hr : cuda::host_ranges_of(t.view(li))) {
          cuda::RegistrationOptions o;
          o.boundary_bytes = hr.boundary_bytes;
          o.read_only = t.read_only;
          cuda::HostRegistration r = take(cuda::HostRegistration::register_range(hr.ptr, hr.bytes, o));
          reg->bytes += r.bytes();
          reg->chunks += static_cast<int>(r.chunks().size());
          reg->prefault_ns += r.prefault_ns();
          reg->register_ns += r.register_ns();
          reg->regs.push_back(std::move(r));
        }
      }
    }
    const auto& regs = first ? first->regs : reg->regs;
    std::vector<const cuda::HostRegistration*> ptrs;
    for (const auto& r : regs) ptrs.push_back(&r);
    for (int li = 0; li < t.n_layers(); ++li) reg->tables.push_back(take(cuda::UvaTable::make(t.view(li), ptrs)));
  }
  t.cuda.push_back(std::move(reg));
  return *t.cuda.back();
}

py::dict registration_dict(const CudaRegistration& r) {
  py::dict d;
  d["device"] = r.device;
  d["sm_count"] = r.sm_count;
  d["bytes"] = r.bytes;
  d["chunks"] = r.chunks;
  d["prefault_ns"] = r.prefault_ns;
  d["register_ns"] = r.register_ns;
  bool same = true;
  for (const auto& t : r.tables) same = same && t.uniform() && t.uniform_delta() == 0;
  d["device_equals_host"] = same;
  return d;
}

py::dict launch_dict(const cuda::LaunchInfo& l) {
  py::dict d;
  d["rows"] = l.rows;
  d["tiles"] = l.tiles;
  d["grid"] = l.grid;
  d["cap"] = l.cap;
  d["block_threads"] = l.block_threads;
  d["tile_rows"] = l.tile_rows;
  d["lanes_per_row"] = l.lanes_per_row;
  d["rows_in_flight"] = l.rows_in_flight;
  return d;
}

// grid_cap: blocks > 0 caps the grid at that many blocks (LookupArgs' cap = floor(fraction * sm_count) with
// fraction 1 and sm_count = blocks); otherwise `fraction` of the device's SMs.
void apply_grid_cap(double fraction, int blocks, int sm_count, double* out_fraction, int* out_sm) {
  if (blocks > 0) {
    *out_fraction = 1.0;
    *out_sm = blocks;
  } else {
    if (!(fraction > 0 && fraction <= 1)) invalid("grid_cap: a fraction must be in (0, 1], got " + std::to_string(fraction));
    *out_fraction = fraction;
    *out_sm = sm_count;
  }
}

// Makes `consumer` wait (on the GPU) for work enqueued on `producer` so far; nothing when they are the same stream.
void stream_after(uintptr_t consumer, uintptr_t producer, int device) {
  if (canonical_stream(consumer) == canonical_stream(producer)) return;
  ScopedDevice scoped(device);
  cudaEvent_t ev = nullptr;
  check(cuda_error(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
  cudaError_t e = cudaEventRecord(ev, as_stream(canonical_stream(producer)));
  if (e == cudaSuccess) e = cudaStreamWaitEvent(as_stream(canonical_stream(consumer)), ev, 0);
  (void)cudaEventDestroy(ev);  // released once the wait is resolved
  check(cuda_error(e, "stream ordering for DLPack consumer"));
}
#endif  // ENGRAM_HAVE_CUDA

}  // namespace

PYBIND11_MODULE(_engram, m) {
  m.doc() = "engram-offload C++ bindings (use the engram_offload package, not this module directly).";

  g_engram_error = PyErr_NewException("engram_offload.EngramError", PyExc_RuntimeError, nullptr);
  m.add_object("EngramError", py::handle(g_engram_error));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object cls = py::reinterpret_borrow<py::object>(g_engram_error);
      py::object exc = cls(e.status.to_string());
      exc.attr("code") = code_name(e.status.code());
      exc.attr("message") = e.status.message();
      exc.attr("sys_error") = e.status.sys_error();
      PyErr_SetObject(g_engram_error, exc.ptr());
    }
  });

  m.def("code_names", [] {
    std::vector<std::string> names;
    for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c) names.push_back(code_name(static_cast<Code>(c)));
    return names;
  }, "Names of every status code, in code order ('ok', 'invalid_argument', ...).");

  m.def("cuda_backend_built", &cuda_backend_built, "True when the library was built with the CUDA backend.");

  // ---- format ----
  m.def(
      "decode_rows",
      [](py::array_t<uint8_t, py::array::c_style> payload, py::array_t<uint8_t, py::array::c_style> scales) {
        if (payload.ndim() != 2 || scales.ndim() != 2 || payload.shape(0) != scales.shape(0) ||
            payload.shape(1) != scales.shape(1) * kScaleBlock) {
          invalid("decode_rows: payload must be [rows, d] and scales [rows, d/32] uint8");
        }
        const int64_t rows = payload.shape(0);
        const int d = static_cast<int>(payload.shape(1));
        py::array_t<uint16_t> out({rows, static_cast<int64_t>(d)});
        const uint8_t* p = payload.data();
        const uint8_t* s = scales.data();
        uint16_t* o = out.mutable_data();
        {
          py::gil_scoped_release release;
          for (int64_t r = 0; r < rows; ++r) decode_row_reference(p + r * d, s + r * (d / 32), d, o + r * d);
        }
        return out;
      },
      py::arg("payload"), py::arg("scales"),
      "Scalar reference decoder (format.hpp): payload uint8 [rows, d] FP8 E4M3 codes, scales uint8 [rows, d/32]\n"
      "ue8m0 codes -> uint16 [rows, d] bf16 bits, bf16(fp8 * 2^(scale-127)) rounded to nearest even, every NaN\n"
      "0x7FC0. Raises EngramError(invalid_argument) for mismatched shapes.");

  m.def(
      "synth_rows",
      [](uint64_t seed, int layer_index, py::object rows_obj, int d) {
        if (d <= 0 || d % kScaleBlock != 0) invalid("synth_rows: d must be a positive multiple of 32");
        std::vector<int64_t> rows = int_vector(rows_obj, "synth_rows rows");
        const int64_t n = static_cast<int64_t>(rows.size());
        py::array_t<uint8_t> payload({n, static_cast<int64_t>(d)});
        py::array_t<uint8_t> scales({n, static_cast<int64_t>(d / kScaleBlock)});
        for (int64_t i = 0; i < n; ++i) {
          synth_row(seed, layer_index, rows[i], d, payload.mutable_data() + i * d,
                    scales.mutable_data() + i * (d / kScaleBlock));
        }
        return py::make_tuple(payload, scales);
      },
      py::arg("seed"), py::arg("layer_index"), py::arg("rows"), py::arg("d"),
      "Synthetic row content (table.hpp synth_row) of the given rows: (payload uint8 [n, d], scales uint8 [n, d/32]).");

  // ---- layout ----
  py::class_<EngramLayout>(m, "Layout",
                           "EngramLayout: the shape of a model's Engram tables (layer ids, N-gram orders, heads,\n"
                           "prime row counts per head, row width d, in-memory row format).")
      .def_static(
          "preset",
          [](const std::string& name, py::object table_size, const std::string& format) {
            return take(make_preset_layout(name, size_arg(table_size, "table_size"), take(parse_row_format(format))));
          },
          py::arg("name"), py::arg("table_size") = py::int_(int64_t{512} << 20), py::arg("format") = "fused",
          "Preset layout: 'v41-flash', 'v41-flash-mini' (rows sized so the whole model totals about table_size\n"
          "bytes; int or '512MiB'), 'tiny' (d=64, for tests). format: 'fused' (one padded record per row) or\n"
          "'split'. Raises EngramError(invalid_argument) for an unknown name or a table size too small.")
      .def_static(
          "from_checkpoint",
          [](const std::string& path, const std::string& format) {
            return take(host::read_checkpoint_layout(path, take(parse_row_format(format))));
          },
          py::arg("path"), py::arg("format") = "fused",
          "Layout stored in a safetensors checkpoint's __metadata__ (validated: the prime walk must give the\n"
          "stored head_rows), with the in-memory row format `format`. Raises EngramError: not_found / permission /\n"
          "io from the file, invalid_argument for a malformed file.")
      .def_static("preset_names", &preset_names, "Names of the presets.")
      .def_property_readonly("name", [](const EngramLayout& l) { return l.name; })
      .def_property_readonly("d", [](const EngramLayout& l) { return l.d; }, "Values per row (multiple of 32).")
      .def_property_readonly("heads", &EngramLayout::heads, "Hash heads per Engram layer: (max_ngram-1)*heads_per_order.")
      .def_property_readonly("max_ngram", [](const EngramLayout& l) { return l.max_ngram; })
      .def_property_readonly("heads_per_order", [](const EngramLayout& l) { return l.heads_per_order; })
      .def_property_readonly("layer_ids", [](const EngramLayout& l) { return l.layer_ids; },
                             "Model layer id of each Engram layer; a 'layer index' is a position in this list.")
      .def_property_readonly("n_layers", &EngramLayout::n_layers)
      .def_property_readonly("format", [](const EngramLayout& l) { return std::string(row_format_name(l.format)); })
      .def_property_readonly("rows", [](const EngramLayout& l) {
        std::vector<int64_t> r;
        for (int i = 0; i < l.n_layers(); ++i) r.push_back(l.rows(i));
        return r;
      }, "Rows of each Engram layer's table (sum of its head_rows).")
      .def_property_readonly("head_rows", [](const EngramLayout& l) { return l.head_rows; },
                             "[layer][head] prime row counts.")
      .def_property_readonly("head_offsets", [](const EngramLayout& l) { return l.head_offsets; },
                             "[layer][heads+1] cumulative rows: global id = head_offsets[h] + local id.")
      .def_property_readonly("row_stride_bytes", &EngramLayout::row_stride_bytes,
                             "Bytes a row occupies in memory (fused: padded record; split: d + d/32).")
      .def_property_readonly("source_bytes_per_row", &EngramLayout::source_bytes_per_row, "d + d/32 bytes.")
      .def_property_readonly("total_bytes", &EngramLayout::total_bytes, "Bytes of every layer's table in memory.")
      .def_property_readonly("total_rows", &EngramLayout::total_rows)
      .def("layer_index", &EngramLayout::layer_index, py::arg("layer_id"), "Index of a model layer id, or -1.")
      .def("__repr__", [](const EngramLayout& l) {
        return "Layout(name='" + l.name + "', d=" + std::to_string(l.d) + ", heads=" + std::to_string(l.heads()) +
               ", layers=" + std::to_string(l.n_layers()) + ", format=" + row_format_name(l.format) +
               ", total_bytes=" + std::to_string(l.total_bytes()) + ")";
      });

  // ---- table ----
  py::class_<PyTable>(m, "SharedTable",
                      "Host memory of every Engram layer of a layout (HostTable): shared backings (memfd by\n"
                      "default) placed by a NUMA policy before the first page exists, or private memory.")
      .def_static(
          "create",
          [](const EngramLayout& layout, const std::string& backing, const std::string& placement,
             const std::string& group, bool prefault, bool allow_fallback, int home_node) {
            TableOptions o;
            o.backing = backing;
            o.placement = placement;
            o.group = group;
            o.prefault = prefault;
            o.allow_fallback = allow_fallback;
            o.home_node = home_node;
            Result<std::unique_ptr<HostTable>> r = Status(Code::kInternal, "create did not run");
            {
              py::gil_scoped_release release;
              r = HostTable::create(layout, o);
            }
            auto t = std::make_unique<PyTable>();
            t->table = take(std::move(r));
            t->backing = backing;
            t->placement = placement;
            return t;
          },
          py::arg("layout"), py::arg("backing") = "memfd", py::arg("placement") = "none", py::arg("group") = "",
          py::arg("prefault") = true, py::arg("allow_fallback") = false, py::arg("home_node") = -1,
          "One shared backing per Engram layer. backing: memfd | shm | hugetlb | hugetlb-1g | anon-thp;\n"
          "placement: none | local | bind:N | preferred:N | interleave:N,M|all | weighted-interleave:N=w,... |\n"
          "replica-per-node. Memory is zero until fill_synthetic() or load(). Raises EngramError:\n"
          "invalid_argument (bad option text, node not allowed), no_space, permission, unsupported.")
      .def_static(
          "allocate",
          [](const EngramLayout& layout) {
            auto t = std::make_unique<PyTable>();
            t->table = take(HostTable::allocate(layout));
            t->backing = "private";
            t->placement = "none";
            return t;
          },
          py::arg("layout"), "Private anonymous memory (not shared with other processes, not placed).")
      .def_property_readonly("layout", [](const PyTable& t) { return t.layout(); })
      .def_property_readonly("n_layers", [](const PyTable& t) { return t.n_layers(); })
      .def_property_readonly("n_replicas", [](const PyTable& t) { return t.table ? t.table->n_replicas() : 1; })
      .def_property_readonly("backing_kind", [](const PyTable& t) { return t.backing; })
      .def_property_readonly("placement", [](const PyTable& t) { return t.placement; })
      .def(
          "fill_synthetic",
          [](PyTable& t, uint64_t seed, int threads) {
            t.check_writable("fill_synthetic");
            py::gil_scoped_release release;
            if (t.table) {
              t.table->fill_synthetic(seed, threads);
            } else {
              fill_group_synthetic(t, seed, threads);
            }
          },
          py::arg("seed"), py::arg("threads") = 0,
          "Fills every row with synth_row(seed, layer_index, row) (every replica); threads 0 = all CPUs.")
      .def(
          "load",
          [](PyTable& t, const std::string& path, bool progress, int threads,
             std::optional<std::function<void(int64_t, int64_t, double)>> on_progress) {
            t.check_writable("load");
            host::LoadOptions o;
            o.threads = threads;
            o.display = progress ? host::ProgressDisplay::kOn : host::ProgressDisplay::kOff;
            if (on_progress) {
              auto fn = *on_progress;
              o.on_progress = [fn](const host::CheckpointProgress& p) {
                py::gil_scoped_acquire acquire;
                fn(p.done_bytes, p.total_bytes, p.elapsed_s);
              };
            }
            Status s;
            {
              py::gil_scoped_release release;
              s = t.table ? host::load_checkpoint(path, *t.table, o)
                          : host::load_checkpoint(path, t.group_layout, t.group_spans, o);
            }
            check(s);
          },
          py::arg("path"), py::arg("progress") = false, py::arg("threads") = 0, py::arg("on_progress") = py::none(),
          "Reads a safetensors checkpoint into the table (layout must match). progress=True prints a progress\n"
          "line on stderr; on_progress(done_bytes, total_bytes, elapsed_s) is called about every 100 ms.\n"
          "Raises EngramError: not_found / permission / io, invalid_argument (malformed file, layout mismatch).")
      .def(
          "save",
          [](PyTable& t, const std::string& path, bool overwrite) {
            host::WriteOptions o;
            o.overwrite = overwrite;
            o.display = host::ProgressDisplay::kOff;
            Status s;
            {
              py::gil_scoped_release release;
              s = t.table ? host::write_checkpoint(path, *t.table, o)
                          : Status(Code::kUnsupported, "save: a shared-group table (save from a HostTable)");
            }
            check(s);
          },
          py::arg("path"), py::arg("overwrite") = false,
          "Writes the table as a safetensors checkpoint (atomic rename). Raises EngramError: invalid_argument\n"
          "(target exists and not overwrite), not_found (no directory), no_space / io / permission.")
      .def(
          "census",
          [](const PyTable& t, const std::string& point, uint64_t max_samples) {
            host::CensusPoint p = parse_census_point(point);
            std::vector<host::PageCensus> cs;
            {
              py::gil_scoped_release release;
              cs = t.table ? t.table->census(p, max_samples)
                           : shared_table_census(t.group->segments(), t.group_layout, t.group->group(), p, max_samples);
            }
            py::list out;
            for (const auto& c : cs) out.append(json_to_py(c.to_json()));
            return out;
          },
          py::arg("point") = "on_demand", py::arg("max_samples") = uint64_t{1} << 20,
          "Page census (move_pages) of every backing: one dict per backing (PageCensus::to_json: table identity,\n"
          "pages_per_node, not_resident, known/reason). point names when it is taken (after_placement, after_load,\n"
          "after_registration, after_replay, on_demand).")
      .def(
          "view",
          [](const PyTable& t, int layer_index) {
            const TableView v = t.view(t.layer_index_checked(layer_index));
            py::dict d;
            d["rows"] = v.rows;
            d["d"] = v.d;
            d["format"] = row_format_name(v.format);
            d["stride_bytes"] = v.stride_bytes;
            d["data_ptr"] = reinterpret_cast<uintptr_t>(v.data);
            d["scales_ptr"] = reinterpret_cast<uintptr_t>(v.scales);
            return d;
          },
          py::arg("layer_index"),
          "TableView of a layer: rows, d, format, stride_bytes, data_ptr / scales_ptr (host addresses).")
      .def(
          "backing",
          [](const PyTable& t, int layer_index, int replica) -> py::object {
            t.layer_index_checked(layer_index);
            const host::PlacedBacking* b = t.table ? t.table->backing(layer_index, replica) : nullptr;
            if (b == nullptr) return py::none();
            py::dict d;
            d["identity"] = b->backing.identity().to_string();
            d["fd"] = b->backing.fd();
            d["size_bytes"] = b->backing.size_bytes();
            d["mapped_bytes"] = b->backing.mapped_bytes();
            d["page_bytes"] = b->backing.page_bytes();
            d["placement"] = json_to_py(b->report.to_json());
            return d;
          },
          py::arg("layer_index"), py::arg("replica") = 0,
          "Backing and placement report of a layer's replica (None for allocate()): identity, fd (memfd, valid\n"
          "while the table lives), size/mapped/page bytes, placement report dict.")
      .def(
          "memory",
          [](py::object self, int layer_index, bool writable) -> py::tuple {
            PyTable& t = self.cast<PyTable&>();
            if (writable) t.check_writable("memory(writable=True)");
            const TableSpan s = t.span(t.layer_index_checked(layer_index));
            py::list arrays;
            auto make = [&](uint8_t* p, int64_t rows, int64_t cols) {
              py::array a(py::dtype::of<uint8_t>(), {rows, cols}, {cols, int64_t{1}}, p, self);
              if (!writable) py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
              return a;
            };
            if (s.format == RowFormat::kFused) return py::make_tuple(make(s.data, s.rows, s.stride_bytes));
            return py::make_tuple(make(s.data, s.rows, s.d), make(s.scales, s.rows, s.d / kScaleBlock));
          },
          py::arg("layer_index"), py::arg("writable") = false,
          "Zero-copy uint8 views of a layer's table memory: fused -> (records [rows, stride_bytes],) with payload\n"
          "in [:, :d] and scales in [:, d:d+d/32]; split -> (payload [rows, d], scales [rows, d/32]). The arrays\n"
          "keep the table alive. Read-only unless writable=True.");

  // ---- lookup ----
  m.def(
      "lookup",
      [](py::object table_obj, int layer_index, py::object ids_obj, py::object out_obj, bool checked, int threads) {
        PyTable& t = table_obj.cast<PyTable&>();
        t.layer_index_checked(layer_index);
        const int heads = t.layout().heads();
        const int d = t.layout().d;
        auto ids = ids_array(ids_obj, heads, "lookup");
        const int64_t tokens = ids.shape(0);
        py::array_t<uint16_t, py::array::c_style> out;
        if (out_obj.is_none()) {
          out = py::array_t<uint16_t, py::array::c_style>({tokens, static_cast<int64_t>(heads), static_cast<int64_t>(d)});
        } else {
          py::array a = py::array::ensure(out_obj);
          if (!a || a.dtype().kind() != 'u' || a.itemsize() != 2 ||
              !(a.flags() & py::array::c_style) || !a.writeable()) {
            invalid("lookup: out must be a writable C-contiguous uint16 array (bf16 bits)");
          }
          if (a.ndim() != 3 || a.shape(0) != tokens || a.shape(1) != heads || a.shape(2) != d) {
            invalid("lookup: out must have shape [" + std::to_string(tokens) + ", " + std::to_string(heads) + ", " +
                    std::to_string(d) + "]");
          }
          out = py::reinterpret_borrow<py::array_t<uint16_t, py::array::c_style>>(a);
        }
        LookupStats st = run_lookup(t, layer_index, ids.data(), tokens, out.mutable_data(), checked, threads);
        return py::make_tuple(out, stats_dict(st));
      },
      py::arg("table"), py::arg("layer_index"), py::arg("ids"), py::arg("out") = py::none(),
      py::arg("checked") = false, py::arg("threads") = 0,
      "CPU lookup of one Engram layer. ids: integer [tokens, heads] global row ids (int64 read in place); -1 (any\n"
      "negative) gives a zero row. out: None or a writable C-contiguous uint16 [tokens, heads, d] array (written\n"
      "in place). Returns (out, stats) with stats {rows, dead_rows, invalid_ids}; bf16 bits as uint16. An id >=\n"
      "rows: checked -> EngramError(invalid_argument) before anything is written; else a zero row counted in\n"
      "invalid_ids. threads: 0 = all CPUs, 1 = calling thread. The GIL is released during the lookup.");

  // ---- hasher ----
  py::class_<PySequence>(m, "Sequence",
                         "Look-back state of one sequence (SequenceState): the last N-1 compressed tokens and a\n"
                         "rollback reserve. Made by Hasher.begin_sequence / resume / restore.")
      .def_property_readonly("position", [](const PySequence& s) { return s.state.position(); })
      .def_property_readonly("rollback_limit", [](const PySequence& s) { return s.state.rollback_limit(); })
      .def("rollback", [](PySequence& s, int64_t k) { check(s.state.rollback(k)); }, py::arg("k"),
           "Drops the last k tokens. EngramError(invalid_argument) if k < 0, k > position or k > rollback_limit.")
      .def("snapshot", [](const PySequence& s) {
        SequenceSnapshot snap = s.state.snapshot();
        return py::make_tuple(snap.position, snap.tail);
      }, "(position, tail): what a prefix cache stores to resume this sequence.")
      .def("copy", [](const PySequence& s) { return PySequence{s.hasher, s.state}; });

  py::class_<NgramHasher, std::shared_ptr<NgramHasher>>(m, "_HasherHandle");
  m.def(
      "_make_hasher",
      [](const EngramLayout& layout, std::optional<std::string> table_path, int64_t compressed_vocab, int64_t seed,
         int64_t pad_id, int64_t expected_compressed_vocab, int64_t max_rollback) {
        NgramHashOptions o;
        o.seed = seed;
        o.pad_id = pad_id;
        o.expected_compressed_vocab = expected_compressed_vocab;
        o.max_rollback = max_rollback;
        if (table_path) {
          CompressionTable ct = take(read_compression_table(*table_path));
          return std::make_shared<NgramHasher>(take(NgramHasher::create(layout, std::move(ct), o)));
        }
        return std::make_shared<NgramHasher>(take(NgramHasher::create_precompressed(layout, compressed_vocab, o)));
      },
      py::arg("layout"), py::arg("table_path"), py::arg("compressed_vocab"), py::arg("seed"), py::arg("pad_id"),
      py::arg("expected_compressed_vocab"), py::arg("max_rollback"));
  m.def("default_compression_table_path", &default_compression_table_path,
        "Path of the committed DeepSeek-V3 compression table in the source tree.");
  m.def("_hasher_info", [](const std::shared_ptr<NgramHasher>& h) {
    py::dict d;
    d["compressed_vocab"] = h->compressed_vocab();
    d["vocab_size"] = h->vocab_size();
    d["compressed_pad_id"] = h->compressed_pad_id();
    py::list ms;
    for (int i = 0; i < h->layout().n_layers(); ++i) ms.append(h->multipliers(i));
    d["multipliers"] = ms;
    return d;
  });
  m.def(
      "_hash",
      [](const std::shared_ptr<NgramHasher>& h, py::object tokens_obj, int layer_index, bool global) {
        std::vector<int64_t> tokens = int_vector(tokens_obj, "hash tokens");
        const int heads = h->layout().heads();
        py::array_t<int64_t> out({static_cast<int64_t>(tokens.size()), static_cast<int64_t>(heads)});
        Status s;
        {
          py::gil_scoped_release release;
          s = h->hash(tokens, layer_index, std::span<int64_t>(out.mutable_data(), tokens.size() * heads),
                      global ? HashIdKind::kGlobalRow : HashIdKind::kHeadLocal);
        }
        check(s);
        return out;
      });
  m.def("_begin_sequence",
        [](const std::shared_ptr<NgramHasher>& h) { return PySequence{h, h->begin_sequence()}; });
  m.def("_resume_sequence", [](const std::shared_ptr<NgramHasher>& h, py::object prefix) {
    std::vector<int64_t> p = int_vector(prefix, "resume prefix");
    return PySequence{h, take(h->resume_sequence(p))};
  });
  m.def("_restore_sequence", [](const std::shared_ptr<NgramHasher>& h, int64_t position, py::object tail) {
    SequenceSnapshot snap;
    snap.position = position;
    snap.tail = int_vector(tail, "snapshot tail");
    return PySequence{h, take(h->restore(snap))};
  });
  m.def("_hash_chunk", [](PySequence& seq, py::object tokens_obj, bool global) {
    std::vector<int64_t> tokens = int_vector(tokens_obj, "hash_chunk tokens");
    const EngramLayout& l = seq.hasher->layout();
    py::array_t<int64_t> out({static_cast<int64_t>(l.n_layers()), static_cast<int64_t>(tokens.size()),
                              static_cast<int64_t>(l.heads())});
    Status s;
    {
      py::gil_scoped_release release;
      s = seq.hasher->hash_chunk(seq.state, tokens,
                                 std::span<int64_t>(out.mutable_data(), static_cast<size_t>(out.size())),
                                 global ? HashIdKind::kGlobalRow : HashIdKind::kHeadLocal);
    }
    check(s);
    return out;
  });

  // ---- prefetcher ----
  py::class_<PyPrefetcher>(m, "_Prefetcher")
      .def(py::init([](py::object table_obj, std::vector<int> layers, const std::string& mode, int threads,
                       bool checked, int rank, std::optional<std::function<double()>> clock_ns) {
             auto p = std::make_unique<PyPrefetcher>();
             p->table_ref = table_obj;
             p->table = &table_obj.cast<PyTable&>();
             p->mode = take(parse_prefetch_mode_arg(mode));
             p->set_layers(std::move(layers));
             const EngramLayout& l = p->table->layout();
             std::vector<TableView> views;
             for (int li : p->layers) views.push_back(p->table->view(li));
             cpu::CpuPrefetchOptions o;
             o.rank = rank;
             o.lookup_threads = threads;
             o.checked = checked;
             if (clock_ns) {
               auto fn = *clock_ns;
               o.clock_ns = [fn]() {
                 py::gil_scoped_acquire acquire;
                 return fn();
               };
             }
             p->queue = take(cpu::CpuPrefetchQueue::create(views, p->layer_ids(), l.heads(), o));
             p->heads = l.heads();
             p->d = l.d;
             return p;
           }),
           py::arg("table"), py::arg("layers"), py::arg("mode"), py::arg("threads"), py::arg("checked"),
           py::arg("rank"), py::arg("clock_ns"))
      .def_static(
          "cuda",
          [](py::object table_obj, std::vector<int> layers, const std::string& mode, int device, uintptr_t stream,
             int64_t max_tokens, double grid_fraction, int grid_blocks, bool checked, int rank, bool record_timeline) {
#if ENGRAM_HAVE_CUDA
            auto p = std::make_unique<PyPrefetcher>();
            p->table_ref = table_obj;
            p->table = &table_obj.cast<PyTable&>();
            p->mode = take(parse_prefetch_mode_arg(mode));
            p->set_layers(std::move(layers));
            CudaRegistration& reg = register_table_cuda(*p->table, device);
            ScopedDevice scoped(device);
            std::vector<const cuda::UvaTable*> tables;
            for (int li : p->layers) tables.push_back(&reg.tables[static_cast<size_t>(li)]);
            cuda::CudaPrefetchOptions o;
            o.rank = rank;
            o.max_tokens = max_tokens;
            o.checked = checked;
            o.record_timeline = record_timeline;
            if (grid_blocks > 0) {
              // the queue caps at floor(fraction * SMs): the nearest fraction that gives grid_blocks
              o.grid_fraction = std::min(1.0, (grid_blocks + 0.5) / std::max(1, reg.sm_count));
            } else {
              if (!(grid_fraction > 0 && grid_fraction <= 1)) invalid("grid_cap: a fraction must be in (0, 1]");
              o.grid_fraction = grid_fraction;
            }
            const EngramLayout& l = p->table->layout();
            auto q = take(cuda::CudaPrefetchQueue::create(tables, p->layer_ids(), l.heads(),
                                                          reinterpret_cast<void*>(stream), o));
            p->cuda_queue = q.get();
            p->queue = std::move(q);
            p->device = device;
            p->heads = l.heads();
            p->d = l.d;
            return p;
#else
            (void)table_obj, (void)layers, (void)mode, (void)device, (void)stream, (void)max_tokens,
                (void)grid_fraction, (void)grid_blocks, (void)checked, (void)rank, (void)record_timeline;
            raise(Status(Code::kUnsupported, "Prefetcher on CUDA: engram_offload was built without the CUDA backend"));
#endif
          },
          py::arg("table"), py::arg("layers"), py::arg("mode"), py::arg("device"), py::arg("stream"),
          py::arg("max_tokens"), py::arg("grid_fraction"), py::arg("grid_blocks"), py::arg("checked"), py::arg("rank"),
          py::arg("record_timeline"))
      .def_property_readonly("mode", [](const PyPrefetcher& p) { return std::string(prefetch_mode_name(p.mode)); })
      .def_property_readonly("backend", [](const PyPrefetcher& p) { return std::string(p.queue->backend_name()); })
      .def_property_readonly("layers", [](const PyPrefetcher& p) { return p.layers; })
      .def_property_readonly("device", [](const PyPrefetcher& p) { return p.device; })
      .def_property_readonly("streams", [](const PyPrefetcher& p) -> py::object {
#if ENGRAM_HAVE_CUDA
        if (p.cuda_queue)
          return py::make_tuple(reinterpret_cast<uintptr_t>(p.cuda_queue->main_stream()),
                                reinterpret_cast<uintptr_t>(p.cuda_queue->prefetch_stream()));
#endif
        (void)p;
        return py::none();
      }, "(main stream, prefetch stream) raw cudaStream_t handles of a CUDA prefetcher; None on the CPU.")
      .def("begin_step", [](PyPrefetcher& p, int64_t step) { p.queue->begin_step(step); }, py::arg("step"))
      .def("end_step", [](PyPrefetcher& p) {
        Status s;
        {
          py::gil_scoped_release release;
          s = p.queue->end_step();
        }
        check(s);
      })
      .def("wait_event", [](PyPrefetcher& p, uintptr_t event) {
#if ENGRAM_HAVE_CUDA
        if (!p.cuda_queue) invalid("after_event: only a CUDA Prefetcher waits on CUDA events");
        if (event == 0) invalid("after_event: the event was never recorded (raw handle 0)");
        ScopedDevice scoped(p.device);
        check(cuda_error(cudaStreamWaitEvent(static_cast<cudaStream_t>(p.cuda_queue->main_stream()),
                                             reinterpret_cast<cudaEvent_t>(event), 0),
                         "cudaStreamWaitEvent(main stream, after_event)"));
#else
        (void)p, (void)event;
        invalid("after_event: only a CUDA Prefetcher waits on CUDA events");
#endif
      }, py::arg("event"))
      .def("prepare", [](PyPrefetcher& p, int layer_index, py::object ids_obj) {
        const int slot = p.slot(layer_index);
        auto ids = ids_array(ids_obj, p.heads, "prepare");
        const int64_t tokens = ids.shape(0);
        if (p.mode == PrefetchMode::kOnDemand) {
          p.held[slot] = std::vector<int64_t>(ids.data(), ids.data() + ids.size());
          p.held_device[slot] = 0;
          p.held_tokens[slot] = tokens;
          return;
        }
        Status s;
        {
#if ENGRAM_HAVE_CUDA
          std::optional<ScopedDevice> scoped;
          if (p.device >= 0) scoped.emplace(p.device);
#endif
          py::gil_scoped_release release;
          s = p.queue->prepare(slot, ids.data(), tokens);
        }
        check(s);
      }, py::arg("layer_index"), py::arg("ids"))
      .def("prepare_device", [](PyPrefetcher& p, int layer_index, uintptr_t ids_ptr, int64_t tokens) {
        const int slot = p.slot(layer_index);
#if ENGRAM_HAVE_CUDA
        if (!p.cuda_queue) invalid("prepare: device ids need a CUDA Prefetcher");
        if (p.mode == PrefetchMode::kOnDemand) {
          p.held[slot].reset();
          p.held_device[slot] = ids_ptr;
          p.held_tokens[slot] = tokens;
          return;
        }
        ScopedDevice scoped(p.device);
        check(p.cuda_queue->prepare_device(slot, reinterpret_cast<const int64_t*>(ids_ptr), tokens));
#else
        (void)slot, (void)ids_ptr, (void)tokens;
        invalid("prepare: device ids need a CUDA Prefetcher");
#endif
      }, py::arg("layer_index"), py::arg("ids_ptr"), py::arg("tokens"))
      .def("write_ids", [](PyPrefetcher& p, int layer_index, py::object ids_obj) {
        const int slot = p.slot(layer_index);
        auto ids = ids_array(ids_obj, p.heads, "write_ids");
#if ENGRAM_HAVE_CUDA
        if (!p.cuda_queue) invalid("write_ids: only a CUDA Prefetcher replays captured steps");
        Status s;
        {
          ScopedDevice scoped(p.device);
          py::gil_scoped_release release;
          s = p.cuda_queue->write_ids(slot, ids.data(), ids.shape(0));
        }
        check(s);
#else
        (void)slot;
        invalid("write_ids: only a CUDA Prefetcher replays captured steps");
#endif
      }, py::arg("layer_index"), py::arg("ids"))
      .def("last_launch", [](const PyPrefetcher& p, int layer_index) -> py::object {
        const int slot = p.slot(layer_index);
#if ENGRAM_HAVE_CUDA
        if (p.cuda_queue) return launch_dict(p.cuda_queue->last_launch(slot));
#endif
        (void)slot;
        return py::none();
      }, py::arg("layer_index"))
      .def("consume", [](py::object self, int layer_index, bool copy) -> py::object {
        PyPrefetcher& p = self.cast<PyPrefetcher&>();
        const int slot = p.slot(layer_index);
        Result<StagingView> r = Status(Code::kInternal, "consume did not run");
        Status s;
        std::optional<std::vector<int64_t>> held;
        uintptr_t held_dev = 0;
        if (p.mode == PrefetchMode::kOnDemand) {
          if (!p.held[slot] && p.held_device[slot] == 0) {
            invalid("consume(" + std::to_string(layer_index) + "): no ids prepared for this layer");
          }
          held = std::move(p.held[slot]);
          held_dev = p.held_device[slot];
          p.held[slot].reset();
          p.held_device[slot] = 0;
        }
        {
#if ENGRAM_HAVE_CUDA
          std::optional<ScopedDevice> scoped;
          if (p.device >= 0) scoped.emplace(p.device);
#endif
          py::gil_scoped_release release;
          if (held) s = p.queue->prepare(slot, held->data(), p.held_tokens[slot]);
#if ENGRAM_HAVE_CUDA
          if (held_dev) s = p.cuda_queue->prepare_device(slot, reinterpret_cast<const int64_t*>(held_dev), p.held_tokens[slot]);
#else
          (void)held_dev;
#endif
          if (s.is_ok()) r = p.queue->consume(slot);
        }
        check(s);
        StagingView v = take(std::move(r));
#if ENGRAM_HAVE_CUDA
        if (p.cuda_queue) {
          DeviceArray a;
          a.ptr = reinterpret_cast<uintptr_t>(v.data);
          a.shape = {v.tokens, v.heads, v.d};
          a.device = p.device;
          a.ready_stream = reinterpret_cast<uintptr_t>(p.cuda_queue->main_stream());
          a.owner = self;
          return py::cast(std::move(a));
        }
#endif
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
      .def("timeline_json", [](const PyPrefetcher& p) { return json_to_py(p.queue->timeline().to_json()); })
      .def("chrome_trace", [](const PyPrefetcher& p) { return json_to_py(p.queue->timeline().to_chrome_trace()); })
      .def("totals", [](const PyPrefetcher& p) { return stats_dict(p.queue->totals()); })
      .def("analyze", [](const PyPrefetcher& p) {
        py::list out;
        for (const LayerAnalysis& a : analyze_timeline(p.queue->timeline())) {
          auto dist = [](const Distribution& d) {
            py::dict x;
            x["median"] = d.median;
            x["p5"] = d.p5;
            x["p95"] = d.p95;
            x["p99"] = d.p99;
            x["n"] = d.n;
            return x;
          };
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


  // ---- CUDA: registration, lookup, staging arrays -----------------------------------------------
  auto table_cls = py::reinterpret_borrow<py::class_<PyTable>>(m.attr("SharedTable"));
  table_cls
      .def(
          "register_cuda",
          [](PyTable& t, int device) -> py::dict {
#if ENGRAM_HAVE_CUDA
            return registration_dict(register_table_cuda(t, device));
#else
            (void)t, (void)device;
            raise(Status(Code::kUnsupported, "register_cuda: engram_offload was built without the CUDA backend"));
#endif
          },
          py::arg("device") = 0,
          "Registers every layer's host memory with CUDA (cudaHostRegister Mapped|Portable in chunks of <= 64 GiB on\n"
          "row boundaries, prefaulted, rolled back on failure) so that device `device` reads rows over UVA. Nothing\n"
          "is copied to the device. Idempotent per device; a second device reuses the first registration. Returns\n"
          "{device, sm_count, bytes, chunks, prefault_ns, register_ns, device_equals_host}. Raises EngramError:\n"
          "unsupported (no CUDA build / no GPU), cuda / out_of_memory naming the chunk.")
      .def_property_readonly("cuda_devices", [](const PyTable& t) {
        std::vector<int> d;
#if ENGRAM_HAVE_CUDA
        for (const auto& r : t.cuda) d.push_back(r->device);
#else
        (void)t;
#endif
        return d;
      }, "Devices the table is registered for.")
      .def_property_readonly("read_only", [](const PyTable& t) { return t.read_only; })
      .def_property_readonly("group_rank", [](const PyTable& t) { return t.group_rank; },
                             "Rank in the shared group (0 = leader), -1 for a table not made through a group.")
      .def_property_readonly("group_world_size", [](const PyTable& t) { return t.group_world; })
      .def_property_readonly("group_name", [](const PyTable& t) -> py::object {
        if (!t.group) return py::none();
        return py::str(t.group->group());
      })
      .def("group_steps", [](const PyTable& t) -> py::object {
        if (!t.group) return py::none();
        return step_records(t.group->steps());
      }, "Steps of the shared-group protocol on this rank: [{step, seconds, entries}] (None: not a group table).");

  m.def(
      "_cuda_lookup",
      [](PyTable& t, int layer_index, uintptr_t ids, int64_t tokens, uintptr_t out, int device, uintptr_t stream,
         double grid_fraction, int grid_blocks, bool checked) -> py::dict {
#if ENGRAM_HAVE_CUDA
        t.layer_index_checked(layer_index);
        CudaRegistration& reg = require_registration(t, device);
        cuda::LookupArgs a;
        a.table = &reg.tables[static_cast<size_t>(layer_index)];
        a.ids = reinterpret_cast<const int64_t*>(ids);
        a.tokens = tokens;
        a.heads = t.layout().heads();
        a.out = reinterpret_cast<uint16_t*>(out);
        a.checked = checked;
        apply_grid_cap(grid_fraction, grid_blocks, reg.sm_count, &a.grid_fraction, &a.sm_count);
        Result<cuda::LaunchInfo> r = Status(Code::kInternal, "lookup did not run");
        {
          ScopedDevice scoped(device);
          py::gil_scoped_release release;
          r = cuda::launch_lookup(a, reinterpret_cast<void*>(stream));
        }
        return launch_dict(take(std::move(r)));
#else
        (void)t, (void)layer_index, (void)ids, (void)tokens, (void)out, (void)device, (void)stream, (void)grid_fraction,
            (void)grid_blocks, (void)checked;
        raise(Status(Code::kUnsupported, "lookup on CUDA: engram_offload was built without the CUDA backend"));
#endif
      },
      py::arg("table"), py::arg("layer_index"), py::arg("ids"), py::arg("tokens"), py::arg("out"), py::arg("device"),
      py::arg("stream"), py::arg("grid_fraction"), py::arg("grid_blocks"), py::arg("checked"));

  py::class_<DeviceArray>(m, "DeviceArray",
                          "A device array the module hands out (CUDA prefetch staging, bf16 [tokens, heads, d]): zero\n"
                          "copy through __dlpack__ (torch.from_dlpack, cupy.from_dlpack) or __cuda_array_interface__.\n"
                          "It keeps its owner (the Prefetcher) alive; the memory is valid until the layer's next prepare.")
      .def_property_readonly("ptr", [](const DeviceArray& a) { return a.ptr; })
      .def_property_readonly("shape", [](const DeviceArray& a) { return py::tuple(py::cast(a.shape)); })
      .def_property_readonly("device", [](const DeviceArray& a) { return a.device; })
      .def_property_readonly("stream", [](const DeviceArray& a) { return a.ready_stream; },
                             "The stream (raw cudaStream_t) in whose order the data is valid.")
      .def("__dlpack_device__", [](const DeviceArray& a) { return py::make_tuple(dl::kCUDA, a.device); })
      .def(
          "__dlpack__",
          [](py::object self, py::object stream) {
            const DeviceArray& a = self.cast<const DeviceArray&>();
#if ENGRAM_HAVE_CUDA
            // DLPack: the consumer's stream must see the data; -1 means "no synchronisation wanted".
            if (!stream.is_none()) {
              const auto s = stream.cast<int64_t>();
              if (s != -1) stream_after(static_cast<uintptr_t>(s), a.ready_stream, a.device);
            }
#else
            (void)stream;
#endif
            return make_dlpack_capsule(a, self);
          },
          py::arg("stream") = py::none())
      .def_property_readonly("__cuda_array_interface__", [](const DeviceArray& a) {
        py::dict d;
        py::list shape;
        for (int64_t x : a.shape) shape.append(x);
        d["shape"] = py::tuple(shape);
        d["typestr"] = "<u2";  // bf16 bits (the interface has no bfloat16)
        d["data"] = py::make_tuple(a.ptr, false);
        d["version"] = 3;
        d["strides"] = py::none();
        d["stream"] = a.ready_stream == 0 ? py::object(py::int_(1)) : py::object(py::int_(a.ready_stream));
        return d;
      });

  m.def("_read_dlpack_capsule", &read_dlpack_capsule, py::arg("capsule"),
        "Consumes a 'dltensor' capsule: (ptr, device_type, device_id, shape, strides|None, (code, bits, lanes), holder).");

  // ---- shared groups ----------------------------------------------------------------------------
  py::class_<host::GroupChannel>(m, "_Channel")
      .def_property_readonly("rank", &host::GroupChannel::rank)
      .def_property_readonly("world_size", &host::GroupChannel::world_size)
      .def_property_readonly("can_pass_fds", &host::GroupChannel::can_pass_fds)
      .def("describe", &host::GroupChannel::describe)
      .def(
          "barrier",
          [](host::GroupChannel& c, const std::string& step, double timeout_s) {
            Status s;
            {
              py::gil_scoped_release release;
              s = c.barrier(step, host::Millis(static_cast<int64_t>(timeout_s * 1e3)));
            }
            check(s);
          },
          py::arg("step") = "barrier", py::arg("timeout_s") = 30.0);

  py::class_<host::UnixGroupChannel, host::GroupChannel>(
      m, "UnixGroupChannel",
      "The library's own group channel: AF_UNIX SOCK_SEQPACKET star around the leader, peers checked with\n"
      "SO_PEERCRED, memfds passed with SCM_RIGHTS, every wait bounded. Peers connect(); the leader gets its\n"
      "channel from UnixGroupListener.accept().")
      .def_static(
          "connect",
          [](const std::string& socket_path, const std::string& group, double timeout_s) {
            host::UnixGroupOptions o;
            o.group = group;
            Result<std::unique_ptr<host::UnixGroupChannel>> r = Status(Code::kInternal, "connect did not run");
            {
              py::gil_scoped_release release;
              r = host::UnixGroupChannel::connect(socket_path, o, host::Millis(static_cast<int64_t>(timeout_s * 1e3)));
            }
            return take(std::move(r));
          },
          py::arg("socket_path"), py::arg("group") = "engram", py::arg("timeout_s") = 30.0,
          "Peer: connects to the leader's socket (retrying until it exists), waits for its rank. Raises EngramError:\n"
          "permission / invalid_argument (refused, with the leader's reason), timeout.")
      .def("__repr__", &host::UnixGroupChannel::describe);

  py::class_<host::UnixGroupListener>(m, "UnixGroupListener",
                                      "The leader's listening endpoint of a UnixGroupChannel.")
      .def_static(
          "listen",
          [](const std::string& group, const std::string& socket_path) {
            host::UnixGroupOptions o;
            o.group = group;
            o.socket_path = socket_path;
            return take(host::UnixGroupListener::listen(o));
          },
          py::arg("group") = "engram", py::arg("socket_path") = "",
          "Listens in a private directory (socket_path '' = <runtime dir>/<group>.<random>.sock).")
      .def_property_readonly("socket_path", &host::UnixGroupListener::socket_path)
      .def(
          "accept",
          [](host::UnixGroupListener& l, int n_peers, double timeout_s) {
            Result<std::unique_ptr<host::UnixGroupChannel>> r = Status(Code::kInternal, "accept did not run");
            {
              py::gil_scoped_release release;
              r = l.accept_group(n_peers, host::Millis(static_cast<int64_t>(timeout_s * 1e3)));
            }
            return take(std::move(r));
          },
          py::arg("n_peers"), py::arg("timeout_s") = 30.0,
          "Admits n_peers peers (ranks 1..n in order of arrival) and returns the leader's channel (rank 0).\n"
          "Raises EngramError(timeout) naming how many joined.")
      .def("unlink", [](host::UnixGroupListener& l) { check(l.unlink_socket()); },
           "Removes the socket path (no new peer can find the group).")
      .def_property_readonly("rejections", &host::UnixGroupListener::rejections);

  py::class_<PyCallbackChannel, host::GroupChannel>(m, "_CallbackChannel")
      .def(py::init([](py::object impl) { return std::make_unique<PyCallbackChannel>(std::move(impl)); }),
           py::arg("impl"));

  m.def(
      "_create_shared",
      [](const EngramLayout& layout, py::object channel_obj, const std::string& backing, const std::string& placement,
         const std::string& group_name, const std::string& shm_dir, std::optional<uint64_t> seed,
         std::optional<std::string> checkpoint, double step_timeout_s, double load_timeout_s) {
        std::unique_ptr<PyCallbackChannel> holder;
        host::GroupChannel& ch = channel_of(channel_obj, holder);
        if (ch.rank() != 0)
          invalid("SharedTable.create(group=channel): channel rank is " + std::to_string(ch.rank()) +
                  "; the leader is rank 0, other ranks call SharedTable.attach(channel)");
        host::SharedTableSpec spec;
        spec.group = group_name.empty() ? "py-" + std::to_string(sys::process_id()) : group_name;
        spec.segments = take(shared_segment_specs(layout, backing, shm_dir, spec.group));
        spec.placement = take(host::parse_placement(placement));
        spec.job = layout_to_json(layout).dump();
        host::ProtocolHooks hooks;
        RankJob job;
        if (checkpoint) job.checkpoint = *checkpoint;
        if (seed) job.seed = *seed;
        if (seed || checkpoint) {
          hooks.load = [&job, &layout](std::vector<host::SharedSegment>& segs) {
            return load_shared_table(job, layout, segs);
          };
        }
        auto t = std::make_unique<PyTable>();
        Status s;
        {
          py::gil_scoped_release release;
          auto g = host::SharedTableGroup::create(spec);
          if (!g.is_ok()) {
            s = g.status();
            (void)host::SharedTableGroup::fail_peers(ch, spec.group, s, timeouts_of(step_timeout_s, load_timeout_s).step);
          } else {
            t->group = std::move(*g);
            s = t->group->admit(ch, hooks, timeouts_of(step_timeout_s, load_timeout_s));
          }
        }
        check(s);
        t->group_layout = layout;
        t->group_spans = take(shared_table_spans(layout, t->group->segments()));
        t->group_rank = 0;
        t->group_world = ch.world_size();
        t->backing = backing;
        t->placement = placement;
        return t;
      },
      py::arg("layout"), py::arg("channel"), py::arg("backing"), py::arg("placement"), py::arg("group_name"),
      py::arg("shm_dir"), py::arg("seed"), py::arg("checkpoint"), py::arg("step_timeout_s"),
      py::arg("load_timeout_s"));

  m.def(
      "_attach_shared",
      [](py::object channel_obj, bool read_only, double step_timeout_s, double load_timeout_s) {
        std::unique_ptr<PyCallbackChannel> holder;
        host::GroupChannel& ch = channel_of(channel_obj, holder);
        if (ch.rank() == 0) invalid("SharedTable.attach: channel rank 0 is the leader (it calls SharedTable.create)");
        host::PeerOptions po;
        po.read_only = read_only;
        auto t = std::make_unique<PyTable>();
        Status s;
        {
          py::gil_scoped_release release;
          auto g = host::SharedTableGroup::join(ch, po, {}, timeouts_of(step_timeout_s, load_timeout_s));
          if (g.is_ok()) {
            t->group = std::move(*g);
          } else {
            s = g.status();
          }
        }
        check(s);
        t->group_layout = take(layout_from_json(t->group->job()));
        t->group_spans = take(shared_table_spans(t->group_layout, t->group->segments()));
        t->read_only = read_only;
        t->group_rank = ch.rank();
        t->group_world = ch.world_size();
        t->backing = "shared";
        t->placement = "leader's";
        return t;
      },
      py::arg("channel"), py::arg("read_only"), py::arg("step_timeout_s"), py::arg("load_timeout_s"));
}

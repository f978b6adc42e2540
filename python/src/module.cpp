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
#include "host/placement.hpp"
#include "host/token_io.hpp"
#include "replay/cuda_backend_factory.hpp"
#include "sched/prefetch_queue.hpp"
#include "sched/timeline.hpp"

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

// A HostTable plus the thread pool its lookups run on (one lookup at a time per table pool).
struct PyTable {
  std::unique_ptr<HostTable> table;
  std::string backing;    // "private" for allocate()
  std::string placement;
  std::mutex pool_mu;
  std::unique_ptr<ThreadPool> pool;
  int pool_threads = 0;

  const EngramLayout& layout() const { return table->layout(); }
  int layer_index_checked(int layer_index) const {
    if (layer_index < 0 || layer_index >= table->n_layers()) {
      invalid("layer index " + std::to_string(layer_index) + " out of range [0, " +
              std::to_string(table->n_layers()) + ") (an index into layout.layer_ids, not a model layer id)");
    }
    return layer_index;
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
  const TableView view = t.table->view(layer_index);
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

// ---- hasher -------------------------------------------------------------------------------------

struct PySequence {
  std::shared_ptr<const NgramHasher> hasher;
  SequenceState state;
};

// ---- prefetcher ---------------------------------------------------------------------------------

struct PyPrefetcher {
  py::object table_ref;  // keeps the PyTable (and its memory) alive
  PyTable* table = nullptr;
  PrefetchMode mode = PrefetchMode::kEarly;
  std::unique_ptr<PrefetchQueue> queue;
  int heads = 0, d = 0;
  // on_demand: ids held until consume() submits them.
  std::vector<std::optional<std::vector<int64_t>>> held;
  std::vector<int64_t> held_tokens;
};

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
      .def_property_readonly("n_layers", [](const PyTable& t) { return t.table->n_layers(); })
      .def_property_readonly("n_replicas", [](const PyTable& t) { return t.table->n_replicas(); })
      .def_property_readonly("backing_kind", [](const PyTable& t) { return t.backing; })
      .def_property_readonly("placement", [](const PyTable& t) { return t.placement; })
      .def(
          "fill_synthetic",
          [](PyTable& t, uint64_t seed, int threads) {
            py::gil_scoped_release release;
            t.table->fill_synthetic(seed, threads);
          },
          py::arg("seed"), py::arg("threads") = 0,
          "Fills every row with synth_row(seed, layer_index, row) (every replica); threads 0 = all CPUs.")
      .def(
          "load",
          [](PyTable& t, const std::string& path, bool progress, int threads,
             std::optional<std::function<void(int64_t, int64_t, double)>> on_progress) {
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
              s = host::load_checkpoint(path, *t.table, o);
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
              s = host::write_checkpoint(path, *t.table, o);
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
              cs = t.table->census(p, max_samples);
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
            const TableView v = t.table->view(t.layer_index_checked(layer_index));
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
            const host::PlacedBacking* b = t.table->backing(t.layer_index_checked(layer_index), replica);
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
            const TableSpan s = t.table->span(t.layer_index_checked(layer_index));
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
      .def(py::init([](py::object table_obj, const std::string& mode, int threads, bool checked, int rank,
                       std::optional<std::function<double()>> clock_ns) {
             auto p = std::make_unique<PyPrefetcher>();
             p->table_ref = table_obj;
             p->table = &table_obj.cast<PyTable&>();
             if (mode == "early") {
               p->mode = PrefetchMode::kEarly;
             } else if (mode == "on_demand") {
               p->mode = PrefetchMode::kOnDemand;
             } else {
               invalid("prefetch mode '" + mode + "': expected early or on_demand");
             }
             const EngramLayout& l = p->table->layout();
             std::vector<TableView> views;
             for (int i = 0; i < l.n_layers(); ++i) views.push_back(p->table->table->view(i));
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
             p->queue = take(cpu::CpuPrefetchQueue::create(views, l.layer_ids, l.heads(), o));
             p->heads = l.heads();
             p->d = l.d;
             p->held.resize(l.n_layers());
             p->held_tokens.assign(l.n_layers(), 0);
             return p;
           }),
           py::arg("table"), py::arg("mode"), py::arg("threads"), py::arg("checked"), py::arg("rank"),
           py::arg("clock_ns"))
      .def_property_readonly("mode", [](const PyPrefetcher& p) { return std::string(prefetch_mode_name(p.mode)); })
      .def_property_readonly("backend", [](const PyPrefetcher& p) { return std::string(p.queue->backend_name()); })
      .def("begin_step", [](PyPrefetcher& p, int64_t step) { p.queue->begin_step(step); }, py::arg("step"))
      .def("end_step", [](PyPrefetcher& p) {
        Status s;
        {
          py::gil_scoped_release release;
          s = p.queue->end_step();
        }
        check(s);
      })
      .def("prepare", [](PyPrefetcher& p, int layer_index, py::object ids_obj) {
        p.table->layer_index_checked(layer_index);
        auto ids = ids_array(ids_obj, p.heads, "prepare");
        const int64_t tokens = ids.shape(0);
        if (p.mode == PrefetchMode::kOnDemand) {
          p.held[layer_index] = std::vector<int64_t>(ids.data(), ids.data() + ids.size());
          p.held_tokens[layer_index] = tokens;
          return;
        }
        Status s;
        {
          py::gil_scoped_release release;
          s = p.queue->prepare(layer_index, ids.data(), tokens);
        }
        check(s);
      }, py::arg("layer_index"), py::arg("ids"))
      .def("consume", [](py::object self, int layer_index, bool copy) {
        PyPrefetcher& p = self.cast<PyPrefetcher&>();
        p.table->layer_index_checked(layer_index);
        Result<StagingView> r = Status(Code::kInternal, "consume did not run");
        Status s;
        std::optional<std::vector<int64_t>> held;
        if (p.mode == PrefetchMode::kOnDemand) {
          if (!p.held[layer_index]) {
            invalid("consume(" + std::to_string(layer_index) + "): no ids prepared for this layer");
          }
          held = std::move(p.held[layer_index]);
          p.held[layer_index].reset();
        }
        {
          py::gil_scoped_release release;
          if (held) s = p.queue->prepare(layer_index, held->data(), p.held_tokens[layer_index]);
          if (s.is_ok()) r = p.queue->consume(layer_index);
        }
        check(s);
        StagingView v = take(std::move(r));
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
}

// SharedTable (a HostTable and the engines over it) and the direct lookups `lookup` / `_cuda_lookup`.
//
// A local table is HostTable::create's; a shared-group table is the table of an Engine::lead_group (rank 0) or
// Engine::join_group (other ranks): the same type either way, so fill, load, save, census and lookups work the
// same on a leader and on a peer. Direct lookups go through an engine over the table: the cpu backend (one per
// thread count), or the engine register_cuda(N) made for device N (the planner's fast path).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <optional>

#include "common.hpp"
#include "engram/backing_info.hpp"
#include "engram/checkpoint.hpp"
#include "engram/engine.hpp"
#include "engram/format.hpp"
#include "progress_line.hpp"
#include "py_channel.hpp"

namespace engram::py_bind {
namespace {

py::dict registration_dict(Engine& e) {
  const nlohmann::json d = e.describe();
  py::dict out;
  out["device"] = e.device();
  out["sm_count"] = d["device"].value("sm_count", 0);
  const auto& r = d["registration"];
  out["bytes"] = r.value("bytes", int64_t{0});
  out["chunks"] = r.value("chunks", 0);
  out["prefault_ns"] = r.value("prefault_s", 0.0) * 1e9;
  out["register_ns"] = r.value("register_s", 0.0) * 1e9;
  out["device_equals_host"] = r.value("device_pointer_equals_host", true);
  return out;
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

EngineOptions group_options(const std::string& backing, const std::string& placement, const std::string& shm_dir,
                            double step_timeout_s, double load_timeout_s, const py::dict& options) {
  EngineOptions o;
  o.backend = BackendKind::kCpu;  // the protocol's register step on this rank: none unless a backend is asked for
  check(set_engine_option(o, "backing", backing));
  check(set_engine_option(o, "placement", placement));
  o.table.shm_dir = shm_dir;
  o.step_timeout_ms = static_cast<int64_t>(step_timeout_s * 1e3);
  o.load_timeout_ms = static_cast<int64_t>(load_timeout_s * 1e3);
  apply_options(o, options);
  return o;
}

}  // namespace

void bind_table(py::module_& m) {
  py::class_<PyTable>(m, "SharedTable",
                      "Host memory of every Engram layer of a layout (HostTable): shared backings (memfd by\n"
                      "default) placed by a NUMA policy before the first page exists, or private memory.")
      .def_static(
          "create",
          [](const EngramLayout& layout, const std::string& backing, const std::string& placement,
             const std::string& group, bool prefault, bool allow_fallback, int home_node, int tp_size, int tp_rank) {
            TableOptions o;
            check(set_table_option(o, "backing", backing));
            check(set_table_option(o, "placement", placement));
            check(set_table_option(o, "tp_size", std::to_string(tp_size)));
            check(set_table_option(o, "tp_rank", std::to_string(tp_rank)));
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
            t->table = std::shared_ptr<HostTable>(take(std::move(r)));
            t->backing = backing;
            t->placement = placement;
            return t;
          },
          py::arg("layout"), py::arg("backing") = "memfd", py::arg("placement") = "none", py::arg("group") = "",
          py::arg("prefault") = true, py::arg("allow_fallback") = false, py::arg("home_node") = -1,
          py::arg("tp_size") = 1, py::arg("tp_rank") = 0,
          "One shared backing per Engram layer. backing: memfd | shm | hugetlb | hugetlb-1g | anon-thp;\n"
          "placement: none | local | bind:N | preferred:N | interleave:N,M|all | weighted-interleave:N=w,... |\n"
          "replica-per-node. tp_size / tp_rank: hold only tensor-parallel rank tp_rank's heads (ceil(heads /\n"
          "tp_size) per rank, as vLLM shards them) and their rows; lookups then write [tokens, ceil(heads /\n"
          "tp_size), d]. Memory is zero until fill_synthetic() or load(). Raises EngramError:\n"
          "invalid_argument (bad option text, node not allowed), no_space, permission, unsupported.")
      .def_static(
          "allocate",
          [](const EngramLayout& layout) {
            auto t = std::make_unique<PyTable>();
            t->table = std::shared_ptr<HostTable>(take(HostTable::allocate(layout)));
            t->backing = "private";
            t->placement = "none";
            return t;
          },
          py::arg("layout"), "Private anonymous memory (not shared with other processes, not placed).")
      .def_property_readonly("layout", [](const PyTable& t) { return t.layout(); })
      .def_property_readonly("n_layers", [](const PyTable& t) { return t.n_layers(); })
      .def_property_readonly("n_replicas", [](const PyTable& t) { return t.table->n_replicas(); })
      .def_property_readonly("backing_kind", [](const PyTable& t) { return t.backing; })
      .def_property_readonly("placement", [](const PyTable& t) { return t.placement; })
      .def(
          "fill_synthetic",
          [](PyTable& t, uint64_t seed, int threads) {
            t.check_writable("fill_synthetic");
            py::gil_scoped_release release;
            t.table->fill_synthetic(seed, threads);
          },
          py::arg("seed"), py::arg("threads") = 0,
          "Fills every row with synth_row(seed, layer_index, row) (every replica); threads 0 = all CPUs.")
      .def(
          "load",
          [](PyTable& t, const std::string& path, bool progress, int threads,
             std::optional<std::function<void(int64_t, int64_t, double)>> on_progress) {
            t.check_writable("load");
            TableContent c;
            c.kind = TableContent::Kind::kCheckpoint;
            c.path = path;
            c.threads = threads;
            c.on_progress = load_progress(path, progress, on_progress);
            Status s;
            {
              py::gil_scoped_release release;
              s = fill_table(*t.table, c);
            }
            check(s);
          },
          py::arg("path"), py::arg("progress") = false, py::arg("threads") = 0, py::arg("on_progress") = py::none(),
          "Reads a safetensors checkpoint into the table (layout must match; every replica). progress=True prints a\n"
          "progress line on stderr; on_progress(done_bytes, total_bytes, elapsed_s) is called about every 100 ms.\n"
          "Raises EngramError: not_found / permission / io, invalid_argument (malformed file, layout mismatch).")
      .def(
          "load_model",
          [](PyTable& t, const std::string& dir, const std::string& tensor_names, int threads, int reader_node,
             bool progress, std::optional<std::function<void(int64_t, int64_t, double)>> on_progress) {
            t.check_writable("load_model");
            TableContent c = TableContent::model(dir, tensor_names);
            c.threads = threads;
            c.reader_node = reader_node;
            c.on_progress = load_progress(c.to_string(), progress, on_progress);
            Status s;
            {
              py::gil_scoped_release release;
              s = fill_table(*t.table, c);
            }
            check(s);
          },
          py::arg("dir"), py::arg("tensor_names") = "", py::arg("threads") = 0, py::arg("reader_node") = -1,
          py::arg("progress") = false, py::arg("on_progress") = py::none(),
          "Streams the Engram tables of a Hugging Face model directory into the table (every replica; layout must\n"
          "be Layout.from_model(dir) in this table's row format): parallel readers (threads 0 = min(16, CPUs)),\n"
          "pinned to reader_node's CPUs when >= 0, a bounded buffer, the page cache dropped behind them; rows past\n"
          "the primes are not read. progress=True prints a progress line on stderr; on_progress(done_bytes,\n"
          "total_bytes, elapsed_s) is called about every 100 ms. Raises EngramError: not_found / permission / io,\n"
          "invalid_argument (malformed directory, layout mismatch, a tensor missing or of another dtype: named).")
      .def(
          "save",
          [](PyTable& t, const std::string& path, bool overwrite) {
            CheckpointWriteOptions o;
            o.overwrite = overwrite;
            Status s;
            {
              py::gil_scoped_release release;
              s = write_table_checkpoint(path, *t.table, o);
            }
            check(s);
          },
          py::arg("path"), py::arg("overwrite") = false,
          "Writes the table as a safetensors checkpoint (atomic rename). Raises EngramError: invalid_argument\n"
          "(target exists and not overwrite), not_found (no directory), no_space / io / permission.")
      .def(
          "census",
          [](const PyTable& t, const std::string& point, uint64_t max_samples) {
            CensusPoint p = parse_census_point(point);
            std::vector<PageCensus> cs;
            {
              py::gil_scoped_release release;
              cs = t.table->census(p, max_samples);
            }
            py::list out;
            for (const auto& c : cs) out.append(census_to_py(c));
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
            t.layer_index_checked(layer_index);
            const std::optional<BackingInfo> b = backing_info(*t.table, layer_index, replica);
            if (!b) return py::none();
            py::dict d;
            d["identity"] = b->identity;
            d["fd"] = b->fd;
            d["size_bytes"] = b->size_bytes;
            d["mapped_bytes"] = b->mapped_bytes;
            d["page_bytes"] = b->page_bytes;
            d["placement"] = json_to_py(b->placement);
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
            const TableSpan s = t.table->span(t.layer_index_checked(layer_index));
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
          "keep the table alive. Read-only unless writable=True.")
      .def(
          "register_cuda",
          [](PyTable& t, int device, py::kwargs options) -> py::dict {
            EngineOptions o;
            o.grid_cap = GridCap::all_sms();  // direct lookups run in the foreground
            apply_options(o, options);
            return registration_dict(t.register_cuda(device, o));
          },
          py::arg("device") = 0,
          "Registers every layer's host memory with CUDA (cudaHostRegister Mapped|Portable in chunks of <= 64 GiB on\n"
          "row boundaries, prefaulted, rolled back on failure) so that device `device` reads rows over UVA, and builds\n"
          "the device's lookup engine (the planner's fast path; engine options as keyword arguments, e.g.\n"
          "fast_path='plain', cache_size='5%'). Nothing is copied to the device. Idempotent per device; a second device\n"
          "reuses the first registration. Returns {device, sm_count, bytes, chunks, prefault_ns, register_ns,\n"
          "device_equals_host}. Raises EngramError: unsupported (no CUDA build / no GPU), cuda / out_of_memory naming\n"
          "the chunk.")
      .def_property_readonly("cuda_devices", [](PyTable& t) { return t.cuda_devices(); },
                             "Devices the table is registered for.")
      .def_property_readonly("read_only", [](const PyTable& t) { return t.table->read_only(); })
      .def_property_readonly("group_rank", [](const PyTable& t) { return t.group ? t.group->group_rank() : -1; },
                             "Rank in the shared group (0 = leader), -1 for a table not made through a group.")
      .def_property_readonly("group_world_size", [](const PyTable& t) { return t.group ? t.group->group_world_size() : 0; })
      .def_property_readonly("group_name", [](const PyTable& t) -> py::object {
        if (!t.group) return py::none();
        return py::str(t.group->group_name());
      })
      .def("group_steps", [](const PyTable& t) -> py::object {
        if (!t.group) return py::none();
        return step_records(t.group->group_steps());
      }, "Steps of the shared-group protocol on this rank: [{step, seconds, entries}] (None: not a group table).")
      .def("describe", [](PyTable& t, int device) -> py::object {
        Engine* e = device >= 0 ? t.cuda_engine(device) : t.group.get();
        if (!e) return py::none();
        return json_to_py(e->describe());
      }, py::arg("device") = -1,
         "The lookup engine's report (backend, registration, fast path per layer: paths, why, cache) of device N, or\n"
         "of the shared group's engine (device -1); None when there is none.");

  // ---- direct lookups ----
  m.def(
      "lookup",
      [](py::object table_obj, int layer_index, py::object ids_obj, py::object out_obj, bool checked, int threads) {
        PyTable& t = table_obj.cast<PyTable&>();
        t.layer_index_checked(layer_index);
        return host_lookup(t.cpu_engine(threads), layer_index, ids_obj, out_obj, checked);
      },
      py::arg("table"), py::arg("layer_index"), py::arg("ids"), py::arg("out") = py::none(),
      py::arg("checked") = false, py::arg("threads") = 0,
      "CPU lookup of one Engram layer. ids: integer [tokens, heads] global row ids (int64 read in place); -1 (any\n"
      "negative) gives a zero row. out: None or a writable C-contiguous uint16 [tokens, heads, d] array (written\n"
      "in place). Returns (out, stats) with stats {rows, dead_rows, invalid_ids}; bf16 bits as uint16. An id >=\n"
      "rows: checked -> EngramError(invalid_argument) before anything is written; else a zero row counted in\n"
      "invalid_ids. threads: 0 = CPUs - 1 (the engine's rule), 1 = calling thread. The GIL is released.");

  m.def(
      "_cuda_lookup",
      [](PyTable& t, int layer_index, uintptr_t ids, int64_t tokens, uintptr_t out, int device, uintptr_t stream,
         const py::dict& grid, bool checked) -> py::dict {
        t.layer_index_checked(layer_index);
        Engine* e = t.cuda_engine(device);
        if (!e)
          invalid("the table is not registered for cuda:" + std::to_string(device) + " (call table.register_cuda(" +
                  std::to_string(device) + ") first)");
        return device_lookup(*e, layer_index, ids, tokens, out, stream, grid, checked);
      },
      py::arg("table"), py::arg("layer_index"), py::arg("ids"), py::arg("tokens"), py::arg("out"), py::arg("device"),
      py::arg("stream"), py::arg("grid"), py::arg("checked"));

  // ---- shared groups ----
  m.def(
      "_create_shared",
      [](const EngramLayout& layout, py::object channel_obj, const std::string& backing, const std::string& placement,
         const std::string& group_name, const std::string& shm_dir, std::optional<uint64_t> seed,
         std::optional<std::string> checkpoint, double step_timeout_s, double load_timeout_s, py::dict options) {
        std::unique_ptr<PyCallbackChannel> holder;
        host::GroupChannel& ch = channel_of(channel_obj, holder);
        if (ch.rank() != 0)
          invalid("SharedTable.create(group=channel): channel rank is " + std::to_string(ch.rank()) +
                  "; the leader is rank 0, other ranks call SharedTable.attach(channel)");
        EngineOptions o = group_options(backing, placement, shm_dir, step_timeout_s, load_timeout_s, options);
        o.table.group = group_name;
        if (o.content.kind == TableContent::Kind::kModel) {  // model=DIR among the options
          if (seed || checkpoint) invalid("SharedTable.create: model= excludes seed= and checkpoint=");
        } else {
          o.content.kind = TableContent::Kind::kZero;
        }
        if (seed) {
          o.content.kind = TableContent::Kind::kSynthetic;
          o.content.seed = *seed;
        }
        if (checkpoint) {
          o.content.kind = TableContent::Kind::kCheckpoint;
          o.content.path = *checkpoint;
        }
        Result<std::unique_ptr<Engine>> r = Status(Code::kInternal, "create did not run");
        {
          py::gil_scoped_release release;
          r = Engine::lead_group(layout, o, ch);
        }
        auto t = std::make_unique<PyTable>();
        t->group = take(std::move(r));
        t->table = t->group->shared_table();
        t->backing = backing;
        t->placement = placement;
        return t;
      },
      py::arg("layout"), py::arg("channel"), py::arg("backing"), py::arg("placement"), py::arg("group_name"),
      py::arg("shm_dir"), py::arg("seed"), py::arg("checkpoint"), py::arg("step_timeout_s"), py::arg("load_timeout_s"),
      py::arg("options"));

  m.def(
      "_attach_shared",
      [](py::object channel_obj, bool read_only, double step_timeout_s, double load_timeout_s, py::dict options) {
        std::unique_ptr<PyCallbackChannel> holder;
        host::GroupChannel& ch = channel_of(channel_obj, holder);
        if (ch.rank() == 0) invalid("SharedTable.attach: channel rank 0 is the leader (it calls SharedTable.create)");
        EngineOptions o = group_options("memfd", "none", "/dev/shm", step_timeout_s, load_timeout_s, options);
        o.read_only = read_only;
        Result<std::unique_ptr<Engine>> r = Status(Code::kInternal, "attach did not run");
        {
          py::gil_scoped_release release;
          r = Engine::join_group(o, ch);
        }
        auto t = std::make_unique<PyTable>();
        t->group = take(std::move(r));
        t->table = t->group->shared_table();
        t->backing = "shared";
        t->placement = "leader's";
        return t;
      },
      py::arg("channel"), py::arg("read_only"), py::arg("step_timeout_s"), py::arg("load_timeout_s"),
      py::arg("options"));
}

}  // namespace engram::py_bind

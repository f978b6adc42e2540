// Engine (see engram/engine.hpp): the order of assembly is the design's protocol, for one process as for a group:
//   choose the backend (fail before minutes of table building when a named one cannot run)
//   -> create and place the table -> census "after placement"
//   -> register the memory with the backend -> census "after registration"
//   -> write the content (synthetic rows / checkpoint; every replica) -> census "after load"
//      (create_local registers while the content is written, by default: registration pins the pages the placement
//      allocated and reads no row; then "after registration" and "after load" are one point, after both, and the
//      census "after load" is taken there once: a page-by-page census of a 35 GiB table of 4 KiB pages takes
//      about 1.5 s)
//   -> build the rank's lookup stack (queue with its lookup path, compute).
// A shared group runs the same steps through the protocol (engine/group.cpp); a table handed in (over_table) skips
// creation and content.
#include "engram/engine.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "engine/backend.hpp"
#include "engine/engine_impl.hpp"
#include "engine/guardian.hpp"
#include "host/census.hpp"
#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"
#include "host/checkpoint.hpp"
#include "host/group.hpp"
#include "host/hot_profile.hpp"
#include "host/model_io.hpp"
#include "sys/affinity.hpp"

namespace engram {

using engine::Backend;

Engine::Engine() : impl_(std::make_unique<Impl>()) {}

Engine::~Engine() {
  // The backend first (its queue reads the table, its registration pins it), then the group, then the table.
  if (impl_) {
    impl_->metered.reset();
    impl_->device = nullptr;
    impl_->backend.reset();
    impl_->registration.reset();
    impl_->group.reset();
    impl_->table.reset();
  }
}

namespace engine {

std::vector<TableView> table_views(const HostTable& t) {
  std::vector<TableView> views;
  for (int li = 0; li < t.n_layers(); ++li) views.push_back(t.view(li));
  return views;
}

Result<host::ModelInfo> read_model(const TableContent& c) {
  host::ModelTensorNames names;
  if (!c.tensor_names.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(names, host::parse_model_tensor_names(c.tensor_names));
  }
  return host::read_model_dir(c.path, names);
}

Status write_content(HostTable& table, const TableContent& c) {
  switch (c.kind) {
    case TableContent::Kind::kZero: return Status::ok();
    case TableContent::Kind::kSynthetic: {
      const int threads = sys::threads_or_auto(c.threads);
      if (c.on_progress) table.fill_synthetic(c.seed, threads, c.on_progress);
      else table.fill_synthetic(c.seed, threads);
      return Status::ok();
    }
    case TableContent::Kind::kCheckpoint: {
      host::LoadOptions lo;
      lo.threads = c.threads;
      lo.drop_page_cache = c.drop_page_cache;
      if (c.on_progress) {
        auto fn = c.on_progress;
        lo.on_progress = [fn](const host::CheckpointProgress& p) { fn(p.done_bytes, p.total_bytes, p.elapsed_s); };
      }
      // The loader's messages already name the file ("checkpoint PATH: ..."); others get that context here.
      const Status s = host::load_checkpoint(c.path, table, lo);
      const std::string context = "checkpoint " + c.path;
      return s.is_ok() || s.message().rfind(context, 0) == 0 ? s : s.with_context(context);
    }
    case TableContent::Kind::kModel: {
      ENGRAM_ASSIGN_OR_RETURN(const host::ModelInfo info, read_model(c));
      host::ModelLoadOptions lo;
      lo.threads = c.threads;
      lo.reader_node = c.reader_node;
      lo.drop_page_cache = c.drop_page_cache;
      if (c.on_progress) {
        auto fn = c.on_progress;
        lo.on_progress = [fn](const host::TransferProgress& p) { fn(p.done_bytes, p.total_bytes, p.elapsed_s); };
      }
      for (int r = 0; r < table.n_replicas(); ++r) {  // replica-per-node: every copy holds the rows
        std::vector<TableSpan> spans;
        for (int i = 0; i < table.n_layers(); ++i) spans.push_back(table.span(i, r));
        ENGRAM_RETURN_IF_ERROR(host::load_model(info, table.layout(), spans, lo));
      }
      return Status::ok();
    }
  }
  return Status(Code::kInternal, "unknown table content");
}

Status load_cache_profile(EngineOptions& o, const EngramLayout& layout, double* read_s) {
  if (o.cache.profile_path.empty() || !o.cache.profile.empty()) return Status::ok();
  const auto t0 = std::chrono::steady_clock::now();
  auto p = host::read_hot_profile(o.cache.profile_path);
  if (!p.is_ok()) return p.status().with_context("cache profile");
  ENGRAM_RETURN_IF_ERROR(host::check_hot_profile_layout(*p, layout).with_context("cache profile"));
  for (auto& l : p->layers) o.cache.profile.push_back(std::move(l.id_counts));
  o.cache.profile_source = "profile " + o.cache.profile_path + " (" + std::to_string(p->tokens) + " tokens)";
  if (read_s) *read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

Status build_stack(Engine::Impl& impl, const EngineOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  ENGRAM_ASSIGN_OR_RETURN(impl.backend,
                          impl.entry->create(impl.table->layout(), table_views(*impl.table), impl.registration, o));
  impl.backend_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  impl.metrics->init(*impl.table, o, impl.entry->name, /*has_queue=*/true, o.record_timeline, impl.load_s,
                     impl.group_world);
  impl.metrics->set_censuses(impl.censuses);
  impl.device = impl.backend->device_queue();
  impl.metered = std::make_unique<MeteredQueue>(impl.backend->queue(), *impl.metrics, impl.device);
  return Status::ok();
}

// Registrations are per table and backend, shared by every engine over that table (registering the same host
// range twice fails with cudaErrorHostMemoryAlreadyRegistered): the first engine registers, later ones reuse it
// while any engine holds it.
Status register_table(Engine::Impl& impl, const EngineOptions& o, bool read_only) {
  static std::mutex mu;
  static std::map<std::pair<const HostTable*, BackendKind>, std::weak_ptr<Registration>> live;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(static_cast<const HostTable*>(impl.table.get()), impl.entry->kind);
  if (auto it = live.find(key); it != live.end()) {
    if (auto reg = it->second.lock()) {
      impl.registration = std::move(reg);
      return Status::ok();
    }
    live.erase(it);
  }
  ENGRAM_ASSIGN_OR_RETURN(impl.registration,
                          impl.entry->register_memory(impl.table->layout(), table_views(*impl.table), o, read_only));
  if (impl.registration) live[key] = impl.registration;
  return Status::ok();
}

}  // namespace engine

Result<EngramLayout> content_layout(const TableContent& c, RowFormat format) {
  switch (c.kind) {
    case TableContent::Kind::kCheckpoint: return host::read_checkpoint_layout(c.path, format);
    case TableContent::Kind::kModel: {
      ENGRAM_ASSIGN_OR_RETURN(const host::ModelInfo info, engine::read_model(c));
      return host::model_layout(info, format);
    }
    case TableContent::Kind::kZero:
    case TableContent::Kind::kSynthetic: break;
  }
  return Status(Code::kInvalidArgument, c.to_string() + " content has no layout of its own: give a layout preset");
}

Status fill_table(HostTable& table, const TableContent& content) {
  return engine::write_content(table, content);
}

Result<std::unique_ptr<Engine>> Engine::create_local(const EngramLayout& layout, const EngineOptions& o) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = o;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  ENGRAM_RETURN_IF_ERROR(engine::load_cache_profile(e->options_, layout, &e->impl_->profile_read_s));
  ENGRAM_ASSIGN_OR_RETURN(e->impl_->entry, engine::choose_backend(o, &e->backend_note_));
  const auto t_place = Clock::now();
  ENGRAM_ASSIGN_OR_RETURN(e->impl_->guardian, engine::guard_named_backings(e->options_.table));
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<HostTable> t, HostTable::create(layout, e->options_.table));
  e->impl_->table = std::shared_ptr<HostTable>(std::move(t));
  Impl& im = *e->impl_;
  im.place_s = since(t_place);
  e->add_censuses(im.table->census(host::CensusPoint::kAfterPlacement));
  const auto t_steps = Clock::now();
  Status registered, written;
  auto do_register = [&] {
    const auto t0 = Clock::now();
    registered = engine::register_table(im, o, /*read_only=*/false);
    im.register_s = since(t0);
  };
  auto do_write = [&] {
    const auto t0 = Clock::now();
    written = engine::write_content(*im.table, o.content);
    im.load_s = since(t0);
  };
  im.registered_during_load = o.register_during_load && o.content.kind != TableContent::Kind::kZero;
  if (im.registered_during_load) {
    // A failure of either waits for the other; the registration's rollback (and a failed write's partial rows)
    // leave the same state as in sequence: the engine is dropped and releases both.
    std::thread registrar;
    try {
      registrar = std::thread(do_register);
    } catch (const std::system_error& ex) {
      return Status(Code::kOutOfMemory, std::string("engine: cannot start the registration thread: ") + ex.what());
    }
    do_write();
    registrar.join();
    ENGRAM_RETURN_IF_ERROR(registered);
  } else {
    do_register();
    ENGRAM_RETURN_IF_ERROR(registered);
  }
  if (im.registration && !im.registered_during_load)
    e->add_censuses(im.table->census(host::CensusPoint::kAfterRegistration));
  if (!im.registered_during_load) do_write();
  ENGRAM_RETURN_IF_ERROR(written);
  im.assembly_s = im.place_s + since(t_steps);
  if (o.content.kind != TableContent::Kind::kZero) {
    const auto t_census = Clock::now();
    e->add_censuses(im.table->census(host::CensusPoint::kAfterLoad));
    im.load_census_s = since(t_census);
  }
  ENGRAM_RETURN_IF_ERROR(engine::build_stack(im, e->options_));
  return e;
}

Result<std::unique_ptr<Engine>> Engine::over_table(std::shared_ptr<HostTable> table, const EngineOptions& o) {
  if (!table) return Status(Code::kInvalidArgument, "Engine::over_table: no table");
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = o;
  ENGRAM_ASSIGN_OR_RETURN(e->impl_->entry, engine::choose_backend(o, &e->backend_note_));
  Impl& im = *e->impl_;
  im.table = std::move(table);
  ENGRAM_RETURN_IF_ERROR(engine::load_cache_profile(e->options_, im.table->layout(), &im.profile_read_s));
  ENGRAM_RETURN_IF_ERROR(engine::register_table(im, o, im.table->read_only()));
  if (im.registration) e->add_censuses(im.table->census(host::CensusPoint::kAfterRegistration));
  ENGRAM_RETURN_IF_ERROR(engine::build_stack(im, e->options_));
  return e;
}

Result<BackendKind> Engine::resolve_backend(const EngineOptions& o, std::string* note) {
  std::string n;
  ENGRAM_ASSIGN_OR_RETURN(const engine::BackendEntry* e, engine::choose_backend(o, &n));
  if (note) *note = n;
  return e->kind;
}

const EngramLayout& Engine::layout() const { return impl_->table->layout(); }
int Engine::staging_heads() const { return impl_->table->staging_heads(); }
HostTable& Engine::table() { return *impl_->table; }
const HostTable& Engine::table() const { return *impl_->table; }
std::shared_ptr<HostTable> Engine::shared_table() const { return impl_->table; }

BackendKind Engine::backend() const { return impl_->entry ? impl_->entry->kind : BackendKind::kAuto; }
const char* Engine::backend_name() const { return impl_->backend && impl_->entry ? impl_->entry->name : "none"; }
bool Engine::has_backend() const { return impl_->backend != nullptr; }

PrefetchQueue& Engine::queue() {
  impl_->require_backend();
  return *impl_->metered;
}
LayerCompute& Engine::compute() { return impl_->require_backend().compute(); }

Result<LookupResult> Engine::lookup(int layer_index, const int64_t* ids, int64_t tokens, uint16_t* out,
                                    const LookupCall& call) {
  if (!impl_->backend) return Status(Code::kInvalidArgument, "lookup: this engine holds a table for peers, no backend");
  LookupCall c = call;
  c.checked = c.checked || options_.checked;
  // Every piece's failure is counted in the metrics (errors by kind).
  auto one = [&](const int64_t* piece_ids, int64_t n, uint16_t* piece_out) {
    auto r = impl_->backend->lookup(layer_index, piece_ids, n, piece_out, c);
    if (!r.is_ok()) impl_->metrics->count_error(r.status());
    return r;
  };
  const int64_t cap = options_.max_tokens;
  if (cap <= 0 || tokens <= cap) return one(ids, tokens, out);
  const EngramLayout& l = layout();
  if (layer_index < 0 || layer_index >= l.n_layers())
    return Status(Code::kInvalidArgument, "lookup: layer index " + std::to_string(layer_index) + " out of range [0, " +
                                              std::to_string(l.n_layers()) + ")");
  const int64_t id_stride = l.heads();
  const int64_t out_stride = static_cast<int64_t>(staging_heads()) * l.d;
  // Checked mode promises nothing is written when an id is out of range: on the CPU the ids are host memory, so
  // the whole batch is checked before the first piece (a CUDA backend checks each piece on the device).
  if (c.checked && backend() == BackendKind::kCpu) {
    const int64_t rows = l.rows(layer_index);
    for (int64_t i = 0; i < tokens * id_stride; ++i)
      if (ids[i] >= rows)
        return Status(Code::kInvalidArgument, "lookup: id " + std::to_string(ids[i]) + " at position " +
                                                  std::to_string(i) + " is >= the layer's " + std::to_string(rows) + " rows");
  }
  LookupResult total;
  for (int64_t t0 = 0; t0 < tokens; t0 += cap) {
    const int64_t n = std::min(cap, tokens - t0);
    ENGRAM_ASSIGN_OR_RETURN(LookupResult r,
                            one(ids + t0 * id_stride, n, out + t0 * out_stride));
    total.stats.rows += r.stats.rows;
    total.stats.dead_rows += r.stats.dead_rows;
    total.stats.invalid_ids += r.stats.invalid_ids;
    total.launch = r.launch;
  }
  total.launch.rows = total.stats.rows;
  return total;
}

Status Engine::Impl::counted(Status s) const {
  if (!s.is_ok()) metrics->count_error(s);
  return s;
}

Status Engine::prepare_device(int li, const int64_t* ids, int64_t tokens) {
  ENGRAM_ASSIGN_OR_RETURN(engine::DeviceQueue * d, impl_->require_device("prepare_device"));
  return impl_->counted(d->prepare_device(li, ids, tokens));
}
Status Engine::write_ids(int li, const int64_t* ids, int64_t tokens) {
  ENGRAM_ASSIGN_OR_RETURN(engine::DeviceQueue * d, impl_->require_device("write_ids"));
  return d->write_ids(li, ids, tokens);
}
Status Engine::main_wait_event(void* ev) {
  ENGRAM_ASSIGN_OR_RETURN(engine::DeviceQueue * d, impl_->require_device("main_wait_event"));
  return d->main_wait_event(ev);
}
Result<LaunchShape> Engine::last_launch(int li) const {
  ENGRAM_ASSIGN_OR_RETURN(engine::DeviceQueue * d, impl_->require_device("last_launch"));
  return d->last_launch(li);
}
void* Engine::main_stream() const { return impl_->device ? impl_->device->main_stream() : nullptr; }
void* Engine::prefetch_stream() const { return impl_->device ? impl_->device->prefetch_stream() : nullptr; }
int Engine::device() const { return impl_->device ? impl_->device->device() : -1; }

Status Engine::enable_device_hashing(const NgramHasher& hasher, int max_requests, int64_t max_tokens) {
  const EngramLayout& hl = hasher.layout();
  const EngramLayout& tl = layout();
  if (hl.layer_ids != tl.layer_ids || hl.head_rows != tl.head_rows)
    return Status(Code::kInvalidArgument, "device hashing: the hasher's layout " + hl.name +
                                              " has other layers or rows than the table's " + tl.name);
  ENGRAM_ASSIGN_OR_RETURN(engine::DeviceQueue * d, impl_->require_device("enable_device_hashing"));
  return d->enable_device_hashing(ngram_hash_params(hasher, HashIdKind::kGlobalRow), max_requests, max_tokens);
}
Status Engine::hash_and_prepare(const int64_t* tokens, const uint8_t* new_sequence, int n_requests) {
  ENGRAM_ASSIGN_OR_RETURN(engine::DeviceQueue * d, impl_->require_device("hash_and_prepare"));
  Status s = impl_->counted(d->hash_and_prepare(tokens, new_sequence, n_requests));
  if (s.is_ok()) impl_->metered->note_device_hash();
  return s;
}
Status Engine::hash_chunks_and_prepare(const int64_t* tokens, const int32_t* counts, const int32_t* slots,
                                       const uint8_t* new_sequence, int n_chunks) {
  ENGRAM_ASSIGN_OR_RETURN(engine::DeviceQueue * d, impl_->require_device("hash_chunks_and_prepare"));
  Status s = impl_->counted(d->hash_chunks_and_prepare(tokens, counts, slots, new_sequence, n_chunks));
  if (s.is_ok()) impl_->metered->note_device_hash();
  return s;
}
Result<DeviceHashStep> Engine::last_device_hash(bool with_ids) const {
  ENGRAM_ASSIGN_OR_RETURN(engine::DeviceQueue * d, impl_->require_device("last_device_hash"));
  return d->last_device_hash(with_ids);
}

Status Engine::synchronize() { return impl_->backend ? impl_->backend->synchronize() : Status::ok(); }

std::vector<host::PageCensus> Engine::census(host::CensusPoint point, uint64_t max_samples) const {
  return impl_->table->census(point, max_samples);
}
const std::vector<host::PageCensus>& Engine::censuses() const { return impl_->censuses; }
void Engine::add_censuses(std::vector<host::PageCensus> more) {
  for (auto& c : more) impl_->censuses.push_back(std::move(c));
  impl_->metrics->set_censuses(impl_->censuses);
}

MetricsSnapshot Engine::metrics() const { return impl_->metrics->snapshot(); }

nlohmann::json Engine::describe() const {
  nlohmann::json j = impl_->backend ? impl_->backend->describe() : nlohmann::json{{"backend", nullptr}};
  j["backend_requested"] = backend_kind_name(options_.backend);
  j["backend_note"] = backend_note_.empty() ? nlohmann::json(nullptr) : nlohmann::json(backend_note_);
  j["registration_holder"] = impl_->registration ? impl_->registration->describe() : nlohmann::json(nullptr);
  j["tp"] = engine::tp_json(*impl_->table);
  auto secs = [](double s) { return s < 0 ? nlohmann::json(nullptr) : nlohmann::json(s); };
  const Impl& im = *impl_;
  j["assembly"] = {{"place_s", secs(im.place_s)},
                   {"register_s", secs(im.register_s)},
                   {"load_s", secs(im.load_s)},
                   {"total_s", secs(im.assembly_s)},
                   {"load_census_s", secs(im.load_census_s)},
                   {"profile_read_s", secs(im.profile_read_s)},
                   {"backend_s", secs(im.backend_s)},
                   {"register_during_load", im.registered_during_load}};
  im.metrics->fold_describe(j);
  return j;
}

std::vector<std::string> Engine::describe_lines() const { return engine::describe_lines(describe()); }

int Engine::group_rank() const { return impl_->group_rank; }
int Engine::group_world_size() const { return impl_->group_world; }
const std::string& Engine::group_name() const { return impl_->group_name; }
const std::string& Engine::group_job() const { return impl_->group_job; }

Backend& Engine::Impl::require_backend() const {
  if (!backend) {
    std::fprintf(stderr, "engram: Engine::queue()/compute() on an engine without a backend (serve_group)\n");
    std::abort();
  }
  return *backend;
}

Result<engine::DeviceQueue*> Engine::Impl::require_device(const char* what) const {
  require_backend();
  if (!device)
    return Status(Code::kUnsupported, std::string(what) + ": a CUDA queue extension; the " + entry->name +
                                          " backend has none");
  return device;
}

}  // namespace engram

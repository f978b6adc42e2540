// Engine: the one place where a rank's serving stack is assembled. Every consumer — the `engram` commands, the
// replay harnesses, the Python module, the benches that time an engine path — gets its table, backend,
// registration and prefetch queue from here, and from nowhere else.
//
//   EngineOptions (typed; text parsed once at the edge: options.hpp, set_engine_option)
//     -> table      HostTable: created and placed before first touch (local), created and shared (group leader),
//                   or attached to a leader's backings (group peer); censused at named points
//     -> content    synthetic rows, a checkpoint, or nothing (zero pages)
//     -> backend    from the registry: cpu, cuda, or auto (cuda when the library has it and a device is usable,
//                   else cpu, with the reason kept in backend_note())
//     -> register   the backend's registration of the table memory (CUDA: cudaHostRegister in chunks; CPU:
//                   nothing). In a group this is the protocol's "register" step on every rank, so the census
//                   "after registration" is taken after it
//     -> queue      the serial prefetch queue with the lookup path fixed when it is built: the fast path
//                   (planner, dedup, sort, hot-row cache with its online updates, host-gather hybrid) or the plain
//                   gather; plus the synthetic layer compute where a harness asks for it
//
// A shared group runs the shared-table protocol over a GroupChannel (engram/group_channel.hpp): the leader calls
// lead_group(), every peer join_group(); the peers learn the layout from the leader. An engine that already
// has a process group implements GroupChannel (broadcast, all-gather, barrier) and plugs it in.
//
// Thread safety: an Engine is driven by one thread (its queue's contract). Process safety: see host/group.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// The declaration of nlohmann::json only: describe() returns one; a caller that reads it includes <nlohmann/json.hpp>.
#include <nlohmann/json_fwd.hpp>

#include "engram/census.hpp"
#include "engram/export.hpp"
#include "engram/group_channel.hpp"
#include "engram/layout.hpp"
#include "engram/lookup.hpp"
#include "engram/metrics.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/options.hpp"
#include "engram/prefetch_queue.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram {

// Internal types the engine names but a consumer does not use: the harnesses' synthetic layer compute
// (src/sched/layer_compute.hpp), their knobs (src/engine/harness.hpp), the group protocol (src/host/group.hpp).
class LayerCompute;
struct EngineHarness;
namespace host {
class SharedTableGroup;
}  // namespace host

ENGRAM_API_BEGIN

// The GPU hot-row cache of each Engram layer (CUDA fast path with the planner). Filled from `profile` when given
// (an offline `engram profile`), else from the ids of the first `warmup_steps` steps numbered >= 0 that the
// engine sees (those steps run without it); then online updates swap at most update.rows rows per layer every
// update.every steps (hottest uncached ids of a decayed LFU count, for the coldest of a sampled set of cached rows).
struct CacheOptions {
  CacheSize size;                        // per layer; off by default
  CacheFormat format = CacheFormat::kFp8;
  double hbm_fraction = 0.5;             // all layers' caches together take at most this share of the free HBM
  int warmup_steps = 4;                  // warm-up window in counted steps (>= 1); unused with a profile
  std::vector<std::vector<std::pair<int64_t, int64_t>>> profile;  // per layer (id, count), hottest first
  std::string profile_source;            // where `profile` came from (reports)
  // A profile file (`engram profile`) read and checked against the layout when the engine is built, when
  // `profile` is empty.
  std::string profile_path;
  CacheUpdate update;                    // online updates
  // Record each step's probes and hits per layer (describe()'s fast_path[].cache.step_probes / step_hits). A
  // measurement mode: the counters are read at each step's end, which waits for that step's lookups.
  bool step_series = false;
};

// What the table holds once the engine is built.
struct TableContent {
  enum class Kind {
    kZero,        // pages as allocated (zero); the caller writes rows later
    kSynthetic,   // synth_row(seed, layer, row) in every row (engram table create writes the same bytes)
    kCheckpoint,  // a safetensors checkpoint of this project's format (host/checkpoint.hpp), at `path`
    kModel,       // a Hugging Face model directory as released (config.json, index, shards; host/model_io.hpp)
  };
  Kind kind = Kind::kSynthetic;
  uint64_t seed = 1;
  std::string path;
  std::string tensor_names;  // kModel: "WEIGHT,SCALE" with {L} for the layer id; "" = the released names
  int reader_node = -1;      // kModel: pin the shard readers to this NUMA node's CPUs; -1 = not pinned
  bool drop_page_cache = true;  // checkpoint and kModel: drop the files' pages from the page cache behind the readers
  // Fill/load threads; 0 = one per CPU this process may run on (its affinity mask) for the synthetic fill, at most
  // 8 of them for a checkpoint and 16 for a model directory (readers past those add no bandwidth).
  int threads = 0;
  // Load progress (bytes done, bytes total, seconds); called from the loading thread about every 100 ms.
  std::function<void(int64_t, int64_t, double)> on_progress;
  std::string to_string() const;  // "synthetic(seed=1)", "checkpoint FILE", "model DIR", "zero"
  // The checkpoint at `checkpoint` when it is not empty, else synthetic rows of `seed`.
  static TableContent synthetic_or_checkpoint(uint64_t seed, const std::string& checkpoint);
  static TableContent model(const std::string& dir, const std::string& tensor_names = "");
};

// The layout a checkpoint or model directory holds, with in-memory rows of `format` (a model's tables are read from
// its config.json and checked against the tensors' headers; no row is read). kInvalidArgument for synthetic or zero
// content (their layout is the caller's choice); the reader's errors otherwise (exit-2 kinds: the file, tensor and
// shard are named).
Result<EngramLayout> content_layout(const TableContent& content, RowFormat format);

// Writes `content` into every replica of an existing table (the engine's own fill and load step, for a table the
// caller created: Python's SharedTable). The layout must match the content's (kInvalidArgument otherwise); the
// reader's errors as content_layout. On error the table holds partial rows.
Status fill_table(HostTable& table, const TableContent& content);

struct EngineOptions {
  BackendKind backend = BackendKind::kAuto;
  int device = -1;                  // CUDA ordinal; -1: rank % visible devices
  int rank = 0;                     // timeline rank
  TableOptions table;               // backing, placement, shards (leader / local; a peer maps the leader's)
  TableContent content;             // leader / local only
  FastPathMode fast_path = FastPathMode::kPlanner;
  // CUDA planner: correct the calibrated path costs with the measured times of served batches, and bar a path
  // measured slower than plain. false: the planner keeps its start-up costs (an A/B of the learner itself).
  bool planner_learn = true;
  CacheOptions cache;               // off by default
  // CUDA: grid cap of every prefetch-queue lookup (they run in the background beside compute). The fast path runs
  // prefill-sized batches (>= 32,768 rows) on half of it, where fewer blocks in flight measured faster, and an
  // exposed lookup keeps the cap too: every SM made the 8K-token prefill gather slower, not faster
  // (docs/results/2026-12-06-overlap-budget.md).
  GridCap grid_cap = GridCap::background_default();
  int lookup_threads = 0;           // CPU: gather threads (0..4096); 0 = one per CPU this process may run on
  bool checked = false;             // reject ids >= rows before a lookup (host-side pass)
  PrefetchMode prefetch = PrefetchMode::kEarly;  // how a harness submits (the queue serves both)
  int64_t max_tokens = 8192;        // largest batch (tokens) of one prepare()
  bool record_timeline = true;
  // create_local: register the table while its content is written (registration pins the pages placement
  // allocated and reads no row); false: register, then write. Either way both censuses follow both steps.
  bool register_during_load = true;
  // Registration progress (bytes of the table registered with the GPU, bytes in all, seconds): called from the
  // registering thread (with register_during_load, not the loading thread) after each registered chunk and once
  // at the end (done == total). Backends that register nothing never call it.
  std::function<void(int64_t, int64_t, double)> on_register_progress;
  void* main_stream = nullptr;      // CUDA: adopt this cudaStream_t as the consumer's stream; null: create one
  // CPU queue: the time source of its timeline (ns; must not go backwards; called from the consumer's thread
  // and the queue's worker). Empty: steady_clock from the queue's start. An engine that stamps its own steps
  // passes its clock so that both lines share one time base.
  std::function<double()> clock_ns;
  // Shared groups.
  bool read_only = true;            // peers map the table PROT_READ (and register it read-only)
  int64_t step_timeout_ms = 30000;  // every protocol step
  int64_t load_timeout_ms = 600000; // peers wait this long for the leader's load
  // The project's own harnesses (replay, benches, tests) set knobs no serving engine uses here: synthetic layer
  // compute and protocol-step hooks (src/engine/harness.hpp). Null for every other consumer.
  std::shared_ptr<const EngineHarness> harness;
};

// How one direct lookup (Engine::lookup) runs.
struct LookupCall {
  // CUDA: the caller's cudaStream_t; the lookup is enqueued on it and on no other stream the caller cannot see
  // (the fast path's side stream forks from it and joins back before the call returns). null (0) is the legacy
  // default stream, as in every CUDA API: torch's default stream is that stream.
  void* stream = nullptr;
  bool checked = false;       // reject ids >= rows before anything is written (CUDA: synchronises the stream)
  GridCap grid_cap;           // CUDA: every SM by default (a direct lookup is in the foreground)
};

struct LookupResult {
  LookupStats stats;  // rows; dead and invalid counts on the CPU (CUDA counts them on the device: 0 here)
  LaunchShape launch;
};

// Sets one option from text (`key` as in EngineOptions, with '-' or '_', leading "--" allowed: "placement",
// "--cache-size", "fast_path"). kInvalidArgument naming the option and quoting the text for a malformed value
// or an unknown key (listing the known ones). CLI, Python keyword arguments and config files all go through it.
Status set_engine_option(EngineOptions& options, std::string_view key, const std::string& value);
// The keys set_engine_option accepts, with a one-line description each.
std::vector<std::pair<std::string, std::string>> engine_option_keys();

// True when the library was built with the CUDA backend (it may still find no usable device).
bool cuda_backend_built();

// CUDA stream ordering for consumers that hand the engine's device memory to other code (DLPack): `consumer`
// waits on the GPU for what was enqueued on `producer` so far (nothing when they are the same stream), on device
// `device`. Streams are cudaStream_t (null = the legacy default stream). kUnsupported without the CUDA backend.
Status cuda_stream_wait(void* consumer, void* producer, int device);

// One step hashed on the device (Engine::hash_and_prepare, hash_chunks_and_prepare).
struct DeviceHashStep {
  double gpu_ns = 0;                      // GPU time: token copy, look-back resets, hash of every layer, advance
  std::vector<std::vector<int64_t>> ids;  // [layer][tokens * heads] global row ids, when read back
  uint64_t errors = 0;                    // ids the kernel wrote as DEAD for invalid inputs, over all steps
};

class Engine {
 public:
  // A table of this process only: create, place, fill (options.content), register, build the queue.
  static Result<std::unique_ptr<Engine>> create_local(const EngramLayout& layout, const EngineOptions& options);
  // Builds the backend over a table that already exists (Python's SharedTable, a caller's HostTable); the table
  // is kept alive by the engine. Content is the caller's: options.content is not applied.
  static Result<std::unique_ptr<Engine>> over_table(std::shared_ptr<HostTable> table, const EngineOptions& options);
  // The leader of a shared group (channel rank 0): creates and places the table, runs the protocol with the
  // channel's peers (describe, attach, register, census, load, ready, census) and builds its own backend. `job` is
  // opaque text handed to every peer (group_job()). Errors name the protocol step and the rank.
  static Result<std::unique_ptr<Engine>> lead_group(const EngramLayout& layout, const EngineOptions& options,
                                                    host::GroupChannel& channel, const std::string& job = "");
  // A leader that holds the table for peers that come later (serve-table): creates, places and loads it, builds no
  // lookup backend; admit() runs the protocol with each round of peers.
  static Result<std::unique_ptr<Engine>> serve_group(const EngramLayout& layout, const EngineOptions& options,
                                                     const std::string& group, const std::string& job = "");
  // A peer (channel rank >= 1): attaches the leader's table (the layout comes with it), registers it with its
  // backend at the protocol's register step, and builds its queue. `configure`, when given, is called with the
  // leader's job text and the table's layout before this rank attaches: a rank that takes its options from the
  // leader (its failure fails the group's "attach" step with this rank's message).
  using Configure = std::function<Status(const std::string& job, const EngramLayout& layout, EngineOptions& options)>;
  static Result<std::unique_ptr<Engine>> join_group(const EngineOptions& options, host::GroupChannel& channel,
                                                    const Configure& configure = {});
  // The backend `options` would get here and why (the registry's one auto rule: cuda when the library has it and
  // a usable device exists, else cpu, with the reason in `note`). kUnsupported when a backend named by
  // options.backend cannot run here.
  static Result<BackendKind> resolve_backend(const EngineOptions& options, std::string* note = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngramLayout& layout() const;
  // Heads per token of a lookup's output (staging, Engine::lookup's out): the layout's heads, or on a
  // tensor-parallel slice (EngineOptions::table.tp) its local heads ceil(H / tp size). Ids keep the layout's heads.
  int staging_heads() const;
  HostTable& table();
  const HostTable& table() const;
  std::shared_ptr<HostTable> shared_table() const;
  const EngineOptions& options() const { return options_; }

  // The backend that runs the lookups, and why (auto: "cuda not used: <reason>"; "" when asked for by name).
  BackendKind backend() const;
  const char* backend_name() const;
  const std::string& backend_note() const { return backend_note_; }
  bool has_backend() const;  // false for serve_group()

  // The prefetch queue (fast path, planner and cache behind it on CUDA; engram/prefetch_queue.hpp) and the
  // harnesses' synthetic layer compute (no work unless a harness asked for it). An engine without a backend
  // (serve_group) aborts here.
  PrefetchQueue& queue();
  LayerCompute& compute();
  // One lookup outside the queue, through the same lookup path (CUDA: the planner's fast path). CPU: ids/out are
  // host pointers ([tokens][heads] int64, [tokens][staging_heads()][d] bf16 bits), the call returns when done. CUDA: device
  // pointers, enqueued on call.stream (null: the legacy default stream) without synchronising: work the caller
  // enqueues next on that stream sees `out` written, and CUDA events recorded on it around the call time the
  // lookup. A batch of more than EngineOptions::max_tokens tokens is looked up in pieces of at most that many, in
  // order on the same stream (the backend's buffers are sized for max_tokens); the result sums their counts and
  // keeps the last piece's launch shape. kInvalidArgument for a bad layer index, sizes, or (checked) an id >= rows
  // (CPU: checked over the whole batch before any piece is written). CUDA: a direct lookup uses the layer's
  // fast-path buffers and hot-row cache, which the queue uses too; it must not overlap a queued step of the same
  // engine still running on the GPU (an online cache update may replace rows it reads): order the two streams
  // (events, or synchronize()) when both are used.
  Result<LookupResult> lookup(int layer_index, const int64_t* ids, int64_t tokens, uint16_t* out,
                              const LookupCall& call = {});
  // Waits for everything the engine enqueued on its own streams (CUDA: main, prefetch and maintenance streams; CPU:
  // the queue is idle after end_step). A direct lookup runs on the caller's stream: the caller synchronises that.
  Status synchronize();

  // CUDA queue extensions (kUnsupported on the cpu backend). prepare_device: the layer's ids are already in device
  // memory ([tokens][heads], written in main-stream order). write_ids: refills the pinned buffer a captured step's
  // copy reads before a graph replay. main_wait_event: the main stream waits (on the GPU) for a cudaEvent_t of
  // the caller (the ids' producer).
  Status prepare_device(int layer_index, const int64_t* ids_device, int64_t tokens);
  Status write_ids(int layer_index, const int64_t* ids, int64_t tokens);
  Status main_wait_event(void* cuda_event);
  Result<LaunchShape> last_launch(int layer_index) const;
  // CUDA: the consumer's (main) stream and the prefetch stream as cudaStream_t, and the device ordinal; null / -1
  // on the cpu backend.
  void* main_stream() const;
  void* prefetch_stream() const;
  int device() const;

  // CUDA: steps hashed on the GPU, so no id is made or copied on the host. enable_device_hashing uploads the
  // hasher's constants (global row ids) and keeps max_requests look-back rows on the device, with room for
  // max_tokens tokens per step (0: max_requests, decode steps only). hash_and_prepare enqueues on the main stream
  // one decode step: tokens[r] (host, raw id) is request r's new token (look-back row r), new_sequence[r] != 0
  // restarts request r before it. hash_chunks_and_prepare enqueues one step of chunks (chunked prefill and decode
  // mixed): chunk c's counts[c] tokens are next in `tokens`, its look-back row is slots[c] (distinct; null: row c),
  // new_sequence[c] != 0 makes that row DEAD first. Both then hash and prepare (prepare_device) every layer's ids and
  // advance the look-back. Call them between begin_step and the first consume, in place of prepare.
  // last_device_hash: the last step's GPU time (waits for it) and, with_ids, its ids read back (synchronises).
  // kUnsupported on the cpu backend; kInvalidArgument for a hasher of another layout, more requests, chunks or
  // tokens than enabled, a slot out of range or repeated.
  Status enable_device_hashing(const NgramHasher& hasher, int max_requests, int64_t max_tokens = 0);
  Status hash_and_prepare(const int64_t* tokens, const uint8_t* new_sequence, int n_requests);
  Status hash_chunks_and_prepare(const int64_t* tokens, const int32_t* counts, const int32_t* slots,
                                 const uint8_t* new_sequence, int n_chunks);
  Result<DeviceHashStep> last_device_hash(bool with_ids) const;

  // Page census of every backing now, at a named point. The censuses the engine took while it was built
  // (after placement, registration, load; one after load when registration ran during the load) are in
  // censuses(), in order.
  std::vector<PageCensus> census(CensusPoint point, uint64_t max_samples = uint64_t{1} << 20) const;
  const std::vector<PageCensus>& censuses() const;
  void add_censuses(std::vector<PageCensus> more);

  // Backend, device, registration, lookup path per layer (paths taken, last plan and why, costs, cache: state,
  // size, hit rate, link bytes avoided, online updates). Synchronises the streams (call it after a run).
  nlohmann::json describe() const;
  // The same as report lines: "Path ...", "Cache ...", "why ..." (indented two spaces under their layer).
  std::vector<std::string> describe_lines() const;

  // Serving metrics (engram/metrics.hpp, docs/metrics.md): lookups, rows, bytes and the L / E / queue-time
  // histograms per Engram layer (folded from the timeline at each end_step of queue()), table bytes, load, pages per
  // node of the last census, group ranks, errors by kind; on CUDA also paths, cache and plan figures as of the last
  // describe(). A copy; safe to call from any thread while the engine lives (a scraper's), never waits for a device.
  MetricsSnapshot metrics() const;

  // Shared groups: rank (-1 outside a group), world size, the leader's job text, this rank's protocol steps.
  int group_rank() const;
  int group_world_size() const;
  const std::string& group_name() const;
  const std::string& group_job() const;
  const std::vector<host::StepRecord>& group_steps() const;
  // serve_group(): runs the protocol with a new round of peers on `channel`.
  Status admit(host::GroupChannel& channel);

  struct Impl;  // src/engine/engine_impl.hpp

 private:
  Engine();
  EngineOptions options_;
  std::string backend_note_;
  std::unique_ptr<Impl> impl_;
};

ENGRAM_API_END
}  // namespace engram

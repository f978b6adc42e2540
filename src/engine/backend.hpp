// The backend registry behind Engine (as ggml registers its backends): each backend is an entry with a name, a
// probe that says whether it can run here (kUnsupported with the reason otherwise), a registration step (the
// shared-table protocol's "register": make a rank's table memory readable by the backend's device) and a
// constructor of the rank's lookup stack (queue with its lookup path, synthetic compute, direct lookups).
// `auto` takes the first usable entry in the order cuda, cpu and keeps the reason why an earlier one was not.
// Internal to src/engine: consumers see Engine only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engram/hash_batch.hpp"
#include "engram/engine.hpp"
#include "sched/layer_compute.hpp"
#include "engram/prefetch_queue.hpp"

namespace engram::engine {

// A backend's hold on registered memory (CUDA: the cudaHostRegister chunks); released when the last backend and
// the engine drop it.
class Registration {
 public:
  virtual ~Registration() = default;
  virtual nlohmann::json describe() const = 0;  // bytes, chunks, seconds
};

// What only a device backend adds to the rank's queue: the Engine's CUDA queue extensions (ids already on the
// device, graph-replay id refills, the caller's events, the streams and the launch shape) and the step hashing on
// the device (engine.hpp says what each does). A backend that has them gives this interface out from
// Backend::device_queue(); the engine asks once, when it builds the stack, and itself answers kUnsupported (or
// null / -1) for an engine whose backend has none, so no backend implements a capability it does not have.
class DeviceQueue {
 public:
  virtual ~DeviceQueue() = default;
  virtual Status prepare_device(int layer_index, const int64_t* ids_device, int64_t tokens) = 0;
  virtual Status write_ids(int layer_index, const int64_t* ids, int64_t tokens) = 0;
  virtual Status main_wait_event(void* cuda_event) = 0;
  virtual Result<LaunchShape> last_launch(int layer_index) const = 0;
  virtual void* main_stream() const = 0;
  virtual void* prefetch_stream() const = 0;
  virtual int device() const = 0;
  virtual Status enable_device_hashing(const NgramHashParams& params, int max_requests, int64_t max_tokens) = 0;
  virtual Status hash_and_prepare(const int64_t* tokens, const uint8_t* new_sequence, int n_requests) = 0;
  virtual Status hash_chunks_and_prepare(const int64_t* tokens, const int32_t* counts, const int32_t* slots,
                                         const uint8_t* new_sequence, int n_chunks) = 0;
  virtual Result<DeviceHashStep> last_device_hash(bool with_ids) const = 0;
};

// One rank's lookup stack over registered table memory: what every backend implements.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual PrefetchQueue& queue() = 0;
  virtual LayerCompute& compute() = 0;
  virtual Result<LookupResult> lookup(int layer_index, const int64_t* ids, int64_t tokens, uint16_t* out,
                                      const LookupCall& call) = 0;
  virtual Status synchronize() = 0;
  // {"backend", ...}: the backend's own figures (cuda: device, registration, grid cap, fast_path: [per layer],
  // fast_path_note, compute; cpu: lookup_threads, compute, cache_note).
  virtual nlohmann::json describe() const = 0;
  // The device extension, or null (the cpu backend). Lives as long as the backend.
  virtual DeviceQueue* device_queue() { return nullptr; }
};

struct BackendEntry {
  BackendKind kind;
  const char* name;
  // OK when the backend can run with these options on this machine; kUnsupported naming the reason otherwise.
  Status (*probe)(const EngineOptions& options);
  // Registers the views' memory; nullptr when the backend needs no registration.
  Result<std::shared_ptr<Registration>> (*register_memory)(const EngramLayout& layout,
                                                           const std::vector<TableView>& views,
                                                           const EngineOptions& options, bool read_only);
  Result<std::unique_ptr<Backend>> (*create)(const EngramLayout& layout, const std::vector<TableView>& views,
                                             std::shared_ptr<Registration> registration, const EngineOptions& options);
};

// The registry: cuda (when built), then cpu.
const std::vector<BackendEntry>& backend_registry();
// options.backend by name, or the auto rule. `note` receives why auto did not take an earlier entry
// ("cuda not used: <reason>"). kUnsupported when a backend asked for by name cannot run here.
Result<const BackendEntry*> choose_backend(const EngineOptions& options, std::string* note);

// Entries, defined next to their backends.
const BackendEntry& cpu_backend_entry();
const BackendEntry* cuda_backend_entry();  // nullptr when the library was built without CUDA

// Report lines of a backend's describe() (Engine::describe_lines).
std::vector<std::string> describe_lines(const nlohmann::json& details);
// The table's TP slice for describe(): null for a whole table, else {size, rank, heads, local_heads, head_begin,
// held_heads, layers: [{layer_id, row_begin, row_end}], bytes}.
nlohmann::json tp_json(const HostTable& table);

}  // namespace engram::engine

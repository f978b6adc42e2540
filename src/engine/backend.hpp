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

// One rank's lookup stack over registered table memory.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual PrefetchQueue& queue() = 0;
  virtual LayerCompute& compute() = 0;
  virtual Result<LookupResult> lookup(int layer_index, const int64_t* ids, int64_t tokens, uint16_t* out,
                                      const LookupCall& call) = 0;
  virtual Status synchronize() = 0;
  // CUDA queue extensions (engine.hpp); the CPU backend answers kUnsupported / null / -1.
  virtual Status prepare_device(int, const int64_t*, int64_t) { return unsupported(); }
  virtual Status write_ids(int, const int64_t*, int64_t) { return unsupported(); }
  virtual Status main_wait_event(void*) { return unsupported(); }
  virtual Result<LaunchShape> last_launch(int) const { return unsupported(); }
  virtual void* main_stream() const { return nullptr; }
  virtual void* prefetch_stream() const { return nullptr; }
  virtual int device() const { return -1; }
  // Step hashing on the device (Engine::enable_device_hashing); the CPU backend answers kUnsupported.
  virtual Status enable_device_hashing(const NgramHashParams&, int, int64_t) { return unsupported(); }
  virtual Status hash_and_prepare(const int64_t*, const uint8_t*, int) { return unsupported(); }
  virtual Status hash_chunks_and_prepare(const int64_t*, const int32_t*, const int32_t*, const uint8_t*, int) {
    return unsupported();
  }
  virtual Result<DeviceHashStep> last_device_hash(bool) const { return unsupported(); }
  // {"backend", device, registration, grid_fraction, fast_path: [per layer], fast_path_note, compute, ...}
  virtual nlohmann::json describe() const = 0;

 protected:
  static Status unsupported() { return Status(Code::kUnsupported, "a CUDA queue extension on the cpu backend"); }
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

// Engine::Impl: what an Engine holds, in destruction order from last to first member (the table outlives the
// group, which outlives the registration, which outlives the backend). Internal to src/engine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/engine_metrics.hpp"
#include "engram/engine.hpp"
#include "host/census.hpp"
#include "host/group.hpp"
#include "sys/process.hpp"

namespace engram {

struct Engine::Impl {
  // A single process's named (shm) table: the guardian that unlinks its files if the process dies holding them
  // (engine/guardian.hpp). Declared first: it outlives the table, which unlinks them itself on a normal end.
  std::shared_ptr<sys::FileGuardian> guardian;
  std::shared_ptr<HostTable> table;
  std::unique_ptr<host::SharedTableGroup> group;  // leader or peer of a shared group
  int group_rank = -1;
  int group_world = 0;
  std::string group_name;
  std::string group_job;
  const engine::BackendEntry* entry = nullptr;
  std::shared_ptr<engine::Registration> registration;
  std::unique_ptr<engine::Backend> backend;
  engine::DeviceQueue* device = nullptr;  // backend->device_queue(), asked once when the stack is built; null: none
  std::unique_ptr<engine::MeteredQueue> metered;  // the backend's queue as Engine::queue() gives it out
  std::unique_ptr<engine::EngineMetrics> metrics = std::make_unique<engine::EngineMetrics>();
  std::vector<host::PageCensus> censuses;
  // Seconds of create_local's steps (-1: the step did not run here); register and load overlap when
  // EngineOptions::register_during_load, so `assembly_s` (place to the end of both) is the figure to compare. The
  // census after load follows it (load_census_s).
  double place_s = -1, register_s = -1, load_s = -1, assembly_s = -1, load_census_s = -1;
  // Seconds to read and check the cache profile file, and to build the backend (a CUDA backend's calibration and
  // cache fill inside it: its describe()'s "construction").
  double profile_read_s = -1, backend_s = -1;
  bool registered_during_load = false;

  engine::Backend& require_backend() const;
  // The backend's device extension; kUnsupported naming `what` when the backend has none. Aborts without a backend
  // (serve_group), as require_backend.
  Result<engine::DeviceQueue*> require_device(const char* what) const;
  Status counted(Status s) const;  // counts a non-ok status in the metrics' errors, returns it
};

namespace engine {
std::vector<TableView> table_views(const HostTable& table);
// Writes the content into every replica of the table.
Status write_content(HostTable& table, const TableContent& content);
Status register_table(Engine::Impl& impl, const EngineOptions& options, bool read_only);
Status build_stack(Engine::Impl& impl, const EngineOptions& options);
// Reads options.cache.profile_path into options.cache.profile (checked against `layout`) when the profile is empty;
// *read_s gets the seconds that took when a file was read.
Status load_cache_profile(EngineOptions& options, const EngramLayout& layout, double* read_s = nullptr);
}  // namespace engine

}  // namespace engram

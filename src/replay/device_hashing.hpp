// Decode replay with the ids hashed on the GPU: the engine takes each step's raw tokens (TextIdSource's) and hashes
// them on the device in the step (Engine::hash_and_prepare), in place of the host ids' prepare; after each step,
// outside its clock, the device ids are read back and compared with the CPU hasher's ids of the same step, id by
// id, so a run that reports GPU hashing has verified every id it looked up. The GPU time of each measured step's
// hash is kept for the report next to the host source's time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engram/engine.hpp"
#include "replay/decode_replay.hpp"
#include "replay/id_source.hpp"

namespace engram {

enum class HashPlace { kAuto, kCpu, kGpu };
Result<HashPlace> parse_hash_place(const std::string& text);  // "auto" | "cpu" | "gpu"
const char* hash_place_name(HashPlace p);

struct DeviceHashingReport {
  HashPlace used = HashPlace::kCpu;
  std::string note;               // why auto took the CPU, "" otherwise
  std::vector<double> gpu_ns;     // measured steps' GPU hash time
  int64_t verified_ids = 0;       // device ids compared with the CPU hasher's (every step, warm-up included)
  uint64_t kernel_errors = 0;     // ids the kernel wrote as DEAD for invalid inputs
};

// Decides where `engine`'s replay hashes and wires it into `options`: gpu needs the cuda backend, a real-text
// source (TextIdSource) and early prefetch; auto takes gpu when all three hold (the hot-row cache counts the device
// ids: CudaBackend::prepare_device), else cpu with the reason in
// report->note. kInvalidArgument when gpu was asked for and cannot apply, naming why. The hooks write into
// `report` (kept alive by the caller through the replay); a device id that differs from the CPU's fails the
// step with kInternal naming the step, layer, position and both ids.
Status wire_device_hashing(HashPlace requested, Engine& engine, IdSource& source, const DecodeReplayOptions& base,
                           DecodeReplayOptions& options, const std::shared_ptr<DeviceHashingReport>& report);

// Why `engine` cannot hash a replay's ids on the GPU ("" when it can): not the cuda backend, ids not hashed from
// tokens (source names them), or on-demand prefetch. The decode and the serving replay ask it alike.
std::string device_hashing_obstacle(const Engine& engine, bool hashed_from_tokens, const std::string& source,
                                    PrefetchMode mode);
// Compares the step's device ids with the host's, id by id, and counts them into `report` (and the GPU time, for a
// measured step). kInternal naming the step, layer, position and both ids at the first difference.
Status check_device_ids(int64_t step, const DeviceHashStep& d, const std::vector<std::vector<int64_t>>& host,
                        bool measured, DeviceHashingReport& report);
// The report's `hash` block (docs/json.md): place, requested, note, host_source_ns, gpu_step_ns, verified_ids,
// kernel_errors (the GPU figures null when the CPU hashed).
nlohmann::json hash_report_json(const DeviceHashingReport& r, const std::string& requested, const Distribution& host);

}  // namespace engram

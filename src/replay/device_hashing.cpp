// Decode replay hashed on the GPU (device_hashing.hpp).
#include "replay/device_hashing.hpp"

#include <nlohmann/json.hpp>

#include "replay/text_id_source.hpp"

namespace engram {

Result<HashPlace> parse_hash_place(const std::string& text) {
  if (text == "auto") return HashPlace::kAuto;
  if (text == "cpu") return HashPlace::kCpu;
  if (text == "gpu") return HashPlace::kGpu;
  return Status(Code::kInvalidArgument, "hash place '" + text + "': expected auto, cpu or gpu");
}

const char* hash_place_name(HashPlace p) {
  switch (p) {
    case HashPlace::kAuto: return "auto";
    case HashPlace::kCpu: return "cpu";
    case HashPlace::kGpu: return "gpu";
  }
  return "?";
}

std::string device_hashing_obstacle(const Engine& engine, bool hashed_from_tokens, const std::string& source,
                                    PrefetchMode mode) {
  if (engine.backend() != BackendKind::kCuda) return "the " + std::string(engine.backend_name()) + " backend hashes on the host";
  if (!hashed_from_tokens) return "ids from " + source + " are not hashed from tokens";
  if (mode != PrefetchMode::kEarly)
    return "on-demand prefetch prepares each layer apart; the device hashes every layer of a step at once";
  return "";
}

Status check_device_ids(int64_t step, const DeviceHashStep& d, const std::vector<std::vector<int64_t>>& host,
                        bool measured, DeviceHashingReport& report) {
  if (measured) report.gpu_ns.push_back(d.gpu_ns);
  report.kernel_errors = d.errors;
  if (d.ids.size() != host.size())
    return Status(Code::kInternal, "GPU hashing: " + std::to_string(d.ids.size()) + " layers of device ids, " +
                                       std::to_string(host.size()) + " on the host");
  for (size_t l = 0; l < host.size(); ++l) {
    if (d.ids[l].size() != host[l].size())
      return Status(Code::kInternal, "GPU hashing: step " + std::to_string(step) + " layer index " + std::to_string(l) +
                                         " has " + std::to_string(d.ids[l].size()) + " device ids, " +
                                         std::to_string(host[l].size()) + " on the host");
    for (size_t i = 0; i < host[l].size(); ++i)
      if (d.ids[l][i] != host[l][i])
        return Status(Code::kInternal, "GPU hashing: step " + std::to_string(step) + " layer index " +
                                           std::to_string(l) + " id " + std::to_string(i) + ": device " +
                                           std::to_string(d.ids[l][i]) + ", CPU hasher " + std::to_string(host[l][i]));
    report.verified_ids += static_cast<int64_t>(host[l].size());
  }
  return Status::ok();
}

Status wire_device_hashing(HashPlace requested, Engine& engine, IdSource& source, const DecodeReplayOptions& base,
                           DecodeReplayOptions& options, const std::shared_ptr<DeviceHashingReport>& report) {
  options = base;
  report->used = HashPlace::kCpu;
  if (requested == HashPlace::kCpu) return Status::ok();
  auto* text = dynamic_cast<TextIdSource*>(&source);
  const std::string why = device_hashing_obstacle(engine, text != nullptr, source.describe(), base.mode);
  if (!why.empty()) {
    if (requested == HashPlace::kGpu) return Status(Code::kInvalidArgument, "GPU hashing: " + why);
    report->note = "hashing on the CPU: " + why;
    return Status::ok();
  }
  ENGRAM_RETURN_IF_ERROR(engine.enable_device_hashing(text->hasher(), base.batch));
  report->used = HashPlace::kGpu;
  Engine* e = &engine;
  options.prepare_step = [e, text](int64_t, const std::vector<std::vector<int64_t>>&) {
    const TextIdSource::StepTokens& st = text->last_step_tokens();
    return e->hash_and_prepare(st.tokens.data(), st.new_sequence.data(), static_cast<int>(st.tokens.size()));
  };
  std::weak_ptr<DeviceHashingReport> weak = report;
  options.after_step = [e, weak](int64_t step, bool measured, const std::vector<std::vector<int64_t>>& ids) -> Status {
    auto rep = weak.lock();
    if (!rep) return Status(Code::kInternal, "GPU hashing: the report is gone");
    ENGRAM_ASSIGN_OR_RETURN(DeviceHashStep d, e->last_device_hash(true));
    return check_device_ids(step, d, ids, measured, *rep);
  };
  return Status::ok();
}

nlohmann::json hash_report_json(const DeviceHashingReport& r, const std::string& requested, const Distribution& host) {
  const bool gpu = r.used == HashPlace::kGpu;
  return {{"place", hash_place_name(r.used)},
          {"requested", requested},
          {"note", r.note.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.note)},
          {"host_source_ns", host.to_json()},
          {"gpu_step_ns", gpu ? Distribution::of(r.gpu_ns).to_json() : nlohmann::json(nullptr)},
          {"verified_ids", gpu ? nlohmann::json(r.verified_ids) : nlohmann::json(nullptr)},
          {"kernel_errors", gpu ? nlohmann::json(r.kernel_errors) : nlohmann::json(nullptr)}};
}

}  // namespace engram

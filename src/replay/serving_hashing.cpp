// Serving replay hashed on the GPU (serving_hashing.hpp).
#include "replay/serving_hashing.hpp"

#include <algorithm>
#include <string>

namespace engram {

ServingHashSlots::ServingHashSlots(int capacity) : capacity_(std::max(0, capacity)) {
  for (int s = capacity_ - 1; s >= 0; --s) free_.push_back(s);
}

Status ServingHashSlots::assign(const ScheduledStep& step, std::vector<int32_t>& slots,
                                std::vector<uint8_t>& new_sequence) {
  slots.clear();
  new_sequence.clear();
  for (const auto& c : step.chunks) {
    auto it = slot_of_.find(c.request);
    if (it == slot_of_.end()) {
      if (c.pos != 0)
        return Status(Code::kInternal, "serving hash slots: request " + std::to_string(c.request) + " continues at " +
                                           std::to_string(c.pos) + " without a look-back slot");
      if (free_.empty())
        return Status(Code::kInternal, "serving hash slots: all " + std::to_string(capacity_) +
                                           " look-back slots are held (request " + std::to_string(c.request) + ")");
      it = slot_of_.emplace(c.request, free_.back()).first;
      free_.pop_back();
      peak_ = std::max(peak_, live());
    }
    slots.push_back(it->second);
    new_sequence.push_back(c.pos == 0 ? 1 : 0);
  }
  return Status::ok();
}

void ServingHashSlots::release_finished(const ScheduledStep& step, const std::vector<ServingRequest>& requests) {
  for (const auto& c : step.chunks) {
    if (c.request < 0 || c.request >= static_cast<int64_t>(requests.size())) continue;
    const ServingRequest& r = requests[static_cast<size_t>(c.request)];
    const int64_t fed = r.prompt_tokens + std::max<int64_t>(r.output_tokens, 1) - 1;  // positions [0, fed)
    if (c.pos + c.tokens < fed) continue;
    auto it = slot_of_.find(c.request);
    if (it == slot_of_.end()) continue;
    free_.push_back(it->second);
    slot_of_.erase(it);
  }
  std::sort(free_.begin(), free_.end(), std::greater<int32_t>());  // hand out the lowest slot next
}

int serving_slots_needed(const ServingSchedule& schedule) {
  ServingHashSlots slots(static_cast<int>(std::max<size_t>(schedule.requests.size(), 1)));
  std::vector<int32_t> s;
  std::vector<uint8_t> n;
  for (const auto& st : schedule.steps) {
    if (!slots.assign(st, s, n).is_ok()) break;  // the replay itself reports such a schedule
    slots.release_finished(st, schedule.requests);
  }
  return std::max(1, slots.peak());
}

int64_t serving_max_step_tokens(const ServingSchedule& schedule) {
  int64_t m = 0;
  for (const auto& st : schedule.steps) m = std::max(m, st.tokens());
  return m;
}

namespace {

// What the two hooks share: the slots and the step's staging vectors.
struct ServingDeviceHashing {
  Engine* engine = nullptr;
  ServingIdSource* ids = nullptr;
  const std::vector<ServingRequest>* requests = nullptr;
  ServingHashSlots slots{0};
  std::vector<int64_t> tokens, chunk_tokens;
  std::vector<int32_t> counts, slot_of_chunk;
  std::vector<uint8_t> new_sequence;
};

}  // namespace

Status wire_serving_device_hashing(HashPlace requested, Engine& engine, ServingIdSource& ids,
                                   const std::vector<ServingRequest>& requests, int max_requests, int64_t max_tokens,
                                   const ServingOptions& base, ServingOptions& options,
                                   const std::shared_ptr<DeviceHashingReport>& report) {
  options = base;
  report->used = HashPlace::kCpu;
  if (requested == HashPlace::kCpu) return Status::ok();
  const std::string why = device_hashing_obstacle(engine, ids.hasher() != nullptr, ids.describe(), base.mode);
  if (!why.empty()) {
    if (requested == HashPlace::kGpu) return Status(Code::kInvalidArgument, "GPU hashing: " + why);
    report->note = "hashing on the CPU: " + why;
    return Status::ok();
  }
  if (max_requests < 1 || max_tokens < 1)
    return Status(Code::kInvalidArgument, "GPU hashing: room for " + std::to_string(max_requests) + " requests and " +
                                              std::to_string(max_tokens) + " tokens per step");
  ENGRAM_RETURN_IF_ERROR(engine.enable_device_hashing(*ids.hasher(), max_requests, max_tokens));
  report->used = HashPlace::kGpu;
  auto h = std::make_shared<ServingDeviceHashing>();
  h->engine = &engine;
  h->ids = &ids;
  h->requests = &requests;
  h->slots = ServingHashSlots(max_requests);
  options.host_ids_off_clock = true;
  options.prepare_step = [h](const ScheduledStep& st, int64_t, const std::vector<std::vector<int64_t>>&) -> Status {
    ENGRAM_RETURN_IF_ERROR(h->slots.assign(st, h->slot_of_chunk, h->new_sequence));
    h->tokens.clear();
    h->counts.clear();
    for (const auto& c : st.chunks) {
      if (c.request < 0 || c.request >= static_cast<int64_t>(h->requests->size()))
        return Status(Code::kInvalidArgument, "GPU hashing: chunk of unknown request " + std::to_string(c.request));
      ENGRAM_RETURN_IF_ERROR(h->ids->raw_tokens((*h->requests)[static_cast<size_t>(c.request)], c.pos, c.tokens, h->chunk_tokens));
      h->tokens.insert(h->tokens.end(), h->chunk_tokens.begin(), h->chunk_tokens.end());
      h->counts.push_back(static_cast<int32_t>(c.tokens));
    }
    return h->engine->hash_chunks_and_prepare(h->tokens.data(), h->counts.data(), h->slot_of_chunk.data(),
                                              h->new_sequence.data(), static_cast<int>(st.chunks.size()));
  };
  std::weak_ptr<DeviceHashingReport> weak = report;
  options.after_step = [h, weak](const ScheduledStep& st, int64_t index, bool measured,
                                 const std::vector<std::vector<int64_t>>& host) -> Status {
    auto rep = weak.lock();
    if (!rep) return Status(Code::kInternal, "GPU hashing: the report is gone");
    ENGRAM_ASSIGN_OR_RETURN(DeviceHashStep d, h->engine->last_device_hash(true));
    ENGRAM_RETURN_IF_ERROR(check_device_ids(index, d, host, measured, *rep));
    h->slots.release_finished(st, *h->requests);
    return Status::ok();
  };
  return Status::ok();
}

}  // namespace engram

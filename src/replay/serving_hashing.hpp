// Serving replay with the ids hashed on the GPU: each step's chunks (chunked prefill and decode mixed) go to the
// device as raw tokens, every Engram layer's ids are hashed there from each request's look-back row
// (Engine::hash_chunks_and_prepare) in place of the host ids' prepare. A request holds a look-back slot from its
// first chunk to its last fed token; slots are reused by later requests. After each step, outside the replay's
// clock, the device ids are read back and compared with the id source's (the CPU hasher's), id by id, so a replay
// that reports GPU hashing has verified every id it looked up; the host hashing for that check is off the clock
// too, because the lookups did not wait for it.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engram/engine.hpp"
#include "replay/device_hashing.hpp"
#include "replay/serving.hpp"

namespace engram {

// Look-back slots of a serving replay's requests, [0, capacity).
class ServingHashSlots {
 public:
  explicit ServingHashSlots(int capacity);
  // slots[c] / new_sequence[c] for each chunk of `step`: a chunk at position 0 starts its request (new_sequence 1)
  // with a free slot, or the one it holds (a warm-up runs a request's start again); other chunks use their
  // request's slot. kInternal when no slot is free or a chunk continues a request that holds none.
  Status assign(const ScheduledStep& step, std::vector<int32_t>& slots, std::vector<uint8_t>& new_sequence);
  // After `step`: each request whose last fed token was in it gives its slot back. A request feeds positions up to
  // prompt + output - 2 (its last output token is not fed back), prompt - 1 when it has one output token.
  void release_finished(const ScheduledStep& step, const std::vector<ServingRequest>& requests);
  int capacity() const { return capacity_; }
  int live() const { return static_cast<int>(slot_of_.size()); }
  int peak() const { return peak_; }

 private:
  int capacity_;
  int peak_ = 0;
  std::unordered_map<int64_t, int32_t> slot_of_;  // request id -> slot
  std::vector<int32_t> free_;                     // free slots, the lowest last
};

// The most slots a replay of `schedule` holds at once (what its device hasher needs), and its largest step in tokens.
int serving_slots_needed(const ServingSchedule& schedule);
int64_t serving_max_step_tokens(const ServingSchedule& schedule);

// Decides where the serving replay hashes and wires it into `options` (a copy of `base`): gpu needs the cuda
// backend, ids hashed from tokens (real text) and early prefetch; auto takes gpu when all hold, else cpu with the
// reason in report->note. kInvalidArgument when gpu was asked for and cannot apply, naming why. The device keeps
// max_requests look-back slots and room for max_tokens tokens per step. `requests` (the replay's, kept alive by the
// caller) give the chunks' text offsets and lengths. A device id that differs from the CPU's fails the step with
// kInternal naming the step, layer, position and both ids.
Status wire_serving_device_hashing(HashPlace requested, Engine& engine, ServingIdSource& ids,
                                   const std::vector<ServingRequest>& requests, int max_requests, int64_t max_tokens,
                                   const ServingOptions& base, ServingOptions& options,
                                   const std::shared_ptr<DeviceHashingReport>& report);

}  // namespace engram

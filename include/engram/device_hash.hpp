// DeviceStepHash: the Engram N-gram hash of one engine step on a CUDA device, for a consumer that keeps each
// request's look-back rows itself (the torch op engram::hash, an engine's own scheduler). Engine's device hashing
// (Engine::enable_device_hashing) keeps the look-back inside the engine instead.
#pragma once

#include <cstdint>
#include <memory>

#include "engram/export.hpp"
#include "engram/status.hpp"

namespace engram {
ENGRAM_API_BEGIN

class NgramHasher;  // engram/ngram_hash.hpp

// The Engram N-gram hash of one step on a CUDA device, for a consumer that keeps each request's look-back itself
// (the torch op engram::hash, an engine's own scheduler): the hasher's constants are uploaded once, and each launch
// only enqueues kernels on the caller's stream (no allocation, no host synchronisation: capturable in a CUDA graph).
// Ids are global row ids, bit for bit those of the CPU hasher (NgramHasher::hash_chunk from each look-back row).
class DeviceStepHash {
 public:
  // kUnsupported without the CUDA backend or a usable device `device`; kInvalidArgument for an inconsistent
  // hasher; kOutOfMemory; kCuda.
  static Result<std::unique_ptr<DeviceStepHash>> create(const NgramHasher& hasher, int device);
  ~DeviceStepHash();
  DeviceStepHash(const DeviceStepHash&) = delete;
  DeviceStepHash& operator=(const DeviceStepHash&) = delete;

  int n_layers() const;
  int heads() const;   // ids per token and layer
  int window() const;  // raw ids per look-back row (N - 1)
  int device() const;
  // All pointers are device memory, read and written in `stream` order (null: the legacy default stream).
  // tokens[n_tokens] raw ids of the step's new tokens, requests back to back; query_start_loc[n_requests + 1]
  // (int32, [0] = 0, non-decreasing, last <= n_tokens); lookback[lookback_rows][window()] raw ids, oldest first;
  // slots[n_requests] (int32, distinct; null: row r) the look-back row of request r; dead_mask[n_tokens]
  // (optional: non-zero marks a DEAD token, which blocks the n-grams through it). out[n_layers()][n_tokens][heads()]
  // int64: layer l's id of token t, head h. Invalid contents (a token >= the vocabulary, a slot out of range) give
  // DEAD ids (-1) on the device. kInvalidArgument for bad shapes or null pointers; kCuda when a launch fails.
  Status launch(const int64_t* tokens, int64_t n_tokens, const int32_t* query_start_loc, int n_requests,
                const int64_t* lookback, int64_t lookback_rows, const int32_t* slots, const uint8_t* dead_mask,
                int64_t* out, void* stream) const;

  struct Impl;

 private:
  DeviceStepHash();
  std::unique_ptr<Impl> impl_;
};

ENGRAM_API_END
}  // namespace engram

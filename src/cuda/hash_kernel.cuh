// The Engram N-gram hash on the GPU: one engine step's ids from raw token ids already on the device, bit for bit
// the ids of the CPU reference (core/hash_batch.hpp hash_batch_reference, i.e. NgramHasher), DEAD tokens and
// look-back rows included; and the look-back upkeep an engine needs to keep every request's state on the device.
//
// A DeviceHasher uploads the hasher's constants once (compression table, multipliers, head primes with their
// Barrett constants, head offsets: core/fast_mod.hpp does the modulo exactly without a 64-bit division). The work
// of each thread is core/hash_step.hpp, which the unit tests also run on the CPU. Per step:
//   launch_hash            ids of the step's new tokens for every Engram layer;
//   launch_update_lookback after verification: each request's look-back row advances past its accepted tokens
//                          (rollback of a rejected draft = accepting fewer);
//   launch_reset_lookback  new requests: rows of DEAD slots (a prefix-cache hit instead copies a row made by
//                          lookback_of_prefix).
// Every launch only enqueues kernels on the given stream: no allocation, no host synchronisation, no read of
// device memory by the host, so a step can be captured into a CUDA graph and replayed with new contents of the
// same buffers. Shapes the host knows (counts, strides, null pointers) are checked and fail as kInvalidArgument
// before anything is enqueued; contents the host cannot see are handled on the device: an id whose n-gram reaches
// a token id >= the vocabulary, a look-back slot outside [0, lookback_rows) or a token outside its request's CSR
// range is written as kDeadId (-1: the lookup gives a zero row) and counted in `errors` (see launch_hash).
//
// Thread safety: a DeviceHasher is immutable after create() and may be used from several threads and streams.
// Launches that write the same look-back rows must be ordered by the caller (one stream per engine). No CUDA types
// in this header; streams are cudaStream_t passed as void* (nullptr = the legacy default stream).
#pragma once

#include <cstdint>
#include <memory>

#include "engram/hash_batch.hpp"
#include "core/hash_step.hpp"
#include "engram/status.hpp"

namespace engram::cuda {

// Element type of the ids written. kInt32 requires every layer's ids to fit: rows(layer) <= 2^31 (checked by
// create); kDeadId stays -1.
enum class HashIdType { kInt64, kInt32 };
const char* hash_id_type_name(HashIdType t);  // "int64" / "int32"

class DeviceHasher {
 public:
  // Uploads `params` (core/hash_batch.hpp ngram_hash_params(hasher, kind)) to device 0's current context.
  // kInvalidArgument for inconsistent params or kInt32 when a layer has more than 2^31 rows; kUnsupported without
  // a usable device; kOutOfMemory; kCuda.
  static Result<std::unique_ptr<DeviceHasher>> create(const NgramHashParams& params,
                                                      HashIdType id_type = HashIdType::kInt64);
  ~DeviceHasher();
  DeviceHasher(const DeviceHasher&) = delete;
  DeviceHasher& operator=(const DeviceHasher&) = delete;

  int window() const { return max_ngram_ - 1; }  // ids per look-back row (N-1)
  int n_layers() const { return n_layers_; }
  int heads() const { return heads_; }           // ids per token and layer
  HashIdType id_type() const { return id_type_; }
  int64_t device_bytes() const { return bytes_; }

  // Enqueues the step's hashing. `batch` points to device memory (HashBatch; lookback rows of window() ids).
  // out (int64_t or int32_t per id_type(), device): layer l's id of token t, head h at
  // out[l * out_layer_stride + t * heads() + h] for t < query_start_loc[n_requests]; nothing else is written.
  // out_layer_stride 0 means max_tokens * heads(). errors (device, optional): += 1 per id written as kDeadId
  // because its inputs were invalid (above), and += (query_start_loc[n_requests] - max_tokens) * n_layers *
  // heads when the offsets claim more tokens than max_tokens (those ids are not written).
  // kInvalidArgument for a bad shape (check_hash_batch_shape), a null out with max_tokens > 0, or a stride below
  // max_tokens * heads(); kCuda when the launch fails.
  Status launch_hash(const HashBatch& batch, void* out, int64_t out_layer_stride, unsigned long long* errors,
                     void* stream) const;

  // Enqueues the look-back update after the step (update_lookback_reference on the device): for each request r,
  // row slot(r) of lookback_out (device, [lookback_rows][window()]) becomes the last window() ids of
  // (row slot(r) of batch.lookback ++ the first accepted[r] new tokens, DEAD ones as kDeadToken). accepted
  // (device [n_requests], optional: null accepts all). lookback_out may be batch.lookback (in place). Slots must
  // be distinct (as for launch_hash). A request whose slot is out of range or whose accepted[r] is outside
  // [0, n_r] keeps its row unchanged and adds 1 to errors (device, optional). kInvalidArgument for a bad shape.
  Status launch_update_lookback(const HashBatch& batch, const int32_t* accepted, int64_t* lookback_out,
                                unsigned long long* errors, void* stream) const;

  // Enqueues rows slots[0..n_slots) of lookback (device [lookback_rows][window()]) := kDeadToken: the rows of new
  // sequences. slots (device) null means rows 0..n_slots-1. A slot outside [0, lookback_rows) is skipped and adds
  // 1 to errors (device, optional). kInvalidArgument for n_slots < 0, null lookback or lookback_rows < 1.
  Status launch_reset_lookback(int64_t* lookback, int64_t lookback_rows, const int32_t* slots, int32_t n_slots,
                               unsigned long long* errors, void* stream) const;

 private:
  DeviceHasher() = default;
  int n_layers_ = 0;
  int max_ngram_ = 0;
  int heads_ = 0;
  HashIdType id_type_ = HashIdType::kInt64;
  int64_t bytes_ = 0;
  void* mem_ = nullptr;   // one device allocation: the constants' words, then the compression table
  HashStepConsts consts_;  // pointing into mem_
};

}  // namespace engram::cuda

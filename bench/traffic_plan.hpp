// The host side of `engram bench traffic` that needs no GPU: its options and their checks, the held-out text as one
// stream of hash ids, and the plan that gives every timed call its own token positions.
//
// Why a plan: a repeated lookup of the same ids is 1.5-6x faster than the first one even after a 256 MiB L2 flush
// (the GPU's translation caches stay warm), so every call of every arm reads token positions that no other call of
// the process reads. Prefill windows are consecutive runs of `tokens` tokens at the start of the stream; each decode
// workload owns a region of the rest, where its `batch` sequences start at evenly spread slots (so they read
// different documents) and advance one token per call. Call c of a workload is repetition c / arms, arm c % arms;
// the last call of each workload (index calls - 1) is the shared check call, run by every arm on the same ids after
// the timed ones. Token positions are disjoint across all calls of all workloads; ids repeat only where the text
// repeats an N-gram (what the cache and de-duplication are for).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/traffic_options.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/status.hpp"
#include "host/token_io.hpp"

namespace engram::bench {

class TrafficPlan {
 public:
  // Plans `calls` calls of each workload over a stream of `stream_tokens` tokens. kInvalidArgument when the stream
  // is too short: the message gives the tokens needed (`what` names the stream in it).
  static Result<TrafficPlan> make(int64_t stream_tokens, const std::vector<TrafficWorkload>& workloads, int calls,
                                  const std::string& what);
  // Token positions of call `call` of workload `w` (prefill: the window in order; decode: one per sequence).
  std::vector<int64_t> positions(size_t w, int call) const;
  int calls() const { return calls_; }
  size_t workloads() const { return work_.size(); }
  // Tokens the plan needs at least for these workloads and calls.
  static int64_t tokens_needed(const std::vector<TrafficWorkload>& workloads, int calls);

 private:
  struct Part {
    TrafficWorkload w;
    int64_t begin = 0;   // first token of the workload's region
    int64_t stride = 0;  // decode: tokens between two sequences' start slots
  };
  std::vector<Part> work_;
  int calls_ = 0;
};

// The hash ids of a whole token file for Engram layer 0 of the hasher's layout, as a stream: out[token][heads], each
// document hashed from its start and cut every seq_len tokens (engram profile's rule), `threads` hashing threads.
Result<std::vector<int64_t>> hash_token_stream(const NgramHasher& hasher, const TokenFile& tokens, int64_t seq_len,
                                               int threads);

// ids[positions.size()][heads] gathered from a stream of `heads` ids per token.
std::vector<int64_t> gather_stream_ids(const std::vector<int64_t>& stream, int heads, const std::vector<int64_t>& positions);

}  // namespace engram::bench

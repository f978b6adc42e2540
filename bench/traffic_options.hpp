// Options and workloads of `engram bench traffic` (bench/traffic.cpp): plain C++17, so that the bench's CUDA part
// includes them too. The plan and the text stream are in traffic_plan.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engram/status.hpp"

namespace engram::bench {

inline const std::vector<std::string>& traffic_arm_names() {
  // engine: the whole engine (planner, hot-row cache from a profile) through its prefetch queue;
  // plain: the project's plain kernel (launch_lookup) on the same fused table, every SM;
  // reference: a persistent-grid split-row kernel in the style of the serving engine's Engram kernel, split table;
  // plain-split: the project's plain kernel on the split table (the reference's table memory).
  static const std::vector<std::string> a{"engine", "plain", "reference", "plain-split"};
  return a;
}

struct TrafficOptions {
  std::string same_tokens;     // held-out text of the profile's domain ("" = DATA/corpus-doc/corpus-test.tokens)
  std::string other_tokens;    // held-out text of another domain ("" = DATA/corpus-h/corpus-test.tokens)
  std::string cache_profile;   // engram profile --layout bench --table-size SAME of a training split ("" = made here)
  std::string train_tokens;    // training split counted when there is no profile ("" = DATA/corpus-doc/corpus-train.tokens)
  std::string table_size = "32GiB";
  std::string cache_size = "5%";
  int64_t prefill_tokens = 8192;
  std::vector<int64_t> decode{64, 256};
  std::vector<std::string> arms{"engine", "plain", "reference", "plain-split"};
  std::vector<std::string> domains{"same", "other"};
  double engine_grid_fraction = 0.5;  // the engine's prefetch grid cap (EngineOptions::grid_cap's default)
  int64_t hash_seed = 0;
  int64_t seq_len = 2048;             // sequences cut every seq_len tokens inside a document, as engram profile
  int check_rows = 512;               // rows of every timed call compared with the CPU decoder
};

// kInvalidArgument naming the option: an unknown or repeated arm or domain, no arm, prefill or decode sizes < 1 or
// repeated, no workload, a cache size that does not parse, both --cache-profile and --train-tokens, a grid fraction
// outside (0, 1], check rows < 0, seq_len < 1.
Status check_traffic_options(const TrafficOptions& o);

struct TrafficWorkload {
  bool prefill = false;
  int64_t tokens = 0;  // prefill: tokens of one window; decode: sequences (one token each per call)
  std::string name() const { return (prefill ? "prefill " : "decode ") + std::to_string(tokens); }
};

// Prefill first, then the decode batches in the given order.
std::vector<TrafficWorkload> traffic_workloads(const TrafficOptions& o);

// Call index of (repetition, arm), and the shared check call.
inline int traffic_call(int rep, int arm, int arms) { return rep * arms + arm; }
inline int traffic_calls(int reps_total, int arms) { return reps_total * arms + 1; }

}  // namespace engram::bench

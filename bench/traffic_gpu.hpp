// The measuring part of `engram bench traffic` (bench/traffic_run.cpp): what bench/traffic.cpp prepares on the host
// (options, layout, profile, every call's ids) goes in; tables, notes and data come out in the Report.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/registry.hpp"
#include "bench/traffic_options.hpp"
#include "engram/layout.hpp"
#include "engram/status.hpp"

namespace engram::bench {

// One workload of one domain: every call's ids, call c = traffic_call(rep, arm, arms), the last one the shared
// check call.
struct TrafficWorkloadIds {
  std::string domain;                     // "same", "other"
  std::string text;                       // the token file
  TrafficWorkload workload;
  std::vector<std::vector<int64_t>> calls;  // [calls][tokens * heads]
  // Share of each call's ids that calls of earlier repetitions and workloads (in run order, all arms) read too:
  // what text repeats across calls, alike for every arm (the order of arms inside a repetition is not counted).
  std::vector<double> seen_share;           // [calls]
};

struct TrafficRun {
  TrafficOptions options;
  EngramLayout layout;                     // one fused Engram layer (bench_layout of --table-size)
  std::vector<std::pair<int64_t, int64_t>> profile;  // (id, count) hottest first; empty = cache off
  int64_t profile_lookups = 0;
  std::string profile_source;
  std::vector<TrafficWorkloadIds> workloads;
  int warmup = 1, reps = 5;
};

// Builds the fused table (engine and plain arms) and the split table (reference and plain-split arms) with the same
// rows, registers them, builds the engine and the plain engine once, times every workload's arms and checks their
// outputs against the CPU decoder; appends tables, notes and data to `rep`. kUnsupported without a usable GPU;
// kInternal when an arm's output differs from the CPU decoder or from another arm (correctness first).
Status run_traffic_gpu(const TrafficRun& run, Context& ctx, Report& rep);

}  // namespace engram::bench

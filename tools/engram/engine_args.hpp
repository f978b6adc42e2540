// The engine's command-line options, shared by `engram run`, `replay`, `experiment`, `soak` and `serve-table`: the
// text each flag takes is kept as typed by the user and turned into EngineOptions once, by set_engine_option
// (engram/engine.hpp), so every command names a bad value the same way and the library never parses text.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "command.hpp"
#include "option_rules.hpp"
#include "engram/engine.hpp"
#include "report/progress_line.hpp"

namespace engram::cli {

// GPU hot-row cache options.
struct CacheArgs {
  std::string size = "5%";
  std::string format = "fp8";
  std::string profile;  // --cache-profile FILE (engram profile)
  int warmup = -1;      // -1: the command's default
  std::string update = "every=4,rows=256";
};

inline void add_cache_options(CLI::App& sub, CacheArgs& c, const std::string& warmup_default) {
  sub.add_option("--cache-size", c.size,
                 "CUDA GPU hot-row cache per Engram layer: bytes (256MiB), a share of the layer's table (default 5%), "
                 "or off (no cache; a size of 0 is refused); capped at half the free HBM. CUDA-only: the cpu backend "
                 "says so and runs without it")
      ->check(parsed_by([](const std::string& t) -> Status {
        if (t == "off") return Status::ok();
        auto parsed = parse_cache_size(t);
        if (!parsed.is_ok()) return parsed.status();
        if (parsed->kind == CacheSize::Kind::kOff)
          return Status(Code::kInvalidArgument,
                        "'" + t + "' is a cache of no rows: give --cache-size off to run without the cache");
        return Status::ok();
      }));
  sub.add_option("--cache-format", c.format, "Cache rows as fp8 (default: records as stored) or bf16 (decoded once)")
      ->check(CLI::IsMember({"fp8", "bf16"}));
  sub.add_option("--cache-profile", c.profile,
                 "Fill the cache at start-up from this profile (engram profile) instead of a warm-up window")
      ->check(input_file());
  sub.add_option("--cache-warmup", c.warmup,
                 "Warm-up window: the cache is filled from the ids of the first N steps, which run without it (default " +
                     warmup_default + ")")
      ->check(range(1, 1 << 20));
  sub.add_option("--cache-update", c.update,
                 "Online update: every=K,rows=M,slice=S swaps at most M rows per layer every K steps (hottest uncached "
                 "ids of a decayed LFU count vs the coldest of a sampled set of cached rows, planned on the counting "
                 "thread), applied at most S rows per layer and step off the lookups' path; while plans come back "
                 "full (the traffic moved) M and S double per update up to burst=B times (4 follows a change of "
                 "traffic within a few hundred steps, 16 within ~100, at the cost of longer steps while it bursts; 1: "
                 "never more than S rows per step); S is raised to M/K; or off (default every=4,rows=256,slice=64,"
                 "burst=4)");
}

// --shm-dir is read for --backing shm only (run, replay, experiment, serve-table, census).
inline void refuse_shm_dir_without_shm(CLI::App& sub, const std::string* backing) {
  refuse_unless_value(sub, sub.get_option("--shm-dir"), sub.get_option("--backing"), backing, {"shm"},
                      "the directory holds the named files of --backing shm only");
}

// Tensor-parallel slice of the table (--tp-size, --tp-rank): kept as typed, parsed by set_table_option.
struct TpArgs {
  std::string size = "1";
  std::string rank = "0";
};

// The lookup-stack options every engine command takes.
struct EngineArgs {
  std::string backend = "auto";
  std::string backing = "memfd";
  std::string shm_dir = "/dev/shm";  // --backing shm: directory of the named files
  std::string placement = "none";
  std::string fast_path = "planner";
  std::string planner_learn = "true";  // --planner-learn as typed: EngineOptions::planner_learn
  std::string grid_fraction = "0.5";  // --grid-fraction as typed: EngineOptions::grid_cap
  std::string lookup_threads = "0";   // --threads as typed: EngineOptions::lookup_threads
  bool checked = false;
  CacheArgs cache;
  TpArgs tp;
};

// A flag whose text is an engine option's value: checked by the library's one options table (set_engine_option on
// a scratch EngineOptions), so the command line accepts exactly what the engine does, with the engine's message.
inline CLI::Validator engine_option_text(const char* key) {
  return parsed_by([key](const std::string& text) {
    EngineOptions scratch;
    return set_engine_option(scratch, key, text);
  });
}

inline void add_backend_options(CLI::App& sub, EngineArgs& a) {
  sub.add_option("--backend", a.backend,
                 "Lookup backend: auto (default: cuda when a usable GPU is present, else cpu, saying why), cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub.add_option("--grid-fraction", a.grid_fraction,
                 "CUDA: background grid cap as a fraction of the SMs, in (0, 1] (default 0.5)")
      ->check(engine_option_text("grid_fraction"));
  sub.add_option("--threads", a.lookup_threads, std::string("CPU lookup threads, 0..4096 (default 0; ") + kAutoThreadsHelp + ")")
      ->check(engine_option_text("lookup_threads"));
  sub.add_flag("--checked", a.checked, "Validate every id before each lookup (an out-of-range id fails the run)");
  sub.add_option("--fast-path", a.fast_path,
                 "CUDA lookup path: planner (default: per batch, dedup / sort / hot-row cache / plain from calibrated "
                 "costs, printed with its reasons), plain (the fast-path machinery runs the plain gather), off (the "
                 "plain kernel, no cache)")
      ->check(CLI::IsMember({"planner", "plain", "off"}));
  sub.add_option("--planner-learn", a.planner_learn,
                 "CUDA planner: correct its calibrated costs with the measured times of served batches and bar a "
                 "path measured slower than plain: true (default) or false (the start-up costs alone)")
      ->check(engine_option_text("planner_learn"));
}

inline void add_table_memory_options(CLI::App& sub, EngineArgs& a) {
  sub.add_option("--backing", a.backing, "Table memory: memfd (default), shm, hugetlb, hugetlb-1g, anon-thp")
      ->check(CLI::IsMember({"memfd", "shm", "hugetlb", "hugetlb-1g", "anon-thp"}));
  sub.add_option("--shm-dir", a.shm_dir, "Directory (a tmpfs) of the named files of --backing shm (default /dev/shm)")
      ->check(input_dir());
  sub.add_option("--placement", a.placement,
                 "NUMA placement applied before first touch: none (default), local, bind:NODES|all, preferred:N, "
                 "interleave:NODES|all, weighted-interleave:N=w,..., replica-per-node; NODES as numactl writes "
                 "them: 0,2 or 0-3, !LIST (every node but LIST), +LIST (positions among the nodes this process may "
                 "use: +0 is the first)")
      ->check(parsed_by([](const std::string& t) { return parse_placement(t).status(); }));
}

inline void add_tp_options(CLI::App& sub, TpArgs& t) {
  sub.add_option("--tp-size", t.size,
                 "Tensor-parallel ranks the heads are split over, as vLLM's ParallelEngramEmbedding does: each rank "
                 "holds ceil(heads / N) heads and only their rows (default 1: the whole table)");
  sub.add_option("--tp-rank", t.rank, "This process's tensor-parallel rank, 0..tp-size-1 (default 0)");
}

// The rules between the engine options of add_table_memory_options (option_rules.hpp).
inline void add_engine_option_rules(CLI::App& sub, EngineArgs& a) { refuse_shm_dir_without_shm(sub, &a.backing); }

// Sets o.tp from the flags. kInvalidArgument naming the flag: not an integer, --tp-size < 1, --tp-rank outside
// [0, tp-size).
inline Status apply_tp_args(const TpArgs& t, TableOptions& o) {
  ENGRAM_RETURN_IF_ERROR(set_table_option(o, "--tp-size", t.size));
  ENGRAM_RETURN_IF_ERROR(set_table_option(o, "--tp-rank", t.rank));
  return check_tp_slice(o.tp).with_context("--tp-size " + t.size + " --tp-rank " + t.rank);
}

// The lookup-side flags as (flag, text) pairs, for set_engine_option: what a rank process of `run --ranks` gets
// from the leader's job (the table's backing and placement are the leader's).
inline std::vector<std::pair<std::string, std::string>> lookup_option_text(const EngineArgs& a, int default_warmup) {
  std::vector<std::pair<std::string, std::string>> v = {
      {"--backend", a.backend},           {"--fast-path", a.fast_path},
      {"--planner-learn", a.planner_learn},
      {"--cache-size", a.cache.size},     {"--cache-format", a.cache.format},
      {"--cache-update", a.cache.update}, {"--grid-fraction", a.grid_fraction},
      {"--lookup-threads", a.lookup_threads},
      {"--checked", a.checked ? "true" : "false"},
      {"--cache-warmup", std::to_string(a.cache.warmup > 0 ? a.cache.warmup : std::max(1, default_warmup))}};
  if (!a.cache.profile.empty()) v.emplace_back("--cache-profile", a.cache.profile);
  return v;
}

// Turns the arguments into `o` (its other fields kept). The cache's warm-up window defaults to `default_warmup`
// counted steps. kInvalidArgument naming the flag.
inline Status apply_engine_args(const EngineArgs& a, const EngramLayout& layout, int default_warmup, EngineOptions& o) {
  (void)layout;  // a cache profile is checked against the layout when the engine is built
  ENGRAM_RETURN_IF_ERROR(set_engine_option(o, "--backing", a.backing));
  ENGRAM_RETURN_IF_ERROR(set_engine_option(o, "--shm-dir", a.shm_dir));
  ENGRAM_RETURN_IF_ERROR(set_engine_option(o, "--placement", a.placement));
  ENGRAM_RETURN_IF_ERROR(apply_tp_args(a.tp, o.table));
  for (const auto& [flag, value] : lookup_option_text(a, default_warmup))
    ENGRAM_RETURN_IF_ERROR(set_engine_option(o, flag, value));
  return Status::ok();
}

// Writing the table's content (synthetic fill, checkpoint or model directory load) and registering it with the
// GPU show their progress lines (bytes, GB/s, ETA) on stderr as --progress says (progress_args.hpp: by default
// when stderr is a terminal, so piped or redirected output stays free of them).
inline void show_load_progress(EngineOptions& o, report::ProgressDisplay display) {
  TableContent& c = o.content;
  if (c.kind != TableContent::Kind::kZero) {
    auto line = std::make_shared<report::ProgressLine>(c.to_string(), display);
    if (line->enabled()) {
      const char* phase = c.kind == TableContent::Kind::kSynthetic ? "fill" : "load";
      c.on_progress = [line, phase](int64_t done, int64_t total, double elapsed) {
        line->update({phase, done, total, elapsed, done == total});
      };
    }
  }
  auto reg = std::make_shared<report::ProgressLine>("table (GPU)", display);
  if (reg->enabled())
    o.on_register_progress = [reg](int64_t done, int64_t total, double elapsed) {
      reg->update({"register", done, total, elapsed, done == total});
    };
}

// The cache options as asked for (report JSON).
inline nlohmann::json cache_requested_json(const CacheArgs& a, const EngineOptions& o) {
  return {{"size", a.size},
          {"format", a.format},
          {"profile", a.profile.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.profile)},
          {"warmup_steps", o.cache.warmup_steps},
          {"update_every", o.cache.update.every},
          {"update_rows", o.cache.update.rows},
          {"update_slice", o.cache.update.slice}};
}

}  // namespace engram::cli

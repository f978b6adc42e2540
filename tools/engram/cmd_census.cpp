// `engram census`: where the pages of Engram tables are, per NUMA node.
//   engram census --pid PID [--json]   every table mapped by a running process (found by its backing
//                                      name "engram:..." in /proc/PID/maps), counts from numa_maps
//                                      (kernelpagesize_kB units), Rss/Pss per table from smaps and the
//                                      process's smaps_rollup.
//   engram census [--table-size 64MiB] [--backing memfd] [--placement interleave:all] [--json]
//                 [--head-shards 2 --shard-placements "bind:0;bind:1"] [--tp-size N --tp-rank R]
//                                      builds a synthetic table here with that backing and placement,
//                                      prints the placement report (requested / obtained / why) and the
//                                      move_pages census after placement and after load.
// Exit codes: 0; 1 runtime failure; 2 bad argument or no such process; 77 the machine cannot do it
// (e.g. weighted interleave before Linux 6.9).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "command.hpp"
#include "engine/bare_table.hpp"
#include "engine_args.hpp"
#include "named_tables.hpp"
#include "progress_args.hpp"
#include "core/units.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/census.hpp"
#include "host/placement.hpp"

namespace engram::cli {
namespace {

struct CensusArgs {
  int pid = 0;
  bool json = false;
  std::string prefix = "engram:";
  std::string table_size = "64MiB";
  std::string layout = "v41-flash-mini";
  std::string backing = "memfd";
  std::string shm_dir = "/dev/shm";
  std::string placement = "none";
  bool allow_fallback = false;
  uint64_t max_samples = uint64_t{1} << 20;
  uint64_t seed = 1;
  std::string head_shards;
  std::string shard_placements;
  TpArgs tp;
  std::string progress = "auto";
};

int census_pid(const CensusArgs& a) {
  auto pc = host::process_census(a.pid, a.prefix);
  if (!pc.is_ok()) return report_failure("census", pc.status().with_context("--pid " + std::to_string(a.pid)));
  if (a.json) {
    nlohmann::json j = pc->to_json();
    j["schema"] = "engram.census-pid/1";
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", pc->to_text().c_str());
  }
  return 0;
}

int census_here(const CensusArgs& a) {
  auto size = parse_size_bytes(a.table_size);
  if (!size.is_ok()) return report_failure("census", size.status().with_context("--table-size"));
  auto layout = make_preset_layout(a.layout, *size);
  if (!layout.is_ok()) return report_failure("census", layout.status().with_context("--layout"));
  TableOptions opts;
  opts.allow_fallback = a.allow_fallback;
  for (const auto& [flag, value] : std::vector<std::pair<const char*, std::string>>{
           {"--backing", a.backing}, {"--shm-dir", a.shm_dir}, {"--placement", a.placement}, {"--head-shards", a.head_shards},
           {"--shard-placements", a.shard_placements}})
    if (Status st = set_table_option(opts, flag, value, layout->heads()); !st.is_ok()) return report_failure("census", st);
  if (Status st = apply_tp_args(a.tp, opts); !st.is_ok()) return report_failure("census", st);
  sweep_before_named_table("census", opts);
  auto built = engine::create_bare_table(*layout, opts);
  if (!built.is_ok()) return report_failure("census", built.status());
  const std::unique_ptr<HostTable>* table = &built->table;
  nlohmann::json j;
  j["schema"] = "engram.census/1";
  j["placement"] = nlohmann::json::array();
  const int per_layer = std::max((*table)->n_replicas(), (*table)->n_shards());
  for (int li = 0; li < (*table)->n_layers(); ++li)
    for (int r = 0; r < per_layer; ++r) {
      const host::PlacedBacking* pb =
          (*table)->n_shards() > 1 ? (*table)->shard_backing(li, r) : (*table)->backing(li, r);
      if (!pb) continue;  // a TP rank without heads has no backing
      if (a.json) {
        nlohmann::json p = pb->report.to_json();
        p["backing"] = pb->backing.identity().to_string();
        j["placement"].push_back(p);
      } else {
        std::printf("placement of %s: %s\n", pb->backing.identity().to_string().c_str(), pb->report.to_string().c_str());
      }
    }
  j["census"] = nlohmann::json::array();
  auto print = [&](host::CensusPoint point) {
    for (const host::PageCensus& c : (*table)->census(point, a.max_samples)) {
      if (a.json) j["census"].push_back(c.to_json());
      else std::printf("%s", c.to_text().c_str());
    }
  };
  print(host::CensusPoint::kAfterPlacement);
  report::ProgressLine line("synthetic(seed=" + std::to_string(a.seed) + ")", progress_display(a.progress));
  if (line.enabled())
    (*table)->fill_synthetic(a.seed, 0, [&line](int64_t done, int64_t total, double elapsed) {
      line.update({"fill", done, total, elapsed, done == total});
    });
  else
    (*table)->fill_synthetic(a.seed);
  print(host::CensusPoint::kAfterLoad);
  if (a.json) std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<CensusArgs>();
  sub.add_option("--pid", a->pid, "Census of a running process's tables (numa_maps + smaps)")
      ->check(integer_in(1, std::numeric_limits<int>::max()));
  sub.add_option("--prefix", a->prefix, "With --pid: backing-name prefix that marks a table mapping (default engram:)")
      ->check(non_empty());
  sub.add_flag("--json", a->json, "Print JSON");
  add_progress_option(sub, a->progress);
  sub.add_option("--table-size", a->table_size, "Without --pid: size of the synthetic table to build (e.g. 64MiB)")
      ->check(size_in(1, int64_t{1} << 50));
  sub.add_option("--layout", a->layout, "Without --pid: layout preset (v41-flash-mini, tiny)")
      ->check(CLI::IsMember(preset_names()));
  sub.add_option("--backing", a->backing, "Without --pid: memfd | shm | hugetlb | hugetlb-1g | anon-thp")
      ->check(CLI::IsMember({"memfd", "shm", "hugetlb", "hugetlb-1g", "anon-thp"}));
  sub.add_option("--shm-dir", a->shm_dir, "Without --pid: directory (a tmpfs) of the named files of --backing shm")
      ->check(input_dir());
  sub.add_option("--placement", a->placement,
                 "Without --pid: none | local | bind:NODES | preferred:N | interleave:NODES | "
                 "weighted-interleave:N=w,... | replica-per-node; NODES as numactl writes them (0,2, 0-3, all, "
                 "!LIST, +LIST)")
      ->check(parsed_by([](const std::string& t) { return parse_placement(t).status(); }));
  sub.add_flag("--allow-fallback", a->allow_fallback, "Placement refused: keep the default policy and report it");
  sub.add_option("--head-shards", a->head_shards,
                 "Without --pid: shard each layer by head ranges (tensor parallelism), each its own backing: "
                 "N (equal ranges) or a-b,c-d,... (e.g. 0-12,12-24)")
      ->check(non_empty());
  sub.add_option("--shard-placements", a->shard_placements,
                 "Without --pid: one placement per head shard, ';'-separated (e.g. \"bind:0;bind:1\"); default --placement")
      ->check(non_empty());
  add_tp_options(sub, a->tp);
  sub.add_option("--max-samples", a->max_samples, "Exact census up to this many pages, stride sampling above")
      ->check(integer_in(1, int64_t{1} << 40));
  // The options of a table built here do not apply to another process's census: given with --pid, they are refused.
  for (const char* here : {"--table-size", "--layout", "--backing", "--shm-dir", "--placement", "--allow-fallback",
                           "--head-shards", "--shard-placements", "--tp-size", "--tp-rank"})
    sub.get_option("--pid")->excludes(sub.get_option(here));
  refuse_without(sub, sub.get_option("--prefix"), sub.get_option("--pid"), "a table built here is found by its own backing");
  refuse_shm_dir_without_shm(sub, &a->backing);
  return [a] { return a->pid > 0 ? census_pid(*a) : census_here(*a); };
}

}  // namespace
}  // namespace engram::cli
ENGRAM_COMMAND(census, "census", "Pages per NUMA node of each Engram table (a running process's, or one built here)",
               engram::cli::setup);

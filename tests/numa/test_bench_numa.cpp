// `engram bench numa` inside the 2-node guest: the registry entry itself (bench/numa.cpp) runs on two real NUMA
// nodes, so its matrices are 2 x 2 and every cell's memory was placed with bind:<node> and censused before timing.
//
// Checks what the bench promises, not its speed (no timing assertions): each memory node's buffer is verified by
// census to lie on that node (>= 99% of its pages), every matrix has one row per CPU node and one column per memory
// node, every cell is a finite positive number (a cell whose buffer failed the census would be n/a), and the
// latency p99 is not below the median. The tables are printed exactly as `engram bench numa` prints them
// (bench/report_io), followed by one "ENGRAM-BENCH-JSON <json>" line that scripts/numa-guest copies out of the
// guest's log (the numbers of docs/results/*-guest-numa-bench.md come from there).
//
// Sizes: ENGRAM_GUEST_BENCH_BYTES (default 64MiB per node; the guest has 512 MiB per node) and the bench's
// own options; under TCG both "nodes" are the same host RAM, so the figures show the code path, not NUMA costs.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "bench/registry.hpp"
#include "bench/report_io.hpp"
#include "numa_test_util.hpp"

using namespace engram;

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

TEST(BenchNuma, TwoByTwoMatricesOnCensusedMemory) {
  ENGRAM_NEED_TWO_NODES();
  const bench::Entry* e = bench::find_entry("numa");
  ASSERT_NE(e, nullptr) << "the numa bench is not registered in this binary";

  CLI::App app("bench numa (guest)");
  ASSERT_TRUE(e->add_options);
  e->add_options(app);
  const std::string bytes = env_or("ENGRAM_GUEST_BENCH_BYTES", "64MiB");
  std::vector<std::string> args = {"--chase-hops", "262144", "--gather-rows", "262144", "--numa-bytes", bytes};
  std::reverse(args.begin(), args.end());  // CLI11 parses a vector given in reverse order
  ASSERT_NO_THROW(app.parse(args));

  bench::Context ctx;
  ctx.warmup = 1;
  ctx.reps = 5;
  ctx.seed = 20261201;
  ctx.rng.seed(ctx.seed);
  auto rep = e->run(ctx);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  ASSERT_FALSE(rep->waived) << rep->waived_reason;

  const std::vector<int> nodes = sys::memory_nodes();
  ASSERT_GE(nodes.size(), 2u);
  ASSERT_TRUE(rep->data.contains("census"));
  ASSERT_EQ(rep->data["census"].size(), nodes.size());
  for (const auto& c : rep->data["census"]) EXPECT_TRUE(c["verified"].get<bool>()) << c.dump();

  for (const char* key : {"seq_read_1t_gbps", "seq_read_all_gbps", "latency_ns", "latency_p99_ns", "gather_256b_mrows"}) {
    const bench::Table* t = nullptr;
    for (const auto& tb : rep->tables)
      if (tb.key == key) t = &tb;
    ASSERT_NE(t, nullptr) << key;
    ASSERT_EQ(t->columns.size(), nodes.size() + 1) << key;  // "CPU node" + one column per memory node
    ASSERT_EQ(t->rows.size(), 2u) << key;                   // the guest's two CPU nodes
    for (const auto& row : t->rows) {
      ASSERT_EQ(row.size(), t->columns.size()) << key;
      EXPECT_TRUE(row[0].is_text());
      for (size_t k = 1; k < row.size(); ++k) {
        EXPECT_FALSE(row[k].is_text()) << key;
        EXPECT_TRUE(std::isfinite(row[k].value) && row[k].value > 0) << key << " cell " << k << " = " << row[k].value;
      }
    }
  }
  const auto find = [&](const std::string& key) -> const bench::Table& {
    for (const auto& tb : rep->tables)
      if (tb.key == key) return tb;
    return rep->tables.front();
  };
  const auto& med = find("latency_ns");
  const auto& p99 = find("latency_p99_ns");
  for (size_t r = 0; r < med.rows.size(); ++r)
    for (size_t k = 1; k < med.rows[r].size(); ++k) EXPECT_GE(p99.rows[r][k].value, med.rows[r][k].value);

  for (const auto& t : rep->tables) bench::print_table(t);
  for (const auto& n : rep->notes) std::printf("  %s\n", n.c_str());
  std::printf("ENGRAM-BENCH-JSON %s\n", bench::report_json(*rep, e->description).dump().c_str());
  std::fflush(stdout);
}

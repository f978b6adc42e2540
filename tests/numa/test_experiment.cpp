// A1-A3 end to end in the 2-node guest (scripts/numa-guest), CPU backend, tiny sizes: each arm's table is
// created and placed before it is used, the census proves the two arms differ in placement, every arm is
// timed on the same recorded batches, and every link of the acceptance chain is computed. The reports are
// printed between ENGRAM-REPORT markers so the guest log can be copied into docs/results/.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/harness.hpp"
#include "replay/experiment.hpp"
#include "sys/numa.hpp"

namespace engram {
namespace {

ExperimentOptions tiny_options(const std::string& id) {
  ExperimentOptions o;
  o.id = id;
  o.layout = *make_preset_layout("tiny");
  o.base.backend = BackendKind::kCpu;
  o.base.table.backing.kind = BackingKind::kMemfd;
  o.base.table.group = "guest";
  o.base.lookup_threads = 1;
  mutable_engine_harness(o.base).layer_us = 20;
  o.base.max_tokens = 64;
  o.serving.model = *ModelShape::preset("tiny");
  o.serving.rates = {400, 4000, 20};
  o.serving.scheduler = {64, 32, 8, 64};
  WorkloadOptions w;
  w.rate_rps = 500;
  w.n_requests = 8;
  w.seed = 11;
  w.prompt = *LengthDist::parse("uniform:16-96");
  w.output = *LengthDist::parse("uniform:2-8");
  o.schedule.requests = *make_requests(w);
  const EngramLayout layout = o.layout;
  o.make_ids = [layout] { return make_zipf_serving_ids(layout, 1.0, 11); };
  o.reps = 5;
  o.conditions = {{"machine", "QEMU TCG guest, 2 sockets x 1 CPU, 2 NUMA nodes x 512 MiB (scripts/numa-guest)"}};
  o.log = [](const std::string& s) { std::printf("  %s\n", s.c_str()); };
  return o;
}

class PlacementExperiment : public ::testing::TestWithParam<const char*> {};

TEST_P(PlacementExperiment, CensusProvesPlacementAndTheChainIsComputed) {
  if (sys::memory_nodes().size() < 2) GTEST_SKIP() << "needs >= 2 NUMA nodes (scripts/numa-guest runs it on two)";
  const std::string id = GetParam();
  auto r = run_experiment(tiny_options(id));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->arms.size(), 2u);
  for (const auto& a : r->arms) {
    EXPECT_TRUE(a.valid) << a.spec.name << ": " << a.evidence;
    EXPECT_EQ(a.runs.size(), 5u);
    EXPECT_FALSE(a.censuses.empty());
  }
  EXPECT_NE(r->arms[0].signature, r->arms[1].signature);
  const auto& c = r->json["comparisons"][0];
  ASSERT_EQ(c["links"].size(), 4u);
  EXPECT_EQ(c["links"][0]["holds"], true) << c["links"][0]["evidence"];
  for (size_t i = 1; i < 4; ++i) EXPECT_FALSE(c["links"][i]["evidence"].get<std::string>().empty());
  EXPECT_TRUE(c["links"][1]["holds"].is_boolean());
  EXPECT_TRUE(c["chain_holds"].is_boolean());
  std::printf("ENGRAM-REPORT-BEGIN %s\n%sENGRAM-REPORT-END %s\n", id.c_str(), r->markdown.c_str(), id.c_str());
}

INSTANTIATE_TEST_SUITE_P(A, PlacementExperiment, ::testing::Values("A1", "A2", "A3"));

}  // namespace
}  // namespace engram

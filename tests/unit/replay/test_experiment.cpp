// Experiment harness: arms change exactly one thing, arms that would do the same on this machine are refused
// (kUnsupported: A1-A3 on one node, B2's CPU analogue on two cores), fewer than 5 repetitions are refused, the census
// check accepts what an arm asked for and rejects what it did not get, and a small B1 on the CPU backend runs
// every arm on the same recorded batches and computes each link of the acceptance chain.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/harness.hpp"
#include "replay/experiment.hpp"
#include "sys/numa.hpp"

namespace engram {
namespace {

host::PageCensus census(std::map<int, uint64_t> pages, int replica_node = -1) {
  host::PageCensus c;
  c.point = host::CensusPoint::kAfterPlacement;
  c.known = true;
  c.pages_per_node = pages;
  for (auto& [n, p] : pages) c.pages_sampled += p;
  c.pages_total = c.pages_sampled;
  c.table.replica_node = replica_node;
  return c;
}

PlacementPolicy policy(const std::string& text) { return *parse_placement(text); }

TEST(Experiment, ArmsChangeOneThing) {
  EngineOptions base;
  base.table.placement = policy("none");
  auto b1 = make_arms("B1", base, {0}, {}, 8);
  ASSERT_TRUE(b1.is_ok());
  ASSERT_EQ(b1->size(), 2u);
  EXPECT_EQ((*b1)[0].mode, PrefetchMode::kEarly);
  EXPECT_EQ((*b1)[1].mode, PrefetchMode::kOnDemand);
  EXPECT_EQ((*b1)[0].rig.table.placement, (*b1)[1].rig.table.placement);
  auto b2 = make_arms("B2", base, {0}, {0.25, 1.0}, 9);
  ASSERT_TRUE(b2.is_ok());
  EXPECT_EQ((*b2)[0].rig.lookup_threads, 2);  // CPU analogue: 25% of 8 worker cores
  EXPECT_EQ((*b2)[1].rig.lookup_threads, 8);
  base.backend = BackendKind::kCuda;
  auto b2c = make_arms("B2", base, {0}, {0.25, 1.0}, 9);
  EXPECT_DOUBLE_EQ((*b2c)[0].rig.grid_cap.fraction(), 0.25);
  EXPECT_EQ(make_arms("B2", base, {0}, {1.5}, 9).status().code(), Code::kInvalidArgument);
  for (const char* a : {"A1", "A2", "A3"}) EXPECT_EQ(make_arms(a, base, {0}, {}, 8).status().code(), Code::kUnsupported) << a;
  auto a1 = make_arms("A1", base, {0, 1}, {}, 8);
  ASSERT_TRUE(a1.is_ok());
  EXPECT_EQ((*a1)[0].rig.table.placement.to_string(), "bind:0");
  EXPECT_EQ((*a1)[1].rig.table.placement.to_string(), "bind:1");
  EXPECT_EQ((*a1)[0].consumer_node, (*a1)[1].consumer_node);
  auto a3 = make_arms("A3", base, {0, 1}, {}, 8);
  ASSERT_TRUE(a3.is_ok());
  EXPECT_EQ((*a3)[1].rig.table.placement.to_string(), "replica-per-node");
  EXPECT_EQ((*a3)[1].rig.table.home_node, 1);
  EXPECT_EQ(make_arms("C9", base, {0}, {}, 8).status().code(), Code::kInvalidArgument);
}

TEST(Experiment, ArmsThatDoTheSameOnThisMachineAreRefusedWithTheReason) {
  EngineOptions base;
  base.backend = BackendKind::kCpu;
  // Two cores: every cap of the CPU analogue rounds to one lookup thread.
  auto b2 = make_arms("B2", base, {0}, {0.25, 0.5, 1.0}, 2);
  ASSERT_EQ(b2.status().code(), Code::kUnsupported);
  EXPECT_NE(b2.status().message().find("cap=0.25 and cap=0.50"), std::string::npos) << b2.status().message();
  EXPECT_NE(b2.status().message().find("1 lookup threads"), std::string::npos) << b2.status().message();
  // Caps that round to distinct thread counts run.
  EXPECT_TRUE(make_arms("B2", base, {0}, {0.25, 1.0}, 9).is_ok());
  // The same rule refuses placement experiments on one node, with the node count in the reason.
  for (const char* id : {"A1", "A2", "A3"}) {
    auto a = make_arms(id, base, {0}, {}, 8);
    ASSERT_EQ(a.status().code(), Code::kUnsupported) << id;
    EXPECT_NE(a.status().message().find("needs two NUMA memory nodes; this machine has 1"), std::string::npos)
        << a.status().message();
  }
  // A single cap has nothing to compare.
  EXPECT_EQ(make_arms("B2", base, {0}, {0.5}, 9).status().code(), Code::kInvalidArgument);
  // Two nodes: the arms differ, and their effective settings say where the pages land.
  auto a2 = make_arms("A2", base, {0, 1}, {}, 8);
  ASSERT_TRUE(a2.is_ok()) << a2.status().to_string();
  EXPECT_NE((*a2)[0].effective.find("pages on N0"), std::string::npos) << (*a2)[0].effective;
  EXPECT_NE((*a2)[1].effective.find("pages spread over N0,N1"), std::string::npos) << (*a2)[1].effective;
}

TEST(Experiment, CensusCheckAcceptsWhatWasAskedAndRejectsTheRest) {
  ArmSpec a;
  a.rig.table.placement = policy("bind:1");
  std::string ev, sig;
  EXPECT_TRUE(census_proves_placement(a, {census({{1, 100}})}, 1, -1, &ev, &sig));
  EXPECT_NE(ev.find("N1=100.0%"), std::string::npos) << ev;
  EXPECT_FALSE(census_proves_placement(a, {census({{0, 100}})}, 1, -1, &ev, &sig));
  host::PageCensus unknown = census({});
  unknown.known = false;
  unknown.reason = "move_pages: EPERM";
  EXPECT_FALSE(census_proves_placement(a, {unknown}, 1, -1, &ev, &sig));
  EXPECT_NE(ev.find("EPERM"), std::string::npos);
  a.rig.table.placement = policy("interleave:0,1");
  EXPECT_TRUE(census_proves_placement(a, {census({{0, 50}, {1, 50}})}, 1, -1, &ev, &sig));
  EXPECT_FALSE(census_proves_placement(a, {census({{0, 100}})}, 1, -1, &ev, &sig));
  a.rig.table.placement = policy("replica-per-node");
  EXPECT_TRUE(census_proves_placement(a, {census({{0, 10}}, 0), census({{1, 10}}, 1)}, 2, 1, &ev, &sig));
  EXPECT_FALSE(census_proves_placement(a, {census({{0, 10}}, 0), census({{0, 10}}, 1)}, 2, 1, &ev, &sig));
}

TEST(Experiment, B1OnTheCpuBackendComputesTheChain) {
  ExperimentOptions o;
  o.id = "B1";
  o.layout = *make_preset_layout("tiny");
  o.base.backend = BackendKind::kCpu;
  o.base.table.backing.kind = BackingKind::kMemfd;
  o.base.lookup_threads = 1;
  mutable_engine_harness(o.base).layer_us = 5;
  o.base.max_tokens = 32;
  o.serving.model = *ModelShape::preset("tiny");
  o.serving.rates = {400, 4000, 5};
  o.serving.scheduler = {32, 16, 4, 64};
  WorkloadOptions w;
  w.rate_rps = 2000;
  w.n_requests = 6;
  w.prompt = *LengthDist::parse("uniform:4-20");
  w.output = *LengthDist::parse("3");
  o.schedule.requests = *make_requests(w);
  const EngramLayout layout = o.layout;
  o.make_ids = [layout] { return make_zipf_serving_ids(layout, 1.0, 1); };
  o.reps = kMinExperimentReps - 1;
  auto few = run_experiment(o);
  EXPECT_EQ(few.status().code(), Code::kInvalidArgument);
  EXPECT_NE(few.status().message().find("too few"), std::string::npos) << few.status().message();
  o.reps = kMinExperimentReps;
  o.out_dir = testing::TempDir() + "/exp_b1";
  auto r = run_experiment(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->arms.size(), 2u);
  for (const auto& a : r->arms) {
    EXPECT_TRUE(a.valid) << a.evidence;
    EXPECT_EQ(a.runs.size(), static_cast<size_t>(kMinExperimentReps));
    EXPECT_FALSE(a.trace_file.empty());
  }
  const auto& c = r->json["comparisons"][0];
  ASSERT_EQ(c["links"].size(), 4u);
  EXPECT_TRUE(c["links"][0]["holds"].is_null());  // B1 holds placement fixed
  EXPECT_TRUE(c["links"][1]["holds"].is_boolean());
  EXPECT_TRUE(c["chain_holds"].is_boolean());
  EXPECT_TRUE(c["diff_of_medians"]["ttft_p50_ms"]["ci_low"].is_number());
  EXPECT_NE(r->markdown.find("Acceptance chain"), std::string::npos);
  ASSERT_TRUE(write_experiment_report(*r, o.out_dir).is_ok());
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/report.md"));
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/report.json"));
  std::filesystem::remove_all(o.out_dir);
}

}  // namespace
}  // namespace engram

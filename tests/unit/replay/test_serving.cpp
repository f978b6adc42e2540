// Serving replay: the workload is a pure function of its seed, lengths follow their forms, the schedule file
// round-trips, the layer-compute sizing follows its formula, and a live run on the CPU backend completes every
// request with consistent client accounting; replaying the recorded batches runs the same steps and tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cpu/compute.hpp"
#include "cpu/prefetch.hpp"
#include "engram/table.hpp"
#include "replay/serving.hpp"

namespace engram {
namespace {

TEST(Serving, LengthDistParsesItsFormsAndRejectsOthers) {
  auto f = LengthDist::parse("128");
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->kind, LengthDist::Kind::kFixed);
  EXPECT_EQ(f->a, 128);
  auto u = LengthDist::parse("uniform:4-9");
  ASSERT_TRUE(u.is_ok());
  EXPECT_EQ(u->kind, LengthDist::Kind::kUniform);
  EXPECT_EQ(u->b, 9);
  EXPECT_TRUE(LengthDist::parse("lognormal:512,0.6").is_ok());
  EXPECT_FALSE(LengthDist::parse("uniform:9-4").is_ok());
  EXPECT_FALSE(LengthDist::parse("gamma:1").is_ok());
  EXPECT_FALSE(LengthDist::parse("0").is_ok());
}

TEST(Serving, RequestsAreDeterministicPerSeedAndWithinTheirDistribution) {
  WorkloadOptions w;
  w.rate_rps = 10;
  w.n_requests = 200;
  w.seed = 3;
  w.prompt = *LengthDist::parse("uniform:4-9");
  w.output = *LengthDist::parse("lognormal:16,0.5");
  auto a = make_requests(w, 1000);
  auto b = make_requests(w, 1000);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ(a->size(), 200u);
  double prev = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    const auto& r = (*a)[i];
    EXPECT_EQ(r.id, static_cast<int64_t>(i));
    EXPECT_GE(r.arrival_ns, prev);
    prev = r.arrival_ns;
    EXPECT_GE(r.prompt_tokens, 4);
    EXPECT_LE(r.prompt_tokens, 9);
    EXPECT_GE(r.output_tokens, 1);
    EXPECT_LT(r.text_offset, 1000);
    EXPECT_EQ(r.arrival_ns, (*b)[i].arrival_ns);
    EXPECT_EQ(r.output_tokens, (*b)[i].output_tokens);
  }
  // Poisson at 10/s: 200 arrivals take about 20 s (mean gap 0.1 s); a loose bound, not a timing.
  EXPECT_GT(a->back().arrival_ns, 10e9);
  EXPECT_LT(a->back().arrival_ns, 30e9);
  w.seed = 4;
  auto c = make_requests(w, 1000);
  ASSERT_TRUE(c.is_ok());
  EXPECT_NE((*c)[5].arrival_ns, (*a)[5].arrival_ns);
}

TEST(Serving, TraceFileGivesLengthsAndArrivals) {
  const std::string path = testing::TempDir() + "/serving_trace.csv";
  {
    std::ofstream f(path);
    f << "# prompt,output,arrival_s\n12,3,0.5\n7,2,0.1\n";
  }
  WorkloadOptions w;
  w.trace_file = path;
  auto r = make_requests(w);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].prompt_tokens, 7);  // sorted by arrival
  EXPECT_DOUBLE_EQ((*r)[0].arrival_ns, 0.1e9);
  EXPECT_EQ((*r)[1].output_tokens, 3);
  {
    std::ofstream f(path);
    f << "12\n";
  }
  EXPECT_EQ(make_requests(w).status().code(), Code::kInvalidArgument);
}

TEST(Serving, LayerComputeFollowsTheFormula) {
  ModelShape m = *ModelShape::preset("v41-flash");
  ComputeRates r{400, 4000, 50};
  // Decode of 1 token: weight floor 0.3e9 * 2 B / 4 TB/s = 150 us.
  EXPECT_NEAR(model_layer_ns(m, r, 1), 150e3, 1);
  // Prefill of 2048 tokens: 2 * 2048 * 0.3e9 / 400e12 s = 3.072 ms.
  EXPECT_NEAR(model_layer_ns(m, r, 2048), 3.072e6, 1);
  EXPECT_EQ(units_for_layer(m, r, 1), 3);
  EXPECT_EQ(units_for_layer(m, r, 2048), 62);
  EXPECT_FALSE(ModelShape::preset("gpt").is_ok());
}

TEST(Serving, ScheduleRoundTripsThroughJson) {
  ServingSchedule s;
  s.requests = {{0, 1.5e6, 10, 3, 7}, {1, 2.5e6, 4, 1, 9}};
  s.rejected = {1};
  ScheduledStep st;
  st.chunks = {{0, 0, 8, true}, {1, 0, 4, true}};
  s.steps.push_back(st);
  st.chunks = {{0, 8, 2, true}};
  s.steps.push_back(st);
  auto back = ServingSchedule::from_json(s.to_json());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->steps.size(), 2u);
  EXPECT_EQ(back->steps[0].tokens(), 12);
  EXPECT_EQ(back->steps[1].chunks[0].pos, 8);
  EXPECT_EQ(back->requests[1].text_offset, 9);
  EXPECT_EQ(back->rejected, std::vector<int64_t>{1});
  auto bad = s.to_json();
  bad["steps"][0][0][0] = 5;  // request 5 does not exist
  EXPECT_EQ(ServingSchedule::from_json(bad).status().code(), Code::kInvalidArgument);
}

struct CpuRig {
  EngramLayout layout;
  std::unique_ptr<HostTable> table;
  std::unique_ptr<cpu::CpuPrefetchQueue> queue;
  std::unique_ptr<cpu::CpuLayerCompute> compute;
  void build() {
    layout = *make_preset_layout("tiny");
    table = HostTable::allocate(layout).value();
    table->fill_synthetic(1, 1);
    cpu::CpuPrefetchOptions o;
    o.lookup_threads = 1;
    o.checked = true;  // an out-of-range id fails the run
    queue = cpu::CpuPrefetchQueue::create({table->view(0)}, layout.layer_ids, layout.heads(), o).value();
    compute = std::make_unique<cpu::CpuLayerCompute>(5);
  }
};

TEST(Serving, LiveRunCompletesEveryRequestAndRecordedReplayRunsTheSameBatches) {
  CpuRig rig;
  rig.build();
  WorkloadOptions w;
  w.rate_rps = 2000;  // arrivals within a few ms
  w.n_requests = 12;
  w.seed = 5;
  w.prompt = *LengthDist::parse("uniform:3-40");
  w.output = *LengthDist::parse("uniform:1-6");
  auto reqs = make_requests(w);
  ASSERT_TRUE(reqs.is_ok());
  ServingOptions so;
  so.model = *ModelShape::preset("tiny");
  so.rates = {400, 4000, 5};
  so.scheduler = {32, 16, 4, 64};
  auto ids = make_zipf_serving_ids(rig.layout, 1.0, 5);
  ASSERT_TRUE(ids.is_ok());
  ServingSchedule sched;
  auto rep = run_serving_live(rig.layout, *reqs, **ids, *rig.queue, *rig.compute, so, &sched);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->requests, 12);
  EXPECT_EQ(rep->completed, 12);
  EXPECT_EQ(rep->rejected, 0);
  int64_t prompt = 0, decode = 0;
  for (const auto& r : *reqs) {
    prompt += r.prompt_tokens;
    decode += r.output_tokens - 1;
  }
  EXPECT_EQ(rep->prefill_tokens, prompt);
  EXPECT_EQ(rep->decode_tokens, decode);
  EXPECT_EQ(rep->ttft_ns.n, 12u);
  EXPECT_EQ(static_cast<int64_t>(rep->itl_samples_ns.size()), decode);
  EXPECT_GT(rep->ttft_ns.median, 0);
  EXPECT_EQ(rep->rows_looked_up, (prompt + decode) * rig.layout.heads());
  ASSERT_EQ(static_cast<int64_t>(sched.steps.size()), rep->steps);
  for (const auto& st : sched.steps) EXPECT_LE(st.tokens(), 32);
  EXPECT_TRUE(std::isfinite(rep->goodput_rps));
  // Same batches again from the record.
  auto again = run_serving_recorded(rig.layout, sched, **ids, *rig.queue, *rig.compute, so);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->steps, rep->steps);
  EXPECT_EQ(again->prefill_tokens, prompt);
  EXPECT_EQ(again->completed, 12);
}

TEST(Serving, FullWaitingQueueRejectsArrivals) {
  CpuRig rig;
  rig.build();
  WorkloadOptions w;
  w.rate_rps = 1e6;  // everything arrives at once
  w.n_requests = 10;
  w.prompt = *LengthDist::parse("64");
  w.output = *LengthDist::parse("2");
  auto reqs = make_requests(w);
  ASSERT_TRUE(reqs.is_ok());
  ServingOptions so;
  so.model = *ModelShape::preset("tiny");
  so.rates = {400, 4000, 5};
  so.warmup_steps = 0;
  so.scheduler = {16, 16, 1, 2};
  auto ids = make_zipf_serving_ids(rig.layout, 1.0, 5);
  ServingSchedule sched;
  // A clock that starts after every arrival: all 10 arrive before the first admission; 2 fit the waiting queue.
  double t = 1e9;
  so.clock_ns = [&t] { return t += 1000; };
  auto rep = run_serving_live(rig.layout, *reqs, **ids, *rig.queue, *rig.compute, so, &sched);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->rejected, 8);  // max_waiting 2 fills before any request is admitted to run
  EXPECT_EQ(rep->completed, 2);
  EXPECT_DOUBLE_EQ(rep->rejection_rate, 0.8);
  EXPECT_EQ(sched.rejected.size(), 8u);
}

}  // namespace
}  // namespace engram

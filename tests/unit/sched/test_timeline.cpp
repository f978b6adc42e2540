// Serial-queue recurrence, percentiles, and the JSON / Chrome trace exports of the timeline.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engram/timeline.hpp"

namespace engram {
namespace {

LayerTiming t(double r, double s, double f, double c, double wend, int layer = 0) {
  LayerTiming x;
  x.layer_id = layer;
  x.r_ns = r;
  x.s_ns = s;
  x.f_ns = f;
  x.c_ns = c;
  x.wait_end_ns = wend;
  return x;
}

TEST(SerialQueueModel, RecurrenceAndExposedWait) {
  // Two lookups ready at 0 and 10; L = 50 and 30; consumers arrive at 40 and 200.
  std::vector<LayerTiming> q = {t(0, 0, 50, 40, 50, 1), t(10, 50, 80, 200, 200, 14)};
  auto rows = explain_serial_queue(q, 0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[0].model_s_ns, 0);
  EXPECT_DOUBLE_EQ(rows[0].model_f_ns, 50);
  EXPECT_DOUBLE_EQ(rows[0].model_e_ns, 10);        // f - c = 50 - 40
  EXPECT_DOUBLE_EQ(rows[1].model_s_ns, 50);        // max(r=10, f_prev=50)
  EXPECT_DOUBLE_EQ(rows[1].model_f_ns, 80);
  EXPECT_DOUBLE_EQ(rows[1].model_e_ns, 0);         // consumer arrives after f
  EXPECT_DOUBLE_EQ(rows[1].residual_s_ns, 0);
  EXPECT_DOUBLE_EQ(q[1].queue_ns(), 40);
  EXPECT_DOUBLE_EQ(q[0].exposed_wait_ns(), 10);
  EXPECT_DOUBLE_EQ(q[1].lead_ns(), 190);
}

TEST(SerialQueueModel, ExposedWaitIsNotRecordedWithoutFinishOrConsumer) {
  LayerTiming x;
  x.r_ns = 0;
  x.s_ns = 5;
  x.f_ns = 50;
  EXPECT_TRUE(std::isnan(x.exposed_wait_ns()));  // no consumer time: not an exposed wait of 0
  x.c_ns = 40;
  EXPECT_DOUBLE_EQ(x.exposed_wait_ns(), 10);
  x.f_ns = kNotRecorded;
  EXPECT_TRUE(std::isnan(x.exposed_wait_ns()));
  x.f_ns = 30;
  EXPECT_DOUBLE_EQ(x.exposed_wait_ns(), 0);  // consumer after f
}

TEST(SerialQueueModel, ResidualShowsAnotherDependency) {
  // The second lookup started at 70 though the queue was free at 50: 20 ns unexplained by the model.
  std::vector<LayerTiming> q = {t(0, 0, 50, 100, 100), t(10, 70, 100, 100, 100)};
  auto rows = explain_serial_queue(q, 0);
  EXPECT_DOUBLE_EQ(rows[1].residual_s_ns, 20);
}

TEST(SerialQueueModel, WhatIfHalvingLookupTime) {
  std::vector<LayerTiming> q = {t(0, 0, 100, 60, 100), t(0, 100, 200, 120, 200)};
  auto base = explain_serial_queue(q, 0);
  EXPECT_DOUBLE_EQ(base[0].model_e_ns, 40);
  EXPECT_DOUBLE_EQ(base[1].model_e_ns, 80);
  auto half = explain_serial_queue(q, 0, 0.5);
  EXPECT_DOUBLE_EQ(half[0].model_f_ns, 50);
  EXPECT_DOUBLE_EQ(half[1].model_s_ns, 50);   // queue frees at modelled f
  EXPECT_DOUBLE_EQ(half[1].model_f_ns, 100);
  EXPECT_DOUBLE_EQ(half[0].model_e_ns, 0);
  EXPECT_DOUBLE_EQ(half[1].model_e_ns, 0);
}

TEST(Percentile, InterpolatesAndIgnoresNaN) {
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 50), 3);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 100), 5);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 25), 12.5);
  EXPECT_DOUBLE_EQ(percentile({kNotRecorded, 7}, 50), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
  EXPECT_TRUE(std::isnan(percentile({kNotRecorded}, 50)));
}

TEST(TimelineExport, JsonUsesNullForNotRecorded) {
  Timeline tl;
  LayerTiming x = t(0, 5, 10, 8, 10, 14);
  x.submit_ns = kNotRecorded;
  tl.add(x);
  auto j = tl.to_json();
  EXPECT_EQ(j["unit"], "ns");
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_TRUE(j["rows"][0]["submit_ns"].is_null());
  EXPECT_EQ(j["rows"][0]["f_ns"], 10.0);
  EXPECT_EQ(j["rows"][0]["layer_id"], 14);
}

TEST(TimelineExport, ChromeTraceHasLookupAndWaitSlices) {
  Timeline tl;
  tl.add(t(0, 1000, 3000, 2000, 3000, 1));
  auto j = tl.to_chrome_trace();
  ASSERT_TRUE(j.contains("traceEvents"));
  int lookups = 0, waits = 0;
  for (auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "lookup") {
      ++lookups;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0);   // microseconds
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2.0);
      EXPECT_EQ(e["tid"], 2);  // lanes: 0 steps, 1 main (consumer), 2 prefetch queue
    }
    if (e["cat"] == "wait") {
      ++waits;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 2.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.0);
      EXPECT_EQ(e["tid"], 1);
    }
  }
  EXPECT_EQ(lookups, 1);
  EXPECT_EQ(waits, 1);
}

// Cache-maintenance spans get their own lane (tid 2, named) with microsecond times; a span whose times were not
// recorded is left out of the trace but kept, as null, in the JSON; no spans: no lane and no "maintenance" key.
TEST(TimelineExport, MaintenanceSpansHaveTheirOwnLane) {
  Timeline tl;
  tl.add(t(0, 1000, 3000, 2000, 3000, 1));
  EXPECT_FALSE(tl.to_json().contains("maintenance"));
  MaintenanceSpan m;
  m.rank = 0;
  m.step = 4;
  m.layer_id = 1;
  m.what = "stage";
  m.rows = 64;
  m.start_ns = 5000;
  m.end_ns = 7500;
  m.host_us = 12.5;
  tl.add_maintenance(m);
  MaintenanceSpan untimed = m;
  untimed.what = "commit";
  untimed.start_ns = kNotRecorded;
  tl.add_maintenance(untimed);
  const auto j = tl.to_chrome_trace();
  int spans = 0;
  bool lane_named = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e.value("tid", -1) == 3) lane_named = e["args"]["name"] == "cache maintenance";
    if (e["ph"] != "X" || e["cat"] != "maintenance") continue;
    ++spans;
    EXPECT_EQ(e["tid"], 3);  // lanes: 0 steps, 1 main, 2 prefetch queue, 3 cache maintenance
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 5.0);
    EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2.5);
    EXPECT_EQ(e["args"]["rows"], 64);
    EXPECT_EQ(e["name"], "cache stage L1 step 4");
  }
  EXPECT_EQ(spans, 1);
  EXPECT_TRUE(lane_named);
  const auto js = tl.to_json();
  ASSERT_TRUE(js.contains("maintenance"));
  ASSERT_EQ(js["maintenance"].size(), 2u);
  EXPECT_TRUE(js["maintenance"][1]["start_ns"].is_null());
  EXPECT_DOUBLE_EQ(js["maintenance"][0]["host_us"].get<double>(), 12.5);
  tl.clear();
  EXPECT_TRUE(tl.maintenance().empty());
}

TEST(TimelineExport, ChromeTraceRoundTripsThroughFromJson) {
  Timeline tl;
  LayerTiming x = t(1, 2, 3, 4, 5, 14);
  x.step = 7;
  x.rank = 2;
  x.submit_ns = kNotRecorded;
  tl.add(x);
  auto back = Timeline::from_json(tl.to_chrome_trace());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->rows().size(), 1u);
  EXPECT_EQ(back->rows()[0].step, 7);
  EXPECT_EQ(back->rows()[0].rank, 2);
  EXPECT_DOUBLE_EQ(back->rows()[0].f_ns, 3);
  EXPECT_TRUE(std::isnan(back->rows()[0].submit_ns));
  EXPECT_FALSE(Timeline::from_json(nlohmann::json::array()).is_ok());
}

TEST(TimelineExport, WarmupIsMarkedAndLeftOutOfTheMeasuredTimeline) {
  Timeline tl;
  for (int step = 0; step < 3; ++step) {
    LayerTiming x = t(100.0 * step, 100.0 * step + 10, 100.0 * step + 30, 100.0 * step + 20, 100.0 * step + 30, 1);
    x.step = step;
    tl.add(x);
    tl.add_step({0, step, 100.0 * step, 100.0 * step + 50, false});
  }
  tl.mark_warmup(1, 1);  // the first step was warm-up
  EXPECT_TRUE(tl.rows()[0].is_warmup());
  EXPECT_FALSE(tl.rows()[1].is_warmup());
  EXPECT_TRUE(tl.steps()[0].is_warmup());
  const Timeline m = tl.measured();
  ASSERT_EQ(m.rows().size(), 2u);
  ASSERT_EQ(m.steps().size(), 2u);
  EXPECT_EQ(m.rows()[0].step, 1);
  EXPECT_EQ(m.steps()[0].step, 1);
  // A step numbered < 0 (the serving harness's warm-up) counts as warm-up without a mark.
  LayerTiming neg = t(0, 1, 2, 3, 4);
  neg.step = -1;
  EXPECT_TRUE(neg.is_warmup());
  // The marks survive the trace file.
  auto back = Timeline::from_json(tl.to_chrome_trace());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->measured().rows().size(), 2u);
  EXPECT_EQ(back->measured().steps().size(), 2u);
  int warm_slices = 0;
  const nlohmann::json trace = tl.to_chrome_trace();
  for (auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["args"].value("warmup", false)) {
      ++warm_slices;
      EXPECT_EQ(e["name"].get<std::string>().rfind("warm-up ", 0), 0u) << e.dump();
    }
  EXPECT_EQ(warm_slices, 5);  // step 0: its step slice, lookup, wait, and compute before and after the wait
}

TEST(TimelineExport, ChromeTraceHasStepAndComputeSlicesPidAndAbsoluteTime) {
  Timeline tl;
  tl.origin_unix_ns = 1.7e18;
  LayerTiming x = t(100, 1000, 3000, 2000, 3500, 4);
  x.rank = 3;
  tl.add(x);
  tl.add_step({3, 0, 500, 5000, false});
  auto j = tl.to_chrome_trace({4242, false});
  EXPECT_EQ(j["schema"], "engram.trace/1");
  std::vector<std::pair<double, double>> compute;
  int steps = 0;
  bool named = false;
  for (auto& e : j["traceEvents"]) {
    EXPECT_EQ(e["pid"], 4242) << e.dump();
    if (e["ph"] == "M" && e["name"] == "process_name") named = e["args"]["name"] == "engram rank 3";
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["args"]["rank"], 3) << e.dump();
    if (e["cat"] == "step") {
      ++steps;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.5);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 4.5);
    }
    if (e["cat"] == "compute") compute.emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(steps, 1);
  // Compute: step begin (0.5 us) -> arrival at the wait (2 us), wait end (3.5 us) -> step end (5 us).
  ASSERT_EQ(compute.size(), 2u);
  EXPECT_DOUBLE_EQ(compute[0].first, 0.5);
  EXPECT_DOUBLE_EQ(compute[0].second, 1.5);
  EXPECT_DOUBLE_EQ(compute[1].first, 3.5);
  EXPECT_DOUBLE_EQ(compute[1].second, 1.5);
  // Absolute time: every ts shifted by the origin's wall-clock time in microseconds.
  auto abs = tl.to_chrome_trace({4242, true});
  for (auto& e : abs["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "step") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.7e15 + 0.5);
    }
  auto back = Timeline::from_json(abs);
  ASSERT_TRUE(back.is_ok());
  EXPECT_DOUBLE_EQ(back->origin_unix_ns, 1.7e18);
  // Without a known origin the trace stays relative.
  Timeline rel = tl;
  rel.origin_unix_ns = kNotRecorded;
  const nlohmann::json rel_trace = rel.to_chrome_trace({1, true});
  for (auto& e : rel_trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "step") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.5);
    }
}

TEST(AnalyzeTimeline, PerRankQueueAcrossStepsAndShares) {
  Timeline tl;
  // Rank 0: step 0 layer 1 then layer 14; step 1 layer 1 queued behind step 0's layer 14.
  tl.add(t(0, 0, 100, 50, 100, 1));      // E = 50
  tl.add(t(0, 100, 150, 400, 400, 14));  // E = 0, queue 100
  LayerTiming s1 = t(120, 150, 250, 200, 250, 1);  // queued behind f=150: E = 50
  s1.step = 1;
  tl.add(s1);
  auto a = analyze_timeline(tl);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].layer_id, 1);
  EXPECT_DOUBLE_EQ(a[0].total_exposed_wait_ns, 100);
  EXPECT_DOUBLE_EQ(a[1].total_exposed_wait_ns, 0);
  EXPECT_DOUBLE_EQ(a[0].residual_s_ns.median, 0);  // fully explained by the recurrence across steps
  EXPECT_DOUBLE_EQ(a[1].queue_ns.median, 100);
  auto faster = analyze_timeline(tl, 0.5);
  EXPECT_DOUBLE_EQ(faster[0].total_model_exposed_wait_ns, 0);  // 0..50 then 120..170 vs c = 50 and 200
}

}  // namespace
}  // namespace engram

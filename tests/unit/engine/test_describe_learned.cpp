// The lines of a CUDA backend's description built from its JSON alone (so checked on the CPU): the Path lines (the
// served paths, then per path and batch-size range what the learner measured against the planner's prediction) and
// the Build line (where the backend's construction time went).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "engine/backend.hpp"

namespace engram::engine {
namespace {

TEST(DescribeLines, LearnedPredictedAndMeasuredPerPathAndSizeRange) {
  const nlohmann::json det = {
      {"backend", "cuda"},
      {"fast_path_mode", "planner"},
      {"fast_path",
       {{{"layer_index", 0},
         {"paths", {{"plain-uva, background", 40}, {"cache+uva, background", 3}}},
         {"unique_fraction", 0.97},
         {"cache_hit_rate", 0.2},
         {"learned",
          {{{"rows_min", 1024}, {"rows_max", 2047}, {"path", "plain-uva"}, {"batches", 40}, {"predicted_us", 50.0},
            {"measured_us", 55.0}, {"factor", 1.1}, {"barred", false}},
           {{"rows_min", 1024}, {"rows_max", 2047}, {"path", "cache+uva"}, {"batches", 3}, {"predicted_us", 35.0},
            {"measured_us", nullptr}, {"barred", true}}}}}}}};
  const std::vector<std::string> lines = describe_lines(det);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("plain-uva, background x40"), std::string::npos) << all;
  EXPECT_NE(all.find("learned rows 1024-2047, plain-uva: predicted 50.0 us, measured 55.0 us (40 batches, factor "
                     "1.10)"),
            std::string::npos)
      << all;
  // A missing factor (an older JSON) and a missing measurement read n/a.
  EXPECT_NE(all.find("learned rows 1024-2047, cache+uva: predicted 35.0 us, measured n/a us (3 batches, factor n/a), "
                     "barred"),
            std::string::npos)
      << all;
  // A description without the learner's entries (an older JSON) still gives the Path line.
  nlohmann::json old = det;
  old["fast_path"][0].erase("learned");
  const auto old_lines = describe_lines(old);
  ASSERT_FALSE(old_lines.empty());
  for (const auto& l : old_lines) EXPECT_EQ(l.find("learned"), std::string::npos) << l;
}

TEST(DescribeLines, LearningOffIsSaidOnlyWhenOff) {
  nlohmann::json det = {{"backend", "cuda"},
                        {"fast_path_mode", "planner"},
                        {"fast_path", {{{"layer_index", 0}, {"paths", {{"plain-uva, background", 4}}}, {"learning", false}}}}};
  std::string all;
  for (const auto& l : describe_lines(det)) all += l + "\n";
  EXPECT_NE(all.find("learning off: the planner keeps its calibrated costs"), std::string::npos) << all;
  det["fast_path"][0]["learning"] = true;
  all.clear();
  for (const auto& l : describe_lines(det)) all += l + "\n";
  EXPECT_EQ(all.find("learning off"), std::string::npos) << all;
}

TEST(DescribeLines, BuildLineSaysWhereConstructionTimeWent) {
  const nlohmann::json det = {
      {"backend", "cuda"},
      {"construction", {{"calibration_ms", 412.4}, {"cache_fill_ms", 2875.0}}},
      {"assembly", {{"profile_read_s", 0.4567}, {"backend_s", 3.3902}}}};
  std::string all;
  for (const auto& l : describe_lines(det)) all += l + "\n";
  EXPECT_NE(all.find("Build     backend 3390 ms: calibration 412 ms, cache fill from the profile 2875 ms; profile file "
                     "read 0.457 s"),
            std::string::npos)
      << all;
  // Steps that did not run (no planner, no profile) are n/a, not 0.
  nlohmann::json none = det;
  none["construction"]["calibration_ms"] = nullptr;
  none["construction"]["cache_fill_ms"] = nullptr;
  none["assembly"]["profile_read_s"] = nullptr;
  all.clear();
  for (const auto& l : describe_lines(none)) all += l + "\n";
  EXPECT_NE(all.find("calibration n/a ms, cache fill from the profile n/a ms; profile file read n/a s"),
            std::string::npos)
      << all;
}

}  // namespace
}  // namespace engram::engine

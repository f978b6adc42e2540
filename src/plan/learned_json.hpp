// The learner's records (CostLearner::paths()) as JSON, one object per (size range, path): what the engine's
// description and the benches report. `factor` is the correction the planner applies to the path's model price
// (measured / model, averaged in the log domain); predicted_us and measured_us are running averages of the served
// batches' corrected prediction and measured time. Header-only: its users already link nlohmann_json.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_num.hpp"
#include "plan/cost_learner.hpp"

namespace engram::plan {

inline nlohmann::json learned_json(const std::vector<LearnedPath>& paths) {
  nlohmann::json j = nlohmann::json::array();
  for (const LearnedPath& r : paths)
    j.push_back({{"rows_min", r.rows_min}, {"rows_max", r.rows_max}, {"path", r.name}, {"batches", r.samples},
                 {"predicted_us", json_num(r.predicted_us)}, {"measured_us", json_num(r.measured_us)},
                 {"factor", json_num(r.factor)}, {"barred", r.barred}});
  return j;
}

}  // namespace engram::plan

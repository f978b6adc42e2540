// A number that may be missing, as JSON: NaN or infinity (not recorded, could not be read) is null, never 0
// (docs/json.md). The one home of this rule for every layer that writes JSON (sched, replay, report, bench);
// report/numbers.hpp adds the text side ("n/a").
#pragma once

#include <cmath>

#include <nlohmann/json.hpp>

namespace engram {

inline nlohmann::json json_num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace engram

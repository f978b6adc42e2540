// Conditions: the facts every figure must carry (docs/measurement.md): this project's revision, compiler, CPU
// model, cores, cpufreq governor, load average, NUMA nodes and distances, kernel, THP settings, hugepages, NUMA
// balancing. Anything that cannot be read is null in the JSON and "n/a" in the summary.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace engram {

// Reads the machine's conditions now. `git_rev` is the build's revision (git_revision(); "n/a" -> null).
nlohmann::json collect_conditions(const std::string& git_rev);

// One-line summary: "cpu=<model> x<cores>, numa_nodes=<n>, kernel=<release>, thp=<enabled>, governor=<g>,
// load=<1-min load average>, rev=<revision>" with "n/a" for what could not be read.
std::string conditions_summary(const nlohmann::json& conditions);

}  // namespace engram

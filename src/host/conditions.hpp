// Conditions: the facts every figure must carry (design.md "Measurement rules"): git revision, compiler, CPU
// model, cores, NUMA nodes and distances, kernel, THP settings, hugepages. Anything that cannot be read is "n/a".
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace engram {

// Reads the machine's conditions now. `git_rev` is the build's revision (ENGRAM_GIT_REV).
nlohmann::json collect_conditions(const std::string& git_rev);

// "n/a"-safe one-line summary: "cpu=<model> x<cores>, nodes=<n>, kernel=<release>, thp=<enabled>".
std::string conditions_summary(const nlohmann::json& conditions);

}  // namespace engram

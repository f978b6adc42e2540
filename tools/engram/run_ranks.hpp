// `engram run --ranks N` (N > 1): the CLI side of src/replay/multi_rank.hpp, kept out of cmd_run.cpp so
// that the run command only forwards its options. Prints the human report (or the JSON) and returns the
// exit code (0, 1, 2 bad input, 77 unsupported).
#pragma once

#include "report/progress_line.hpp"
#include "replay/multi_rank.hpp"

namespace engram::cli {

struct RanksCliArgs {
  RankJob job;
  MultiRankOptions options;
  bool json = false;
  report::ProgressDisplay progress = report::ProgressDisplay::kAuto;  // the leader's fill/load line (--progress)
};

int run_ranks_cli(const RanksCliArgs& args);

}  // namespace engram::cli

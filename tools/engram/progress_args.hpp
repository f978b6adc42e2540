// `--progress auto|always|never`: the one switch of the progress lines (bytes, GB/s, ETA on stderr) of the long
// steps: the synthetic fill, checkpoint and model-directory loads and writes, GPU registration. Shared by run,
// replay, census, table create, table load and serve-table.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "report/progress_line.hpp"

namespace engram::cli {

inline void add_progress_option(CLI::App& sub, std::string& mode) {
  sub.add_option("--progress", mode,
                 "Progress lines of long steps (fill, load, write, GPU registration) on stderr: auto (default: when "
                 "stderr is a terminal, rewritten in place), always (also on a pipe or a file: one line a second), "
                 "never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
}

// The display of a --progress value (checked by add_progress_option).
inline report::ProgressDisplay progress_display(const std::string& mode) {
  if (mode == "always") return report::ProgressDisplay::kOn;
  if (mode == "never") return report::ProgressDisplay::kOff;
  return report::ProgressDisplay::kAuto;
}

}  // namespace engram::cli

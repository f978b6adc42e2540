// `engram run --ranks N` output: progress lines on stderr (not with --json), then the multi-rank report.
#include "run_ranks.hpp"

#include <cstdio>

#include "command.hpp"

namespace engram::cli {

int run_ranks_cli(const RanksCliArgs& a) {
  MultiRankOptions o = a.options;
  if (!a.json) o.progress = [](const std::string& m) { std::fprintf(stderr, "engram run: %s\n", m.c_str()); };
  auto r = run_multi_rank(a.job, o);
  if (!r.is_ok()) return report_failure("run", r.status());
  if (a.json) {
    std::printf("%s\n", r->dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s", multi_rank_text(*r).c_str());
  }
  return 0;
}

}  // namespace engram::cli

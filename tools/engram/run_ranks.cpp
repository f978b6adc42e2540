// `engram run --ranks N` output: progress lines on stderr (not with --json), then the multi-rank report.
#include "run_ranks.hpp"

#include <cstdio>
#include <memory>

#include "command.hpp"
#include "core/git_rev.hpp"
#include "sys/unix_socket.hpp"

namespace engram::cli {

int run_ranks_cli(const RanksCliArgs& a) {
  if (const std::string note = sys::runtime_dir_fallback_note(); !note.empty())
    std::fprintf(stderr, "engram run: note: %s\n", note.c_str());
  MultiRankOptions o = a.options;
  o.git_rev = git_revision();
  if (!a.json) o.progress = [](const std::string& m) { std::fprintf(stderr, "engram run: %s\n", m.c_str()); };
  o.notice = [](const std::string& m) { std::fprintf(stderr, "engram run: %s\n", m.c_str()); };
  const TableContent content = a.job.content();
  auto line = std::make_shared<report::ProgressLine>(content.to_string(), a.progress);
  if (line->enabled() && content.kind != TableContent::Kind::kZero) {
    const char* phase = content.kind == TableContent::Kind::kSynthetic ? "fill" : "load";
    o.on_load_progress = [line, phase](int64_t done, int64_t total, double elapsed) {
      line->update({phase, done, total, elapsed, done == total});
    };
  }
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

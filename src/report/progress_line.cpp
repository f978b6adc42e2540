// Progress lines (see progress_line.hpp): formatting is a pure function of the report, so it is
// tested without a terminal; ProgressLine only rate-limits and writes.
#include "report/progress_line.hpp"

#include <cstdio>
#include <memory>

#include "core/units.hpp"
#include "sys/file.hpp"

namespace engram::report {

std::string duration_text(double s) {
  char buf[32];
  if (!(s >= 0) || s > 1e7) return "n/a";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
  return buf;
}

std::string progress_line_text(const std::string& label, const TransferProgress& p) {
  const double done = static_cast<double>(p.done_bytes);
  const int pct = p.total_bytes > 0 ? static_cast<int>(100.0 * done / static_cast<double>(p.total_bytes)) : 100;
  std::string line = std::string(p.phase) + " " + label + ": " + format_bytes(p.done_bytes) + " / " +
                     format_bytes(p.total_bytes) + " (" + std::to_string(pct) + "%), " + format_gbps(done, p.elapsed_s);
  if (p.final) return line + ", " + duration_text(p.elapsed_s);
  const double rate = p.elapsed_s > 0 ? done / p.elapsed_s : 0;
  return line + ", ETA " +
         (rate > 0 ? duration_text(static_cast<double>(p.total_bytes - p.done_bytes) / rate) : std::string("n/a"));
}

ProgressLine::ProgressLine(std::string label, ProgressDisplay display)
    : label_(std::move(label)),
      enabled_(display == ProgressDisplay::kOn || (display == ProgressDisplay::kAuto && sys::is_terminal(2))),
      terminal_(sys::is_terminal(2)),
      last_print_(std::chrono::steady_clock::now()) {}

void ProgressLine::update(const TransferProgress& p) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!p.final && now - last_print_ < std::chrono::milliseconds(terminal_ ? 200 : 1000)) return;
  last_print_ = now;
  const std::string line = terminal_ ? "\r" + progress_line_text(label_, p) + (p.final ? "\x1b[K\n" : "\x1b[K")
                                     : progress_line_text(label_, p) + "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

TransferProgressFn with_progress_line(const std::string& label, ProgressDisplay display, TransferProgressFn fn) {
  auto line = std::make_shared<ProgressLine>(label, display);
  if (!line->enabled()) return fn;
  return [line, fn = std::move(fn)](const TransferProgress& p) {
    if (fn) fn(p);
    line->update(p);
  };
}

}  // namespace engram::report

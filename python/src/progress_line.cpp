// The load progress line of the bindings (progress_line.hpp): the text is a pure function of one report; the line
// object only rate-limits and writes.
#include "progress_line.hpp"

#include <pybind11/pybind11.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>

#include "engram/units.hpp"

namespace engram::py_bind {
namespace {

std::string duration_text(double s) {
  char buf[32];
  if (!(s >= 0) || s > 1e7) return "n/a";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
  return buf;
}

class ProgressLine {
 public:
  explicit ProgressLine(std::string label)
      : label_(std::move(label)), terminal_(isatty(2) == 1), last_(std::chrono::steady_clock::now()) {}
  void update(int64_t done, int64_t total, double elapsed_s) {
    const bool final = done == total;
    const auto now = std::chrono::steady_clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(terminal_ ? 200 : 1000)) return;
    last_ = now;
    const std::string text = progress_line_text("load", label_, done, total, elapsed_s);
    const std::string line = terminal_ ? "\r" + text + (final ? "\x1b[K\n" : "\x1b[K") : text + "\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool terminal_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace

std::string progress_line_text(const std::string& phase, const std::string& label, int64_t done, int64_t total,
                               double elapsed_s) {
  const double d = static_cast<double>(done);
  const int pct = total > 0 ? static_cast<int>(100.0 * d / static_cast<double>(total)) : 100;
  char rate[32];
  if (elapsed_s > 0) std::snprintf(rate, sizeof rate, "%.2f GB/s", d / elapsed_s / 1e9);
  else std::snprintf(rate, sizeof rate, "n/a");
  std::string line = phase + " " + label + ": " + format_bytes(done) + " / " + format_bytes(total) + " (" +
                     std::to_string(pct) + "%), " + rate;
  if (done == total) return line + ", " + duration_text(elapsed_s);
  const double per_s = elapsed_s > 0 ? d / elapsed_s : 0;
  return line + ", ETA " + (per_s > 0 ? duration_text(static_cast<double>(total - done) / per_s) : std::string("n/a"));
}

ProgressFn load_progress(const std::string& label, bool show, const std::optional<ProgressFn>& fn) {
  std::shared_ptr<ProgressLine> line = show ? std::make_shared<ProgressLine>(label) : nullptr;
  ProgressFn call = fn.value_or(nullptr);
  if (!line && !call) return nullptr;
  return [line, call](int64_t done, int64_t total, double elapsed_s) {
    if (line) line->update(done, total, elapsed_s);
    if (call) {
      pybind11::gil_scoped_acquire acquire;
      call(done, total, elapsed_s);
    }
  };
}

}  // namespace engram::py_bind

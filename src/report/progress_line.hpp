// The progress line of long transfers on a terminal: "load DIR: 12.3 GiB / 189.1 GiB (6%), 9.81 GB/s,
// ETA 19 s", rewritten in place on stderr, and a last line with the total time. The library (host/,
// engine/) never prints: it only calls on_progress callbacks; the CLI, the benches and the Python
// binding feed this from those callbacks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "host/transfer.hpp"

namespace engram::report {

using host::TransferProgress;
using host::TransferProgressFn;

// "12 s", "3m05s", "1h02m"; "n/a" for a negative, non-finite or absurd (> 10^7 s) duration.
std::string duration_text(double seconds);

// The line for one report, without the leading "\r" and the trailing erase / newline:
// "<phase> <label>: <done> / <total> (<pct>%), <GB/s>, ETA <t>"; a final report ends in the total time
// instead of the ETA.
std::string progress_line_text(const std::string& label, const TransferProgress& p);

// kAuto: print when stderr is a terminal, nothing otherwise. kOn / kOff force it (the CLI's --progress
// always / never).
enum class ProgressDisplay { kAuto, kOn, kOff };

// Prints progress_line_text to stderr: on a terminal at most every 200 ms, "\r"-rewritten in place; elsewhere (kOn
// on a pipe or a file) one plain line at most every second, so a log holds no carriage returns or escapes. The
// final report is always printed. Not thread-safe: call it from one thread (transfers report on the caller's
// thread); two lines on two threads each print whole lines.
class ProgressLine {
 public:
  ProgressLine(std::string label, ProgressDisplay display);
  bool enabled() const { return enabled_; }
  void update(const TransferProgress& p);

 private:
  std::string label_;
  bool enabled_;
  bool terminal_;
  std::chrono::steady_clock::time_point last_print_{};
};

// `fn` (may be empty), then the progress line labelled `label` when `display` asks for one: the
// on_progress of a checkpoint load or write that should show it. `fn` itself when no line is drawn.
TransferProgressFn with_progress_line(const std::string& label, ProgressDisplay display, TransferProgressFn fn);

}  // namespace engram::report

// The progress line of SharedTable.load / load_model(progress=True) on stderr: "load LABEL: 1.5 GiB / 4.0 GiB (37%),
// 2.51 GB/s, ETA 3 s", rewritten in place at most every 200 ms on a terminal, else one plain line at most every
// second (a log holds no carriage returns); the last report (done == total) always, ending in the total time. The
// library prints nothing (its loads only call on_progress); the CLI draws the same line with its own writer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace engram::py_bind {

using ProgressFn = std::function<void(int64_t, int64_t, double)>;

// The text of one report (pure): "<phase> <label>: <done> / <total> (<pct>%), <GB/s>, ETA <t>" or, when done ==
// total, "..., <t>" (the total time).
std::string progress_line_text(const std::string& phase, const std::string& label, int64_t done, int64_t total,
                               double elapsed_s);

// The on_progress of a load: the line labelled `label` when `show`, then `fn` (called with the GIL held) when
// given. Empty when neither. Called from one thread (the loading one, which has released the GIL).
ProgressFn load_progress(const std::string& label, bool show, const std::optional<ProgressFn>& fn);

}  // namespace engram::py_bind

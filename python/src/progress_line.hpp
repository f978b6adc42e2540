// The progress line of SharedTable.load / load_model(progress=True) on stderr: "load LABEL: 1.5 GiB / 4.0 GiB (37%),
// 2.51 GB/s, ETA 3 s", the CLI's own line (src/report/progress_line.hpp): rewritten in place at most every 200 ms on
// a terminal, else one plain line at most every second (a log holds no carriage returns); the last report (done ==
// total) always, ending in the total time. The library prints nothing (its loads only call on_progress).
// progress_line.cpp is compiled with the internal headers (python/CMakeLists.txt); this header needs none.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace engram::py_bind {

using ProgressFn = std::function<void(int64_t, int64_t, double)>;

// The on_progress of a load: the line labelled `label` when `show`, then `fn` (called with the GIL held) when
// given. Empty when neither. Called from one thread (the loading one, which has released the GIL).
ProgressFn load_progress(const std::string& label, bool show, const std::optional<ProgressFn>& fn);

}  // namespace engram::py_bind

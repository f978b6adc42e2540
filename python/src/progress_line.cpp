// The load progress line of the bindings (progress_line.hpp): report::ProgressLine draws it, as for the CLI.
#include "progress_line.hpp"

#include <pybind11/pybind11.h>

#include <memory>

#include "report/progress_line.hpp"

namespace engram::py_bind {

ProgressFn load_progress(const std::string& label, bool show, const std::optional<ProgressFn>& fn) {
  std::shared_ptr<report::ProgressLine> line =
      show ? std::make_shared<report::ProgressLine>(label, report::ProgressDisplay::kOn) : nullptr;
  ProgressFn call = fn.value_or(nullptr);
  if (!line && !call) return nullptr;
  return [line, call](int64_t done, int64_t total, double elapsed_s) {
    if (line) line->update({"load", done, total, elapsed_s, done == total});
    if (call) {
      pybind11::gil_scoped_acquire acquire;
      call(done, total, elapsed_s);
    }
  };
}

}  // namespace engram::py_bind

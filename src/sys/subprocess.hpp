// Helper programs run to completion (gnuplot for figures, node for the tokenizer): found by name on PATH,
// started with posix_spawnp, stdout and stderr optionally sent to a file, waited for without a deadline; and
// the private temporary files such a program reads or writes. Rank processes (deadlines, signals, the file
// guardian) are process.hpp's.
//
// Contract (as in the rest of src/sys): Status / Result, errno left as found, names in messages.
#pragma once

#include <string>
#include <vector>

#include "engram/status.hpp"
#include "sys/process.hpp"

namespace engram::sys {

struct RunOptions {
  std::string output_path;  // "": the child inherits stdout/stderr; else both go to this file (truncated)
};

// Runs argv[0] (searched on PATH) with this process's environment until it ends. kNotFound when the program is
// not found; the exit (code or signal) is the result otherwise, whatever the code.
Result<ExitInfo> run_program(const std::vector<std::string>& argv, const RunOptions& options = {});

// True when an executable `name` is on PATH (or /usr/bin:/bin when PATH is unset).
bool program_on_path(const std::string& name);

// A new empty file "<prefix>XXXXXX" (mkstemp: mode 0600, a name no one else has), closed; its path.
Result<std::string> make_temp_file(const std::string& prefix);

}  // namespace engram::sys

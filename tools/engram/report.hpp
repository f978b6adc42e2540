// Formatting helpers of the subcommands: the library's (src/report/numbers.hpp), named here for the CLI.
#pragma once

#include "report/numbers.hpp"

namespace engram::cli {

using report::fmt_json_num;
using report::fmt_num;
using report::json_num;

}  // namespace engram::cli

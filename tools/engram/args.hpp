// The argument layer every `engram` command shares: the checks that make bad input exit 2 before any work, with
// a message that names the option (CLI11 prefixes each validator's message with the option's name).
//
// Two parts. harden_options() runs once over the whole command tree (main.cpp) and attaches, by the option's
// value type, the checks CLI11 itself does not make: a floating option takes only finite numbers (CLI11's
// strtold reads "nan" and "inf", and its Range lets NaN through); an integer option takes only a decimal integer
// inside its type's full range (CLI11 reads with base 0, so "010" is 8 and "0x10" 16, and strtoull saturates
// 18446744073709551616 to 2^64 - 1 and wraps "-1"); an option whose name ends in "seed" takes no negative value.
// The checked text is rewritten in canonical decimal, so CLI11's own conversion then reads what was checked.
// The second part is per option: the validators of arg_checks.hpp for ranges (printed with %g, never a 309-digit
// DBL_MAX), sizes, lists, output paths (parent exists and is writable, not a directory, not a FIFO: checked at
// parse time, so nothing is computed for an output that cannot be written) and input files (regular files: a
// FIFO would block the read), and socket_path below.
// A value CLI11 cannot convert after these checks (an integer that the option's own type cannot hold) is
// reported by parse_command_line with the option's accepted values.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "arg_checks.hpp"
#include "option_rules.hpp"

namespace engram::cli {

// The per-option checks (finite_number, integer_in, range, size_in, list_of, parsed_by, non_empty, output_file,
// output_dir, input_file, input_path, input_dir) are in arg_checks.hpp.

// A socket path: not empty; when something is there already, a socket (a leftover of an earlier leader).
CLI::Validator socket_path();

// Attaches the type-based checks of the file comment to every option of `app` and of its subcommands, nested.
void harden_options(CLI::App& app);

}  // namespace engram::cli

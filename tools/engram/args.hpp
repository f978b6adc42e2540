// The argument layer every `engram` command shares: the checks that make bad input exit 2 before any work, with
// a message that names the option (CLI11 prefixes each validator's message with the option's name).
//
// Two parts. harden_options() runs once over the whole command tree (main.cpp) and attaches, by the option's
// value type, the checks CLI11 itself does not make: a floating option takes only finite numbers (CLI11's
// strtold reads "nan" and "inf", and its Range lets NaN through); an integer option takes only a decimal integer
// inside its type's full range (CLI11 reads with base 0, so "010" is 8 and "0x10" 16, and strtoull saturates
// 18446744073709551616 to 2^64 - 1 and wraps "-1"); an option whose name ends in "seed" takes no negative value.
// The checked text is rewritten in canonical decimal, so CLI11's own conversion then reads what was checked.
// The second part is per option: the validators below for ranges (printed with %g, never a 309-digit DBL_MAX),
// output paths (parent exists and is writable, not a directory, not a FIFO: checked at parse time, so nothing is
// computed for an output that cannot be written) and input files (regular files: a FIFO would block the read).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace engram::cli {

// A finite number in [lo, hi].
CLI::Validator finite_number(double lo, double hi);
// A finite number > 0.
CLI::Validator positive_number();
// A decimal integer in [lo, hi] (no clamping: a value outside is refused).
CLI::Validator integer_in(int64_t lo, int64_t hi);

// An output file (sys::check_output_path kFile). `special` words pass unchecked ("none", "-" for stdout).
CLI::Validator output_file(std::vector<std::string> special = {});
// An output directory that exists or can be made (its parent exists and is writable).
CLI::Validator output_dir();
// An input file that exists and is a regular file; input_path() also takes a directory.
CLI::Validator input_file();
CLI::Validator input_path();

// Attaches the type-based checks of the file comment to every option of `app` and of its subcommands, nested.
void harden_options(CLI::App& app);

// A non-empty text (a name or a path where '' would silently mean something else).
CLI::Validator non_empty();
// A byte size as core/units.hpp reads it ("512MiB", "1GB", "4096") in [lo, hi] bytes.
CLI::Validator size_in(int64_t lo, int64_t hi);

}  // namespace engram::cli

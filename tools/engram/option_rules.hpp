// Rules between the options of one command, checked once the whole command line is read (every value known) and
// before the command runs: a refusal is exit 2 with a message that names both options and says why, and nothing
// has been computed, read or written.
//
// - An option that has no effect in the combination given (it is read only when another option has some value)
//   is refused instead of being silently ignored: refuse_when / refuse_without. Presence-only relations that need
//   no reason keep CLI11's own excludes()/needs(); these add the reason, and the value-dependent cases CLI11
//   cannot express (`--timeline-absolute` with `--timeline none`).
// - Two options naming the same file (two outputs, or an output and an input) are refused: the second writer
//   would overwrite the first, or the command would overwrite what it reads. harden_options (args.hpp) installs
//   this check on every command from the validators of its options (output_file, output_dir, input_file): no
//   command declares it.
//
// CLI11 keeps one parse-complete callback per (sub)command; add_parse_check chains any number of checks on it, so
// every rule of a command and a command's own checks run in the order they were added.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace engram::cli {

// Whether `o` is a flag (takes no value: CLI11 gives a flag an expected count of 0, its type size stays 1).
inline bool is_flag(const CLI::Option& o) { return o.get_expected_max() == 0 || o.get_type_size_max() == 0; }

// Runs `check` after `sub`'s command line is parsed, before the command runs; it throws CLI::ValidationError (or
// another CLI::ParseError) to refuse it. Checks run in the order they were added.
void add_parse_check(CLI::App& sub, std::function<void()> check);

// `opt`, when given, is refused when `conflict()` returns a reason (the text after "--opt: "), e.g.
// "has no effect with --timeline none (no trace is written)". conflict() reads the parsed values.
void refuse_when(CLI::App& sub, CLI::Option* opt, std::function<std::string()> conflict);

// `opt`, when given, is refused unless `other` is given too; `why` says what `opt` is for, e.g.
// "it sizes the batches of the N-gram statistics". Message: "--batch: has no effect without --stats (why)".
void refuse_without(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string& why);

// `opt`, when given, is refused when `other` is given too. Message: "--no-bos: has no effect with --tokens (why)".
void refuse_with(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string& why);

// `opt`, when given, is refused while the value of `other` (`*value`: the parsed value, given or default) is one of
// `values` (refuse_with_value) or is none of them (refuse_unless_value). Message: "--tokens: has no effect with
// --ids zipf (why)".
void refuse_with_value(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string* value,
                       std::set<std::string> values, const std::string& why);
void refuse_unless_value(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string* value,
                         std::set<std::string> values, const std::string& why);

// Files a command derives from an output's name (hash's OUT.json beside --out OUT, run's <timeline>.rank<r>.json)
// are checked like the output itself (sys::check_output_path kFile) once the command line is read, before any
// work: a FIFO there would block the command after all its work, a directory would fail it only then. `derived`
// returns the derived paths from the parsed values (none when the output is not written); the refusal names `opt`.
void check_derived_outputs(CLI::App& sub, CLI::Option* opt, std::function<std::vector<std::string>()> derived);

// Whether two paths name the same file ("" and "-" name none; "none" neither, for the outputs that take it).
bool same_file(const std::string& x, const std::string& y);

// Installs the same-file check on `sub` over its options whose validators are path checks (args.hpp does this for
// every command).
void refuse_shared_files(CLI::App& sub);

}  // namespace engram::cli

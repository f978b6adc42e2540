// Subcommand registry of the `engram` CLI: each tools/engram/cmd_*.cpp registers itself with a
// static ENGRAM_COMMAND(...) so adding a subcommand touches no shared file.
//
// Exit codes (all subcommands): 0 success; 1 runtime failure; 2 bad input (argument, file,
// layout mismatch: nothing written); 77 the machine cannot do it (kUnsupported: a skip).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "engram/status.hpp"

namespace engram::cli {

// Called once to declare the subcommand's options on `sub`; returns the function that runs it.
using SetupFn = std::function<std::function<int()>(CLI::App& sub)>;

struct CommandEntry {
  std::string name;
  std::string description;
  SetupFn setup;
};

std::vector<CommandEntry>& command_registry();
bool register_command(std::string name, std::string description, SetupFn setup);

// Check for an option read into an unsigned integer (seeds): digits only. CLI11 itself would read
// "-1" into a uint64_t as 2^64 - 1 without a word.
inline CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
          return "expected a non-negative integer, got '" + text + "'";
        return {};
      },
      "UINT", "unsigned integer");
}

// The meaning of --threads 0 on every command (sys::threads_or_auto), for the --help texts.
inline constexpr const char* kAutoThreadsHelp =
    "0 = one per CPU this process may run on (its affinity mask, as taskset and cgroups set it)";

// Prints "engram <cmd>: <status>" to stderr and returns the exit code for it (see above).
int report_failure(const std::string& command, const Status& status);
int exit_code_for(const Status& status);

}  // namespace engram::cli

#define ENGRAM_COMMAND(ident, name, description, setup) \
  static const bool engram_cmd_registered_##ident = ::engram::cli::register_command(name, description, setup)

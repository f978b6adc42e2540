// The `engram` command tree and its parse, apart from running a command: main.cpp parses and then runs the command
// chosen; the argv fuzzer (fuzz/fuzz_cli_args.cpp) parses only, so that every command's options and the shared
// checks (args.hpp) meet arbitrary command lines without any command doing its work.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace engram::cli {

struct CommandLine {
  CLI::App app;
  // Each command's subcommand and the function that runs it (the SetupFn's result).
  std::vector<std::pair<CLI::App*, std::function<int()>>> commands;
};

// Every registered command's options declared on one app, the shared checks attached (harden_options). Declaring
// options does no work: nothing is read, written or started.
std::unique_ptr<CommandLine> build_command_line();

// Parses argv and makes every check of the argument layer. Returns the exit code when the process ends here: 0
// after --help or --version (printed to `out`), 2 after bad input (the message to `err`); nullopt when a command
// was chosen and its run function is to be called (run_command).
std::optional<int> parse_command_line(CommandLine& cl, int argc, char** argv, std::ostream& out, std::ostream& err);

// Runs the command parse_command_line chose, mapping an exception that escapes it to the exit codes of
// command.hpp (std::invalid_argument and std::out_of_range are bad input; anything else a runtime failure).
int run_command(CommandLine& cl);

}  // namespace engram::cli

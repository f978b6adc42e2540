// `engram`: the command-line front end. Subcommands live one per file (cmd_*.cpp) and register
// themselves; this file only parses and dispatches (command_line.hpp). It is also the commands' boundary: the
// shared argument checks (args.hpp) are attached to every option, and no exception leaves a command: one that
// escapes is reported with the command's name and mapped to the exit codes of command.hpp.
#include <cstdio>
#include <iostream>

#include "command_line.hpp"
#include "sys/fault.hpp"
#include "sys/process.hpp"

int main(int argc, char** argv) {
  using namespace engram::cli;
  const auto cl = build_command_line();
  // The termination signals (Ctrl-C, SIGTERM, SIGHUP, Ctrl-\, SIGUSR1/2: sys::kTerminationSignals) end a command
  // with their default action, except while a named object is half made (sys::DeferTermination): then when it
  // is whole and its guardian holds it. Commands that stop on their own (table create, serve-table) install
  // their handlers over these.
  if (engram::Status st = engram::sys::install_deferred_termination(); !st.is_ok())
    std::fprintf(stderr, "engram: %s\n", st.to_string().c_str());
  if (engram::Status st = engram::sys::check_fault_env(); !st.is_ok()) {
    std::fprintf(stderr, "engram: %s\n", st.message().c_str());
    return 2;
  }
  if (const auto code = parse_command_line(*cl, argc, argv, std::cout, std::cerr)) return *code;
  return run_command(*cl);
}

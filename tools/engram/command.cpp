// The subcommand registry and the exit codes of a Status (command.hpp).
#include "command.hpp"

#include <cstdio>

namespace engram::cli {

std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> entries;
  return entries;
}

bool register_command(std::string name, std::string description, SetupFn setup) {
  command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  return true;
}

int exit_code_for(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument:
    case Code::kNotFound: return 2;
    case Code::kUnsupported: return 77;
    default: return 1;
  }
}

int report_failure(const std::string& command, const Status& status) {
  std::fprintf(stderr, "engram %s: %s\n", command.c_str(), status.to_string().c_str());
  return exit_code_for(status);
}

}  // namespace engram::cli

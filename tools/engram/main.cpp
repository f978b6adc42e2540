// `engram`: the command-line front end. Subcommands live one per file (cmd_*.cpp) and register
// themselves; this file only parses and dispatches.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>

#include "command.hpp"
#include "engram/version.hpp"

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

int main(int argc, char** argv) {
  using namespace engram::cli;
  CLI::App app{
      "engram: serve DeepSeek Engram tables from host memory (shared, NUMA-placed, GPU zero-copy)\n"
      "and measure them. Run `engram <command> --help` for each command; `engram run` with no\n"
      "arguments runs the main job on a 512 MiB synthetic V4.1-Flash-shaped table."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("engram-offload ") + engram::kVersion + " (" + ENGRAM_GIT_REV + ")");
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "spdlog level: trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  auto& reg = command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> subs;
  for (auto& e : reg) {
    CLI::App* sub = app.add_subcommand(e.name, e.description);
    subs.emplace_back(sub, e.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  for (auto& [sub, run] : subs) {
    if (sub->parsed()) return run();
  }
  return 2;
}

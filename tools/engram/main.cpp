// `engram`: the command-line front end. Subcommands live one per file (cmd_*.cpp) and register
// themselves; this file only parses and dispatches. It is also the commands' boundary: the shared argument checks
// (args.hpp) are attached here to every option, and no exception leaves a command: one that escapes is reported
// with the command's name and mapped to the exit codes of command.hpp (std::invalid_argument and
// std::out_of_range, the standard parsers' refusals, are bad input; anything else a runtime failure).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <new>
#include <stdexcept>

#include "args.hpp"
#include "command.hpp"
#include "engram/version.hpp"
#include "sys/process.hpp"

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

namespace {

// Levenshtein distance, for "did you mean" on a mistyped command.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The first word that is not an option: the command the user asked for ("" if none, or after an option that is
// not a top-level one, which the parser then names). Only --help and --version come before it.
std::string command_word(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--help" || w == "-h" || w == "--version") continue;
    if (!w.empty() && w[0] == '-') return "";
    return w;
  }
  return "";
}

}  // namespace

}  // namespace engram::cli

int main(int argc, char** argv) {
  using namespace engram::cli;
  CLI::App app{
      "engram: serve DeepSeek Engram tables from host memory (shared, NUMA-placed, GPU zero-copy)\n"
      "and measure them. Run `engram <command> --help` for each command; `engram run` with no\n"
      "arguments runs the main job on a 512 MiB synthetic V4.1-Flash-shaped table."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("engram-offload ") + engram::kVersion + " (" + ENGRAM_GIT_REV + ")");

  auto& reg = command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> subs;
  for (auto& e : reg) {
    CLI::App* sub = app.add_subcommand(e.name, e.description);
    subs.emplace_back(sub, e.setup(*sub));
  }
  harden_options(app);
  // A word that names no command is a mistake the user can fix: say which command it is closest to.
  if (const std::string word = command_word(argc, argv); !word.empty()) {
    std::string best;
    size_t best_d = std::string::npos;
    bool known = false;
    for (const auto& e : reg) {
      if (e.name == word) known = true;
      const size_t d = edit_distance(word, e.name);
      if (d < best_d) best_d = d, best = e.name;
    }
    if (!known) {
      std::fprintf(stderr, "engram: unknown command '%s'%s; `engram --help` lists the commands\n", word.c_str(),
                   best_d <= std::max<size_t>(2, word.size() / 3) ? (" (did you mean '" + best + "'?)").c_str() : "");
      return 2;
    }
  }
  // Ctrl-C, SIGTERM and SIGHUP end a command with their default action, except while a named object is half
  // made (sys::DeferTermination): then when it is whole and its guardian holds it. Commands that stop on their
  // own (table create, serve-table) install their handlers over these.
  if (engram::Status st = engram::sys::install_deferred_termination(); !st.is_ok())
    std::fprintf(stderr, "engram: %s\n", st.to_string().c_str());
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
  for (auto& [sub, run] : subs) {
    if (!sub->parsed()) continue;
    const std::string name = sub->get_name();
    try {
      return run();
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "engram %s: invalid argument: %s\n", name.c_str(), e.what());
      return 2;
    } catch (const std::out_of_range& e) {
      std::fprintf(stderr, "engram %s: out of range: %s\n", name.c_str(), e.what());
      return 2;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "engram %s: out of memory\n", name.c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "engram %s: %s\n", name.c_str(), e.what());
      return 1;
    } catch (...) {
      std::fprintf(stderr, "engram %s: failed with an unknown exception\n", name.c_str());
      return 1;
    }
  }
  return 2;
}

// The command tree, its parse and the run of the chosen command (command_line.hpp).
#include "command_line.hpp"

#include <algorithm>
#include <cstdio>
#include <new>
#include <ostream>
#include <stdexcept>
#include <string>

#include "args.hpp"
#include "command.hpp"
#include "core/git_rev.hpp"
#include "engram/version.hpp"

namespace engram::cli {

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

// The subcommands `app` lists in its help (hidden ones, started by the CLI itself, left out), comma-separated.
std::string subcommand_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (!s->get_group().empty()) names += (names.empty() ? "" : ", ") + s->get_name();
  return names;
}

// A word after a command that takes subcommands (`engram model bogus`) names none of them, or the words end
// before one (`engram model`): the message lists them. An option where a subcommand is still to come that this
// command does not take (`engram table --bogus`) is named. The walk follows the subcommand words and stops at
// the first option this command takes (help included); "" when there is nothing to say.
std::string subcommand_mistake(const CLI::App& top, int argc, char** argv) {
  const CLI::App* app = &top;
  std::string path = "engram";
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w.empty()) return "";
    if (w[0] == '-') {
      const bool wants_subcommand = app == &top || app->get_require_subcommand_min() > 0;
      const std::string name = w.substr(0, w.find('='));
      if (!wants_subcommand || w == "-" || app->get_option_no_throw(name)) return "";
      if (app == &top) return "engram: unknown option '" + name + "'; `engram --help` lists the commands";
      return path + ": unknown option '" + name + "'; expected a subcommand, one of: " + subcommand_names(*app);
    }
    const auto subs = app->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return "";
    const CLI::App* next = nullptr;
    for (const CLI::App* s : subs)
      if (s->get_name() == w) next = s;
    if (!next) {
      if (app == &top || app->get_require_subcommand_min() == 0) return "";
      return path + ": unknown subcommand '" + w + "'; expected one of: " + subcommand_names(*app);
    }
    path += " " + w;
    app = next;
  }
  if (app == &top || app->get_require_subcommand_min() == 0) return "";
  return path + ": a subcommand is required, one of: " + subcommand_names(*app);
}

// A flag given a value (`--force=yes`, `--verbose=0`, also `--verbose=true`): refused whatever the word, naming the
// flag (CLI11, its flag override disabled by harden_options, would take "true" and name the flag without dashes).
// The walk follows the subcommand words as subcommand_mistake does; "" when no flag has a value.
std::string flag_with_value(const CLI::App& top, int argc, char** argv) {
  const CLI::App* app = &top;
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--") return "";
    if (w.rfind("--", 0) == 0) {
      const size_t eq = w.find('=');
      if (eq == std::string::npos) continue;
      const CLI::Option* o = app->get_option_no_throw(w.substr(0, eq));
      if (o && is_flag(*o))
        return o->get_name() + ": a flag takes no value, got '" + w + "' (give " + o->get_name() + " alone, or leave it out)";
      continue;
    }
    for (const CLI::App* s : app->get_subcommands([](const CLI::App*) { return true; }))
      if (s->get_name() == w) {
        app = s;
        break;
      }
  }
  return "";
}

// The option of the parsed command tree named `name` ("--layers", or a positional's name), or null.
const CLI::Option* find_parsed_option(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* o : app.get_options())
    if (o->get_name() == name) return o;
  for (const CLI::App* sub : app.get_subcommands())
    if (const CLI::Option* o = find_parsed_option(*sub, name)) return o;
  return nullptr;
}

// CLI11's "Could not convert: --layers = 99999999999" (a value that passed the checks of args.hpp but does not fit
// the option's own type) said again with what the option takes.
std::string conversion_message(const CLI::App& app, const std::string& what) {
  const std::string prefix = "Could not convert: ";
  const size_t eq = what.find(" = ");
  if (what.compare(0, prefix.size(), prefix) != 0 || eq == std::string::npos) return what;
  const std::string name = what.substr(prefix.size(), eq - prefix.size());
  const std::string value = what.substr(eq + 3);
  const CLI::Option* o = find_parsed_option(app, name);
  std::string takes = o ? o->get_type_name() : std::string();
  for (char& c : takes)
    if (c == ':') c = ' ';
  return name + ": '" + value + "' is out of the range of this option" + (takes.empty() ? "" : " (it takes " + takes + ")");
}

}  // namespace

std::unique_ptr<CommandLine> build_command_line() {
  auto cl = std::make_unique<CommandLine>();
  CLI::App& app = cl->app;
  app.description(
      "engram: serve DeepSeek Engram tables from host memory (shared, NUMA-placed, GPU zero-copy)\n"
      "and measure them. Run `engram <command> --help` for each command; `engram run` with no\n"
      "arguments runs the main job on a 512 MiB synthetic V4.1-Flash-shaped table.");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("engram-offload ") + engram::kVersion + " (" + git_revision() + ")");

  auto& reg = command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (auto& e : reg) {
    CLI::App* sub = app.add_subcommand(e.name, e.description);
    cl->commands.emplace_back(sub, e.setup(*sub));
  }
  harden_options(app);
  return cl;
}

std::optional<int> parse_command_line(CommandLine& cl, int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App& app = cl.app;
  // A word that names no command is a mistake the user can fix: say which command it is closest to.
  if (const std::string word = command_word(argc, argv); !word.empty()) {
    std::string best;
    size_t best_d = std::string::npos;
    bool known = false;
    for (const auto& [sub, run] : cl.commands) {
      const std::string& name = sub->get_name();
      if (name == word) known = true;
      const size_t d = edit_distance(word, name);
      if (d < best_d) best_d = d, best = name;
    }
    if (!known) {
      err << "engram: unknown command '" << word << "'"
          << (best_d <= std::max<size_t>(2, word.size() / 3) ? " (did you mean '" + best + "'?)" : std::string())
          << "; `engram --help` lists the commands\n";
      err.flush();
      return 2;
    }
  }
  if (const std::string msg = subcommand_mistake(app, argc, argv); !msg.empty()) {
    err << msg << "\n";
    err.flush();
    return 2;
  }
  if (const std::string msg = flag_with_value(app, argc, argv); !msg.empty()) {
    err << msg << "\n";
    err.flush();
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConversionError& e) {
    err << conversion_message(app, e.what()) << "\nRun with --help for more information.\n";
    err.flush();
    return 2;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    app.exit(e, out, err);
    return 2;
  }
  return std::nullopt;
}

int run_command(CommandLine& cl) {
  for (auto& [sub, run] : cl.commands) {
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

}  // namespace engram::cli

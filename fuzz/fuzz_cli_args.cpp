// libFuzzer target: the argument layer of every `engram` command on arbitrary command lines (argv fuzzing). The
// input is split into words on NUL and newline and parsed as `engram WORD...` by the CLI's own parse
// (command_line.hpp: every registered command's options, the shared checks of args.hpp), never run: no command
// does its work, nothing is written, started or served. Two shorthands steer the words to what the commands take:
// a one-byte first word picks a command by index (so most inputs reach a command's options), and a word of
// "\x01" + one byte becomes the option or subcommand name of that index among all the tree's names. Invariants:
// nothing crashes, no undefined behaviour, no exception escapes the parse (main() would die of it), and the parse
// either chooses a command or ends with the exit code of help (0) or of bad input (2), never another.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "command_line.hpp"

namespace {

constexpr size_t kMaxWords = 48;

void collect_names(const CLI::App& app, std::vector<std::string>& names) {
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  for (const CLI::App* sub : app.get_subcommands(std::function<bool(const CLI::App*)>{})) {
    names.push_back(sub->get_name());
    collect_names(*sub, names);
  }
}

// The command tree is declared once and parsed again for every input (CLI11 clears the previous parse's results
// first): declaring the whole tree for each input ran ~30 inputs/s under ASan, parsing it again thousands.
struct Tree {
  std::unique_ptr<engram::cli::CommandLine> cl = engram::cli::build_command_line();
  std::vector<std::string> commands;  // the top-level command names, sorted
  std::vector<std::string> names;     // every option and subcommand name of the tree
};

Tree& tree() {
  static Tree t = [] {
    Tree r;
    for (const auto& [sub, run] : r.cl->commands) r.commands.push_back(sub->get_name());
    collect_names(r.cl->app, r.names);
    return r;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Tree& t = tree();
  std::vector<std::string> words{"engram"};
  std::string cur;
  auto flush = [&] {
    if (words.size() > kMaxWords) return;
    if (words.size() == 1 && cur.size() == 1 && static_cast<unsigned char>(cur[0]) >= 0x20)
      cur = t.commands[static_cast<unsigned char>(cur[0]) % t.commands.size()];
    else if (cur.size() == 2 && cur[0] == '\x01')
      cur = t.names[static_cast<unsigned char>(cur[1]) % t.names.size()];
    words.push_back(cur);
    cur.clear();
  };
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') flush();
    else cur.push_back(c);
  }
  if (!cur.empty() || size == 0) flush();

  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  std::ostringstream out, err;
  const auto code = engram::cli::parse_command_line(*t.cl, static_cast<int>(words.size()), argv.data(), out, err);
  if (code && *code != 0 && *code != 2) std::abort();
  // Bad input is refused with a message; a chosen command parsed cleanly.
  if (code && *code == 2 && err.str().empty()) std::abort();
  return 0;
}

// Rules between a command's options (option_rules.hpp).
#include "option_rules.hpp"

#include "sys/file.hpp"

#include <filesystem>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace engram::cli {

namespace {

using Checks = std::vector<std::function<void()>>;

// The checks of each app. The app's parse-complete callback owns its list; this map only finds it again (a weak
// reference: when the app is destroyed the list goes with its callback, and an app made later at the same address
// starts a list of its own).
std::map<const CLI::App*, std::weak_ptr<Checks>>& lists() {
  static std::map<const CLI::App*, std::weak_ptr<Checks>> m;
  return m;
}

// The names of the validators of arg_checks.hpp that check a path (see there).
bool has_validator(CLI::Option* o, const std::string& name) {
  try {
    return o->get_validator(name)->get_name() == name;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

}  // namespace

void add_parse_check(CLI::App& sub, std::function<void()> check) {
  auto& m = lists();
  std::shared_ptr<Checks> list = m[&sub].lock();
  if (!list) {
    list = std::make_shared<Checks>();
    m[&sub] = list;
    sub.parse_complete_callback([list] {
      for (const auto& c : *list) c();
    });
  }
  list->push_back(std::move(check));
}

void refuse_when(CLI::App& sub, CLI::Option* opt, std::function<std::string()> conflict) {
  add_parse_check(sub, [opt, conflict = std::move(conflict)] {
    if (opt->count() == 0) return;
    if (const std::string why = conflict(); !why.empty()) throw CLI::ValidationError(opt->get_name(), why);
  });
}

void refuse_without(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string& why) {
  refuse_when(sub, opt, [other, why] {
    return other->count() > 0 ? std::string() : "has no effect without " + other->get_name() + " (" + why + ")";
  });
}

void refuse_with(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string& why) {
  refuse_when(sub, opt, [other, why] {
    return other->count() == 0 ? std::string() : "has no effect with " + other->get_name() + " (" + why + ")";
  });
}

namespace {
void refuse_by_value(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string* value,
                     std::set<std::string> values, bool refuse_if_in, const std::string& why) {
  refuse_when(sub, opt, [other, value, values = std::move(values), refuse_if_in, why] {
    if ((values.count(*value) > 0) != refuse_if_in) return std::string();
    // A positional (experiment's id) is named by its value alone.
    const std::string with = other->get_name().rfind('-', 0) == 0 ? other->get_name() + " " + *value : *value;
    return "has no effect with " + with + " (" + why + ")";
  });
}
}  // namespace

void refuse_with_value(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string* value,
                       std::set<std::string> values, const std::string& why) {
  refuse_by_value(sub, opt, other, value, std::move(values), true, why);
}

void refuse_unless_value(CLI::App& sub, CLI::Option* opt, CLI::Option* other, const std::string* value,
                         std::set<std::string> values, const std::string& why) {
  refuse_by_value(sub, opt, other, value, std::move(values), false, why);
}

void check_derived_outputs(CLI::App& sub, CLI::Option* opt, std::function<std::vector<std::string>()> derived) {
  add_parse_check(sub, [opt, derived = std::move(derived)] {
    for (const std::string& path : derived()) {
      const Status s = sys::check_output_path(path, sys::OutputKind::kFile);
      if (!s.is_ok()) throw CLI::ValidationError(opt->get_name(), "derived output '" + path + "': " + s.message());
    }
  });
}

bool same_file(const std::string& x, const std::string& y) {
  auto none = [](const std::string& p) { return p.empty() || p == "-" || p == "none"; };
  if (none(x) || none(y)) return false;
  if (x == y) return true;
  std::error_code ex, ey;
  const std::filesystem::path cx = std::filesystem::weakly_canonical(x, ex), cy = std::filesystem::weakly_canonical(y, ey);
  if (!ex && !ey && cx == cy) return true;
  // The same file under two names (a hard link, a bind mount): compare device and inode of files that exist.
  std::error_code e;
  return std::filesystem::equivalent(x, y, e) && !e;
}

void refuse_shared_files(CLI::App& sub) {
  std::vector<std::pair<CLI::Option*, bool>> paths;  // (option, is an output)
  for (CLI::Option* o : sub.get_options()) {
    if (is_flag(*o)) continue;
    if (has_validator(o, "OUTPUT")) paths.emplace_back(o, true);
    else if (has_validator(o, "INPUT")) paths.emplace_back(o, false);
  }
  if (paths.size() < 2) return;
  add_parse_check(sub, [paths] {
    // Every given value of every path option, in the order of the options; an input may be given several times
    // (a list of token files).
    std::vector<std::tuple<CLI::Option*, bool, std::string>> given;
    for (const auto& [o, out] : paths)
      for (const std::string& v : o->results()) given.emplace_back(o, out, v);
    for (size_t i = 0; i < given.size(); ++i)
      for (size_t j = i + 1; j < given.size(); ++j) {
        const auto& [oi, out_i, vi] = given[i];
        const auto& [oj, out_j, vj] = given[j];
        if ((!out_i && !out_j) || oi == oj || !same_file(vi, vj)) continue;
        const std::string what = out_i && out_j ? "give each output its own file"
                                                : "the output would overwrite the input: give the output another name";
        throw CLI::ValidationError(oi->get_name() + " and " + oj->get_name(), "both name '" + vj + "': " + what);
      }
  });
}

}  // namespace engram::cli

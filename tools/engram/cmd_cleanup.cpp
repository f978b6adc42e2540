// `engram cleanup [--dir DIR]... [--dry-run] [--json]`: removes what killed engram processes left
// behind -- named shared-table files, leaders' sockets, checkpoint temp files -- whose owner is
// dead, and says what it removed and what it kept and why (host/sweep.hpp). Objects of live owners,
// of other users and of unknown owners are never removed. Default directories: /dev/shm and the
// leaders' socket directory ($XDG_RUNTIME_DIR/engram or /tmp/engram-<uid>).
//
// Exit: 0 swept (whether or not anything was there), 1 an object could not be removed or a
// directory not read, 2 a --dir that does not exist.
#include <cstdio>
#include <filesystem>

#include "command.hpp"
#include "core/units.hpp"
#include "host/sweep.hpp"

namespace engram::cli {
namespace {

struct CleanupArgs {
  std::vector<std::string> dirs;
  bool dry_run = false;
  bool json = false;
};

int cleanup(const CleanupArgs& a) {
  host::SweepOptions o;
  o.dry_run = a.dry_run;
  o.dirs = a.dirs.empty() ? host::default_sweep_dirs() : a.dirs;
  for (const auto& d : a.dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec))
      return report_failure("cleanup", Status(Code::kInvalidArgument, "--dir " + d + ": not a directory"));
  }
  const host::SweepReport r = host::sweep_stale(o);
  if (a.json) {
    nlohmann::json j = r.to_json();
    j["schema"] = "engram.cleanup/1";
    j["command"] = "cleanup";
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& line : r.lines()) std::printf("%s\n", line.c_str());
    std::string dirs;
    for (const auto& d : r.dirs) dirs += (dirs.empty() ? "" : ", ") + d;
    std::printf("%s %zu object(s) (%s) of dead owners in %s; kept %zu\n", a.dry_run ? "would remove" : "removed",
                r.removed.size(), format_bytes(r.removed_bytes()).c_str(), dirs.c_str(), r.kept.size());
  }
  return r.errors.empty() ? 0 : 1;
}

auto setup(CLI::App& sub) -> std::function<int()> {
  auto a = std::make_shared<CleanupArgs>();
  sub.add_option("--dir", a->dirs,
                 "Directory to sweep (repeatable; default /dev/shm and the socket directory). Use the --shm-dir of a "
                 "run, or a checkpoint directory for the temp files of a killed `table create`");
  sub.add_flag("--dry-run", a->dry_run, "Say what would be removed; remove nothing");
  sub.add_flag("--json", a->json, "Print JSON: dirs, removed, kept (path, kind, bytes, owner_pid, reason), errors");
  sub.footer(
      "An object is removed only when its owner record names a process that is gone (or whose pid now\n"
      "belongs to another process, or that ran in an earlier boot), and it belongs to this user.");
  return [a] { return cleanup(*a); };
}

}  // namespace
}  // namespace engram::cli

ENGRAM_COMMAND(cleanup, "cleanup", "Remove the tables, sockets and temp files of dead engram processes (never a live one's)",
               engram::cli::setup);

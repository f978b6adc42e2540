// Helper programs and their temporary files (see subprocess.hpp). The child gets its output file through
// posix_spawn file actions (opened in the child, dup'ed onto stderr), so no descriptor of ours is handed over.
#include "sys/subprocess.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

extern char** environ;

namespace engram::sys {

Result<ExitInfo> run_program(const std::vector<std::string>& argv, const RunOptions& options) {
  if (argv.empty()) return Status(Code::kInvalidArgument, "run_program: empty argv");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  if (const int rc = ::posix_spawn_file_actions_init(&actions); rc != 0)
    return errno_status(rc, "posix_spawn_file_actions_init(" + argv[0] + ")");
  int rc = 0;
  if (!options.output_path.empty()) {
    rc = ::posix_spawn_file_actions_addopen(&actions, 1, options.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                            0600);
    if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  pid_t pid = -1;
  if (rc == 0) rc = ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT) return Status(Code::kNotFound, "run_program: " + argv[0] + " not found on PATH", rc);
  if (rc != 0) return errno_status(rc, "posix_spawnp(" + argv[0] + ")");
  return wait_process(pid, Deadline::max());  // a helper program runs until it ends
}

bool program_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

Result<std::string> make_temp_file(const std::string& prefix) {
  std::string path = prefix + "XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) return errno_status(errno, "mkstemp(" + path + ")");
  ::close(fd);
  return path;
}

}  // namespace engram::sys

// Process primitives of the shared group: spawning rank processes, waiting for them with a deadline,
// signals, the termination signals as a stop request, and a file guardian that removes named files when the
// process that made them dies without removing them itself (kill -9 included).
//
// Why a guardian: a named /dev/shm table exists from its creation until the leader unlinks it once
// every peer has attached. A leader killed in that window cannot clean up, and no peer may yet know
// the path. The guardian is a child forked before any table or socket exists; it holds nothing but
// one end of a socket pair whose other end only the leader holds (O_CLOEXEC, so rank processes started
// by exec do not inherit it). When its end reaches EOF -- the leader exited, however it exited --
// the guardian unlinks every path still armed whose device and inode are the ones armed (a path that
// now names another file is left alone), then exits. Between fork and exit it calls only
// async-signal-safe functions (read, lstat, unlink, close, _exit), as required after fork in a
// multi-threaded process.
//
// Contract (as in the rest of src/sys): Status / Result, errno left as found, names in messages.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engram/status.hpp"
#include "sys/unix_socket.hpp"

namespace engram::sys {

// posix_spawn(argv[0], argv) with this process's environment; the child inherits only descriptors
// without O_CLOEXEC. Returns the child's pid. kNotFound when argv[0] does not exist.
Result<int> spawn_process(const std::vector<std::string>& argv);

struct ExitInfo {
  bool exited = false;    // exited with a code
  int code = -1;          // exit code when exited
  bool signaled = false;  // killed by a signal
  int signal = 0;
  std::string to_string() const;  // "exit 0", "killed by signal 9 (SIGKILL)"
};
// waitpid(pid) until it ends or the deadline (kTimeout; the child keeps running). kNotFound for a
// pid that is not our child.
Result<ExitInfo> wait_process(int pid, Deadline deadline);
// kill(pid, sig). kNotFound when the process is gone.
Status kill_process(int pid, int sig);
// readlink(/proc/self/exe).
Result<std::string> self_exe_path();

// The signals whose default action ends the process and that a user or a supervisor sends to stop one: Ctrl-C
// (SIGINT), kill (SIGTERM), a closed terminal (SIGHUP), Ctrl-\ (SIGQUIT, whose default action also dumps core),
// and the user signals SIGUSR1/SIGUSR2, which no command uses for anything else. Every handler below treats them
// alike: the named objects of a command are removed whichever of them ends it.
inline constexpr int kTerminationSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// Installs handlers of kTerminationSignals that only record the signal (no SA_RESTART, so blocking calls return
// EINTR). stop_requested() / stop_signal() read the record.
Status install_stop_handlers();
bool stop_requested() noexcept;
int stop_signal() noexcept;
// A thread that runs fn with kTerminationSignals blocked (the mask is set around its creation and inherited), so the
// process's stop signals interrupt the threads that wait for them (EINTR above), never a helper thread.
std::thread start_thread_without_stop_signals(std::function<void()> fn);

// Termination signals (kTerminationSignals) arriving while a named object is half made -- its owner record
// written, the object not yet armed with its guardian -- would leave a record (or an object) no guardian knows.
// install_deferred_termination() installs handlers that give each such signal its default action at once, except
// inside a DeferTermination section, where it is held and taken when the last section ends. For commands that
// do not stop on their own (a command with install_stop_handlers replaces these). A section costs one atomic
// increment; without the handlers it does nothing else.
Status install_deferred_termination();
class DeferTermination {
 public:
  DeferTermination() noexcept;
  ~DeferTermination();
  DeferTermination(const DeferTermination&) = delete;
  DeferTermination& operator=(const DeferTermination&) = delete;
};

// See the file comment. Move-only; the destructor closes its end (the guardian then unlinks what is
// still armed) and reaps the child.
class FileGuardian {
 public:
  FileGuardian() = default;
  ~FileGuardian();
  FileGuardian(FileGuardian&& o) noexcept;
  FileGuardian& operator=(FileGuardian&& o) noexcept;
  FileGuardian(const FileGuardian&) = delete;
  FileGuardian& operator=(const FileGuardian&) = delete;

  // Forks the guardian. Call before creating what it will guard, while no other thread holds locks
  // it could need (the child uses none). kInvalidArgument is never returned; kIo/kOutOfMemory from
  // socketpair(2) / fork(2).
  static Result<FileGuardian> start();
  bool running() const { return pid_ > 0; }
  int pid() const { return pid_; }
  // The guardian will unlink `path` (as it is now: device + inode from lstat), and its owner record
  // (sys/owner.hpp) when it has one, if this process dies first. kInvalidArgument for a path over
  // 1023 bytes or with a newline; kNotFound when it does not exist; kIo when the guardian is gone.
  Status arm(const std::string& path);
  // Forget `path` and its owner record (unlinked on purpose, or they must outlive us).
  Status disarm(const std::string& path);

 private:
  Status arm_one(const std::string& path);
  Status send(const std::string& line);
  int pid_ = -1;
  int write_fd_ = -1;
};

// For a process started by another (spawn_process) that must not outlive it: asks the kernel to SIGKILL this
// process when its parent ends (prctl PR_SET_PDEATHSIG), then checks that the parent is still `parent_pid`, since
// a parent that ended before the request leaves this process to another one and the request would never fire.
// kIo when the parent is already gone. The kernel sends the signal when the thread that started this
// process ends: the parent must start it from a thread that lives as long as the parent needs it.
Status end_with_parent(int parent_pid);

}  // namespace engram::sys

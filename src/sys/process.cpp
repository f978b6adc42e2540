// Process primitives (see process.hpp). The guardian's child side is written against a fixed budget
// of static memory and async-signal-safe calls only: after fork(2) in a process that may have other
// threads, malloc or stdio could deadlock on a lock held by a thread that no longer exists.
#include "process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "owner.hpp"

extern char** environ;

namespace engram::sys {
namespace {

volatile sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) { g_stop_signal = sig; }

// ---- guardian child (async-signal-safe from here to guardian_main's end) ----

constexpr int kGuardMaxEntries = 256;  // a table file and its owner record take two
constexpr int kGuardMaxPath = 1024;

struct GuardEntry {
  bool used;
  unsigned long long dev, ino;
  char path[kGuardMaxPath];
};
GuardEntry g_entries[kGuardMaxEntries];
char g_line[kGuardMaxPath + 64];

bool parse_ull(const char*& p, unsigned long long* out) {
  unsigned long long v = 0;
  const char* start = p;
  while (*p >= '0' && *p <= '9') v = v * 10 + static_cast<unsigned long long>(*p++ - '0');
  *out = v;
  return p != start;
}

bool same_path(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

void copy_path(char* dst, const char* src) {
  int i = 0;
  for (; src[i] && i < kGuardMaxPath - 1; ++i) dst[i] = src[i];
  dst[i] = '\0';
}

char g_record[kGuardMaxPath + 32];

// Unlinks "<dir>/.engram-owner.<name>" of "<dir>/<name>" (owner_record_path, written out with no allocation).
void unlink_record_of(const char* path) {
  const char* prefix = kOwnerRecordPrefix;
  int slash = -1, n = 0;
  for (; path[n]; ++n)
    if (path[n] == '/') slash = n;
  int o = 0;
  for (int i = 0; i <= slash; ++i) g_record[o++] = path[i];
  for (const char* p = prefix; *p; ++p) g_record[o++] = *p;
  for (int i = slash + 1; i < n && o < static_cast<int>(sizeof g_record) - 1; ++i) g_record[o++] = path[i];
  g_record[o] = '\0';
  (void)::unlink(g_record);
}

// "A <dev> <ino> <path>" arms, "D <path>" disarms.
void guardian_line(const char* line) {
  if (line[0] == 'A' && line[1] == ' ') {
    const char* p = line + 2;
    unsigned long long dev = 0, ino = 0;
    if (!parse_ull(p, &dev) || *p++ != ' ' || !parse_ull(p, &ino) || *p++ != ' ') return;
    for (const auto& e : g_entries)  // armed twice (by its creator's hook and by its group): one entry
      if (e.used && e.dev == dev && e.ino == ino && same_path(e.path, p)) return;
    for (auto& e : g_entries) {
      if (!e.used) {
        e.used = true;
        e.dev = dev;
        e.ino = ino;
        copy_path(e.path, p);
        return;
      }
    }
  } else if (line[0] == 'D' && line[1] == ' ') {
    for (auto& e : g_entries)
      if (e.used && same_path(e.path, line + 2)) e.used = false;
  }
}

[[noreturn]] void guardian_main(int rd, int max_fd) {
  // Only the pipe stays open: an inherited socket or table descriptor would keep a peer from seeing
  // the leader's end of the connection close, or keep a table alive.
#ifdef SYS_close_range
  const bool ranged = (rd == 0 || ::syscall(SYS_close_range, 0u, static_cast<unsigned>(rd - 1), 0u) == 0) &&
                      ::syscall(SYS_close_range, static_cast<unsigned>(rd + 1), ~0u, 0u) == 0;
#else
  const bool ranged = false;
#endif
  if (!ranged)
    for (int fd = 0; fd < max_fd; ++fd)
      if (fd != rd) (void)::close(fd);
  struct sigaction ign{};
  ign.sa_handler = SIG_IGN;
  // A terminal's Ctrl-C or Ctrl-\ (SIGQUIT), or any termination signal sent to the process group, must not
  // take the guardian before the leader: it has to outlive it to do its job.
  for (int sig : kTerminationSignals) (void)::sigaction(sig, &ign, nullptr);
  (void)::sigaction(SIGPIPE, &ign, nullptr);
  size_t len = 0;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(rd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n') {
        g_line[len] = '\0';
        guardian_line(g_line);
        len = 0;
      } else if (len < sizeof g_line - 1) {
        g_line[len++] = buf[i];
      }
    }
  }
  for (auto& e : g_entries) {
    if (!e.used) continue;
    struct stat st;
    if (::lstat(e.path, &st) == 0 && static_cast<unsigned long long>(st.st_dev) == e.dev &&
        static_cast<unsigned long long>(st.st_ino) == e.ino) {
      (void)::unlink(e.path);
      // And its owner record by name, also when the leader died before arming the record itself (between
      // FileGuardian::arm's two lines): the object was ours (same inode), so is the record of its name.
      unlink_record_of(e.path);
    }
  }
  ::_exit(0);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGSTOP: return "SIGSTOP";
    default: return "signal";
  }
}

}  // namespace

// ---- spawn / wait / kill --------------------------------------------------------------------------

Result<int> spawn_process(const std::vector<std::string>& argv) {
  if (argv.empty()) return Status(Code::kInvalidArgument, "spawn_process: empty argv");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), nullptr, nullptr, args.data(), environ);
  if (rc != 0) return errno_status(rc, "posix_spawn(" + argv[0] + ")");
  return static_cast<int>(pid);
}

std::string ExitInfo::to_string() const {
  if (exited) return "exit " + std::to_string(code);
  if (signaled) return "killed by signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
  return "running";
}

Result<ExitInfo> wait_process(int pid, Deadline deadline) {
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      ExitInfo e;
      if (WIFEXITED(st)) {
        e.exited = true;
        e.code = WEXITSTATUS(st);
      } else if (WIFSIGNALED(st)) {
        e.signaled = true;
        e.signal = WTERMSIG(st);
      }
      return e;
    }
    if (r < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == ECHILD) return Status(Code::kNotFound, "waitpid(" + std::to_string(pid) + "): not a child of ours", err);
      return errno_status(err, "waitpid(" + std::to_string(pid) + ")");
    }
    const int64_t left = remaining_ms(deadline);
    if (left <= 0)
      return Status(Code::kTimeout, "waitpid(" + std::to_string(pid) + "): still running at the deadline", ETIMEDOUT);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(left, 5)));
  }
}

Status kill_process(int pid, int sig) {
  if (::kill(pid, sig) != 0) {
    const int err = errno;
    if (err == ESRCH) return Status(Code::kNotFound, "kill(" + std::to_string(pid) + "): no such process", err);
    return errno_status(err, "kill(" + std::to_string(pid) + ", " + std::to_string(sig) + ")");
  }
  return Status::ok();
}

Result<std::string> self_exe_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n < 0) return errno_status(errno, "readlink(/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

Status install_stop_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking wait returns EINTR and the caller looks at the flag
  for (int sig : kTerminationSignals)
    if (::sigaction(sig, &sa, nullptr) != 0) return errno_status(errno, "sigaction(" + std::to_string(sig) + ")");
  return Status::ok();
}

namespace {
std::atomic<int> g_defer_depth{0};
volatile sig_atomic_t g_deferred_signal = 0;

// Default action of `sig` now: the process ends as if no handler had been installed (raise(3) targets this
// thread, and a fatal default action ends every thread).
void die_by(int sig) {
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  (void)::sigaction(sig, &dfl, nullptr);
  (void)::raise(sig);
}

void on_terminate_signal(int sig) {
  if (g_defer_depth.load() > 0) {
    g_deferred_signal = sig;
    return;
  }
  die_by(sig);
}
}  // namespace

Status install_deferred_termination() {
  struct sigaction sa{};
  sa.sa_handler = on_terminate_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a held signal must not make a blocking call fail
  for (int sig : kTerminationSignals)
    if (::sigaction(sig, &sa, nullptr) != 0) return errno_status(errno, "sigaction(" + std::to_string(sig) + ")");
  return Status::ok();
}

DeferTermination::DeferTermination() noexcept { g_defer_depth.fetch_add(1); }

DeferTermination::~DeferTermination() {
  if (g_defer_depth.fetch_sub(1) == 1 && g_deferred_signal != 0) die_by(g_deferred_signal);
}

bool stop_requested() noexcept { return g_stop_signal != 0; }
int stop_signal() noexcept { return g_stop_signal; }

std::thread start_thread_without_stop_signals(std::function<void()> fn) {
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : kTerminationSignals) sigaddset(&block, sig);
  (void)::pthread_sigmask(SIG_BLOCK, &block, &old);
  std::thread t(std::move(fn));
  (void)::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

// ---- FileGuardian ---------------------------------------------------------------------------------

FileGuardian::~FileGuardian() {
  if (write_fd_ >= 0) (void)::close(write_fd_);
  write_fd_ = -1;
  if (pid_ > 0) {
    // EOF on its pipe makes it unlink what is still armed and exit at once.
    (void)wait_process(pid_, deadline_after(std::chrono::seconds(10)));
  }
  pid_ = -1;
}

FileGuardian::FileGuardian(FileGuardian&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), write_fd_(std::exchange(o.write_fd_, -1)) {}

FileGuardian& FileGuardian::operator=(FileGuardian&& o) noexcept {
  if (this != &o) {
    this->~FileGuardian();
    pid_ = std::exchange(o.pid_, -1);
    write_fd_ = std::exchange(o.write_fd_, -1);
  }
  return *this;
}

Result<FileGuardian> FileGuardian::start() {
  // A socket pair rather than a pipe: send(MSG_NOSIGNAL) cannot raise SIGPIPE in the leader should
  // the guardian be gone.
  int p[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return errno_status(errno, "FileGuardian: socketpair");
  long max_fd = ::sysconf(_SC_OPEN_MAX);
  if (max_fd <= 0 || max_fd > 65536) max_fd = 65536;
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(p[0]);
    ::close(p[1]);
    return errno_status(err, "FileGuardian: fork");
  }
  if (pid == 0) guardian_main(p[0], static_cast<int>(max_fd));
  ::close(p[0]);
  FileGuardian g;
  g.pid_ = pid;
  g.write_fd_ = p[1];
  return g;
}

Status FileGuardian::send(const std::string& line) {
  if (write_fd_ < 0) return Status(Code::kIo, "FileGuardian: not running");
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::send(write_fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return errno_status(err, "FileGuardian: write to guardian pid " + std::to_string(pid_));
    }
    off += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status FileGuardian::arm_one(const std::string& path) {
  if (path.size() >= static_cast<size_t>(kGuardMaxPath) || path.find('\n') != std::string::npos || path.empty())
    return Status(Code::kInvalidArgument, "FileGuardian::arm(" + path + "): empty, too long or holds a newline");
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    // The object was created by this process just before: gone now is a runtime failure (removed by another
    // process), not a missing input.
    const int err = errno;
    Status s = errno_status(err, "FileGuardian::arm: lstat(" + path + ")");
    return err == ENOENT ? Status(Code::kIo, s.message() + ": the file this process just made is gone (removed by another process)", err) : s;
  }
  return send("A " + std::to_string(static_cast<unsigned long long>(st.st_dev)) + " " +
              std::to_string(static_cast<unsigned long long>(st.st_ino)) + " " + path + "\n");
}

Status FileGuardian::arm(const std::string& path) {
  // The object first, its record second, and the guardian unlinks in that order too: whenever this
  // process dies (even between the two lines), what may be left is a record without its object
  // (a sweep removes it), never an object without its record (a sweep could not tell it is stale).
  ENGRAM_RETURN_IF_ERROR(arm_one(path));
  const std::string record = owner_record_path(path);
  if (::access(record.c_str(), F_OK) == 0) return arm_one(record);
  return Status::ok();
}

Status FileGuardian::disarm(const std::string& path) {
  ENGRAM_RETURN_IF_ERROR(send("D " + path + "\n"));
  return send("D " + owner_record_path(path) + "\n");
}

Status end_with_parent(int parent_pid) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return errno_status(errno, "prctl(PR_SET_PDEATHSIG)");
  if (::getppid() != parent_pid)
    return Status(Code::kIo, "the process that started this one (pid " + std::to_string(parent_pid) + ") is gone");
  return Status::ok();
}

}  // namespace engram::sys

// A peer pointed at a killed leader's socket waited its whole join timeout (60 s in `engram run --ranks`) although
// the socket's owner record already said the leader was dead: connect_unix now gives up at once with kIo naming
// the dead owner, and still waits (up to its deadline) on a socket whose owner is alive but not listening yet.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "multiproc_support.hpp"
#include "sys/owner.hpp"
#include "sys/unix_socket.hpp"

using namespace engram;
using namespace engram::test;

TEST(StaleSocket, ConnectGivesUpAtOnceWhenTheOwnerIsDead) {
  TempDir dir("/tmp", "engram-stale-sock");
  const std::string path = dir.path + "/leader.sock";
  std::fflush(nullptr);
  const int pid = fork();
  if (pid == 0) {
    // The leader: listens (socket file and owner record made), then dies without cleaning up.
    auto l = sys::listen_unix(path);
    _exit(l.is_ok() ? 0 : 3);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_TRUE(sys::read_owner_record(sys::owner_record_path(path)).is_ok()) << "the leader left no owner record";
  // A deadline far beyond the test's patience: a regression shows as kTimeout after it, not as a pass.
  auto s = sys::connect_unix(path, sys::deadline_after(std::chrono::seconds(30)));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), Code::kIo) << s.status().to_string();
  EXPECT_NE(s.status().message().find("owner is dead"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find(std::to_string(pid)), std::string::npos) << s.status().message();
}

TEST(StaleSocket, ALiveOwnerIsWaitedFor) {
  TempDir dir("/tmp", "engram-stale-sock");
  const std::string path = dir.path + "/leader.sock";
  // Our own record (alive) and a socket bound but not listening yet (connect: ECONNREFUSED), as a leader between
  // bind(2) and listen(2): connect keeps retrying until its deadline.
  ASSERT_TRUE(sys::write_owner_record(path).is_ok());
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  auto s = sys::connect_unix(path, sys::deadline_after(std::chrono::milliseconds(200)));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), Code::kTimeout) << s.status().to_string();
  ::close(fd);
  (void)sys::remove_owner_record(path);
}

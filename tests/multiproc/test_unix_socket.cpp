// Unix-socket layer of the shared group: messages of any size and descriptors arrive intact; malformed,
// oversized, wrong-version and truncated messages are errors (and their descriptors are closed), never
// crashes; EOF and silence are told apart; the socket directory must be private; stale sockets are
// replaced, live ones are not; SO_PEERCRED names the other process; the file guardian removes a file
// when its owner is killed and leaves a disarmed or replaced one alone.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstring>

#include "multiproc_support.hpp"
#include "sys/process.hpp"
#include "sys/unix_socket.hpp"

using namespace engram;
using namespace engram::test;

namespace {

std::string random_bytes(size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng()());
  return s;
}

std::string header(uint32_t magic, uint16_t version, uint16_t type, uint64_t payload, uint32_t n_fds) {
  std::string h(sys::kWireHeaderBytes, '\0');
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 2);
  std::memcpy(h.data() + 6, &type, 2);
  std::memcpy(h.data() + 8, &payload, 8);
  std::memcpy(h.data() + 16, &n_fds, 4);
  return h;
}

sys::Deadline soon() { return sys::deadline_after(std::chrono::seconds(10)); }

int open_fd_count() {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(UnixSocket, MessagesOfAnySizeAndDescriptorsArriveIntact) {
  auto pair = sys::unix_socket_pair();
  ASSERT_TRUE(pair.is_ok());
  auto& a = pair->first;  // not a structured binding: clang 14 cannot capture one in a lambda
  auto& b = pair->second;
  // Sizes around the frame boundaries, plus a multi-frame one; sent from another thread so that the
  // sender blocks on a full buffer while the receiver drains it.
  const size_t sizes[] = {0, 1, sys::kFrameBytes - sys::kWireHeaderBytes, sys::kFrameBytes - sys::kWireHeaderBytes + 1,
                          3 * sys::kFrameBytes + 17 + rng()() % 1000, (1u << 20) + rng()() % 4096};
  std::vector<std::string> payloads;
  for (size_t n : sizes) payloads.push_back(random_bytes(n));
  int memfd = memfd_create("engram-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  const std::string mark = random_bytes(64);
  ASSERT_EQ(write(memfd, mark.data(), mark.size()), static_cast<ssize_t>(mark.size()));
  std::thread sender([&] {
    for (size_t i = 0; i < payloads.size(); ++i) {
      std::vector<int> fds;
      if (i % 2 == 0) fds = {memfd, memfd};
      Status s = sys::send_message(a, static_cast<uint16_t>(100 + i), payloads[i], fds, soon());
      EXPECT_TRUE(s.is_ok()) << s.to_string();
    }
  });
  for (size_t i = 0; i < payloads.size(); ++i) {
    auto m = sys::recv_message(b, 4u << 20, soon());
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_EQ(m->type, 100 + i);
    EXPECT_EQ(m->payload, payloads[i]) << "message " << i << " of " << payloads[i].size() << " B";
    ASSERT_EQ(m->n_fds(), i % 2 == 0 ? 2u : 0u);
    if (i % 2 == 0) {
      const int fd = m->take_fd(1);
      ASSERT_GE(fd, 0);
      EXPECT_NE(fd, memfd);  // a new descriptor for the same object
      std::string back(mark.size(), '\0');
      ASSERT_EQ(pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
      EXPECT_EQ(back, mark);
      EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
      close(fd);
    }
  }
  sender.join();
  close(memfd);
}

TEST(UnixSocket, MalformedMessagesAreErrorsAndTheirDescriptorsAreClosed) {
  auto pair = sys::unix_socket_pair();
  ASSERT_TRUE(pair.is_ok());
  auto& a = pair->first;  // not a structured binding: clang 14 cannot capture one in a lambda
  auto& b = pair->second;
  const std::string body = random_bytes(1 + rng()() % 200);
  struct Case {
    std::string bytes;
    const char* expect;
  };
  const Case cases[] = {
      {header(0x12345678, sys::kWireVersion, 1, body.size(), 0) + body, "bad magic 0x12345678"},
      {header(sys::kWireMagic, sys::kWireVersion + 1, 1, body.size(), 0) + body, "wire version 2"},
      {header(sys::kWireMagic, sys::kWireVersion, 1, uint64_t{1} << 33, 0), "exceeds the limit"},
      {header(sys::kWireMagic, sys::kWireVersion, 1, 1, 0) + body + "xx", "payload bytes, header announces 1"},
      {std::string("ENG"), "shorter than the 20-byte header"},
      {header(sys::kWireMagic, sys::kWireVersion, 1, 0, 3), "announces 3 descriptors, 0 arrived"},
      {header(sys::kWireMagic, sys::kWireVersion, 1, 0, 0) + std::string(sys::kFrameBytes, 'x'), "packet longer than"},
  };
  for (const auto& c : cases) {
    ASSERT_EQ(send(a.fd(), c.bytes.data(), c.bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(c.bytes.size()));
    auto m = sys::recv_message(b, 1 << 20, soon());
    ASSERT_FALSE(m.is_ok()) << c.expect;
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument) << m.status().to_string();
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << m.status().message();
  }
  // Descriptors riding on a refused message are closed, not leaked into the receiver.
  const int before = open_fd_count();
  {
    int fds[3] = {dup(0), dup(0), dup(0)};
    const std::string h = header(sys::kWireMagic, sys::kWireVersion + 7, 1, 0, 3);
    iovec iov{const_cast<char*>(h.data()), h.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof fds);
    std::memcpy(CMSG_DATA(cm), fds, sizeof fds);
    ASSERT_GT(sendmsg(a.fd(), &msg, MSG_NOSIGNAL), 0);
    for (int fd : fds) close(fd);
  }
  auto m = sys::recv_message(b, 1 << 20, soon());
  EXPECT_FALSE(m.is_ok());
  EXPECT_EQ(open_fd_count(), before);
  // A message cut off by its sender's death mid-way is kIo, not a hang.
  const std::string h = header(sys::kWireMagic, sys::kWireVersion, 1, 100000, 0);
  ASSERT_GT(send(a.fd(), h.data(), h.size(), MSG_NOSIGNAL), 0);
  a.close();
  auto cut = sys::recv_message(b, 1 << 20, soon());
  EXPECT_EQ(cut.status().code(), Code::kIo) << cut.status().to_string();
  EXPECT_EQ(cut.status().sys_error(), EPIPE);
}

TEST(UnixSocket, ClosedIsIoAndSilenceIsTimeout) {
  auto pair = sys::unix_socket_pair();
  ASSERT_TRUE(pair.is_ok());
  auto& a = pair->first;  // not a structured binding: clang 14 cannot capture one in a lambda
  auto& b = pair->second;
  auto silent = sys::recv_message(b, 1024, sys::deadline_after(std::chrono::milliseconds(50)));
  EXPECT_EQ(silent.status().code(), Code::kTimeout) << silent.status().to_string();
  a.close();
  auto closed = sys::recv_message(b, 1024, soon());
  EXPECT_EQ(closed.status().code(), Code::kIo);
  EXPECT_EQ(closed.status().sys_error(), EPIPE);
  Status s = sys::send_message(b, 1, "x", {}, soon());
  EXPECT_EQ(s.code(), Code::kIo) << s.to_string();  // and no SIGPIPE killed us
  EXPECT_EQ(s.sys_error(), EPIPE);
  // A receiver that never reads: the sender gives up at its deadline.
  auto p2 = sys::unix_socket_pair();
  ASSERT_TRUE(p2.is_ok());
  const std::string big(8u << 20, 'x');
  Status full = sys::send_message(p2->first, 1, big, {}, sys::deadline_after(std::chrono::milliseconds(100)));
  EXPECT_EQ(full.code(), Code::kTimeout) << full.to_string();
  // Too many descriptors is refused before anything is sent.
  std::vector<int> many(sys::kMaxMessageFds + 1, 0);
  EXPECT_EQ(sys::send_message(p2->first, 1, "", many, soon()).code(), Code::kInvalidArgument);
}

TEST(UnixSocket, PrivateDirectoryIsRequired) {
  TempDir d;
  EXPECT_TRUE(sys::check_private_dir(d.path).is_ok());
  chmod(d.path.c_str(), 0755);
  Status open = sys::check_private_dir(d.path);
  EXPECT_EQ(open.code(), Code::kPermission);
  EXPECT_NE(open.message().find("mode 0755"), std::string::npos) << open.message();
  chmod(d.path.c_str(), 0700);
  const std::string link = d.path + "/link";
  const std::string real = d.path + "/real";
  ASSERT_TRUE(sys::make_private_dir(real).is_ok());
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  EXPECT_EQ(sys::check_private_dir(link).code(), Code::kPermission);
  EXPECT_EQ(sys::check_private_dir(d.path + "/missing").code(), Code::kNotFound);
  auto dir = sys::private_runtime_dir();
  ASSERT_TRUE(dir.is_ok()) << dir.status().to_string();
  EXPECT_TRUE(sys::check_private_dir(*dir).is_ok());
}

TEST(UnixSocket, ListenReplacesStaleSocketAndRefusesLiveOne) {
  TempDir d;
  const std::string path = d.path + "/s.sock";
  {
    auto l = sys::listen_unix(path);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    struct stat st{};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    auto again = sys::listen_unix(path);
    EXPECT_EQ(again.status().code(), Code::kInvalidArgument);
    EXPECT_NE(again.status().message().find("already in use"), std::string::npos);
    // The peer's end: credentials are ours.
    auto c = sys::connect_unix(path, soon());
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    auto s = sys::accept_unix(*l, soon());
    ASSERT_TRUE(s.is_ok());
    auto cred = sys::peer_credentials(*s);
    ASSERT_TRUE(cred.is_ok());
    EXPECT_EQ(cred->pid, getpid());
    EXPECT_EQ(cred->uid, geteuid());
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);  // a clean close removes the socket file
  // A stale socket (its listener died without cleaning up) is replaced.
  Child dead = fork_child([&] {
    auto l = sys::listen_unix(path);
    if (l.is_ok()) raise(SIGKILL);
    return nlohmann::json{{"status", status_json(l.status())}};
  });
  EXPECT_EQ(collect(dead)["killed"], SIGKILL);
  ASSERT_EQ(access(path.c_str(), F_OK), 0);
  auto l = sys::listen_unix(path);
  EXPECT_TRUE(l.is_ok()) << l.status().to_string();
  // Not a socket: refused, left alone.
  const std::string file = d.path + "/plain";
  close(open(file.c_str(), O_CREAT | O_WRONLY, 0600));
  EXPECT_EQ(sys::listen_unix(file).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(access(file.c_str(), F_OK), 0);
  // Too long for sun_path.
  EXPECT_EQ(sys::listen_unix(d.path + "/" + std::string(200, 'x')).status().code(), Code::kInvalidArgument);
  // Nobody listening: connect gives up at its deadline, naming the cause.
  auto none = sys::connect_unix(d.path + "/nobody.sock", sys::deadline_after(std::chrono::milliseconds(60)));
  EXPECT_EQ(none.status().code(), Code::kTimeout);
  EXPECT_NE(none.status().message().find("ENOENT"), std::string::npos) << none.status().message();
  auto accept_none = sys::accept_unix(*l, sys::deadline_after(std::chrono::milliseconds(30)));
  EXPECT_EQ(accept_none.status().code(), Code::kTimeout);
}

TEST(FileGuardian, UnlinksArmedFileWhenOwnerIsKilled) {
  TempDir d{"/dev/shm", "engram-mp-guard"};
  const std::string armed = d.path + "/armed";
  const std::string disarmed = d.path + "/disarmed";
  const std::string replaced = d.path + "/replaced";
  Child owner = fork_child([&] {
    auto g = sys::FileGuardian::start();
    if (!g.is_ok()) return nlohmann::json{{"status", status_json(g.status())}};
    for (const auto& p : {armed, disarmed, replaced}) {
      close(open(p.c_str(), O_CREAT | O_WRONLY, 0600));
      if (!g->arm(p).is_ok()) return nlohmann::json{{"arm", p}};
    }
    (void)g->disarm(disarmed);
    // Same path, another file: the guardian must not remove it.
    unlink(replaced.c_str());
    close(open(replaced.c_str(), O_CREAT | O_WRONLY, 0600));
    // What was written is read by the guardian even after we die: the socket keeps it.
    raise(SIGKILL);
    return nlohmann::json{};
  });
  EXPECT_EQ(collect(owner)["killed"], SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (access(armed.c_str(), F_OK) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_NE(access(armed.c_str(), F_OK), 0) << "armed file survived its owner";
  EXPECT_EQ(access(disarmed.c_str(), F_OK), 0);
  EXPECT_EQ(access(replaced.c_str(), F_OK), 0);
  // In-process: the destructor ends the guardian, which removes what is still armed.
  const std::string mine = d.path + "/mine";
  {
    auto g = sys::FileGuardian::start();
    ASSERT_TRUE(g.is_ok());
    close(open(mine.c_str(), O_CREAT | O_WRONLY, 0600));
    ASSERT_TRUE(g->arm(mine).is_ok());
    // arm() is given files this process just made: one gone is a runtime failure (removed by another process).
    EXPECT_EQ(g->arm(d.path + "/missing").code(), Code::kIo);
    EXPECT_EQ(g->arm("bad\npath").code(), Code::kInvalidArgument);
  }
  EXPECT_NE(access(mine.c_str(), F_OK), 0);
}

}  // namespace

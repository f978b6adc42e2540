// Unix-socket primitives of the shared-group protocol (see unix_socket.hpp for the wire format).
//
// Every socket is non-blocking and every wait is a poll(2) against an absolute deadline, so no call can
// outlive its caller's timeout: a peer that stops reading cannot wedge a sender (EAGAIN -> poll POLLOUT
// -> deadline), and a peer that stops writing cannot wedge a receiver. EINTR restarts the wait with
// the time that is left. recvmsg always asks for descriptors (MSG_CMSG_CLOEXEC), even when none is
// expected, so that descriptors sent with a malformed message are collected and closed rather than
// leaked into this process.
#include "unix_socket.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "owner.hpp"

namespace engram::sys {
namespace {

bool is_closed_errno(int err) { return err == EPIPE || err == ECONNRESET || err == ENOTCONN; }

Status closed_status(const std::string& what) {
  return Status(Code::kIo, what + ": connection closed by the other end (its process exited?)", EPIPE);
}

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Fills a sockaddr_un; kInvalidArgument for a path that does not fit.
Status make_addr(const std::string& path, sockaddr_un* addr, socklen_t* len) {
  if (path.empty() || path.size() > kMaxSocketPathBytes)
    return Status(Code::kInvalidArgument, "socket path '" + path + "': length " + std::to_string(path.size()) +
                                              " is outside 1.." + std::to_string(kMaxSocketPathBytes) +
                                              " bytes (sun_path)");
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path, path.data(), path.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return Status::ok();
}

Result<int> new_socket(const std::string& what) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno_status(errno, what + ": socket(AF_UNIX, SOCK_SEQPACKET)");
  return fd;
}

// Waits for `events` on one descriptor. OK when ready (or hung up: the next call reports it),
// kTimeout at the deadline.
Status wait_fd(int fd, short events, Deadline deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int64_t ms = remaining_ms(deadline);
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (n > 0) return Status::ok();
    if (n == 0) return Status(Code::kTimeout, what + ": no progress before the deadline", ETIMEDOUT);
    const int err = errno;
    if (err != EINTR) return errno_status(err, what + ": poll");
  }
}

}  // namespace

int64_t remaining_ms(Deadline d) {
  const auto left = d - SteadyClock::now();
  if (left <= SteadyClock::duration::zero()) return 0;
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(left).count();
  return (us + 999) / 1000;
}

// ---- UnixSocket / UnixListener ----------------------------------------------------------------------

UnixSocket::~UnixSocket() { close(); }

UnixSocket& UnixSocket::operator=(UnixSocket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void UnixSocket::close() noexcept {
  if (fd_ >= 0) {
    const int saved = errno;
    (void)::close(fd_);
    errno = saved;
  }
  fd_ = -1;
}

UnixListener::~UnixListener() { close(); }

UnixListener::UnixListener(UnixListener&& o) noexcept { *this = std::move(o); }

UnixListener& UnixListener::operator=(UnixListener&& o) noexcept {
  if (this != &o) {
    close();
    sock_ = std::move(o.sock_);
    path_ = std::move(o.path_);
    device_ = o.device_;
    inode_ = o.inode_;
    linked_ = std::exchange(o.linked_, false);
  }
  return *this;
}

Status UnixListener::unlink_path() {
  if (!linked_) return Status::ok();
  linked_ = false;
  const int saved = errno;
  struct stat st{};
  // Only remove the path if it is still our socket: another leader may have replaced a stale one
  // (and its owner record with it). device_ is 0 when listen_unix failed between bind and lstat.
  if (::lstat(path_.c_str(), &st) != 0 || (device_ != 0 && (static_cast<uint64_t>(st.st_dev) != device_ ||
                                                           static_cast<uint64_t>(st.st_ino) != inode_))) {
    errno = saved;
    return Status::ok();
  }
  if (::unlink(path_.c_str()) != 0) {
    const int err = errno;
    errno = saved;
    if (err == ENOENT) return Status::ok();
    return errno_status(err, "unlink(" + path_ + ")");
  }
  Status rec = remove_owner_record(path_);
  errno = saved;
  return rec;
}

void UnixListener::close() noexcept {
  (void)unlink_path();
  sock_.close();
}

// ---- private directory -----------------------------------------------------------------------------

Status check_private_dir(const std::string& dir) {
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) {
    const int err = errno;
    return errno_status(err, "lstat(" + dir + ")");
  }
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  if (S_ISLNK(st.st_mode))
    return Status(Code::kPermission, "socket directory " + dir + " is a symlink (refused: it could point anywhere)");
  if (!S_ISDIR(st.st_mode)) return Status(Code::kPermission, "socket directory " + dir + " is not a directory");
  if (st.st_uid != ::geteuid())
    return Status(Code::kPermission, "socket directory " + dir + " is owned by uid " + std::to_string(st.st_uid) +
                                         ", not by this process's uid " + std::to_string(::geteuid()));
  if ((st.st_mode & 077) != 0)
    return Status(Code::kPermission, "socket directory " + dir + " has mode " + mode +
                                         ": other users could reach the socket; it must be 0700");
  return Status::ok();
}

Status make_private_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0) {
    const int err = errno;
    if (err != EEXIST) return errno_status(err, "mkdir(" + dir + ", 0700)");
  }
  return check_private_dir(dir);
}

std::string private_runtime_dir_name() {
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && xdg[0] == '/' && check_private_dir(xdg).is_ok())
    return std::string(xdg) + "/engram";
  return "/tmp/engram-" + std::to_string(::geteuid());
}

std::string runtime_dir_fallback_note() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg == nullptr || xdg[0] == '\0') return "";
  const std::string fallback = "/tmp/engram-" + std::to_string(::geteuid());
  if (xdg[0] != '/') return std::string("XDG_RUNTIME_DIR=") + xdg + " is not an absolute path: using " + fallback;
  const Status s = check_private_dir(xdg);
  if (s.is_ok()) return "";
  return std::string("XDG_RUNTIME_DIR=") + xdg + " is not usable (" + s.message() + "): using " + fallback;
}

Result<std::string> private_runtime_dir() {
  const std::string dir = private_runtime_dir_name();
  ENGRAM_RETURN_IF_ERROR(make_private_dir(dir));
  return dir;
}

// ---- listen / accept / connect -------------------------------------------------------------------

Result<UnixListener> listen_unix(const std::string& path, int backlog) {
  sockaddr_un addr{};
  socklen_t len = 0;
  ENGRAM_RETURN_IF_ERROR(make_addr(path, &addr, &len));
  const std::string what = "listen_unix(" + path + ")";
  ENGRAM_ASSIGN_OR_RETURN(int fd, new_socket(what));
  UnixListener l;
  l.sock_ = UnixSocket(fd);
  // The owner record comes first (see owner.hpp); a dead owner's record at this path is replaced.
  Status rec = write_owner_record(path);
  if (rec.sys_error() == EEXIST) {
    auto r = read_owner_record(owner_record_path(path));
    std::string why = r.is_ok() ? "" : r.status().message();
    if (r.is_ok() && r->file_uid == ::geteuid() && owner_state(r->owner, &why) == OwnerState::kDead) {
      (void)remove_owner_record(path);
      rec = write_owner_record(path);
    } else {
      return Status(Code::kInvalidArgument, what + ": already in use (" + why + ")", EADDRINUSE);
    }
  }
  if (!rec.is_ok()) return rec.with_context(what);
  bool keep_record = false;
  struct RecordGuard {
    const std::string& path;
    const bool& keep;
    ~RecordGuard() {
      if (!keep) (void)remove_owner_record(path);
    }
  } record_guard{path, keep_record};
  for (int attempt = 0;; ++attempt) {
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) break;
    const int err = errno;
    if (err != EADDRINUSE || attempt > 0) return errno_status(err, what + ": bind");
    struct stat st{};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
      return Status(Code::kInvalidArgument, what + ": the path exists and is not a socket", EADDRINUSE);
    // A socket file is there: live (someone accepts) or stale (its leader died).
    auto probe = connect_unix(path, SteadyClock::now());
    if (probe.is_ok())
      return Status(Code::kInvalidArgument, what + ": already in use (another leader listens there)", EADDRINUSE);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_status(errno, what + ": unlink stale socket");
  }
  l.path_ = path;
  l.linked_ = true;
  keep_record = true;  // from here on the listener removes socket and record together
  if (::listen(fd, backlog) != 0) return errno_status(errno, what + ": listen");
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return errno_status(errno, what + ": lstat after bind");
  l.device_ = static_cast<uint64_t>(st.st_dev);
  l.inode_ = static_cast<uint64_t>(st.st_ino);
  // connect(2) needs write permission on the socket file; the directory is the main fence.
  if (::chmod(path.c_str(), 0600) != 0) return errno_status(errno, what + ": chmod 0600");
  return l;
}

Result<UnixSocket> accept_unix(const UnixListener& listener, Deadline deadline) {
  const std::string what = "accept(" + listener.path() + ")";
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return UnixSocket(fd);
    const int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) return errno_status(err, what);
    Status s = wait_fd(listener.fd(), POLLIN, deadline, what);
    if (!s.is_ok()) {
      if (s.code() == Code::kTimeout) return Status(Code::kTimeout, what + ": no connection before the deadline", ETIMEDOUT);
      return s;
    }
  }
}

Result<UnixSocket> connect_unix(const std::string& path, Deadline deadline) {
  sockaddr_un addr{};
  socklen_t len = 0;
  ENGRAM_RETURN_IF_ERROR(make_addr(path, &addr, &len));
  const std::string what = "connect(" + path + ")";
  const auto start = SteadyClock::now();
  int last_err = 0;
  for (;;) {
    ENGRAM_ASSIGN_OR_RETURN(int fd, new_socket(what));
    UnixSocket s(fd);
    int rc;
    do {
      rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return s;
    last_err = errno;
    if (last_err == EACCES || last_err == EPERM)
      return errno_status(last_err, what + " (the socket's directory or file belongs to someone else)");
    if (last_err != ENOENT && last_err != ECONNREFUSED && last_err != EAGAIN) return errno_status(last_err, what);
    // A socket file nobody accepts on: when its owner record says the process that made it is dead, no listener
    // will ever come (a killed leader's stale socket), so waiting out the deadline would only delay the error.
    if (last_err == ECONNREFUSED) {
      auto rec = read_owner_record(owner_record_path(path));
      std::string why;
      if (rec.is_ok() && owner_state(rec->owner, &why) == OwnerState::kDead)
        return Status(Code::kIo, what + ": ECONNREFUSED and the socket's owner is dead (" + why +
                                     "): a stale socket, no listener will come", ECONNREFUSED);
    }
    if (SteadyClock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(10, remaining_ms(deadline))));
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start).count();
  return Status(Code::kTimeout,
                what + ": no listener after " + std::to_string(waited) + " ms (last error " +
                    (last_err == ENOENT ? "ENOENT: no socket file" : last_err == ECONNREFUSED ? "ECONNREFUSED: nobody accepts" : "EAGAIN: backlog full") +
                    ")",
                last_err);
}

Result<std::pair<UnixSocket, UnixSocket>> unix_socket_pair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
    return errno_status(errno, "socketpair(AF_UNIX, SOCK_SEQPACKET)");
  return std::make_pair(UnixSocket(sv[0]), UnixSocket(sv[1]));
}

Result<PeerCredentials> peer_credentials(const UnixSocket& socket) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket.fd(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return errno_status(errno, "getsockopt(SO_PEERCRED)");
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

uint32_t effective_uid() noexcept { return ::geteuid(); }
int process_id() noexcept { return ::getpid(); }

Status set_reuse_address(int fd) {
  const int yes = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) != 0)
    return Status(Code::kIo, std::string("setsockopt(SO_REUSEADDR): ") + std::strerror(errno), errno);
  return Status::ok();
}

// ---- messages -------------------------------------------------------------------------------------

Message::~Message() { close_fds(); }

Message::Message(Message&& o) noexcept : type(o.type), payload(std::move(o.payload)), fds_(std::move(o.fds_)) {
  o.fds_.clear();
}

Message& Message::operator=(Message&& o) noexcept {
  if (this != &o) {
    close_fds();
    type = o.type;
    payload = std::move(o.payload);
    fds_ = std::move(o.fds_);
    o.fds_.clear();
  }
  return *this;
}

int Message::take_fd(size_t i) {
  if (i >= fds_.size()) return -1;
  return std::exchange(fds_[i], -1);
}

void Message::close_fds() noexcept {
  const int saved = errno;
  for (int& fd : fds_)
    if (fd >= 0) (void)::close(std::exchange(fd, -1));
  fds_.clear();
  errno = saved;
}

namespace {

// Sends one packet, waiting for room until the deadline.
Status send_frame(int fd, const uint8_t* data, size_t len, const std::vector<int>* fds, Deadline deadline,
                  const std::string& what) {
  iovec iov{const_cast<uint8_t*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)];
  if (fds != nullptr && !fds->empty()) {
    const size_t bytes = sizeof(int) * fds->size();
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(bytes);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(bytes);
    std::memcpy(CMSG_DATA(c), fds->data(), bytes);
  }
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return Status::ok();  // SEQPACKET: a packet goes whole or not at all
    const int err = errno;
    if (err == EINTR) continue;
    if (is_closed_errno(err)) return closed_status(what);
    if (err != EAGAIN && err != EWOULDBLOCK) return errno_status(err, what + ": sendmsg");
    ENGRAM_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, what + " (the receiver does not read)"));
  }
}

// Receives one packet into buf[kFrameBytes]; appends received descriptors to *fds.
Result<size_t> recv_frame(int fd, uint8_t* buf, std::vector<int>* fds, Deadline deadline, const std::string& what) {
  for (;;) {
    iovec iov{buf, kFrameBytes};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (is_closed_errno(err)) return closed_status(what);
      if (err != EAGAIN && err != EWOULDBLOCK) return errno_status(err, what + ": recvmsg");
      ENGRAM_RETURN_IF_ERROR(wait_fd(fd, POLLIN, deadline, what));
      continue;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int v;
        std::memcpy(&v, CMSG_DATA(c) + i * sizeof(int), sizeof v);
        fds->push_back(v);
      }
    }
    if (msg.msg_flags & MSG_CTRUNC)
      return Status(Code::kInvalidArgument, what + ": more than " + std::to_string(kMaxMessageFds) +
                                                " descriptors in one message (control data truncated)");
    if (msg.msg_flags & MSG_TRUNC)
      return Status(Code::kInvalidArgument, what + ": packet longer than " + std::to_string(kFrameBytes) +
                                                " bytes (not a frame of this protocol)");
    if (n == 0) return closed_status(what);
    return static_cast<size_t>(n);
  }
}

}  // namespace

Status send_message(const UnixSocket& socket, uint16_t type, std::string_view payload, const std::vector<int>& fds,
                    Deadline deadline) {
  const std::string what = "send_message(type=" + std::to_string(type) + ", " + std::to_string(payload.size()) + " B)";
  if (fds.size() > kMaxMessageFds)
    return Status(Code::kInvalidArgument, what + ": " + std::to_string(fds.size()) + " descriptors, at most " +
                                              std::to_string(kMaxMessageFds));
  if (payload.size() > (uint64_t{1} << 32)) return Status(Code::kInvalidArgument, what + ": payload over 4 GiB");
  std::vector<uint8_t> frame(kFrameBytes);
  put_u32(frame.data(), kWireMagic);
  put_u16(frame.data() + 4, kWireVersion);
  put_u16(frame.data() + 6, type);
  put_u64(frame.data() + 8, payload.size());
  put_u32(frame.data() + 16, static_cast<uint32_t>(fds.size()));
  size_t first = std::min(payload.size(), kFrameBytes - kWireHeaderBytes);
  std::memcpy(frame.data() + kWireHeaderBytes, payload.data(), first);
  ENGRAM_RETURN_IF_ERROR(send_frame(socket.fd(), frame.data(), kWireHeaderBytes + first, &fds, deadline, what));
  for (size_t off = first; off < payload.size();) {
    const size_t k = std::min(payload.size() - off, kFrameBytes);
    ENGRAM_RETURN_IF_ERROR(
        send_frame(socket.fd(), reinterpret_cast<const uint8_t*>(payload.data()) + off, k, nullptr, deadline, what));
    off += k;
  }
  return Status::ok();
}

Result<Message> recv_message(const UnixSocket& socket, size_t max_payload_bytes, Deadline deadline) {
  const std::string what = "recv_message";
  Message m;
  std::vector<uint8_t> buf(kFrameBytes);
  // Descriptors land in m.fds_ as soon as they arrive, so every early return below closes them.
  ENGRAM_ASSIGN_OR_RETURN(size_t n, recv_frame(socket.fd(), buf.data(), &m.fds_, deadline, what));
  if (n < kWireHeaderBytes)
    return Status(Code::kInvalidArgument, what + ": " + std::to_string(n) + "-byte packet is shorter than the " +
                                              std::to_string(kWireHeaderBytes) + "-byte header");
  const uint32_t magic = get_u32(buf.data());
  const uint16_t version = get_u16(buf.data() + 4);
  m.type = get_u16(buf.data() + 6);
  const uint64_t payload_bytes = get_u64(buf.data() + 8);
  const uint32_t n_fds = get_u32(buf.data() + 16);
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08x", magic);
  if (magic != kWireMagic) return Status(Code::kInvalidArgument, what + ": bad magic " + hex + " (not an engram message)");
  if (version != kWireVersion)
    return Status(Code::kInvalidArgument, what + ": wire version " + std::to_string(version) + ", this build speaks " +
                                              std::to_string(kWireVersion));
  if (payload_bytes > max_payload_bytes)
    return Status(Code::kInvalidArgument, what + ": payload of " + std::to_string(payload_bytes) +
                                              " bytes exceeds the limit of " + std::to_string(max_payload_bytes));
  if (n_fds != m.fds_.size())
    return Status(Code::kInvalidArgument, what + ": header announces " + std::to_string(n_fds) + " descriptors, " +
                                              std::to_string(m.fds_.size()) + " arrived");
  const size_t first = n - kWireHeaderBytes;
  if (first > payload_bytes)
    return Status(Code::kInvalidArgument, what + ": first frame holds " + std::to_string(first) +
                                              " payload bytes, header announces " + std::to_string(payload_bytes));
  m.payload.reserve(payload_bytes);
  m.payload.assign(reinterpret_cast<const char*>(buf.data()) + kWireHeaderBytes, first);
  while (m.payload.size() < payload_bytes) {
    const size_t before = m.fds_.size();
    ENGRAM_ASSIGN_OR_RETURN(size_t k, recv_frame(socket.fd(), buf.data(), &m.fds_, deadline, what + " (continuation)"));
    if (m.fds_.size() != before)
      return Status(Code::kInvalidArgument, what + ": descriptors on a continuation frame");
    if (m.payload.size() + k > payload_bytes)
      return Status(Code::kInvalidArgument, what + ": frames carry more than the announced " +
                                                std::to_string(payload_bytes) + " payload bytes");
    m.payload.append(reinterpret_cast<const char*>(buf.data()), k);
  }
  return m;
}

Result<std::vector<size_t>> poll_readable(const std::vector<int>& fds, Deadline deadline) {
  std::vector<pollfd> p(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) p[i] = {fds[i], POLLIN, 0};
  for (;;) {
    const int64_t ms = remaining_ms(deadline);
    const int n = ::poll(p.data(), p.size(), static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return errno_status(err, "poll(" + std::to_string(fds.size()) + " sockets)");
    }
    std::vector<size_t> ready;
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) ready.push_back(i);
    return ready;
  }
}

}  // namespace engram::sys

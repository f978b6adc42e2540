// AF_UNIX SOCK_SEQPACKET sockets for the shared-group protocol: listen / connect / accept with
// deadlines, versioned and length-checked messages, SCM_RIGHTS descriptor passing, SO_PEERCRED.
//
// Why SEQPACKET: the kernel keeps message boundaries and reports a closed peer as a zero-length read
// (and POLLHUP), so a dead leader or peer is seen at once, and descriptors ride on exactly the frame
// they were sent with. A packet is limited by the socket buffer (~200 KiB by default), so a message
// is split into frames of at most kFrameBytes: the first frame carries the header and the descriptors,
// the following ones only payload bytes. One sender thread per socket keeps frames of one message
// together (callers serialise sends; see group.hpp).
//
// Wire header (first frame, little-endian, 20 bytes):
//   u32 magic = kWireMagic ("ENGM")  u16 version = kWireVersion  u16 type
//   u64 payload_bytes                 u32 n_fds
// A receiver refuses (kInvalidArgument, naming the field) a bad magic, another version, a payload
// over its limit, a frame cut by the kernel (MSG_TRUNC / MSG_CTRUNC), a descriptor count that differs
// from the header, or a short message. Descriptors received with a refused message are closed.
//
// Contract (as in the rest of src/sys): every function returns Status / Result, leaves errno as it
// found it, and names the call and the path or peer on failure. Every descriptor is O_CLOEXEC.
// Deadlines are absolute steady-clock times; a call that runs out of time returns kTimeout. A closed
// connection (EOF, EPIPE, ECONNRESET) is kIo with sys_error() == EPIPE, so callers can tell "the other
// process went away" from "it sent garbage" (kInvalidArgument) and "it said nothing" (kTimeout).
// Sources: unix(7) (SCM_RIGHTS, SO_PEERCRED, SOCK_SEQPACKET), recvmsg(2), poll(2).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engram/status.hpp"

namespace engram::sys {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;
inline Deadline deadline_after(std::chrono::milliseconds ms) { return SteadyClock::now() + ms; }
// Milliseconds left until `d` (0 when past), rounded up so a poll never wakes just before it.
int64_t remaining_ms(Deadline d);

inline constexpr uint32_t kWireMagic = 0x4D474E45;  // "ENGM" read as little-endian bytes
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kWireHeaderBytes = 20;
inline constexpr size_t kFrameBytes = 32 * 1024;  // largest packet we send or accept
inline constexpr size_t kMaxMessageFds = 64;      // SCM_RIGHTS descriptors per message
// Length of a socket path, sun_path included NUL (unix(7): 108 bytes).
inline constexpr size_t kMaxSocketPathBytes = 107;

// Move-only owner of one socket descriptor.
class UnixSocket {
 public:
  UnixSocket() = default;
  explicit UnixSocket(int fd) : fd_(fd) {}
  ~UnixSocket();
  UnixSocket(UnixSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UnixSocket& operator=(UnixSocket&& o) noexcept;
  UnixSocket(const UnixSocket&) = delete;
  UnixSocket& operator=(const UnixSocket&) = delete;

  int fd() const noexcept { return fd_; }
  bool is_open() const noexcept { return fd_ >= 0; }
  void close() noexcept;

 private:
  int fd_ = -1;
};

// A bound, listening socket. The destructor closes it and unlinks its path (and its owner record,
// owner.hpp) if the path still names the socket made here (same device and inode), so a stale
// socket is never left by a clean exit.
class UnixListener {
 public:
  UnixListener() = default;
  ~UnixListener();
  UnixListener(UnixListener&& o) noexcept;
  UnixListener& operator=(UnixListener&& o) noexcept;
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  int fd() const noexcept { return sock_.fd(); }
  const std::string& path() const noexcept { return path_; }
  bool is_open() const noexcept { return sock_.is_open(); }
  // Removes the path now (no new peer can find the socket; accepted connections stay). Idempotent.
  Status unlink_path();
  void close() noexcept;

 private:
  friend Result<UnixListener> listen_unix(const std::string& path, int backlog);
  UnixSocket sock_;
  std::string path_;
  uint64_t device_ = 0, inode_ = 0;
  bool linked_ = false;
};

struct PeerCredentials {
  int pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
};

// The directory where a leader puts its socket: "$XDG_RUNTIME_DIR/engram" when XDG_RUNTIME_DIR names
// a directory of ours, else "/tmp/engram-<uid>". Created mode 0700 when missing; an existing one must
// pass check_private_dir. kPermission when it exists but is not private (owner, mode, symlink).
Result<std::string> private_runtime_dir();
// The directory private_runtime_dir() would return, named without creating anything (for checking the length of
// a path in it before any work).
std::string private_runtime_dir_name();
// Why XDG_RUNTIME_DIR is not used when it is set but unusable (not absolute, missing, not a private directory of
// ours), for a note on stderr like the one for an unusable XDG_CACHE_HOME; "" when it is unset or used.
std::string runtime_dir_fallback_note();
// OK when `dir` is a directory (not a symlink) owned by the effective uid with no group/other
// permission bits. kNotFound when missing; kPermission naming owner and mode otherwise.
Status check_private_dir(const std::string& dir);
// mkdir(dir, 0700), then check_private_dir. An existing directory is checked, not changed.
Status make_private_dir(const std::string& dir);

// socket + bind + listen on `path` (its directory must exist), then chmod 0600. The socket's owner
// record (owner.hpp) is written before the bind; a record of a dead owner at that path is replaced,
// a live (or unreadable) one is kInvalidArgument "already in use". A stale socket file (nobody
// accepts on it: ECONNREFUSED) is removed and the bind retried once; a live one is
// kInvalidArgument "already in use". kInvalidArgument for a path over kMaxSocketPathBytes or a path
// that exists and is not a socket; kPermission (EACCES) from bind(2).
Result<UnixListener> listen_unix(const std::string& path, int backlog = 64);
// accept4(SOCK_CLOEXEC) once a connection is pending; kTimeout at the deadline.
Result<UnixSocket> accept_unix(const UnixListener& listener, Deadline deadline);
// connect(2) to `path`, retrying while nothing listens there yet (ENOENT, ECONNREFUSED, EAGAIN)
// until the deadline: kTimeout "no listener at <path> ... (last error ENOENT)". EACCES (the directory
// is not ours) is kPermission at once. A refused connection to a socket whose owner record (owner.hpp)
// names a dead process also ends at once: kIo "the socket's owner is dead" (a killed leader's stale socket).
Result<UnixSocket> connect_unix(const std::string& path, Deadline deadline);
// socketpair(AF_UNIX, SOCK_SEQPACKET|SOCK_CLOEXEC): two connected ends (tests, in-process groups).
Result<std::pair<UnixSocket, UnixSocket>> unix_socket_pair();
// SO_PEERCRED of a connected socket: the other end's pid, uid and gid as of connect(2) time.
Result<PeerCredentials> peer_credentials(const UnixSocket& socket);

uint32_t effective_uid() noexcept;
int process_id() noexcept;
// setsockopt(SO_REUSEADDR) on a listening socket of any family (a restarted server binds its port while the last
// connections sit in TIME_WAIT), and nothing else: no SO_REUSEPORT, so a second process cannot bind the same port.
Status set_reuse_address(int fd);

// One received message. Owns the descriptors it carries: those not taken with take_fd() are closed
// by the destructor. Move-only.
class Message {
 public:
  Message() = default;
  ~Message();
  Message(Message&& o) noexcept;
  Message& operator=(Message&& o) noexcept;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  uint16_t type = 0;
  std::string payload;
  size_t n_fds() const { return fds_.size(); }
  // Hands descriptor i to the caller (who then closes it); -1 when out of range or already taken.
  int take_fd(size_t i);
  void close_fds() noexcept;

 private:
  friend Result<Message> recv_message(const UnixSocket&, size_t, Deadline);
  std::vector<int> fds_;
};

// Sends one message: header and the descriptors in the first frame, then the rest of the payload.
// Descriptors are duplicated into the receiver (the caller keeps its own). Waits for buffer room
// until the deadline (kTimeout). kIo/EPIPE when the other end closed; kInvalidArgument for more
// than kMaxMessageFds descriptors or a payload over 4 GiB. MSG_NOSIGNAL: never SIGPIPE.
Status send_message(const UnixSocket& socket, uint16_t type, std::string_view payload, const std::vector<int>& fds,
                    Deadline deadline);
// Receives one message whose payload is at most `max_payload_bytes` (see the header above for what
// is refused). kTimeout at the deadline, kIo/EPIPE on a closed connection.
Result<Message> recv_message(const UnixSocket& socket, size_t max_payload_bytes, Deadline deadline);

// Waits until at least one of `fds` is readable or hung up (POLLIN/POLLHUP/POLLERR), or the deadline.
// Returns the indices (into fds) that are ready; empty at the deadline (not an error: the caller
// names who did not answer). kIo when poll(2) itself fails.
Result<std::vector<size_t>> poll_readable(const std::vector<int>& fds, Deadline deadline);

}  // namespace engram::sys

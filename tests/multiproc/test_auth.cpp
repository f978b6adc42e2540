// Peer authentication and isolation against hostile processes of the same node.
//  - Allow-list: a process of another uid is admitted only when the leader names its uid (and it
//    names the leader's), over a socket an administrator opened on purpose.
//  - A hostile leader (a raw socket speaking the wire format) cannot make a peer map beyond the
//    object it passed, map another file through a symlink or a swapped path, or use a descriptor it
//    never sent: the peer's join fails at "attach" with the reason, and nothing leaks.
//  - A hostile peer cannot make the leader write anywhere: a gather entry claiming another rank, one
//    carrying descriptors, or one over the size limit gets that peer dropped with the reason; the
//    leader's table bytes are unchanged and no descriptor is left in the leader.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <thread>

#include "group_support.hpp"
#include "host/group.hpp"
#include "sys/memfd.hpp"
#include "sys/unix_socket.hpp"
#include "unit/sys/resource_census.hpp"

using namespace engram;
using namespace engram::test;
using nlohmann::json;
namespace wire = engram::host::wire;

namespace {

constexpr auto kShort = std::chrono::milliseconds(5000);

json ok_entry(const std::string& step, int rank) {
  return {{"code", 0}, {"sys", 0}, {"error", ""}, {"step", step}, {"rank", rank}, {"pid", getpid()}, {"message", ""}};
}

std::string broadcast_payload(const std::string& step, const std::string& bytes) {
  std::string p(4, '\0');
  const auto n = static_cast<uint32_t>(step.size());
  for (int i = 0; i < 4; ++i) p[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return p + step + bytes;
}

json segment(const std::string& kind, const std::string& path, uint64_t size, uint64_t inode, uint64_t dev,
             int fd_index) {
  return {{"kind", kind},           {"name", "engram:hostile"}, {"path", path},      {"size_bytes", size},
          {"inode", inode},         {"device", dev},            {"layer_index", 0},  {"replica_node", -1},
          {"head_begin", 0},        {"head_end", 0},            {"offset_bytes", 0}, {"fd_index", fd_index}};
}

// A fake leader: accepts one peer, welcomes it, broadcasts `description` with `fds`, answers the
// attach gather with the peer's own entry, and returns that entry (what the peer said went wrong).
json fake_leader(const std::string& sock, const json& description, const std::vector<int>& fds) {
  auto l = sys::listen_unix(sock);
  if (!l.is_ok()) return {{"error", l.status().to_string()}};
  auto s = sys::accept_unix(*l, sys::deadline_after(kShort));
  if (!s.is_ok()) return {{"error", s.status().to_string()}};
  auto hello = sys::recv_message(*s, 65536, sys::deadline_after(kShort));
  if (!hello.is_ok()) return {{"error", hello.status().to_string()}};
  const auto dl = sys::deadline_after(kShort);
  (void)sys::send_message(*s, wire::kMsgWelcome,
                          json{{"rank", 1}, {"world", 2}, {"leader_pid", getpid()}, {"group", "hostile"}}.dump(), {}, dl);
  (void)sys::send_message(*s, wire::kMsgBroadcast, broadcast_payload("describe", description.dump()), fds, dl);
  auto entry = sys::recv_message(*s, 1 << 20, sys::deadline_after(kShort));
  if (!entry.is_ok()) return {{"error", entry.status().to_string()}};
  json e = json::parse(entry->payload, nullptr, false);
  json result = {{"step", "attach"}, {"entries", json::array({ok_entry("attach", 0), e})}};
  (void)sys::send_message(*s, wire::kMsgGatherResult, result.dump(), {}, sys::deadline_after(kShort));
  return e;
}

// Runs a real peer in a thread against fake_leader; returns {peer status, peer's attach entry}.
std::pair<Status, json> hostile_description(const json& description, const std::vector<int>& fds) {
  TempDir dir{"/tmp", "engram-auth"};
  const std::string sock = dir.path + "/l.sock";
  Status peer_status;
  std::thread peer([&] {
    host::UnixGroupOptions o;
    o.group = "hostile";
    auto ch = host::UnixGroupChannel::connect(sock, o, kShort);
    if (!ch.is_ok()) {
      peer_status = ch.status();
      return;
    }
    host::ProtocolTimeouts to{kShort, kShort};
    auto g = host::SharedTableGroup::join(**ch, {}, {}, to);
    peer_status = g.status();
  });
  json e = fake_leader(sock, description, fds);
  peer.join();
  return {peer_status, e};
}

// One small layer (about 48 KB of 48-B records): every announced backing below is large enough for it, so what
// the peer refuses is the backing itself.
std::string small_layout() {
  EngramLayout l;
  l.name = "hostile";
  l.layer_ids = {1};
  l.max_ngram = 2;
  l.heads_per_order = 1;
  l.vocab_size_per_order = {1000};
  l.d = 32;
  (void)l.finalize();
  return layout_to_json(l);
}

json description_of(const json& seg) {
  return {{"protocol", wire::kProtocolVersion}, {"group", "hostile"}, {"job", ""}, {"layout", small_layout()},
          {"segments", json::array({seg})}};
}

struct Memfd {
  int fd = -1;
  uint64_t inode = 0, dev = 0;
  explicit Memfd(uint64_t bytes) {
    fd = memfd_create("engram-auth", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0) std::abort();
    struct stat st {};
    fstat(fd, &st);
    inode = st.st_ino;
    dev = st.st_dev;
  }
  ~Memfd() { close(fd); }
};

}  // namespace

TEST(AuthHostileLeader, DescriptionLargerThanTheObjectIsRefusedAtAttach) {
  Memfd m(1 << 20);
  const int fds_before = hardening::count_fds();
  auto [s, e] = hostile_description(description_of(segment("memfd", "", 64 << 20, m.inode, m.dev, 0)), {m.fd});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("attach"), std::string::npos) << s.to_string();
  EXPECT_NE(e.value("code", 0), 0) << e.dump();
  EXPECT_EQ(hardening::count_fds(), fds_before) << "the received descriptor must be closed";
}

TEST(AuthHostileLeader, DescriptorIndexNotSentIsRefused) {
  Memfd m(1 << 20);
  auto [s, e] = hostile_description(description_of(segment("memfd", "", 1 << 20, m.inode, m.dev, 5)), {m.fd});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(e.value("error", std::string()).find("descriptor 5 announced but not received"), std::string::npos)
      << e.dump();
}

TEST(AuthHostileLeader, OutOfRangeFieldsAreRefusedBeforeAnyMapping) {
  Memfd m(1 << 20);
  for (const json& seg : {segment("memfd", "", uint64_t{1} << 60, m.inode, m.dev, 0),
                          segment("memfd", "", 1 << 20, m.inode, m.dev, 1000),
                          segment("memfd", "", 0, m.inode, m.dev, 0)}) {
    auto [s, e] = hostile_description(description_of(seg), {m.fd});
    ASSERT_FALSE(s.is_ok()) << seg.dump();
    EXPECT_NE(e.value("error", std::string()).find("out of range"), std::string::npos) << e.dump();
  }
}

TEST(AuthHostileLeader, NamedPathThroughSymlinkIsRefused) {
  TempDir shm{"/dev/shm", "engram-auth-shm"};
  const std::string real = shm.path + "/real";
  const int fd = open(real.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  struct stat st {};
  fstat(fd, &st);
  close(fd);
  const std::string link = shm.path + "/link";
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  auto [s, e] = hostile_description(description_of(segment("shm", link, 1 << 20, st.st_ino, st.st_dev, -1)), {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(e.value("code", 0), static_cast<int>(Code::kPermission)) << e.dump();
  EXPECT_NE(e.value("error", std::string()).find("symlink"), std::string::npos) << e.dump();
}

TEST(AuthHostileLeader, NamedPathOfAnotherInodeIsRefused) {
  TempDir shm{"/dev/shm", "engram-auth-shm"};
  const std::string path = shm.path + "/t";
  const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  close(fd);
  auto [s, e] = hostile_description(description_of(segment("shm", path, 1 << 20, 12345, 678, -1)), {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(e.value("code", 0), static_cast<int>(Code::kPermission)) << e.dump();
  EXPECT_NE(e.value("error", std::string()).find("names another file"), std::string::npos) << e.dump();
}

TEST(AuthHostileLeader, NamedPathThatIsNotARegularFileIsRefused) {
  TempDir shm{"/dev/shm", "engram-auth-shm"};
  const std::string fifo = shm.path + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // open(O_RDWR) of a FIFO does not block on Linux; the peer then refuses it as not a regular file.
  auto [s, e] = hostile_description(description_of(segment("shm", fifo, 1 << 20, 1, 1, -1)), {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(e.value("code", 0), static_cast<int>(Code::kPermission)) << e.dump();
}

// ---- hostile peer ----------------------------------------------------------------------------------

namespace {

// A raw peer: says hello, reads the describe broadcast, then sends `entry` (with `fds`) at attach.
void hostile_peer(const std::string& sock, const std::string& entry, const std::vector<int>& fds) {
  auto s = sys::connect_unix(sock, sys::deadline_after(kShort));
  if (!s.is_ok()) return;
  const auto dl = sys::deadline_after(kShort);
  (void)sys::send_message(*s, wire::kMsgHello,
                          json{{"protocol", wire::kProtocolVersion}, {"group", "victim"}, {"pid", getpid()}}.dump(),
                          {}, dl);
  auto welcome = sys::recv_message(*s, 1 << 20, dl);
  if (!welcome.is_ok()) return;
  auto describe = sys::recv_message(*s, 1 << 20, dl);  // its memfds arrive and are closed with it
  if (!describe.is_ok()) return;
  (void)sys::send_message(*s, wire::kMsgGather, entry, fds, dl);
  // Read until the leader drops us.
  while (sys::recv_message(*s, 1 << 20, sys::deadline_after(kShort)).is_ok()) {
  }
}

struct VictimResult {
  Status admitted;
  bool table_unchanged = false;
  int fds_before = 0, fds_after = 0;
};

VictimResult run_victim(const std::string& entry, bool with_fd, size_t max_message_bytes = size_t{16} << 20) {
  TempDir dir{"/tmp", "engram-auth"};
  GroupSetup g;
  g.socket_path = dir.path + "/v.sock";
  g.group = "victim";
  g.n_segments = 1;
  g.segment_bytes = 1 << 20;
  g.seed = rng()();
  VictimResult out;
  host::UnixGroupOptions lo = g.group_options();
  lo.max_message_bytes = max_message_bytes;
  auto listener = host::UnixGroupListener::listen(lo);
  if (!listener.is_ok()) {
    out.admitted = listener.status();
    return out;
  }
  auto group = g.lead();
  if (!group.is_ok()) {
    out.admitted = group.status();
    return out;
  }
  (void)(*group)->load(fill_table(g.seed));
  const uint64_t before = fnv64(layer_bytes_of(*(*group)->table(), 0), g.layer_bytes(0));
  out.fds_before = hardening::count_fds();
  Memfd extra(4096);
  std::thread peer([&] { hostile_peer(g.socket_path, entry, with_fd ? std::vector<int>{extra.fd} : std::vector<int>{}); });
  auto ch = (*listener)->accept_group(1, kShort);
  if (ch.is_ok()) {
    host::ProtocolTimeouts to{kShort, kShort};
    out.admitted = (*group)->admit(**ch, {}, to);
  } else {
    out.admitted = ch.status();
  }
  peer.join();
  ch = Status(Code::kInternal, "closed");  // the leader's end of the connection
  out.fds_after = hardening::count_fds() - 1;  // `extra` is still open
  out.table_unchanged = fnv64(layer_bytes_of(*(*group)->table(), 0), g.layer_bytes(0)) == before;
  return out;
}

}  // namespace

TEST(AuthHostilePeer, EntryClaimingAnotherRankIsDroppedAndTableUntouched) {
  json e = ok_entry("attach", 7);
  auto r = run_victim(e.dump(), false);
  ASSERT_FALSE(r.admitted.is_ok());
  EXPECT_NE(r.admitted.message().find("protocol out of step"), std::string::npos) << r.admitted.to_string();
  EXPECT_NE(r.admitted.message().find("rank 1"), std::string::npos) << r.admitted.to_string();
  EXPECT_TRUE(r.table_unchanged);
  EXPECT_EQ(r.fds_after, r.fds_before);
}

TEST(AuthHostilePeer, EntryCarryingDescriptorsIsDroppedAndTheyAreClosed) {
  auto r = run_victim(ok_entry("attach", 1).dump(), true);
  ASSERT_FALSE(r.admitted.is_ok());
  EXPECT_NE(r.admitted.message().find("malformed"), std::string::npos) << r.admitted.to_string();
  EXPECT_TRUE(r.table_unchanged);
  EXPECT_EQ(r.fds_after, r.fds_before) << "a descriptor sent by the peer was left open in the leader";
}

TEST(AuthHostilePeer, OversizedEntryIsDroppedWithoutAllocatingIt) {
  json e = ok_entry("attach", 1);
  e["message"] = std::string(200000, 'x');
  auto r = run_victim(e.dump(), false, 64 * 1024);
  ASSERT_FALSE(r.admitted.is_ok());
  EXPECT_NE(r.admitted.message().find("exceeds the limit"), std::string::npos) << r.admitted.to_string();
  EXPECT_TRUE(r.table_unchanged);
}

TEST(AuthHostilePeer, EntryWithHostileFieldTypesIsDropped) {
  for (const std::string& bad : {std::string(R"({"code":"0","sys":0,"error":"","step":"attach","rank":1,"pid":1,"message":""})"),
                                 std::string(R"({"code":99,"sys":0,"error":"","step":"attach","rank":1,"pid":1,"message":""})"),
                                 std::string(R"([1,2,3])"), std::string("\xff\xfe{"), std::string()}) {
    auto r = run_victim(bad, false);
    ASSERT_FALSE(r.admitted.is_ok()) << bad;
    EXPECT_EQ(r.admitted.code(), Code::kInvalidArgument) << r.admitted.to_string();
    EXPECT_TRUE(r.table_unchanged);
  }
}

// Root only: the allow-list admits exactly the uid it names, in both directions.
TEST(AuthAllowList, ForeignUidOnTheListIsAdmitted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another uid (setuid); running as uid " << geteuid();
  TempDir open_dir{"/tmp", "engram-auth-open"};
  chmod(open_dir.path.c_str(), 0711);
  GroupSetup g;
  g.socket_path = open_dir.path + "/g.sock";
  g.group = "allow";
  g.n_segments = 1;
  host::UnixGroupOptions lo = g.group_options();
  lo.require_private_dir = false;
  lo.allowed_uids = {65534};
  auto listener = host::UnixGroupListener::listen(lo);
  ASSERT_TRUE(listener.is_ok()) << listener.status().to_string();
  chmod(g.socket_path.c_str(), 0666);  // an administrator opening the socket to that uid on purpose
  host::UnixGroupOptions po = g.group_options();
  po.allowed_uids = {0};
  Child nobody = fork_child([&] {
    if (setgid(65534) != 0 || setuid(65534) != 0) return json{{"setuid", false}};
    auto ch = host::UnixGroupChannel::connect(g.socket_path, po, host::Millis(10000));
    if (!ch.is_ok()) return json{{"setuid", true}, {"status", status_json(ch.status())}};
    auto grp = host::SharedTableGroup::join(**ch, {}, {}, g.timeouts);
    return json{{"setuid", true}, {"status", status_json(grp.status())}, {"rank", (*ch)->rank()}};
  });
  auto ch = (*listener)->accept_group(1, host::Millis(20000));
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  auto group = g.lead();
  ASSERT_TRUE(group.is_ok());
  Status s = (*group)->admit(**ch, {}, g.timeouts);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  json r = collect(nobody);
  ASSERT_TRUE(r["setuid"].get<bool>());
  EXPECT_TRUE(r["status"]["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["rank"], 1);
  EXPECT_TRUE((*listener)->rejections().empty());
}

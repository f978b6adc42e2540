// Owner records (sys/owner.hpp): a record names this process as alive; a reaped child, a zombie, a
// reused pid (same pid, other start time) and an earlier boot as dead; a malformed record, an empty
// one and another pid namespace as unknown -- never dead. A record is never written over, and the
// named-object creators (shm files, listening sockets) write theirs before the object and remove it
// with the object.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "sys/owner.hpp"
#include "sys/shm.hpp"
#include "sys/unix_socket.hpp"

using namespace engram;
using namespace engram::sys;

namespace {

struct Dir {
  std::string path;
  explicit Dir(const std::string& parent = "/tmp") {
    std::random_device rd;
    path = parent + "/engram-owner-test-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 1000000);
    std::filesystem::create_directories(path);
    chmod(path.c_str(), 0700);
  }
  ~Dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  size_t count() const {
    size_t n = 0;
    for (auto it = std::filesystem::directory_iterator(path); it != std::filesystem::directory_iterator(); ++it) ++n;
    return n;
  }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

}  // namespace

TEST(OwnerRecord, SelfIsAliveAndRecordRoundTrips) {
  Dir d;
  const std::string obj = d.path + "/engram:layer=1.0123456789abcdef";
  ASSERT_TRUE(write_owner_record(obj).is_ok());
  EXPECT_EQ(owner_record_path(obj), d.path + "/.engram-owner.engram:layer=1.0123456789abcdef");
  auto r = read_owner_record(owner_record_path(obj));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto me = self_stamp();
  ASSERT_TRUE(me.is_ok()) << me.status().to_string();
  EXPECT_EQ(r->owner.pid, getpid());
  EXPECT_EQ(r->owner.start_ticks, me->start_ticks);
  EXPECT_GT(r->owner.start_ticks, 0u);
  EXPECT_EQ(r->owner.boot_id, me->boot_id);
  EXPECT_EQ(r->file_uid, geteuid());
  std::string why;
  EXPECT_EQ(owner_state(r->owner, &why), OwnerState::kAlive) << why;
  // Never written over: a second record under the same name is refused.
  Status again = write_owner_record(obj);
  EXPECT_EQ(again.code(), Code::kInvalidArgument) << again.to_string();
  std::string name;
  EXPECT_TRUE(parse_owner_record_name(".engram-owner.x.sock", &name));
  EXPECT_EQ(name, "x.sock");
  EXPECT_FALSE(parse_owner_record_name("engram-owner.x", &name));
  EXPECT_FALSE(parse_owner_record_name(".engram-owner.", &name));
  ASSERT_TRUE(remove_owner_record(obj).is_ok());
  EXPECT_TRUE(remove_owner_record(obj).is_ok()) << "removing a missing record is not an error";
  EXPECT_EQ(d.count(), 0u);
}

TEST(OwnerRecord, ReapedChildZombieAndReusedPidAreDead) {
  Dir d;
  const std::string obj = d.path + "/child-object";
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(write_owner_record(obj).is_ok() ? 0 : 3);
  // Not yet reaped: a zombie holds nothing.
  for (int i = 0; i < 500; ++i) {
    bool zombie = false;
    auto s = process_stamp(pid, &zombie);
    if (s.is_ok() && zombie) break;
    usleep(2000);
  }
  auto r = read_owner_record(owner_record_path(obj));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->owner.pid, pid);
  std::string why;
  EXPECT_EQ(owner_state(r->owner, &why), OwnerState::kDead) << why;
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ(owner_state(r->owner, &why), OwnerState::kDead) << why;
  EXPECT_NE(why.find("gone"), std::string::npos) << why;
  // Our own pid with another start time: the pid was reused by another process.
  ProcessStamp reused = *self_stamp();
  reused.start_ticks += 1;
  EXPECT_EQ(owner_state(reused, &why), OwnerState::kDead) << why;
  EXPECT_NE(why.find("start time"), std::string::npos) << why;
  ProcessStamp earlier = *self_stamp();
  earlier.boot_id = "00000000-0000-0000-0000-000000000000";
  if (!self_stamp()->boot_id.empty()) {
    EXPECT_EQ(owner_state(earlier, &why), OwnerState::kDead) << why;
  }
}

TEST(OwnerRecord, MalformedEmptyAndForeignNamespaceAreNeverDead) {
  Dir d;
  write_text(d.path + "/.engram-owner.empty", "");
  write_text(d.path + "/.engram-owner.garbage", "engram-owner 1\npid abc\nstart 1\n");
  write_text(d.path + "/.engram-owner.cut", "engram-owner 1\npid 12");
  for (const char* n : {"empty", "garbage", "cut"}) {
    auto r = read_owner_record(d.path + "/.engram-owner." + n);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << n << ": " << r.status().to_string();
  }
  ASSERT_EQ(symlink("/etc/hostname", (d.path + "/.engram-owner.link").c_str()), 0);
  EXPECT_EQ(read_owner_record(d.path + "/.engram-owner.link").status().code(), Code::kInvalidArgument);
  ProcessStamp foreign = *self_stamp();
  foreign.pid_ns += 1;
  std::string why;
  if (self_stamp()->pid_ns != 0) {
    EXPECT_EQ(owner_state(foreign, &why), OwnerState::kUnknown) << why;
  }
}

// The creators of named objects: the record exists while the object does and goes with it.
TEST(OwnerRecord, NamedFileAndSocketCarryTheirRecord) {
  Dir d;
  auto f = create_named_file(d.path, "engram-test");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto r = read_owner_record(owner_record_path(f->path));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->owner.pid, getpid());
  close(f->fd);
  ASSERT_TRUE(unlink_named_file(f->path).is_ok());
  EXPECT_EQ(d.count(), 0u);
  {
    auto l = listen_unix(d.path + "/g.sock");
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    EXPECT_TRUE(read_owner_record(d.path + "/.engram-owner.g.sock").is_ok());
    EXPECT_EQ(d.count(), 2u);
    // A second leader at the same path is refused by the live owner's record.
    auto second = listen_unix(d.path + "/g.sock");
    EXPECT_EQ(second.status().code(), Code::kInvalidArgument) << second.status().to_string();
  }
  EXPECT_EQ(d.count(), 0u) << "the listener removes its socket and its record";
}

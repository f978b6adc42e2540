// The stale-state sweep (host/sweep.hpp): removes the object and record of a dead owner and says so;
// keeps a live owner's, an unreadable record's, another user's, and names an engram-looking object
// that has no record; a dry run removes nothing; a record whose object is gone is removed too.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "host/sweep.hpp"
#include "sys/owner.hpp"

using namespace engram;

namespace {

struct Dir {
  std::string path;
  Dir() {
    std::random_device rd;
    path = "/dev/shm/engram-sweep-test-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 1000000);
    std::filesystem::create_directories(path);
    chmod(path.c_str(), 0700);
  }
  ~Dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  bool has(const std::string& name) const { return std::filesystem::exists(std::filesystem::symlink_status(path + "/" + name)); }
};

void write_bytes(const std::string& path, size_t n) {
  std::ofstream f(path, std::ios::binary);
  std::string s(n, 'x');
  f << s;
}

// A child writes the records for `objects` and exits; it is reaped before this returns, so its
// records name a dead owner.
void records_of_dead_owner(const std::vector<std::string>& objects) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& o : objects)
      if (!sys::write_owner_record(o).is_ok()) _exit(3);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

const host::SweptObject* find(const std::vector<host::SweptObject>& v, const std::string& path) {
  for (const auto& o : v)
    if (o.path == path) return &o;
  return nullptr;
}

}  // namespace

TEST(Sweep, RemovesOnlyWhatDeadOwnersLeft) {
  Dir d;
  const std::string dead_table = d.path + "/engram:layer=1:heads=0-24:group=g.00000000000000aa";
  const std::string dead_socket_like = d.path + "/run-1.00000000.sock";  // a plain file standing in
  const std::string dead_gone = d.path + "/engram:layer=14:heads=0-24:group=g.00000000000000bb";
  const std::string live_table = d.path + "/engram:layer=1:heads=0-24:group=live.00000000000000cc";
  const std::string unowned = d.path + "/engram:old-format";
  const std::string bad_record_obj = d.path + "/engram:bad";
  records_of_dead_owner({dead_table, dead_socket_like, dead_gone});
  write_bytes(dead_table, 64 << 10);
  write_bytes(dead_socket_like, 10);
  ASSERT_TRUE(sys::write_owner_record(live_table).is_ok());
  write_bytes(live_table, 4096);
  write_bytes(unowned, 4096);
  write_bytes(bad_record_obj, 4096);
  write_bytes(sys::owner_record_path(bad_record_obj), 0);

  host::SweepOptions o;
  o.dirs = {d.path};
  o.dry_run = true;
  const host::SweepReport dry = host::sweep_stale(o);
  EXPECT_EQ(dry.removed.size(), 3u) << dry.to_json().dump(2);
  EXPECT_TRUE(d.has(".engram-owner." + std::filesystem::path(dead_table).filename().string()));
  EXPECT_TRUE(std::filesystem::exists(dead_table)) << "a dry run removed something";

  o.dry_run = false;
  const host::SweepReport r = host::sweep_stale(o);
  EXPECT_TRUE(r.errors.empty()) << r.to_json().dump(2);
  ASSERT_EQ(r.removed.size(), 3u) << r.to_json().dump(2);
  const host::SweptObject* t = find(r.removed, dead_table);
  ASSERT_NE(t, nullptr) << r.to_json().dump(2);
  EXPECT_EQ(t->kind, "table");
  EXPECT_GE(t->bytes, 64 << 10);
  EXPECT_GT(t->owner_pid, 0);
  EXPECT_NE(t->reason.find("gone"), std::string::npos) << t->reason;
  EXPECT_NE(find(r.removed, sys::owner_record_path(dead_gone)), nullptr) << "record without object";
  EXPECT_FALSE(std::filesystem::exists(dead_table));
  EXPECT_FALSE(std::filesystem::exists(dead_socket_like));
  EXPECT_FALSE(std::filesystem::exists(sys::owner_record_path(dead_table)));
  EXPECT_FALSE(std::filesystem::exists(sys::owner_record_path(dead_gone)));
  // Kept, with reasons: the live owner's, the unowned one, the unreadable record's.
  EXPECT_TRUE(std::filesystem::exists(live_table));
  EXPECT_TRUE(std::filesystem::exists(sys::owner_record_path(live_table)));
  EXPECT_TRUE(std::filesystem::exists(unowned));
  EXPECT_TRUE(std::filesystem::exists(bad_record_obj));
  const host::SweptObject* live = find(r.kept, live_table);
  ASSERT_NE(live, nullptr) << r.to_json().dump(2);
  EXPECT_NE(live->reason.find("alive"), std::string::npos) << live->reason;
  const host::SweptObject* un = find(r.kept, unowned);
  ASSERT_NE(un, nullptr) << r.to_json().dump(2);
  EXPECT_NE(un->reason.find("no owner record"), std::string::npos) << un->reason;
  const host::SweptObject* bad = find(r.kept, bad_record_obj);
  ASSERT_NE(bad, nullptr) << r.to_json().dump(2);
  EXPECT_NE(bad->reason.find("unreadable"), std::string::npos) << bad->reason;
  // The text lines name what was removed and why.
  bool named = false;
  for (const auto& line : r.lines(false)) named = named || (line.find(dead_table) != std::string::npos &&
                                                            line.rfind("removed", 0) == 0);
  EXPECT_TRUE(named);
  // A second sweep finds nothing more to remove.
  EXPECT_TRUE(host::sweep_stale(o).removed.empty());
}

// Another user's leftovers are never touched, even with a dead owner (needs root to make them).
TEST(Sweep, KeepsAnotherUsersObjects) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create files of another uid";
  Dir d;
  const std::string other = d.path + "/engram:layer=1:heads=0-24:group=other.00000000000000dd";
  records_of_dead_owner({other});
  write_bytes(other, 4096);
  ASSERT_EQ(chown(other.c_str(), 65534, 65534), 0);
  ASSERT_EQ(chown(sys::owner_record_path(other).c_str(), 65534, 65534), 0);
  host::SweepOptions o;
  o.dirs = {d.path};
  const host::SweepReport r = host::sweep_stale(o);
  EXPECT_TRUE(r.removed.empty()) << r.to_json().dump(2);
  const host::SweptObject* k = find(r.kept, other);
  ASSERT_NE(k, nullptr) << r.to_json().dump(2);
  EXPECT_NE(k->reason.find("uid 65534"), std::string::npos) << k->reason;
  EXPECT_TRUE(std::filesystem::exists(other));
}

TEST(Sweep, MissingDirectoryIsNotAnError) {
  host::SweepOptions o;
  o.dirs = {"/nonexistent-engram-dir-for-sweep"};
  const host::SweepReport r = host::sweep_stale(o);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.removed.empty());
  EXPECT_EQ(r.to_json()["dirs"].size(), 1u);
}

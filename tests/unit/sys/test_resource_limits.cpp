// Resource limits: a table under a small RLIMIT_MEMLOCK, on a small /dev/shm, with a bounded number of
// VMAs (vm.max_map_count: one mapping and one policy per backing, never per row), and a table larger
// than the machine's memory -- a clear error before anything is allocated (no mmap, no fallocate, no
// file, no descriptor).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/table_options.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/placement.hpp"
#include "sys/fault.hpp"
#include "unit/sys/resource_census.hpp"

using namespace engram;
using engram::hardening::ResourceCensus;

namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

int64_t mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemTotal:") return kib * 1024;
  return -1;
}

// Mappings of /proc/self/maps whose path names one of this table's backings.
int table_vmas(const HostTable& t) {
  int n = 0;
  for (const auto& m : hardening::read_mappings()) {
    for (int l = 0; l < t.n_layers(); ++l) {
      const uint8_t* base = t.view(l).data;
      if (m.start <= reinterpret_cast<uint64_t>(base) && reinterpret_cast<uint64_t>(base) < m.end) ++n;
      else if (m.start >= reinterpret_cast<uint64_t>(base) &&
               m.start < reinterpret_cast<uint64_t>(base) + static_cast<uint64_t>(t.layout().table_bytes(l)))
        ++n;
    }
  }
  return n;
}

}  // namespace

// RLIMIT_MEMLOCK does not limit this library on the CPU side (nothing is mlock'ed: tables are shared
// tmpfs pages, allocated by fallocate); a table far above a 64 KiB lock limit is created and usable.
TEST(ResourceLimits, SmallMemlockLimitDoesNotAffectTables) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    rlimit rl{64 << 10, 64 << 10};
    if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) _exit(3);
    auto layout = make_preset_layout("v41-flash-mini", 32 << 20);
    if (!layout.is_ok()) _exit(4);
    for (const char* backing : {"memfd", "anon-thp"}) {
      TableOptions o;
      test::set_opt(o, "backing", backing);
      auto t = HostTable::create(*layout, o);
      if (!t.is_ok()) _exit(5);
      (*t)->fill_synthetic(1, 1);
    }
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "3: setrlimit, 4: layout, 5: create failed under RLIMIT_MEMLOCK=64KiB";
}

// A /dev/shm too small for the table: kNoSpace naming the mount before any file exists. Needs a tmpfs
// of a chosen size: mounted here when running as root with CAP_SYS_ADMIN, else skipped.
TEST(ResourceLimits, SmallShmMountIsNoSpaceBeforeAnyFile) {
  const std::string dir = "/tmp/engram-small-shm-" + std::to_string(getpid()) + "-" + std::to_string(rng()() % 100000);
  std::filesystem::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=0700") != 0) {
    const int err = errno;
    std::filesystem::remove(dir);
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(err)
                 << "): needs root with CAP_SYS_ADMIN outside a restricted container";
  }
  auto layout = make_preset_layout("v41-flash-mini", 32 << 20);
  ASSERT_TRUE(layout.is_ok());
  TableOptions o;
  test::set_opt(o, "backing", "shm");
  o.shm_dir = dir;
  const ResourceCensus before = ResourceCensus::take(16 << 20, dir);
  sys::start_call_trace();
  auto t = HostTable::create(*layout, o);
  const auto calls = sys::stop_call_trace();
  const ResourceCensus after = ResourceCensus::take(16 << 20, dir);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kNoSpace) << t.status().to_string();
  EXPECT_NE(t.status().message().find(dir), std::string::npos) << t.status().to_string();
  for (const auto& c : calls) EXPECT_TRUE(c != "fallocate" && c != "mmap") << "allocated before refusing: " << c;
  EXPECT_EQ(after.shm_files, 0);
  EXPECT_EQ(after.fds, before.fds);
  // A table that fits is fine on the same mount.
  auto small = make_preset_layout("v41-flash-mini", 4 << 20);
  ASSERT_TRUE(small.is_ok());
  auto ok = HostTable::create(*small, o);
  EXPECT_TRUE(ok.is_ok()) << ok.status().to_string();
  ok = Status(Code::kInternal, "released");
  EXPECT_EQ(hardening::count_dir_entries(dir), 0);
  EXPECT_EQ(::umount(dir.c_str()), 0);
  std::filesystem::remove(dir);
}

// vm.max_map_count: a table is one mapping per backing (one mempolicy per shared object), whatever
// its size and placement -- 8x the rows gives the same VMA count.
TEST(ResourceLimits, VmaCountIsPerBackingNotPerRow) {
  for (const char* placement : {"none", "bind:0", "interleave:all"}) {
    int vmas[2] = {0, 0};
    int64_t sizes[2] = {8 << 20, 64 << 20};
    for (int k = 0; k < 2; ++k) {
      auto layout = make_preset_layout("v41-flash-mini", sizes[k]);
      ASSERT_TRUE(layout.is_ok());
      TableOptions o;
      test::set_opt(o, "placement", placement);
      auto t = HostTable::create(*layout, o);
      if (!t.is_ok() && t.status().code() == Code::kUnsupported) GTEST_SKIP() << t.status().to_string();
      ASSERT_TRUE(t.is_ok()) << placement << ": " << t.status().to_string();
      (*t)->fill_synthetic(3, 2);
      vmas[k] = table_vmas(**t);
    }
    EXPECT_EQ(vmas[0], vmas[1]) << placement << ": VMA count grows with the table size";
    auto layout = make_preset_layout("v41-flash-mini", 8 << 20);
    EXPECT_LE(vmas[0], 2 * layout->n_layers()) << placement << ": more than two VMAs per backing";
  }
}

// A table larger than the machine's memory: a clear error before any allocation -- the trace of hooked
// calls holds no mmap, no fallocate, no memfd_create or open of a named file.
TEST(ResourceLimits, TableLargerThanMemoryFailsBeforeAnyAllocation) {
  const int64_t total = mem_total_bytes();
  ASSERT_GT(total, 0);
  auto layout = make_preset_layout("v41-flash-mini", total * 2);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  for (const char* backing : {"memfd", "shm", "anon-thp"}) {
    TableOptions o;
    test::set_opt(o, "backing", backing);
    const ResourceCensus before = ResourceCensus::take(uint64_t{1} << 30, "/dev/shm");
    sys::start_call_trace();
    auto t = HostTable::create(*layout, o);
    const auto calls = sys::stop_call_trace();
    const ResourceCensus after = ResourceCensus::take(uint64_t{1} << 30, "/dev/shm");
    ASSERT_FALSE(t.is_ok()) << backing;
    EXPECT_TRUE(t.status().code() == Code::kNoSpace || t.status().code() == Code::kOutOfMemory)
        << backing << ": " << t.status().to_string();
    EXPECT_FALSE(t.status().message().empty());
    for (const auto& c : calls)
      EXPECT_TRUE(c != "fallocate" && c != "mmap" && c != "memfd_create" && c != "open_shm")
          << backing << ": '" << c << "' before refusing a table of " << layout->total_bytes() << " B";
    EXPECT_EQ(after.fds, before.fds) << backing;
    EXPECT_EQ(after.big_maps, before.big_maps) << backing;
    EXPECT_EQ(after.shm_files, before.shm_files) << backing;
  }
}

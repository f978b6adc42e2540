// Refusals and edge statuses: a node outside Mems_allowed (cpuset cgroup), a seccomp filter that
// denies mbind/set_mempolicy, a table larger than its tmpfs, and move_pages's per-page status codes.
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "numa_test_util.hpp"
#include "sys/numa.hpp"

using namespace engram;
using namespace engram::host;
using namespace engram::numa_test;

namespace {

// Runs `body` in a forked child and returns its exit status (or 100 + signal).
template <typename F>
int in_child(F body) {
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    const int rc = body();
    fflush(stdout);
    _exit(rc);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return 200;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  return static_cast<bool>(f);
}

// Installs a seccomp filter that makes mbind and set_mempolicy fail with EPERM, as a container
// runtime's default profile does without CAP_SYS_NICE.
bool deny_policy_syscalls() {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mbind, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_set_mempolicy, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
  };
  struct sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

}  // namespace

TEST(Refusal, SeccompDenyingMbindGivesPermissionWithRequestedAndObtained) {
  const int node = sys::memory_nodes().back();
  const std::string policy = "bind:" + std::to_string(node);
  const int rc = in_child([&] {
    if (!deny_policy_syscalls()) return 10;
    auto layout = make_preset_layout("tiny");
    if (!layout.is_ok()) return 11;
    TableOptions opts;
    opts.placement = *parse_placement(policy);
    auto strict = HostTable::create(*layout, opts);
    std::printf("strict: %s\n", strict.status().to_string().c_str());
    if (strict.is_ok() || strict.status().code() != Code::kPermission) return 12;
    if (strict.status().message().find("requested " + policy) == std::string::npos) return 13;
    if (strict.status().message().find("obtained default") == std::string::npos) return 14;
    opts.allow_fallback = true;
    auto loose = HostTable::create(*layout, opts);
    if (!loose.is_ok()) return 15;
    const PlacementReport& rep = (*loose)->backing(0)->report;
    std::printf("fallback: %s\n", rep.to_string().c_str());
    if (rep.status.code() != Code::kPermission || rep.obtained != "default") return 16;
    auto c = (*loose)->census(CensusPoint::kAfterPlacement);
    return c.at(0).known && c.at(0).not_resident == 0 ? 0 : 17;
  });
  EXPECT_EQ(rc, 0) << "child step " << rc << " failed (see its output)";
}

TEST(Refusal, NodeOutsideMemsAllowedIsRefusedByName) {
  ENGRAM_NEED_TWO_NODES();
  const std::string cg_root = "/sys/fs/cgroup";
  std::ifstream controllers(cg_root + "/cgroup.controllers");
  std::string ctl((std::istreambuf_iterator<char>(controllers)), std::istreambuf_iterator<char>());
  if (ctl.find("cpuset") == std::string::npos) GTEST_SKIP() << "no cgroup2 cpuset controller at " << cg_root;
  if (!write_file(cg_root + "/cgroup.subtree_control", "+cpuset")) GTEST_SKIP() << "cannot enable cpuset (not root?)";
  const std::string cg = cg_root + "/engram-numa-test-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(cg.c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_TRUE(write_file(cg + "/cpuset.cpus", "0"));
  ASSERT_TRUE(write_file(cg + "/cpuset.mems", "0"));
  const int rc = in_child([&] {
    if (!write_file(cg + "/cgroup.procs", "0")) return 10;
    auto allowed = sys::mems_allowed();
    if (!allowed.is_ok() || *allowed != std::vector<int>{0}) return 11;
    // Our own check names Mems_allowed before the kernel could trim a list silently.
    auto r = resolve_placement(*parse_placement("bind:1"));
    std::printf("resolve: %s\n", r.status().to_string().c_str());
    if (r.is_ok() || r.status().code() != Code::kInvalidArgument) return 12;
    if (r.status().message().find("Mems_allowed=0") == std::string::npos) return 13;
    // The raw syscall: EINVAL from the kernel, reported with Mems_allowed.
    void* p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    sys::MemPolicy mp{sys::MemPolicyMode::kBind, {1}};
    Status s = sys::mbind_range(p, 1 << 20, mp, false);
    std::printf("mbind: %s\n", s.to_string().c_str());
    if (s.code() != Code::kInvalidArgument || s.sys_error() != EINVAL) return 14;
    if (s.message().find("Mems_allowed=0") == std::string::npos) return 15;
    auto layout = make_preset_layout("tiny");
    TableOptions opts;
    opts.placement = *parse_placement("interleave:0,1");
    auto t = HostTable::create(*layout, opts);
    if (t.is_ok() || t.status().code() != Code::kInvalidArgument) return 16;
    opts.allow_fallback = true;
    auto loose = HostTable::create(*layout, opts);
    if (!loose.is_ok()) return 17;
    const PlacementReport& rep = (*loose)->backing(0)->report;
    std::printf("fallback: %s\n", rep.to_string().c_str());
    if (rep.status.code() != Code::kInvalidArgument) return 18;
    // interleave:all resolves to the allowed nodes only.
    opts.placement = *parse_placement("interleave:all");
    opts.allow_fallback = false;
    auto all = HostTable::create(*layout, opts);
    if (!all.is_ok() || (*all)->backing(0)->report.obtained != "interleave:0") return 19;
    return 0;
  });
  (void)write_file(cg_root + "/cgroup.procs", "0");
  rmdir(cg.c_str());
  EXPECT_EQ(rc, 0) << "child step " << rc << " failed (see its output)";
}

TEST(Refusal, TableLargerThanItsTmpfsIsNoSpaceWithNoFileLeft) {
  if (std::getenv("ENGRAM_NUMA_GUEST") == nullptr)
    GTEST_SKIP() << "mounts a small tmpfs: runs in the numa guest only (ENGRAM_NUMA_GUEST=1)";
  char dir_template[] = "/tmp/engram-small-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  ASSERT_EQ(mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=8m"), 0) << std::strerror(errno);
  BackingOptions o;
  o.kind = BackingKind::kShmFile;
  o.shm_dir = dir;
  o.name = "engram:layer=1:heads=0-24";
  o.size_bytes = (8u << 20) + 4096 * (1 + rng()() % 256);
  auto b = Backing::create(o);
  std::printf("%s\n", b.status().to_string().c_str());
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), Code::kNoSpace);
  EXPECT_NE(b.status().message().find(dir + " (tmpfs) has 8.0 MiB free of 8.0 MiB"), std::string::npos)
      << b.status().message();
  // One that fits, then a second that no longer does.
  o.size_bytes = 6u << 20;
  auto first = create_placed_backings(o, PlacementPolicy{});
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  auto second = create_placed_backings(o, PlacementPolicy{});
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().code(), Code::kNoSpace);
  // Table files (each has its owner record, sys/owner.hpp, beside it).
  int files = 0, records = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    const bool record = e.path().filename().string().rfind(".engram-owner.", 0) == 0;
    files += e.is_regular_file() && !record ? 1 : 0;
    records += record ? 1 : 0;
  }
  EXPECT_EQ(files, 1) << "only the first table's file may exist";
  EXPECT_EQ(records, 1) << "the first table's owner record, and no other";
  first->clear();
  int entries = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) entries += e.exists() ? 1 : 0;
  EXPECT_EQ(entries, 0) << "a file or an owner record outlived its table";
  umount(dir.c_str());
  rmdir(dir.c_str());
}

TEST(Refusal, MovePagesStatusMapping) {
  // Fresh anonymous page: not present (-ENOENT); read-touched: usually the shared zero page (-EFAULT);
  // written: a node; an unmapped address: -EFAULT. The census counts the first two and the last as
  // "not resident", never as node 0.
  const size_t page = 4096;
  char* p = static_cast<char*>(mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  volatile char sink = p[page];
  (void)sink;
  p[2 * page] = 1;
  munmap(p + 3 * page, page);
  std::vector<const void*> pages = {p, p + page, p + 2 * page, p + 3 * page};
  std::vector<int> status;
  ASSERT_TRUE(sys::move_pages_query(0, pages, &status).is_ok());
  std::printf("move_pages status: untouched %d, zero page %d, written %d, unmapped %d\n", status[0], status[1],
              status[2], status[3]);
  EXPECT_TRUE(status[0] == -ENOENT || status[0] == -EFAULT) << status[0];
  EXPECT_GE(status[2], 0);
  EXPECT_EQ(status[3], -EFAULT);
  for (int i : {0, 3}) EXPECT_EQ(classify_page_status(status[static_cast<size_t>(i)]), kCensusNotResident);
  EXPECT_EQ(classify_page_status(status[2]), status[2]);
  // The zero page: -EFAULT on older kernels (6.1); newer ones (6.18) report a node for it. Either way
  // the census must count it as not resident (it finds it through pagemap + kpageflags).
  PageCensus zc = take_census(p, 4 * page, TableIdentity{}, CensusPoint::kOnDemand);
  ASSERT_TRUE(zc.known);
  std::printf("census of the 4 pages: %s", zc.to_text().c_str());
  if (status[1] >= 0 && !zc.zero_page_check) GTEST_SKIP() << "kernel reports the zero page's node and frames are hidden";
  // Some kernels (a VM's 6.18 here) give a read fault a real zeroed page instead of the zero page:
  // then it is resident memory and counts; the shared zero page never does.
  const bool read_got_real_page = status[1] >= 0 && zc.zero_pages == 0;
  EXPECT_EQ(zc.resident(), read_got_real_page ? 2u : 1u);
  EXPECT_EQ(zc.not_resident, read_got_real_page ? 2u : 3u);
  EXPECT_EQ(zc.resident() + zc.not_resident, 4u);
  munmap(p, 3 * page);
  // A memfd page never touched: -ENOENT (tmpfs), and the census keeps it apart.
  BackingOptions o;
  o.size_bytes = 8 * page;
  auto b = Backing::create(o);
  ASSERT_TRUE(b.is_ok());
  b->data()[0] = 1;
  PageCensus c = take_census(b->data(), b->mapped_bytes(), TableIdentity{}, CensusPoint::kOnDemand);
  ASSERT_TRUE(c.known);
  EXPECT_EQ(c.resident(), 1u);
  EXPECT_EQ(c.not_resident, 7u);
  // Another process's pages are ours to query as root only: a peer that is not may see EPERM, which
  // the census turns into "unknown", not zeros.
}

TEST(Refusal, WeightedInterleaveBeforeLinux69IsUnsupported) {
  ENGRAM_NEED_TWO_NODES();
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  TableOptions opts;
  opts.placement = *parse_placement("weighted-interleave:0=1,1=1");
  auto t = HostTable::create(*layout, opts);
  std::printf("weighted-interleave on %s: %s\n", sys::kernel_version().release.c_str(), t.status().to_string().c_str());
  if (sys::kernel_version().at_least(6, 9)) {
    ASSERT_TRUE(t.is_ok() || t.status().code() == Code::kPermission) << t.status().to_string();
  } else {
    ASSERT_FALSE(t.is_ok());
    EXPECT_EQ(t.status().code(), Code::kUnsupported);
    EXPECT_NE(t.status().message().find("Linux >= 6.9"), std::string::npos) << t.status().message();
  }
}

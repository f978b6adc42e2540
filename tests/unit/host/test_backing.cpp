// Backings: memfd / named shm / anon-THP creation, identity, sharing with a forked peer, size checks
// before anything is created, no file left behind on any error path, unlink-while-mapped, late join.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "host/backing.hpp"
#include "host/placement.hpp"
#include "sys/fault.hpp"
#include "sys/memfd.hpp"

using namespace engram;
using namespace engram::host;

namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

// Files in `dir` whose name starts with `prefix`.
int count_files(const std::string& dir, const std::string& prefix) {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

std::string unique_prefix() { return "engram-test-" + std::to_string(getpid()) + "-" + std::to_string(rng()() % 100000); }

}  // namespace

TEST(Backing, MemfdIsSizedMappedAndNamed) {
  BackingOptions o;
  o.size_bytes = 1 + rng()() % (8u << 20);
  o.name = "engram:layer=1:heads=0-24";
  auto b = Backing::create(o);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(b->kind(), BackingKind::kMemfd);
  EXPECT_GE(b->fd(), 0);
  EXPECT_EQ(b->size_bytes(), o.size_bytes);
  EXPECT_EQ(b->mapped_bytes() % 4096, 0u);
  EXPECT_GE(b->mapped_bytes(), o.size_bytes);
  EXPECT_NE(b->identity().inode, 0u);
  EXPECT_EQ(b->identity().to_string().rfind("memfd:engram:layer=1:heads=0-24 inode ", 0), 0u) << b->identity().to_string();
  std::memset(b->data(), 0x5a, o.size_bytes);
  EXPECT_EQ(b->data()[o.size_bytes - 1], 0x5a);
  // The name shows in /proc/self/maps, where `engram census --pid` finds it.
  std::ifstream maps("/proc/self/maps");
  std::string all((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("/memfd:engram:layer=1:heads=0-24"), std::string::npos);
}

TEST(Backing, MemfdPeerSeesLeaderWritesThroughTheFd) {
  BackingOptions o;
  o.size_bytes = 64 << 10;
  auto leader = Backing::create(o);
  ASSERT_TRUE(leader.is_ok());
  auto fd = sys::dup_fd(leader->fd());
  ASSERT_TRUE(fd.is_ok());
  auto peer = Backing::attach_fd(*fd, BackingKind::kMemfd, o.size_bytes, "peer");
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  EXPECT_EQ(peer->identity().inode, leader->identity().inode);
  EXPECT_FALSE(peer->owner());
  const uint64_t v = rng()();
  std::memcpy(leader->data() + 4096, &v, sizeof v);
  uint64_t got = 0;
  std::memcpy(&got, peer->data() + 4096, sizeof got);
  EXPECT_EQ(got, v);
}

TEST(Backing, AttachFdRefusesTooSmallObjectAndClosesFd) {
  BackingOptions o;
  o.size_bytes = 8192;
  auto leader = Backing::create(o);
  ASSERT_TRUE(leader.is_ok());
  auto fd = sys::dup_fd(leader->fd());
  ASSERT_TRUE(fd.is_ok());
  auto peer = Backing::attach_fd(*fd, BackingKind::kMemfd, 1 << 20, "peer");
  ASSERT_FALSE(peer.is_ok());
  EXPECT_EQ(peer.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(fcntl(*fd, F_GETFD), -1) << "the fd handed to attach_fd must be closed on failure";
}

TEST(Backing, NamedFileIsExclusive0600AndRemovedWithTheBacking) {
  const std::string prefix = unique_prefix();
  std::string path;
  {
    BackingOptions o;
    o.kind = BackingKind::kShmFile;
    o.size_bytes = 1 + rng()() % (1u << 20);
    o.name = prefix;
    auto b = Backing::create(o);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    path = b->identity().path;
    EXPECT_EQ(path.rfind("/dev/shm/" + prefix + ".", 0), 0u) << path;
    EXPECT_EQ(path.size(), std::string("/dev/shm/").size() + prefix.size() + 17);
    struct stat st {};
    ASSERT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(st.st_ino, b->identity().inode);
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "a named file must not outlive its creator's Backing";
}

TEST(Backing, UnlinkWhileMappedKeepsDataAndLateJoinGetsClearError) {
  BackingOptions o;
  o.kind = BackingKind::kShmFile;
  o.size_bytes = 1 << 20;
  o.name = unique_prefix();
  auto leader = Backing::create(o);
  ASSERT_TRUE(leader.is_ok());
  auto peer = Backing::attach_path(leader->identity().path, o.size_bytes);
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  const uint64_t v = rng()();
  std::memcpy(leader->data() + 12345, &v, sizeof v);
  ASSERT_TRUE(leader->unlink_name().is_ok());
  EXPECT_FALSE(std::filesystem::exists(leader->identity().path));
  uint64_t got = 0;
  std::memcpy(&got, peer->data() + 12345, sizeof got);
  EXPECT_EQ(got, v) << "data stays readable through the mapping after unlink";
  auto late = Backing::attach_path(leader->identity().path, o.size_bytes);
  ASSERT_FALSE(late.is_ok());
  EXPECT_EQ(late.status().code(), Code::kIo);  // a runtime failure of the group, not a name given wrong
  EXPECT_NE(late.status().message().find("joined late"), std::string::npos) << late.status().message();
}

TEST(Backing, NamedFileRefusesSymlink) {
  const std::string link = "/dev/shm/" + unique_prefix() + ".link";
  ASSERT_EQ(symlink("/etc/hostname", link.c_str()), 0);
  auto b = Backing::attach_path(link, 1);
  unlink(link.c_str());
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), Code::kPermission) << b.status().to_string();
}

TEST(Backing, TableLargerThanTmpfsFailsUpFrontWithNoFileLeft) {
  auto fs = sys::fs_space_path("/dev/shm");
  ASSERT_TRUE(fs.is_ok());
  if (fs->total_bytes == 0) GTEST_SKIP() << "/dev/shm has no size limit here";
  const std::string prefix = unique_prefix();
  BackingOptions o;
  o.kind = BackingKind::kShmFile;
  o.size_bytes = fs->free_bytes + (uint64_t{1} << 30) + rng()() % (1u << 30);
  o.name = prefix;
  auto b = Backing::create(o);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), Code::kNoSpace);
  const std::string& m = b.status().message();
  EXPECT_NE(m.find("/dev/shm"), std::string::npos) << m;
  EXPECT_NE(m.find("free"), std::string::npos) << m;
  EXPECT_NE(m.find("does not fit"), std::string::npos) << m;
  EXPECT_EQ(count_files("/dev/shm", prefix), 0);
}

TEST(Backing, FallocateEnospcLeavesNoFile) {
  // Fault: tmpfs runs out while the pages are being allocated (after the up-front check passed).
  const std::string prefix = unique_prefix();
  BackingOptions o;
  o.kind = BackingKind::kShmFile;
  o.size_bytes = 4 << 20;
  o.name = prefix;
  sys::ScopedFault f("fallocate", ENOSPC);
  PlacementOptions po;
  po.prefault_fallocate = true;
  auto placed = create_placed_backings(o, PlacementPolicy{}, po);
  ASSERT_FALSE(placed.is_ok());
  EXPECT_EQ(placed.status().code(), Code::kNoSpace) << placed.status().to_string();
  EXPECT_NE(placed.status().message().find("prefault"), std::string::npos);
  EXPECT_EQ(count_files("/dev/shm", prefix), 0);
}

TEST(Backing, PopulateEfaultIsNoSpaceAndLeavesNoFile) {
  // Fault: the populating faults find the tmpfs full (MADV_POPULATE_WRITE fails with EFAULT where an access
  // would have raised SIGBUS).
  const std::string prefix = unique_prefix();
  BackingOptions o;
  o.kind = BackingKind::kShmFile;
  o.size_bytes = 4 << 20;
  o.name = prefix;
  sys::ScopedFault f("madvise", EFAULT);
  auto placed = create_placed_backings(o, PlacementPolicy{});
  ASSERT_FALSE(placed.is_ok());
  EXPECT_EQ(placed.status().code(), Code::kNoSpace) << placed.status().to_string();
  EXPECT_NE(placed.status().message().find("prefault"), std::string::npos) << placed.status().message();
  EXPECT_NE(placed.status().message().find("MADV_POPULATE_WRITE"), std::string::npos) << placed.status().message();
  EXPECT_EQ(count_files("/dev/shm", prefix), 0);
}

TEST(Backing, MemfdPrefaultPopulatesInParallelWithoutFallocate) {
  // The default prefault of a memfd: no fallocate (serialised on the inode), every page resident and zero, the
  // huge-page advice and the bytes in huge pages reported (0 where shmem_enabled is never).
  BackingOptions o;
  o.size_bytes = (8 << 20) + 4096 * 3;
  PlacementOptions po;
  po.prefault_threads = 2;
  sys::start_call_trace();
  auto placed = create_placed_backings(o, PlacementPolicy{}, po);
  const std::vector<std::string> calls = sys::stop_call_trace();
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  for (const std::string& c : calls) EXPECT_NE(c, "fallocate");
  const PlacedBacking& pb = placed->front();
  EXPECT_NE(pb.report.prefault.find("MADV_POPULATE_WRITE"), std::string::npos) << pb.report.prefault;
  EXPECT_EQ(pb.report.prefault.find("fallocate"), std::string::npos) << pb.report.prefault;
  EXPECT_NE(pb.report.huge_advice.find("MADV_HUGEPAGE"), std::string::npos) << pb.report.huge_advice;
  EXPECT_NE(pb.report.huge_advice.find("shmem_enabled"), std::string::npos) << pb.report.huge_advice;
  ASSERT_GE(pb.report.huge_page_bytes, 0);
  EXPECT_LE(pb.report.huge_page_bytes, static_cast<int64_t>(pb.backing.mapped_bytes()));
  auto resident = sys::mincore_range(pb.backing.data(), pb.backing.mapped_bytes());
  ASSERT_TRUE(resident.is_ok());
  for (size_t i = 0; i < resident->size(); ++i) ASSERT_TRUE((*resident)[i] & 1) << "page " << i << " not resident";
  const uint8_t* p = pb.backing.data();
  for (uint64_t b = 0; b < pb.backing.mapped_bytes(); b += 4096) ASSERT_EQ(p[b], 0) << "byte " << b;

  // The former method on request: fallocate, then populate.
  po.prefault_fallocate = true;
  po.shmem_huge_pages = false;
  sys::start_call_trace();
  auto again = create_placed_backings(o, PlacementPolicy{}, po);
  const std::vector<std::string> calls2 = sys::stop_call_trace();
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_NE(std::find(calls2.begin(), calls2.end(), "fallocate"), calls2.end());
  EXPECT_NE(again->front().report.prefault.find("fallocate + MADV_POPULATE_WRITE"), std::string::npos);
  EXPECT_TRUE(again->front().report.huge_advice.empty()) << again->front().report.huge_advice;
}

TEST(Backing, MemfdLargerThanMemoryIsNoSpace) {
  BackingOptions o;
  o.size_bytes = uint64_t{1} << 50;  // 1 PiB
  auto b = Backing::create(o);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), Code::kNoSpace);
  EXPECT_NE(b.status().message().find("MemAvailable"), std::string::npos) << b.status().message();
}

TEST(Backing, HugetlbChecksThePoolFirst) {
  BackingOptions o;
  o.kind = BackingKind::kHugetlb;
  o.size_bytes = uint64_t{1} << 40;  // no machine reserves 1 TiB of hugepages for a test
  auto b = Backing::create(o);
  ASSERT_FALSE(b.is_ok());
  EXPECT_TRUE(b.status().code() == Code::kNoSpace || b.status().code() == Code::kUnsupported) << b.status().to_string();
  EXPECT_NE(b.status().message().find("hugepage"), std::string::npos) << b.status().message();
}

TEST(Backing, AnonThpIsAlignedAndPrefaulted) {
  BackingOptions o;
  o.kind = BackingKind::kAnonThp;
  o.size_bytes = (4u << 20) + rng()() % (4u << 20);
  auto placed = create_placed_backings(o, PlacementPolicy{});
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  ASSERT_EQ(placed->size(), 1u);
  const Backing& b = placed->front().backing;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (2u << 20), 0u);
  EXPECT_EQ(b.fd(), -1);
  EXPECT_NE(placed->front().report.prefault.find("touch"), std::string::npos);
  auto fd = sys::dup_fd(0);
  ASSERT_TRUE(fd.is_ok());
  auto bad = Backing::attach_fd(*fd, BackingKind::kAnonThp, 1, "x");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
}

TEST(Backing, ForkedPeerMapsTheSameNamedFile) {
  BackingOptions o;
  o.kind = BackingKind::kShmFile;
  o.size_bytes = 1 << 20;
  o.name = unique_prefix();
  auto leader = Backing::create(o);
  ASSERT_TRUE(leader.is_ok());
  const uint64_t v = rng()() | 1;
  const std::string path = leader->identity().path;
  const pid_t pid = fork();
  if (pid == 0) {
    auto peer = Backing::attach_path(path, 1 << 20);
    if (!peer.is_ok()) _exit(2);
    std::memcpy(peer->data() + 777, &v, sizeof v);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  uint64_t got = 0;
  std::memcpy(&got, leader->data() + 777, sizeof got);
  EXPECT_EQ(got, v);
}

TEST(Backing, KindNamesParse) {
  uint64_t hp = 0;
  EXPECT_EQ(*parse_backing_kind("memfd"), BackingKind::kMemfd);
  EXPECT_EQ(*parse_backing_kind("shm"), BackingKind::kShmFile);
  EXPECT_EQ(*parse_backing_kind("hugetlb-1g", &hp), BackingKind::kHugetlb);
  EXPECT_EQ(hp, 1u << 30);
  EXPECT_EQ(*parse_backing_kind("anon-thp"), BackingKind::kAnonThp);
  EXPECT_EQ(parse_backing_kind("file").status().code(), Code::kInvalidArgument);
}

TEST(FaultInjection, SpecParsesAndFailsTheNamedWrapperOnly) {
  ASSERT_TRUE(sys::set_faults_from_spec("memfd_create=EMFILE,ftruncate=28").is_ok());
  auto fd = sys::memfd_create("x");
  EXPECT_EQ(fd.status().sys_error(), EMFILE);
  EXPECT_NE(fd.status().message().find("EMFILE"), std::string::npos);
  EXPECT_EQ(sys::fault_errno("ftruncate"), ENOSPC);
  EXPECT_EQ(sys::fault_errno("mbind"), 0);
  sys::clear_faults();
  auto ok = sys::memfd_create("x");
  ASSERT_TRUE(ok.is_ok());
  (void)sys::close_fd(*ok);
  EXPECT_FALSE(sys::set_faults_from_spec("mbind=EWHAT").is_ok());
  EXPECT_FALSE(sys::set_faults_from_spec("mbind").is_ok());
}

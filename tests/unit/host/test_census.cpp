// Census: move_pages counting rules (not resident is never node 0, unknown is never zero), sampling
// stride, table identity naming, and the /proc parsers on fixed samples and on this process.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/census.hpp"
#include "host/placement.hpp"
#include "sys/fault.hpp"
#include "sys/memfd.hpp"
#include "sys/numa.hpp"

using namespace engram;
using namespace engram::host;

namespace {
std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}
}  // namespace

TEST(Census, StatusMapping) {
  EXPECT_EQ(classify_page_status(0), 0);
  EXPECT_EQ(classify_page_status(3), 3);
  EXPECT_EQ(classify_page_status(-ENOENT), kCensusNotResident);
  EXPECT_EQ(classify_page_status(-EFAULT), kCensusNotResident);
  EXPECT_EQ(classify_page_status(-EACCES), kCensusError);
  EXPECT_EQ(classify_page_status(-EBUSY), kCensusError);
}

TEST(Census, UntouchedAnonymousPagesAreNotResidentNeverNodeZero) {
  const size_t pages = 16 + rng()() % 64;
  void* p = mmap(nullptr, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const size_t touched = rng()() % pages;
  for (size_t i = 0; i < touched; ++i) static_cast<char*>(p)[i * 4096] = 1;
  PageCensus c = take_census(p, pages * 4096, TableIdentity{}, CensusPoint::kAfterPlacement);
  munmap(p, pages * 4096);
  ASSERT_TRUE(c.known) << c.reason;
  EXPECT_EQ(c.pages_total, pages);
  EXPECT_EQ(c.pages_sampled, pages);
  EXPECT_EQ(c.stride_pages, 1u);
  EXPECT_EQ(c.resident(), touched);
  EXPECT_EQ(c.not_resident, pages - touched);
  EXPECT_TRUE(c.errors.empty());
}

TEST(Census, StrideSamplingIsStated) {
  const size_t pages = 1000 + rng()() % 1000;
  void* p = mmap(nullptr, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  CensusOptions o;
  o.max_samples = 100;
  PageCensus c = take_census(p, pages * 4096, TableIdentity{}, CensusPoint::kOnDemand, o);
  munmap(p, pages * 4096);
  ASSERT_TRUE(c.known);
  EXPECT_EQ(c.stride_pages, (pages + 99) / 100);
  EXPECT_EQ(c.pages_sampled, (pages + c.stride_pages - 1) / c.stride_pages);
  EXPECT_LE(c.pages_sampled, 100u);
  EXPECT_EQ(c.resident(), c.pages_sampled);
  EXPECT_NE(c.to_text().find("every " + std::to_string(c.stride_pages) + "th page"), std::string::npos);
  EXPECT_EQ(c.to_json()["exact"], false);
}

TEST(Census, RefusedMovePagesIsUnknownNotZero) {
  // Fault: a seccomp filter denies move_pages (ENOSYS) — the census must say unknown.
  std::vector<char> buf(1 << 16, 1);
  sys::ScopedFault f("move_pages", ENOSYS);
  PageCensus c = take_census(buf.data(), buf.size(), TableIdentity{}, CensusPoint::kAfterLoad);
  EXPECT_FALSE(c.known);
  EXPECT_TRUE(c.pages_per_node.empty());
  EXPECT_NE(c.reason.find("ENOSYS"), std::string::npos) << c.reason;
  EXPECT_EQ(c.to_json()["pages_per_node"], "unknown");
  EXPECT_NE(c.to_text().find("unknown"), std::string::npos);
}

TEST(Census, MemfdPagesAllocatedByFallocateAreCountedOnTheirNode) {
  // fallocate allocates tmpfs pages without mapping them here; the census maps the resident ones.
  const int node = sys::memory_nodes().front();
  BackingOptions o;
  o.size_bytes = (64 + rng()() % 64) * 4096;
  auto placed = create_placed_backings(o, *parse_placement("bind:" + std::to_string(node)));
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  const Backing& b = placed->front().backing;
  TableIdentity id;
  id.layer_id = 14;
  id.backing = b.identity().to_string();
  PageCensus c = take_census(b.data(), b.mapped_bytes(), id, CensusPoint::kAfterPlacement);
  ASSERT_TRUE(c.known) << c.reason;
  EXPECT_EQ(c.pages_per_node[node], b.mapped_bytes() / 4096);
  EXPECT_EQ(c.not_resident, 0u);
  EXPECT_EQ(placed->front().report.obtained, "bind:" + std::to_string(node));
  // A peer maps the same object but has none of its pages in its page tables: move_pages alone
  // sees nothing there; the census maps the resident pages (reads, no allocation) and counts them.
  auto fd = sys::dup_fd(b.fd());
  ASSERT_TRUE(fd.is_ok());
  auto peer = Backing::attach_fd(*fd, BackingKind::kMemfd, b.size_bytes(), "peer");
  ASSERT_TRUE(peer.is_ok());
  CensusOptions raw;
  raw.map_resident = false;
  PageCensus before = take_census(peer->data(), peer->mapped_bytes(), id, CensusPoint::kOnDemand, raw);
  ASSERT_TRUE(before.known);
  EXPECT_EQ(before.resident(), 0u);
  EXPECT_EQ(before.not_resident, before.pages_sampled);
  PageCensus after = take_census(peer->data(), peer->mapped_bytes(), id, CensusPoint::kAfterRegistration);
  ASSERT_TRUE(after.known);
  EXPECT_EQ(after.pages_per_node[node], b.mapped_bytes() / 4096);
  EXPECT_EQ(after.not_resident, 0u);
}

TEST(Census, TableNameRoundTrip) {
  TableIdentity t;
  t.layer_id = static_cast<int>(rng()() % 60);
  t.head_begin = static_cast<int>(rng()() % 12);
  t.head_end = t.head_begin + 1 + static_cast<int>(rng()() % 12);
  t.group = "dp" + std::to_string(rng()() % 8);
  t.replica_node = static_cast<int>(rng()() % 4);
  const std::string name = table_backing_name(t);
  for (const std::string& shown : {"/memfd:" + name + " (deleted)", "/dev/shm/" + name + ".0123456789abcdef",
                                   "/memfd:" + name + ".node1 (deleted)"}) {
    TableIdentity back;
    ASSERT_TRUE(parse_table_backing_name(shown, &back)) << shown;
    EXPECT_EQ(back.layer_id, t.layer_id);
    EXPECT_EQ(back.head_begin, t.head_begin);
    EXPECT_EQ(back.head_end, t.head_end);
    EXPECT_EQ(back.group, t.group);
    EXPECT_EQ(back.replica_node, t.replica_node);
  }
  TableIdentity none;
  EXPECT_FALSE(parse_table_backing_name("/usr/lib/libc.so.6", &none));
}

TEST(Census, ParsesNumaMapsWithKernelPageSize) {
  const std::string text =
      "7f0000000000 bind:1 file=/memfd:engram:layer=1:heads=0-24\\040(deleted) dirty=512 N1=512 kernelpagesize_kB=4\n"
      "7f1000000000 interleave:0-1 file=/memfd:engram:layer=14:heads=0-24\\040(deleted) huge dirty=3 N0=2 N1=1 "
      "kernelpagesize_kB=2048\n"
      "55d000000000 default heap anon=10 dirty=10 N0=10 kernelpagesize_kB=4\n";
  auto v = parse_numa_maps(text);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].start, uintptr_t{0x7f0000000000});
  EXPECT_EQ(v[0].policy, "bind:1");
  EXPECT_EQ(v[0].file, "/memfd:engram:layer=1:heads=0-24 (deleted)");
  EXPECT_EQ(v[0].pages_per_node.at(1), 512u);
  EXPECT_EQ(v[0].kernel_page_bytes, 4096u);
  EXPECT_EQ(v[1].kernel_page_bytes, 2u << 20);
  EXPECT_TRUE(v[1].huge);
  EXPECT_EQ(v[1].pages_per_node.at(0), 2u);
  EXPECT_TRUE(v[2].anon);
}

TEST(Census, ParsesMapsAndSmaps) {
  const std::string maps =
      "7f0000000000-7f0000200000 rw-s 00000000 00:01 4242                       /memfd:engram:layer=1:heads=0-2 (deleted)\n"
      "7f0000200000-7f0000201000 r--p 00000000 00:00 0 \n";
  auto m = parse_maps(maps);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].end - m[0].start, 2u << 20);
  EXPECT_EQ(m[0].inode, 4242u);
  EXPECT_EQ(m[0].perms, "rw-s");
  EXPECT_EQ(m[0].path, "/memfd:engram:layer=1:heads=0-2 (deleted)");
  EXPECT_EQ(m[1].path, "");
  const std::string smaps =
      "7f0000000000-7f0000200000 rw-s 00000000 00:01 4242   /memfd:x (deleted)\n"
      "Size:               2048 kB\nRss:                2048 kB\nPss:                1024 kB\n"
      "VmFlags: rd wr sh mr mw me ms sd\n"
      "7f0000200000-7f0000201000 r--p 00000000 00:00 0 \nSize:                  4 kB\nRss:    0 kB\nPss: 0 kB\n";
  auto s = parse_smaps(smaps);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0x7f0000000000].at("Pss"), 1024 * 1024);
  EXPECT_EQ(s[0x7f0000000000].at("Rss"), 2048 * 1024);
  EXPECT_EQ(s[0x7f0000200000].at("Size"), 4096);
}

TEST(Census, ProcessCensusFindsOwnTables) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  TableOptions opts;
  opts.group = "g" + std::to_string(rng()() % 1000);
  auto t = HostTable::create(*layout, opts);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  (*t)->fill_synthetic(rng()());
  auto pc = process_census(getpid());
  ASSERT_TRUE(pc.is_ok()) << pc.status().to_string();
  ASSERT_GE(pc->tables.size(), 1u);
  bool found = false;
  for (const PageCensus& c : pc->tables) {
    if (c.table.group != opts.group) continue;
    found = true;
    EXPECT_EQ(c.table.layer_id, layout->layer_ids[0]);
    EXPECT_EQ(c.table.head_end, layout->heads());
    EXPECT_EQ(c.table.base, reinterpret_cast<uintptr_t>((*t)->view(0).data));
    ASSERT_TRUE(c.known) << c.reason;
    EXPECT_EQ(c.resident() + c.not_resident, c.pages_total);
    EXPECT_EQ(c.not_resident, 0u) << "fill_synthetic wrote every page";
    EXPECT_GT(c.pss_bytes, 0);
  }
  EXPECT_TRUE(found);
  EXPECT_FALSE(pc->mems_allowed.empty());
  EXPECT_GT(pc->rollup.at("Pss"), 0);
  auto gone = process_census(999999999);
  EXPECT_FALSE(gone.is_ok());
}

TEST(Census, HostTableCensusNamesEachTable) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  auto t = HostTable::create(*layout, TableOptions{});
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto cs = (*t)->census(CensusPoint::kAfterPlacement);
  ASSERT_EQ(cs.size(), static_cast<size_t>(layout->n_layers()));
  for (const PageCensus& c : cs) {
    ASSERT_TRUE(c.known) << c.reason;
    EXPECT_EQ(c.point, CensusPoint::kAfterPlacement);
    EXPECT_EQ(c.not_resident, 0u) << "create() prefaults every page";
    EXPECT_NE(c.table.backing.find("memfd:engram:layer="), std::string::npos);
    EXPECT_EQ(c.table.bytes, static_cast<uint64_t>(layout->table_bytes(0)));
  }
  // The legacy allocate() path keeps working and is censused as untouched anonymous memory.
  auto legacy = HostTable::allocate(*layout);
  ASSERT_TRUE(legacy.is_ok());
  auto lc = (*legacy)->census(CensusPoint::kOnDemand);
  ASSERT_EQ(lc.size(), 1u);
  EXPECT_EQ(lc[0].resident(), 0u);
  EXPECT_EQ(lc[0].table.backing, "private anonymous");
}

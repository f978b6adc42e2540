// Placement on two nodes, verified page by page: bind, interleave, preferred fallback, replicas,
// a policy set by one process seen by another, pages touched before the policy.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "numa_test_util.hpp"
#include "sys/affinity.hpp"
#include "sys/memfd.hpp"

using namespace engram;
using namespace engram::host;
using namespace engram::numa_test;

namespace {

Result<std::vector<PlacedBacking>> make(BackingKind kind, uint64_t bytes, const std::string& policy,
                                        const std::string& name = "engram:layer=1:heads=0-24") {
  BackingOptions o;
  o.kind = kind;
  o.size_bytes = bytes;
  o.name = kind == BackingKind::kShmFile ? "engram:layer=1:heads=0-24:group=shm" : name;
  auto p = parse_placement(policy);
  if (!p.is_ok()) return p.status();
  return create_placed_backings(o, *p);
}

uint64_t small_bytes() { return (1024 + rng()() % 1024) * 4096; }  // 4-8 MiB: TCG faults are slow

}  // namespace

class BindAllKinds : public ::testing::TestWithParam<BackingKind> {};

TEST_P(BindAllKinds, BindOnePutsEveryPageOnNodeOne) {
  ENGRAM_NEED_TWO_NODES();
  auto placed = make(GetParam(), small_bytes(), "bind:1");
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  const PlacedBacking& pb = placed->front();
  EXPECT_EQ(pb.report.obtained, "bind:1") << pb.report.to_string();
  std::printf("placement: %s\n", pb.report.to_string().c_str());
  PageCensus c = census_of(pb.backing, std::string("bind:1 ") + backing_kind_name(GetParam()));
  ASSERT_TRUE(c.known) << c.reason;
  EXPECT_EQ(c.pages_sampled, pb.backing.mapped_bytes() / 4096);
  EXPECT_EQ(pages_on(c, 1), c.pages_sampled);
  EXPECT_EQ(pages_on(c, 0), 0u);
  EXPECT_EQ(c.not_resident, 0u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, BindAllKinds,
                         ::testing::Values(BackingKind::kAnonThp, BackingKind::kMemfd, BackingKind::kShmFile),
                         [](const auto& param_info) {
                           std::string n = backing_kind_name(param_info.param);
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

class InterleaveKinds : public ::testing::TestWithParam<BackingKind> {};

TEST_P(InterleaveKinds, InterleaveSplitsHalfAndHalfWithinOnePage) {
  ENGRAM_NEED_TWO_NODES();
  auto placed = make(GetParam(), small_bytes() + 4096 * (rng()() % 2), "interleave:all");
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  const PlacedBacking& pb = placed->front();
  EXPECT_EQ(pb.report.obtained, "interleave:0,1");
  PageCensus c = census_of(pb.backing, std::string("interleave:all ") + backing_kind_name(GetParam()));
  ASSERT_TRUE(c.known);
  const int64_t n0 = static_cast<int64_t>(pages_on(c, 0)), n1 = static_cast<int64_t>(pages_on(c, 1));
  EXPECT_EQ(static_cast<uint64_t>(n0 + n1), c.pages_sampled);
  EXPECT_LE(std::abs(n0 - n1), 1) << "interleave must alternate pages: " << n0 << " vs " << n1;
}

INSTANTIATE_TEST_SUITE_P(Kinds, InterleaveKinds, ::testing::Values(BackingKind::kAnonThp, BackingKind::kMemfd),
                         [](const auto& param_info) {
                           return std::string(param_info.param == BackingKind::kMemfd ? "memfd" : "anon_thp");
                         });

TEST(Placement, ReplicaPerNodeKeepsEachCopyOnItsNode) {
  ENGRAM_NEED_TWO_NODES();
  auto layout = make_preset_layout("v41-flash-mini", 6 << 20);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  TableOptions opts;
  opts.placement = *parse_placement("replica-per-node");
  opts.group = "dp";
  opts.home_node = 1;
  auto t = HostTable::create(*layout, opts);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ((*t)->n_replicas(), 2);
  EXPECT_EQ((*t)->replica_node((*t)->home_replica()), 1);
  EXPECT_EQ((*t)->view(0).data, (*t)->view(0, (*t)->home_replica()).data);
  (*t)->fill_synthetic(rng()());
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(std::memcmp((*t)->view(0, 0).data, (*t)->view(0, 1).data, 4096), 0) << "replicas hold the same rows";
  for (const PageCensus& c : (*t)->census(CensusPoint::kAfterLoad)) {
    std::printf("---- census: replica-per-node\n%s", c.to_text().c_str());
    ASSERT_TRUE(c.known);
    ASSERT_GE(c.table.replica_node, 0);
    EXPECT_EQ(pages_on(c, c.table.replica_node), c.pages_sampled) << c.to_text();
    EXPECT_EQ(c.not_resident, 0u);
  }
}

TEST(Placement, PreferredFallsBackWhenTheNodeIsFull) {
  ENGRAM_NEED_TWO_NODES();
  // Fill node 1 with fallocated tmpfs pages (cheap: fallocate does not zero them), leaving a little.
  auto mem1 = sys::node_memory(1);
  ASSERT_TRUE(mem1.is_ok());
  const uint64_t filler_bytes = static_cast<uint64_t>(mem1->free_bytes) - (24u << 20);
  BackingOptions fo;
  fo.size_bytes = filler_bytes;
  fo.check_memory = false;
  fo.name = "engram:filler";
  auto filler = Backing::create(fo);
  ASSERT_TRUE(filler.is_ok()) << filler.status().to_string();
  PlacementReport frep;
  ASSERT_TRUE(apply_placement(filler->data(), filler->mapped_bytes(), *parse_placement("bind:1"), &frep).is_ok());
  ASSERT_TRUE(filler->fallocate_range(0, filler->mapped_bytes()).is_ok());
  std::printf("filled node 1 with %llu MiB\n", static_cast<unsigned long long>(filler_bytes >> 20));

  // Request four times the headroom left on node 1: with only twice (48 MiB) node 1 took 24.04 MiB of the 48 (pages
  // freed by earlier tests come back after node_memory() is read), a knife edge for "most pages on node 0".
  auto placed = make(BackingKind::kMemfd, 96u << 20, "preferred:1");
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  EXPECT_EQ(placed->front().report.obtained, "preferred:1");
  PageCensus c = census_of(placed->front().backing, "preferred:1 with node 1 full");
  ASSERT_TRUE(c.known);
  EXPECT_EQ(c.not_resident, 0u);
  EXPECT_GT(pages_on(c, 0), c.pages_sampled / 2) << "node 1 is full: most pages must fall back to node 0";
  EXPECT_EQ(pages_on(c, 0) + pages_on(c, 1), c.pages_sampled);
}

TEST(Placement, PolicySetByOneProcessIsSeenByAnother) {
  ENGRAM_NEED_TWO_NODES();
  // The leader sets bind:1 on a fresh memfd and allocates nothing; a forked peer maps the object and
  // touches every page: tmpfs keeps the policy on the object, so the peer's faults land on node 1.
  BackingOptions o;
  o.size_bytes = small_bytes();
  o.name = "engram:layer=14:heads=0-24:group=fork";
  auto leader = Backing::create(o);
  ASSERT_TRUE(leader.is_ok());
  PlacementReport rep;
  ASSERT_TRUE(apply_placement(leader->data(), leader->mapped_bytes(), *parse_placement("bind:1"), &rep).is_ok());
  const int fd = leader->fd();
  const uint64_t bytes = leader->mapped_bytes();
  const pid_t pid = fork();
  if (pid == 0) {
    // Peer: pinned to node 0's CPU, so a local first touch would go to node 0.
    (void)sys::set_thread_affinity({0});
    auto dup = sys::dup_fd(fd);
    if (!dup.is_ok()) _exit(3);
    auto peer = Backing::attach_fd(*dup, BackingKind::kMemfd, bytes, "peer");
    if (!peer.is_ok()) _exit(4);
    for (uint64_t off = 0; off < bytes; off += 4096) peer->data()[off] = 1;
    PageCensus c = census_of(*peer, "peer after touching a bind:1 object");
    _exit(c.known && pages_on(c, 1) == c.pages_sampled ? 0 : 5);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  PageCensus c = census_of(*leader, "leader's view of the peer-touched object");
  EXPECT_EQ(pages_on(c, 1), c.pages_sampled);
}

TEST(Placement, PagesTouchedBeforeThePolicyStayWhereTheyWere) {
  ENGRAM_NEED_TWO_NODES();
  BackingOptions o;
  o.size_bytes = small_bytes();
  auto b = Backing::create(o);
  ASSERT_TRUE(b.is_ok());
  const uint64_t pages = b->mapped_bytes() / 4096, early = pages / 2;
  {
    // First touch on node 0 (pinned to its CPU), before any policy: the mistake the protocol avoids.
    sys::ScopedAffinity pin({0});
    ASSERT_TRUE(pin.status().is_ok());
    for (uint64_t i = 0; i < early; ++i) b->data()[i * 4096] = 1;
  }
  PlacementReport rep;
  Status s = apply_placement(b->data(), b->mapped_bytes(), *parse_placement("bind:1"), &rep);
  EXPECT_EQ(s.code(), Code::kIo) << s.to_string();
  EXPECT_NE(s.message().find("keep their node"), std::string::npos) << s.message();
  EXPECT_EQ(rep.obtained, "bind:1");
  ASSERT_TRUE(prefault_backing(*b, *parse_placement("bind:1"), PlacementOptions{}, &rep).is_ok());
  PageCensus c = census_of(*b, "bind:1 applied after half the pages were touched on node 0");
  EXPECT_EQ(pages_on(c, 0), early);
  EXPECT_EQ(pages_on(c, 1), pages - early);
}

TEST(Placement, LocalFollowsThePrefaultThreadsNode) {
  ENGRAM_NEED_TWO_NODES();
  sys::ScopedAffinity pin({1});
  ASSERT_TRUE(pin.status().is_ok());
  auto placed = make(BackingKind::kMemfd, small_bytes(), "local");
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  EXPECT_EQ(placed->front().report.obtained, "local");
  PageCensus c = census_of(placed->front().backing, "local from node 1");
  EXPECT_EQ(pages_on(c, 1), c.pages_sampled);
}

TEST(Placement, HugetlbBindOneTakesNodeOnesPool) {
  ENGRAM_NEED_TWO_NODES();
  if (std::getenv("ENGRAM_NUMA_GUEST") == nullptr)
    GTEST_SKIP() << "reserves hugepages on each node: runs in the numa guest only (ENGRAM_NUMA_GUEST=1)";
  auto set_pool = [](int node, int pages) {
    const std::string p =
        "/sys/devices/system/node/node" + std::to_string(node) + "/hugepages/hugepages-2048kB/nr_hugepages";
    FILE* f = std::fopen(p.c_str(), "w");
    if (f == nullptr) return false;
    const bool ok = std::fprintf(f, "%d\n", pages) > 0;
    return std::fclose(f) == 0 && ok;
  };
  if (!set_pool(0, 4) || !set_pool(1, 8)) GTEST_SKIP() << "cannot reserve hugepages here";
  // 6 x 2 MiB fits node 1's pool (8) but not node 0's (4): bind:1 must take node 1's pages.
  auto placed = make(BackingKind::kHugetlb, 12u << 20, "bind:1");
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  const Backing& b = placed->front().backing;
  EXPECT_EQ(b.page_bytes(), 2u << 20);
  PageCensus c = census_of(b, "bind:1 hugetlb 2 MiB");
  ASSERT_TRUE(c.known) << c.reason;
  EXPECT_EQ(c.page_bytes, 2u << 20);
  EXPECT_EQ(c.pages_sampled, 6u);
  EXPECT_EQ(pages_on(c, 1), 6u);
  // More than node 1's pool holds: refused up front (no SIGBUS later).
  auto big = make(BackingKind::kHugetlb, 20u << 20, "bind:1");
  ASSERT_FALSE(big.is_ok());
  EXPECT_EQ(big.status().code(), Code::kNoSpace) << big.status().to_string();
  std::printf("%s\n", big.status().to_string().c_str());
  placed->clear();
  (void)set_pool(0, 0);
  (void)set_pool(1, 0);
}

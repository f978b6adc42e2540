// A hugetlb table from an overcommit-only pool (nr_hugepages = 0, nr_overcommit_hugepages = 64):
// the up-front check counts what the kernel can give by overcommit instead of refusing with "0
// available", the kernel hands out surplus pages, and the census shows every page on the bound
// node -- with and without allow_fallback. Past the overcommit headroom it is refused up front,
// naming the headroom. Runs in the 2-node guest (it changes the machine's hugepage settings, and
// puts them back).
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "numa_test_util.hpp"

using namespace engram;
using namespace engram::host;
using namespace engram::numa_test;

namespace {

bool write_sysctl(const std::string& path, int value) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  const bool ok = std::fprintf(f, "%d\n", value) > 0;
  return std::fclose(f) == 0 && ok;
}

int read_sysctl(const std::string& path) {
  std::ifstream f(path);
  int v = -1;
  f >> v;
  return v;
}

const char* kNr = "/proc/sys/vm/nr_hugepages";
const char* kOvercommit = "/proc/sys/vm/nr_overcommit_hugepages";

// Sets the pool for one test and puts the machine's settings back afterwards.
struct OvercommitPool {
  int saved_nr = -1, saved_over = -1;
  bool ok = false;
  explicit OvercommitPool(int overcommit) {
    saved_nr = read_sysctl(kNr);
    saved_over = read_sysctl(kOvercommit);
    ok = write_sysctl(kNr, 0) && write_sysctl(kOvercommit, overcommit) && read_sysctl(kNr) == 0 &&
         read_sysctl(kOvercommit) == overcommit;
  }
  ~OvercommitPool() {
    if (saved_over >= 0) (void)write_sysctl(kOvercommit, saved_over);
    if (saved_nr >= 0) (void)write_sysctl(kNr, saved_nr);
  }
};

// The 32 MiB v41-flash-mini table of both tests, on hugetlb and bound to node 1.
Result<std::unique_ptr<HostTable>> hugetlb_table_on_node1(bool allow_fallback) {
  auto layout = make_preset_layout("v41-flash-mini", 32 << 20);  // 2 layers of 9 x 2 MiB pages
  if (!layout.is_ok()) return layout.status();
  TableOptions o;
  o.backing = *parse_backing("hugetlb");
  o.placement = *parse_placement("bind:1");
  o.allow_fallback = allow_fallback;
  return HostTable::create(*layout, o);
}

}  // namespace

// Both tests change the machine's hugepage pool (to `pages` of overcommit, none reserved): in the
// 2-node guest only, and `pool` puts the settings back at the end of the test.
#define ENGRAM_OVERCOMMIT_POOL(pool, pages)                                                           \
  ENGRAM_NEED_TWO_NODES();                                                                            \
  if (std::getenv("ENGRAM_NUMA_GUEST") == nullptr)                                                    \
    GTEST_SKIP() << "changes the hugepage pool: runs in the numa guest only (ENGRAM_NUMA_GUEST=1)";   \
  OvercommitPool pool(pages);                                                                         \
  if (!pool.ok) GTEST_SKIP() << "cannot set " << kNr << " / " << kOvercommit << " here"

class HugetlbOvercommit : public ::testing::TestWithParam<bool> {};

TEST_P(HugetlbOvercommit, OvercommitOnlyPoolServesABoundTable) {
  ENGRAM_OVERCOMMIT_POOL(pool, 64);
  auto t = hugetlb_table_on_node1(GetParam());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  std::printf("surplus_hugepages after create: %d\n",
              read_sysctl("/sys/kernel/mm/hugepages/hugepages-2048kB/surplus_hugepages"));
  (*t)->fill_synthetic(5, 1);
  for (const PageCensus& c : (*t)->census(CensusPoint::kAfterLoad)) {
    std::printf("%s", c.to_text().c_str());
    ASSERT_TRUE(c.known) << c.reason;
    EXPECT_EQ(c.page_bytes, 2u << 20);
    EXPECT_GT(c.pages_sampled, 0u);
    EXPECT_EQ(pages_on(c, 1), c.pages_sampled) << "a page of the bind:1 table is elsewhere";
    EXPECT_EQ(c.not_resident, 0u);
  }
  for (int l = 0; l < (*t)->n_layers(); ++l) EXPECT_EQ((*t)->backing(l)->report.obtained, "bind:1");
}

INSTANTIATE_TEST_SUITE_P(Fallback, HugetlbOvercommit, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "AllowFallback" : "Strict"; });

TEST(HugetlbOvercommitLimit, PastTheHeadroomIsRefusedUpFront) {
  ENGRAM_OVERCOMMIT_POOL(pool, 4);
  auto t = hugetlb_table_on_node1(false);
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kNoSpace) << t.status().to_string();
  EXPECT_NE(t.status().message().find("by overcommit"), std::string::npos) << t.status().to_string();
  std::printf("%s\n", t.status().to_string().c_str());
}

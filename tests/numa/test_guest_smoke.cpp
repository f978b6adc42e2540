// The test bed itself: the guest (or host) shows its NUMA nodes, CPUs and policy interfaces, so a
// broken guest (one node, no move_pages) is seen before the placement tests run.
#include <gtest/gtest.h>

#include "sys/affinity.hpp"
#include "sys/numa.hpp"

using namespace engram;

TEST(NumaTestBed, NodesCpusAndPolicyCallsWork) {
  const std::vector<int> nodes = sys::memory_nodes();
  std::printf("kernel %s, nodes with memory:", sys::kernel_version().release.c_str());
  for (int n : nodes) {
    auto cpus = sys::node_cpus(n);
    auto mem = sys::node_memory(n);
    std::printf(" node%d(cpus %zu, %lld MiB free)", n, cpus.is_ok() ? cpus->size() : 0,
                mem.is_ok() ? static_cast<long long>(mem->free_bytes >> 20) : -1LL);
  }
  std::printf("\n");
  ASSERT_FALSE(nodes.empty());
  auto allowed = sys::mems_allowed();
  ASSERT_TRUE(allowed.is_ok()) << allowed.status().to_string();
  auto pol = sys::get_thread_mempolicy();
  ASSERT_TRUE(pol.is_ok()) << pol.status().to_string();
  if (nodes.size() < 2) GTEST_SKIP() << "needs >= 2 NUMA nodes (run scripts/numa-guest)";
  for (int n : nodes) {
    auto cpus = sys::node_cpus(n);
    ASSERT_TRUE(cpus.is_ok());
    ASSERT_FALSE(cpus->empty()) << "node " << n << " has no CPU in the guest";
    sys::ScopedAffinity pin(*cpus);
    ASSERT_TRUE(pin.status().is_ok()) << pin.status().to_string();
    EXPECT_EQ(sys::current_cpu_node().node, n);
  }
}

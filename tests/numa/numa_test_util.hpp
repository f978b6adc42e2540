// Helpers shared by the tests/numa programs (run in the 2-node QEMU guest by scripts/numa-guest).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "host/census.hpp"
#include "host/placement.hpp"
#include "sys/numa.hpp"

namespace engram::numa_test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

#define ENGRAM_NEED_TWO_NODES()                                                     \
  do {                                                                              \
    if (::engram::sys::memory_nodes().size() < 2)                                   \
      GTEST_SKIP() << "needs >= 2 NUMA nodes (scripts/numa-guest runs it on two)"; \
  } while (0)

// Exact census of a whole backing, printed (the guest's log is the place where people read them).
inline host::PageCensus census_of(const host::Backing& b, const std::string& label,
                                  host::CensusPoint point = host::CensusPoint::kAfterPlacement) {
  host::TableIdentity id;
  id.backing = b.identity().to_string();
  id.group = label;
  host::TableIdentity named;
  if (host::parse_table_backing_name(b.identity().name, &named)) {
    id.layer_id = named.layer_id;
    id.head_begin = named.head_begin;
    id.head_end = named.head_end;
    id.replica_node = named.replica_node;
  }
  host::CensusOptions o;
  o.page_bytes = b.page_bytes();
  host::PageCensus c = host::take_census(b.data(), b.mapped_bytes(), id, point, o);
  std::printf("---- census: %s\n%s", label.c_str(), c.to_text().c_str());
  return c;
}

inline uint64_t pages_on(const host::PageCensus& c, int node) {
  auto it = c.pages_per_node.find(node);
  return it == c.pages_per_node.end() ? 0 : it->second;
}

}  // namespace engram::numa_test

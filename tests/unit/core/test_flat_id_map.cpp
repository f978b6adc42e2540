// Description: core/flat_id_map.hpp against std::unordered_map on random operation streams (inserts, re-assigns,
// adds through get_or_insert, erases one by one and by predicate, lookups of present, erased and never-seen ids,
// a for_each that reads and changes every value) dense enough in erases that tombstones force rebuilds in
// place and growth forces doubling; ids clustered (consecutive) and spread (random 63-bit), negative ids ignored;
// a reserve holds its keys without a rebuild changing any answer; clear() empties a map that keeps working.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/flat_id_map.hpp"

namespace engram {
namespace {

void expect_same(const FlatIdMap<int64_t>& m, const std::unordered_map<int64_t, int64_t>& ref, const std::vector<int64_t>& probe) {
  ASSERT_EQ(m.size(), ref.size());
  for (int64_t id : probe) {
    const int64_t* v = m.find(id);
    auto it = ref.find(id);
    ASSERT_EQ(v != nullptr, it != ref.end()) << "id " << id;
    ASSERT_EQ(m.contains(id), it != ref.end()) << "id " << id;
    if (v) {
      ASSERT_EQ(*v, it->second) << "id " << id;
    }
  }
}

TEST(FlatIdMap, RandomOperationsMatchTheStandardMap) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const bool spread : {false, true}) {
    SCOPED_TRACE(spread ? "spread ids" : "clustered ids");
    auto draw = [&]() -> int64_t {
      return spread ? static_cast<int64_t>(rng() >> 1) : static_cast<int64_t>(rng() % 5000);
    };
    FlatIdMap<int64_t> m;
    std::unordered_map<int64_t, int64_t> ref;
    std::vector<int64_t> seen;
    for (int op = 0; op < 200'000; ++op) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 5 || seen.empty()) {  // insert or re-assign
        const int64_t id = (kind == 0 && !seen.empty()) ? seen[rng() % seen.size()] : draw();
        const int64_t v = static_cast<int64_t>(rng());
        m.insert_or_assign(id, v);
        ref[id] = v;
        seen.push_back(id);
      } else if (kind < 9) {  // erase: present, already erased or never seen
        const int64_t id = kind < 8 ? seen[rng() % seen.size()] : draw();
        ASSERT_EQ(m.erase(id), ref.erase(id) == 1) << "id " << id;
      } else if (op % 7 == 0) {  // add to a value, inserting it when absent
        const int64_t id = rng() % 2 ? seen[rng() % seen.size()] : draw();
        m.get_or_insert(id, 100) += 3;
        auto [it, fresh] = ref.try_emplace(id, 100);
        it->second += 3;
        seen.push_back(id);
      } else {  // lookups
        const int64_t id = rng() % 2 ? seen[rng() % seen.size()] : draw();
        ASSERT_EQ(m.contains(id), ref.count(id) == 1) << "id " << id;
      }
      if (op % 50'000 == 49'999) {  // erase by predicate: odd values
        const size_t n = m.erase_if([](int64_t, int64_t v) { return (v & 1) != 0; });
        size_t want = 0;
        for (auto it = ref.begin(); it != ref.end();) {
          if (it->second & 1) {
            it = ref.erase(it);
            ++want;
          } else {
            ++it;
          }
        }
        ASSERT_EQ(n, want);
      }
      if (op % 20'000 == 0) {
        std::vector<int64_t> probe(seen.end() - std::min<size_t>(seen.size(), 3000), seen.end());
        for (int k = 0; k < 1000; ++k) probe.push_back(draw());
        expect_same(m, ref, probe);
      }
    }
    expect_same(m, ref, seen);
    // for_each visits every key once with its value, and may change the values.
    size_t visited = 0;
    m.for_each([&](int64_t id, int64_t& v) {
      ++visited;
      auto it = ref.find(id);
      ASSERT_NE(it, ref.end()) << "id " << id;
      ASSERT_EQ(v, it->second);
      v ^= 1;
      it->second ^= 1;
    });
    EXPECT_EQ(visited, ref.size());
    expect_same(m, ref, seen);
  }
}

TEST(FlatIdMap, ReserveNegativeIdsAndClear) {
  FlatIdMap<int64_t> m;
  EXPECT_FALSE(m.contains(0));
  EXPECT_FALSE(m.erase(3));
  EXPECT_EQ(m.find(7), nullptr);
  m.reserve(100'000);
  std::unordered_map<int64_t, int64_t> ref;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 100'000; ++i) {
    const int64_t id = i * 1'000'003;
    m.insert_or_assign(id, -i);
    ref[id] = -i;
    ids.push_back(id);
    ids.push_back(id + 1);  // never inserted
  }
  expect_same(m, ref, ids);
  m.insert_or_assign(-1, 5);  // negative ids are not keys
  m.insert_or_assign(-2, 5);
  EXPECT_EQ(m.get_or_insert(-2, 9), 9);
  m.get_or_insert(-1, 0) += 4;
  EXPECT_FALSE(m.contains(-1));
  EXPECT_FALSE(m.contains(-2));
  EXPECT_FALSE(m.erase(-2));
  EXPECT_EQ(m.size(), ref.size());
  expect_same(m, ref, ids);
  // Erase all but a few, then insert again: the rebuilds that follow (tombstones, shrinking) keep every answer.
  for (size_t k = 0; k + 10 < ids.size(); k += 2) {
    EXPECT_TRUE(m.erase(ids[k]));
    ref.erase(ids[k]);
  }
  for (int64_t i = 0; i < 1000; ++i) {
    m.insert_or_assign(7 + 2 * i, i);
    ref[7 + 2 * i] = i;
    ids.push_back(7 + 2 * i);
  }
  expect_same(m, ref, ids);
  m.clear();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_FALSE(m.contains(0));
  m.insert_or_assign(0, 42);
  ASSERT_NE(m.find(0), nullptr);
  EXPECT_EQ(*m.find(0), 42);
  EXPECT_EQ(m.size(), 1u);
}

}  // namespace
}  // namespace engram

// A random host table of one layer registered for zero-copy and wrapped as a UvaTable (the fast-path tests' table),
// and ids with heavy repetition (what de-duplication and the unique-fraction estimate need to see).
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "cuda/registration.cuh"
#include "cuda_test_support.hpp"

namespace engram::testing {

struct RegisteredTable {
  EngramLayout layout;
  std::unique_ptr<HostTable> host;
  std::vector<cuda::HostRegistration> regs;
  cuda::UvaTable table;
};

// 4 heads x 4000 rows of width d in format f; nullptr (with the failure reported) when registration fails.
inline std::unique_ptr<RegisteredTable> make_registered_table(RowFormat f, int d, std::mt19937_64& rng) {
  auto x = std::make_unique<RegisteredTable>();
  x->layout = make_layout(d, f, 4, 4000);
  x->host = random_host_table(x->layout, rng);
  const TableView v = x->host->view(0);
  const int64_t bytes = v.rows * v.stride_bytes + (f == RowFormat::kSplit ? v.rows * (v.d / 32) : 0);
  cuda::RegistrationOptions ro;
  ro.boundary_bytes = f == RowFormat::kFused ? v.stride_bytes : v.d;
  auto reg = cuda::HostRegistration::register_range(v.data, bytes, ro);
  EXPECT_TRUE(reg.is_ok()) << reg.status().to_string();
  if (!reg.is_ok()) return nullptr;
  x->regs.push_back(std::move(*reg));
  auto t = cuda::UvaTable::make(v, {&x->regs[0]});
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return nullptr;
  x->table = std::move(*t);
  return x;
}

// random_ids' mix (dead and out-of-range ids included) where every valid position but one in keep_one_in is
// replaced by one of a pool of 40 ids: a unique fraction well below 0.5.
inline std::vector<int64_t> repeated_ids(const EngramLayout& l, int64_t tokens, std::mt19937_64& rng,
                                         int keep_one_in) {
  auto ids = random_ids(l, 0, tokens, rng, 0.03);
  std::vector<int64_t> pool;
  for (int64_t id : ids)
    if (id >= 0 && id < l.rows(0) && pool.size() < 40) pool.push_back(id);
  for (auto& id : ids)
    if (id >= 0 && id < l.rows(0) && rng() % keep_one_in != 0) id = pool[rng() % pool.size()];
  return ids;
}

}  // namespace engram::testing

// The fast-path tests' support: a random host table of one layer registered for zero-copy and wrapped as a
// UvaTable, ids with heavy repetition (what de-duplication and the unique-fraction estimate need to see), and one
// launch through a FastLookup with its staging read back.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "cuda/fast_lookup.cuh"
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

// One fast-path launch of `ids` ([tokens][heads]) into poisoned staging, synchronised: with `p`, that plan;
// without, the planner decides (as the prefetch queue's per-layer fast path does). The staging rows and the dead /
// invalid counters come back.
struct FastOut {
  std::vector<uint16_t> staging;
  unsigned long long counters[2] = {0, 0};
};

inline FastOut fast_launch(cuda::FastLookup& fl, const cuda::UvaTable& t, const std::vector<int64_t>& ids, int heads,
                          const plan::Plan* p) {
  FastOut o;
  const int d = t.host_view().d;
  DeviceBuffer<int64_t> dids(ids.size());
  DeviceBuffer<uint16_t> dout(ids.size() * d);
  DeviceBuffer<unsigned long long> dcnt(2);
  EXPECT_EQ(cudaMemcpy(dids.get(), ids.data(), dids.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dout.get(), 0xA5, dout.bytes()), cudaSuccess);
  EXPECT_EQ(cudaMemset(dcnt.get(), 0, dcnt.bytes()), cudaSuccess);
  cuda::LookupArgs a;
  a.table = &t;
  a.ids = dids.get();
  a.ids_host = ids.data();
  a.tokens = static_cast<int64_t>(ids.size()) / heads;
  a.heads = heads;
  a.out = dout.get();
  a.counters = dcnt.get();
  // No plan given: the planner decides, as the prefetch queue's per-layer fast path does.
  auto li = p ? fl.launch_plan(a, *p, nullptr) : fl.launch(a, nullptr);
  EXPECT_TRUE(li.is_ok()) << li.status().to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  o.staging.resize(ids.size() * d);
  EXPECT_EQ(cudaMemcpy(o.staging.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(o.counters, dcnt.get(), dcnt.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return o;
}

}  // namespace engram::testing

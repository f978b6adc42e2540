// CPU prefetch queue: staging equals a direct lookup, lookups run serially in submission order, each consumer
// waits for its own layer only, misuse is reported, and early/on_demand give identical staging.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cpu/lookup.hpp"
#include "cpu/prefetch.hpp"
#include "engram/table.hpp"

namespace engram {
namespace {

struct Fixture {
  std::unique_ptr<HostTable> table;
  EngramLayout layout;
  std::vector<TableView> views;
};

Fixture make_fixture(RowFormat f = RowFormat::kFused) {
  Fixture fx;
  auto l = make_preset_layout("v41-flash-mini", 8LL << 20, f);
  EXPECT_TRUE(l.is_ok());
  fx.layout = *l;
  auto t = HostTable::allocate(fx.layout);
  EXPECT_TRUE(t.is_ok());
  fx.table = std::move(*t);
  fx.table->fill_synthetic(std::random_device{}(), 2);
  for (int li = 0; li < fx.layout.n_layers(); ++li) fx.views.push_back(fx.table->view(li));
  return fx;
}

std::vector<int64_t> random_ids(const EngramLayout& l, int li, int tokens, std::mt19937_64& rng) {
  std::vector<int64_t> ids(static_cast<size_t>(tokens * l.heads()));
  for (auto& id : ids) id = (rng() % 17 == 0) ? kDeadId : static_cast<int64_t>(rng() % static_cast<uint64_t>(l.rows(li)));
  return ids;
}

TEST(CpuPrefetch, StagingEqualsDirectLookupAndQueueIsSerial) {
  auto fx = make_fixture();
  auto q = cpu::CpuPrefetchQueue::create(fx.views, fx.layout.layer_ids, fx.layout.heads(), {});
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  std::mt19937_64 rng(std::random_device{}());
  for (int step = 0; step < 3; ++step) {
    (*q)->begin_step(step);
    std::vector<std::vector<int64_t>> ids;
    for (int li = 0; li < fx.layout.n_layers(); ++li) {
      ids.push_back(random_ids(fx.layout, li, 19, rng));
      ASSERT_TRUE((*q)->prepare(li, ids.back().data(), 19).is_ok());
    }
    for (int li = 0; li < fx.layout.n_layers(); ++li) {
      auto st = (*q)->consume(li);
      ASSERT_TRUE(st.is_ok()) << st.status().to_string();
      std::vector<uint16_t> want(ids[li].size() * 256, 0x1234);
      LookupRequest req{ids[li].data(), 19, fx.layout.heads(), want.data(), false};
      ASSERT_TRUE(cpu::lookup(fx.views[li], req, nullptr).is_ok());
      ASSERT_EQ(std::memcmp(st->data, want.data(), want.size() * 2), 0) << "layer " << li << " step " << step;
    }
    ASSERT_TRUE((*q)->end_step().is_ok());
  }
  const auto& rows = (*q)->timeline().rows();
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_LE(rows[i].r_ns, rows[i].s_ns);
    EXPECT_LE(rows[i].s_ns, rows[i].f_ns);
    EXPECT_LE(rows[i].c_ns, rows[i].wait_end_ns);
    EXPECT_GE(rows[i].wait_end_ns, rows[i].f_ns);  // the consumer is released only after its lookup finished
    if (i > 0 && rows[i].step == rows[i - 1].step) {
      EXPECT_GE(rows[i].s_ns, rows[i - 1].f_ns);  // serial
    }
  }
  EXPECT_EQ((*q)->totals().rows, 6 * 19 * fx.layout.heads());
}

TEST(CpuPrefetch, EarlyAndOnDemandGiveIdenticalStaging) {
  auto fx = make_fixture(RowFormat::kSplit);
  std::mt19937_64 rng(std::random_device{}());
  auto ids0 = random_ids(fx.layout, 0, 23, rng);
  auto ids1 = random_ids(fx.layout, 1, 23, rng);
  std::vector<std::vector<uint16_t>> got[2];
  for (int mode = 0; mode < 2; ++mode) {
    auto q = cpu::CpuPrefetchQueue::create(fx.views, fx.layout.layer_ids, fx.layout.heads(), {});
    ASSERT_TRUE(q.is_ok());
    (*q)->begin_step(0);
    if (mode == 0) {
      ASSERT_TRUE((*q)->prepare(0, ids0.data(), 23).is_ok());
      ASSERT_TRUE((*q)->prepare(1, ids1.data(), 23).is_ok());
    }
    for (int li = 0; li < 2; ++li) {
      if (mode == 1) {
        ASSERT_TRUE((*q)->prepare(li, li == 0 ? ids0.data() : ids1.data(), 23).is_ok());
      }
      auto st = (*q)->consume(li);
      ASSERT_TRUE(st.is_ok());
      got[mode].emplace_back(st->data, st->data + st->tokens * st->heads * st->d);
    }
  }
  EXPECT_EQ(got[0], got[1]);
}

TEST(CpuPrefetch, MisuseIsReported) {
  auto fx = make_fixture();
  auto q = cpu::CpuPrefetchQueue::create(fx.views, fx.layout.layer_ids, fx.layout.heads(), {});
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ((*q)->consume(0).status().code(), Code::kInvalidArgument);  // not prepared
  std::vector<int64_t> ids(static_cast<size_t>(fx.layout.heads()), 0);
  ASSERT_TRUE((*q)->prepare(0, ids.data(), 1).is_ok());
  EXPECT_EQ((*q)->prepare(0, ids.data(), 1).code(), Code::kInvalidArgument);  // twice
  EXPECT_EQ((*q)->end_step().code(), Code::kInvalidArgument);                // not consumed
  EXPECT_TRUE((*q)->consume(0).is_ok());
  EXPECT_TRUE((*q)->end_step().is_ok());
  EXPECT_EQ((*q)->prepare(7, ids.data(), 1).code(), Code::kInvalidArgument);  // no such layer
}

TEST(CpuPrefetch, CheckedModeSurfacesInvalidIdAtConsume) {
  auto fx = make_fixture();
  cpu::CpuPrefetchOptions o;
  o.checked = true;
  auto q = cpu::CpuPrefetchQueue::create(fx.views, fx.layout.layer_ids, fx.layout.heads(), o);
  ASSERT_TRUE(q.is_ok());
  std::vector<int64_t> ids(static_cast<size_t>(fx.layout.heads()), 0);
  ids[3] = fx.layout.rows(0);  // one past the end
  ASSERT_TRUE((*q)->prepare(0, ids.data(), 1).is_ok());
  auto st = (*q)->consume(0);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram

// Tensor-parallel slices (engram/tp_slice.hpp), cpu side: for TP = 1, 2, 3, 4 over fresh random non-zero tables
// (both row layouts, 5 and 6 heads), every rank's table is loaded from the whole table's checkpoint (its row range
// only) and holds exactly those rows' bytes and nothing else; its lookup into poisoned staging equals the whole
// table's lookup restricted to the rank's heads, zeros for padded heads and for ids outside the rank's rows, and
// the ranks' outputs gathered along the head axis and cut to H heads are the whole lookup (vLLM's all_gather).
// Also: the slice arithmetic against vLLM's formulas, options and their errors, the engine (queue and direct
// lookup, describe, census per shard), synthetic content, checked mode and a rank without heads.
#include <gtest/gtest.h>
#include <cstring>
#include <random>

#include "cpu/lookup.hpp"
#include "engram/engine.hpp"
#include "engram/format.hpp"
#include "engram/table.hpp"
#include "host/census.hpp"
#include "host/checkpoint.hpp"
#include "host/placement.hpp"
#include "engram/prefetch_queue.hpp"
#include "support/conformance.hpp"
#include "support/tp_reference.hpp"

namespace engram {
namespace {

std::vector<uint16_t> whole_lookup(const TableView& v, const std::vector<int64_t>& ids, int64_t tokens, int heads) {
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(v.d), 0xA5A5);
  LookupRequest req{ids.data(), tokens, heads, out.data(), false};
  auto st = cpu::lookup(v, req, nullptr);
  EXPECT_TRUE(st.is_ok()) << st.status().to_string();
  return out;
}

TEST(TpSliceMath, MatchesVllmHeadSharding) {
  for (int hc : {5, 6}) {
    const EngramLayout l = test::tp_layout(hc, RowFormat::kFused);
    const int H = l.heads();
    for (int size = 1; size <= 8; ++size) {
      const int P = (H + size - 1) / size;  // vLLM: part_n_hash_cols = cdiv(n_hash_cols, tp_size)
      int64_t covered_rows = 0;
      int covered_heads = 0;
      for (int rank = 0; rank < size; ++rank) {
        const TpSlice tp{size, rank};
        ASSERT_TRUE(check_tp_slice(tp).is_ok());
        for (int li = 0; li < l.n_layers(); ++li) {
          const LayerSlice sl = layer_slice(l, li, tp);
          const auto& sizes = l.head_rows[static_cast<size_t>(li)];
          // vLLM: vocab_start = sum(head_sizes[:head_start]), vocab_end = sum(head_sizes[:head_start + part]).
          int64_t start = 0, end = 0;
          for (int h = 0; h < H; ++h) {
            if (h < rank * P) start += sizes[static_cast<size_t>(h)];
            if (h < rank * P + P) end += sizes[static_cast<size_t>(h)];
          }
          EXPECT_EQ(sl.row_begin, size == 1 ? 0 : start) << "size " << size << " rank " << rank;
          EXPECT_EQ(sl.row_end, size == 1 ? l.rows(li) : end);
          EXPECT_EQ(sl.layer_rows, l.rows(li));
          EXPECT_EQ(sl.out_heads(H), size == 1 ? H : P);
          if (li == 0) {
            covered_rows += sl.rows();
            covered_heads += sl.held_heads();
          }
        }
      }
      EXPECT_EQ(covered_rows, l.rows(0)) << "the ranks' rows tile the layer, size " << size;
      EXPECT_EQ(covered_heads, H);
    }
  }
}

TEST(TpSliceOptions, ParsedAndRefused) {
  EngineOptions o;
  ASSERT_TRUE(set_engine_option(o, "--tp-size", "4").is_ok());
  ASSERT_TRUE(set_engine_option(o, "tp_rank", "3").is_ok());
  EXPECT_EQ(o.table.tp, (TpSlice{4, 3}));
  EXPECT_EQ(set_engine_option(o, "--tp-size", "0").code(), Code::kInvalidArgument);
  EXPECT_EQ(set_engine_option(o, "--tp-rank", "-1").code(), Code::kInvalidArgument);
  EXPECT_EQ(set_engine_option(o, "--tp-size", "two").code(), Code::kInvalidArgument);
  EXPECT_EQ(check_tp_slice({2, 2}).code(), Code::kInvalidArgument);
  EXPECT_EQ(check_tp_slice({0, 0}).code(), Code::kInvalidArgument);
  EXPECT_NE(check_tp_slice({2, 2}).message().find("tp rank 2"), std::string::npos) << check_tp_slice({2, 2}).message();
  const EngramLayout l = test::tp_layout(5, RowFormat::kFused);
  TableOptions bad;
  bad.tp = {2, 5};
  EXPECT_EQ(HostTable::create(l, bad).status().code(), Code::kInvalidArgument);
  TableOptions sharded;
  sharded.tp = {2, 0};
  ASSERT_TRUE(set_table_option(sharded, "head_shards", "2", l.heads()).is_ok());
  EXPECT_EQ(HostTable::create(l, sharded).status().code(), Code::kInvalidArgument);
}

class TpSliceLookup : public ::testing::TestWithParam<std::tuple<int, RowFormat>> {};

TEST_P(TpSliceLookup, EveryShardEqualsTheWholeTableRestrictedToItsHeads) {
  const auto [hc, fmt] = GetParam();
  const uint64_t seed = test::tp_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout l = test::tp_layout(hc, fmt);
  const int H = l.heads(), d = l.d;
  const auto source = test::whole_checkpoint(l, rng);
  ASSERT_TRUE(source->table);
  const HostTable* whole = source->table.get();
  const std::string& ckpt = source->path;

  const int64_t tokens = 1 + static_cast<int64_t>(rng() % 90);
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<uint16_t>> full;
  for (int li = 0; li < l.n_layers(); ++li) {
    ids.push_back(test::tp_ids(l, li, tokens, true, rng));
    full.push_back(whole_lookup(whole->view(li), ids.back(), tokens, H));
    ASSERT_EQ(test::first_reference_mismatch(whole->view(li), ids.back(), full.back().data()), -1) << "seed " << seed;
  }
  for (int size = 1; size <= 4; ++size) {
    int64_t bytes_sum = 0;
    std::vector<std::vector<std::vector<uint16_t>>> outs(static_cast<size_t>(size));  // [rank][layer]
    for (int rank = 0; rank < size; ++rank) {
      const TpSlice tp{size, rank};
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + tp.to_string() + " heads " + std::to_string(H) + " " +
                   row_format_name(fmt));
      auto t = test::tp_table(l, tp);
      ASSERT_TRUE(t);
      host::LoadOptions lo;
      ASSERT_TRUE(host::load_checkpoint(ckpt, *t, lo).is_ok());
      EXPECT_EQ(t->tp(), tp);
      EXPECT_EQ(t->staging_heads(), size == 1 ? H : (H + size - 1) / size);
      for (int li = 0; li < l.n_layers(); ++li) {
        const TableView v = t->view(li);
        const LayerSlice sl = layer_slice(l, li, tp);
        // Memory: the slice's rows only, each byte that row of the whole table.
        EXPECT_EQ(v.rows, sl.rows());
        EXPECT_EQ(t->layer_bytes(li), sl.rows() * l.row_stride_bytes());
        bytes_sum += t->layer_bytes(li);
        if (const host::PlacedBacking* pb = t->backing(li, 0)) {
          EXPECT_EQ(pb->backing.size_bytes(), static_cast<uint64_t>(t->layer_bytes(li)));
        } else {
          EXPECT_EQ(sl.rows(), 0) << "a rank with rows has a backing";
        }
        const TableView wv = whole->view(li);
        for (int64_t r = 0; r < v.rows; ++r) {
          ASSERT_EQ(std::memcmp(v.payload_of(r), wv.payload_of(sl.row_begin + r), static_cast<size_t>(d)), 0) << r;
          ASSERT_EQ(std::memcmp(v.scales_of(r), wv.scales_of(sl.row_begin + r), static_cast<size_t>(d / 32)), 0) << r;
        }
        // Lookup into poisoned staging.
        const int P = t->staging_heads();
        std::vector<uint16_t> out(static_cast<size_t>(tokens * P * d), 0xDEAD);
        LookupRequest req{ids[li].data(), tokens, H, out.data(), false};
        ThreadPool pool(1 + rank % 3);
        auto st = cpu::lookup(v, req, &pool);
        ASSERT_TRUE(st.is_ok()) << st.status().to_string();
        EXPECT_EQ(test::first_slice_mismatch(size == 1 ? LayerSlice{H, 0, H, 0, l.rows(li), l.rows(li)} : sl, ids[li],
                                             tokens, d, full[li].data(), out.data()),
                  -1)
            << "layer " << li;
        int64_t dead = 0, invalid = 0;
        for (int64_t tk = 0; tk < tokens; ++tk)
          for (int h = sl.sliced() ? sl.head_begin : 0; h < (sl.sliced() ? sl.head_begin + sl.held_heads() : H); ++h) {
            const int64_t id = ids[li][static_cast<size_t>(tk * H + h)];
            dead += id < 0;
            invalid += id >= l.rows(li);
          }
        EXPECT_EQ(st->rows, tokens * P);
        EXPECT_EQ(st->dead_rows, dead);
        EXPECT_EQ(st->invalid_ids, invalid);
        outs[static_cast<size_t>(rank)].push_back(std::move(out));
      }
      // Census per shard: one entry per layer with rows, naming the held heads and the slice's bytes.
      const auto census = t->census(host::CensusPoint::kAfterLoad);
      const LayerSlice sl0 = layer_slice(l, 0, tp);
      EXPECT_EQ(census.size(), sl0.rows() > 0 ? static_cast<size_t>(l.n_layers()) : 0u);
      for (size_t i = 0; i < census.size(); ++i) {
        EXPECT_EQ(census[i].table.head_begin, size == 1 ? 0 : sl0.head_begin);
        EXPECT_EQ(census[i].table.head_end, size == 1 ? H : sl0.head_begin + sl0.held_heads());
        EXPECT_EQ(census[i].table.bytes, static_cast<uint64_t>(t->layer_bytes(static_cast<int>(i))));
      }
    }
    EXPECT_EQ(bytes_sum, l.total_bytes()) << "the shards' memory adds up to the whole table, size " << size;
    // vLLM's forward: all_gather(dim=1)[:, :H] of the ranks' staging is the whole lookup, on ids of each head's
    // own rows (an id of another head's rows is a zero on the rank that does not hold it).
    for (int li = 0; li < l.n_layers(); ++li) {
      const int P = size == 1 ? H : (H + size - 1) / size;
      for (int64_t tk = 0; tk < tokens; ++tk)
        for (int h = 0; h < H; ++h) {
          const int64_t id = ids[li][static_cast<size_t>(tk * H + h)];
          const auto& offs = l.head_offsets[static_cast<size_t>(li)];
          if (id < offs[static_cast<size_t>(h)] || id >= offs[static_cast<size_t>(h) + 1]) continue;
          const uint16_t* got = outs[static_cast<size_t>(h / P)][static_cast<size_t>(li)].data() +
                                static_cast<size_t>((tk * P + h % P) * d);
          ASSERT_EQ(std::memcmp(got, full[li].data() + static_cast<size_t>((tk * H + h) * d), static_cast<size_t>(d) * 2), 0)
              << "gathered head " << h << " token " << tk << " size " << size << " seed " << seed;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, TpSliceLookup,
                         ::testing::Combine(::testing::Values(5, 6), ::testing::Values(RowFormat::kFused, RowFormat::kSplit)));

TEST(TpSliceEngine, QueueAndDirectLookupOnACheckpointSlice) {
  const uint64_t seed = test::tp_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout l = test::tp_layout(5, RowFormat::kFused);
  const int H = l.heads(), d = l.d;
  const auto source = test::whole_checkpoint(l, rng);
  ASSERT_TRUE(source->table);
  const HostTable* whole = source->table.get();
  const std::string& ckpt = source->path;
  for (int size : {2, 3, 4})
    for (int rank = 0; rank < size; ++rank) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " tp " + std::to_string(rank) + "/" + std::to_string(size));
      EngineOptions o;
      o.backend = BackendKind::kCpu;
      o.lookup_threads = 2;
      o.max_tokens = 64;
      o.content.kind = TableContent::Kind::kCheckpoint;
      o.content.path = ckpt;
      ASSERT_TRUE(set_engine_option(o, "--tp-size", std::to_string(size)).is_ok());
      ASSERT_TRUE(set_engine_option(o, "--tp-rank", std::to_string(rank)).is_ok());
      auto e = Engine::create_local(l, o);
      ASSERT_TRUE(e.is_ok()) << e.status().to_string();
      Engine& engine = **e;
      const int P = (H + size - 1) / size;
      ASSERT_EQ(engine.staging_heads(), P);
      const int64_t tokens = 1 + static_cast<int64_t>(rng() % 64);
      PrefetchQueue& q = engine.queue();
      q.begin_step(0);
      std::vector<std::vector<int64_t>> ids;
      for (int li = 0; li < l.n_layers(); ++li) {
        ids.push_back(test::tp_ids(l, li, tokens, false, rng));
        ASSERT_TRUE(q.prepare(li, ids.back().data(), tokens).is_ok());
      }
      for (int li = 0; li < l.n_layers(); ++li) {
        const std::vector<uint16_t> full = whole_lookup(whole->view(li), ids[li], tokens, H);
        const LayerSlice sl = layer_slice(l, li, {size, rank});
        auto st = q.consume(li);
        ASSERT_TRUE(st.is_ok()) << st.status().to_string();
        ASSERT_EQ(st->heads, P);
        ASSERT_EQ(st->tokens, tokens);
        EXPECT_EQ(test::first_slice_mismatch(sl, ids[li], tokens, d, full.data(), st->data), -1) << "queue, layer " << li;
        std::vector<uint16_t> out(static_cast<size_t>(tokens * P * d), 0xDEAD);
        auto r = engine.lookup(li, ids[li].data(), tokens, out.data());
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        EXPECT_EQ(test::first_slice_mismatch(sl, ids[li], tokens, d, full.data(), out.data()), -1) << "direct, layer " << li;
      }
      ASSERT_TRUE(q.end_step().is_ok());
      const nlohmann::json desc = engine.describe();
      ASSERT_TRUE(desc["tp"].is_object()) << desc.dump();
      EXPECT_EQ(desc["tp"]["size"], size);
      EXPECT_EQ(desc["tp"]["rank"], rank);
      EXPECT_EQ(desc["tp"]["local_heads"], P);
      int64_t bytes = 0;
      for (int li = 0; li < l.n_layers(); ++li) bytes += engine.table().layer_bytes(li);
      EXPECT_EQ(desc["tp"]["bytes"], bytes);
      bool tp_line = false;
      for (const std::string& line : engine.describe_lines()) tp_line |= line.rfind("TP ", 0) == 0;
      EXPECT_TRUE(tp_line);
      for (const host::PageCensus& c : engine.censuses()) {
        EXPECT_EQ(c.table.head_begin, rank * P);
        EXPECT_LE(c.table.head_end, H);
      }
    }
}

TEST(TpSliceTable, SyntheticRowsAreTheWholeTablesRows) {
  const EngramLayout l = test::tp_layout(6, RowFormat::kSplit);
  const uint64_t seed = test::tp_seed();
  auto whole = test::tp_table(l);
  ASSERT_TRUE(whole);
  whole->fill_synthetic(seed, 2);
  for (int rank = 0; rank < 4; ++rank) {
    auto t = test::tp_table(l, {4, rank});
    ASSERT_TRUE(t);
    t->fill_synthetic(seed, 2);
    for (int li = 0; li < l.n_layers(); ++li) {
      const TableView v = t->view(li), wv = whole->view(li);
      for (int64_t r = 0; r < v.rows; ++r) {
        ASSERT_EQ(std::memcmp(v.payload_of(r), wv.payload_of(v.slice.row_begin + r), static_cast<size_t>(l.d)), 0);
        ASSERT_EQ(std::memcmp(v.scales_of(r), wv.scales_of(v.slice.row_begin + r), static_cast<size_t>(l.d / 32)), 0);
      }
    }
  }
}

TEST(TpSliceTable, RankWithoutHeadsHoldsNothingAndWritesZeros) {
  const EngramLayout l = test::tp_layout(5, RowFormat::kFused);  // TP=4: P=2, heads 0-1, 2-3, 4 (+1 padded), none
  auto t = test::tp_table(l, {4, 3});
  ASSERT_TRUE(t);
  std::mt19937_64 rng(test::tp_seed());
  for (int li = 0; li < l.n_layers(); ++li) {
    EXPECT_EQ(t->view(li).rows, 0);
    EXPECT_EQ(t->layer_bytes(li), 0);
    EXPECT_EQ(t->backing(li, 0), nullptr);
    const auto ids = test::tp_ids(l, li, 9, false, rng);
    std::vector<uint16_t> out(static_cast<size_t>(9 * 2 * l.d), 0xDEAD);
    LookupRequest req{ids.data(), 9, l.heads(), out.data(), false};
    auto st = cpu::lookup(t->view(li), req, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.status().to_string();
    for (uint16_t x : out) ASSERT_EQ(x, 0);
  }
  EXPECT_TRUE(t->census(host::CensusPoint::kAfterLoad).empty());
  t->fill_synthetic(1, 1);  // nothing to write
}

TEST(TpSliceTable, CheckedModeRefusesOnlyIdsPastTheLayer) {
  const EngramLayout l = test::tp_layout(6, RowFormat::kFused);
  auto t = test::tp_table(l, {2, 1});
  ASSERT_TRUE(t);
  t->fill_synthetic(3, 1);
  const TableView v = t->view(0);
  std::vector<int64_t> ids(static_cast<size_t>(l.heads()), 0);  // id 0: rank 0's row, a zero here, valid
  std::vector<uint16_t> out(static_cast<size_t>(3 * l.d), 0xDEAD);
  LookupRequest req{ids.data(), 1, l.heads(), out.data(), true};
  auto ok = cpu::lookup(v, req, nullptr);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->invalid_ids, 0);
  for (uint16_t x : out) ASSERT_EQ(x, 0);
  ids[0] = l.rows(0);  // past the layer (head 0 is rank 0's, but every rank checks every id)
  std::fill(out.begin(), out.end(), 0xDEAD);
  auto bad = cpu::lookup(v, req, nullptr);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  for (uint16_t x : out) ASSERT_EQ(x, 0xDEAD) << "nothing written";
  LookupRequest wrong{ids.data(), 1, l.heads() - 1, out.data(), false};
  EXPECT_EQ(cpu::lookup(v, wrong, nullptr).status().code(), Code::kInvalidArgument) << "ids must have the layer's heads";
}

TEST(TpSliceTable, CheckpointWriteOfASliceIsRefused) {
  const EngramLayout l = test::tp_layout(5, RowFormat::kFused);
  auto t = test::tp_table(l, {2, 0});
  ASSERT_TRUE(t);
  test::TpTempDir dir;
  EXPECT_EQ(host::write_checkpoint(dir.path("x.safetensors"), *t).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram

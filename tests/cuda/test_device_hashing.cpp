// Decode steps hashed on the GPU through the engine (Engine::enable_device_hashing / hash_and_prepare): over a
// random token stream with short documents and sequence cuts, every step's device ids equal the CPU hasher's ids of
// the same step (TextIdSource), and the staging the queue fills from them equals the scalar reference lookup of the
// CPU ids, into poisoned buffers; the whole decode replay with the hashing wired in (wire_device_hashing) verifies
// every id itself. Skips with the reason without a GPU.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "core/ngram_hash.hpp"
#include "cuda_test_support.hpp"
#include "replay/decode_replay.hpp"
#include "replay/device_hashing.hpp"
#include "replay/text_id_source.hpp"
#include "sched/prefetch_queue.hpp"
#include "support/conformance.hpp"
#include "support/hash_support.hpp"

namespace engram {
namespace {

using testing::random_table;

// Documents of 1..90 tokens.
TokenFile random_documents(std::mt19937_64& rng, int docs, int64_t vocab) {
  std::vector<int64_t> sizes;
  for (int d = 0; d < docs; ++d) sizes.push_back(1 + static_cast<int64_t>(rng() % 90));
  return testing::random_token_file(rng, sizes, vocab);
}

using testing::to_host;

TEST(CudaDeviceHashing, StepIdsAndLookupsEqualTheCpuHasher) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = test::conformance_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout layout = test::conformance_layout(RowFormat::kFused);
  auto hasher = NgramHasher::create(layout, random_table(rng, 5000, 0.67), NgramHashOptions{.seed = static_cast<int64_t>(rng() % 1000)});
  ASSERT_TRUE(hasher.is_ok()) << hasher.status().to_string();
  auto src = TextIdSource::create(*hasher, random_documents(rng, 40, 5000), TextIdSourceOptions{.seq_len = 7 + static_cast<int64_t>(rng() % 30)});
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();

  const int batch = 1 + static_cast<int>(rng() % 96);
  test::ConformanceCase c;
  c.backend = BackendKind::kCuda;
  EngineOptions o = test::conformance_options(c, batch);
  o.device = 0;
  auto e = Engine::create_local(layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  ASSERT_EQ(engine.backend(), BackendKind::kCuda);
  test::randomize_table(engine.table(), rng);
  ASSERT_TRUE(engine.enable_device_hashing(*hasher, batch).is_ok());
  EXPECT_EQ(engine.hash_and_prepare(nullptr, nullptr, batch + 1).code(), Code::kInvalidArgument);

  PrefetchQueue& q = engine.queue();
  const size_t per_token = static_cast<size_t>(layout.heads() * layout.d);
  std::vector<std::vector<int64_t>> ids;
  for (int64_t step = 0; step < 120; ++step) {
    ASSERT_TRUE((*src)->next_step(step, batch, ids).is_ok());
    const auto& st = (*src)->last_step_tokens();
    q.begin_step(step);
    ASSERT_TRUE(engine.hash_and_prepare(st.tokens.data(), st.new_sequence.data(), batch).is_ok());
    std::vector<const uint16_t*> staging;
    for (int li = 0; li < layout.n_layers(); ++li) {
      auto s = q.consume(li);
      ASSERT_TRUE(s.is_ok()) << s.status().to_string();
      staging.push_back(s->data);
    }
    ASSERT_TRUE(q.end_step().is_ok());
    auto d = engine.last_device_hash(true);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_GT(d->gpu_ns, 0);
    EXPECT_EQ(d->errors, 0u);
    ASSERT_EQ(d->ids, ids) << "seed " << seed << " step " << step << " batch " << batch;
    if (step % 10 == 0) {
      for (int li = 0; li < layout.n_layers(); ++li) {
        const auto got = to_host(staging[static_cast<size_t>(li)], static_cast<size_t>(batch) * per_token);
        EXPECT_EQ(test::first_reference_mismatch(engine.table().view(li), ids[static_cast<size_t>(li)], got.data()), -1)
            << "seed " << seed << " step " << step << " layer " << li;
      }
    }
  }
}

TEST(CudaDeviceHashing, ReplayWiredOnTheGpuVerifiesEveryId) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(test::conformance_seed());
  const EngramLayout layout = test::conformance_layout(RowFormat::kSplit);
  auto hasher = NgramHasher::create(layout, random_table(rng, 3000, 0.67), NgramHashOptions{.seed = 3});
  ASSERT_TRUE(hasher.is_ok());
  auto src = TextIdSource::create(*hasher, random_documents(rng, 30, 3000), TextIdSourceOptions{.seq_len = 16});
  ASSERT_TRUE(src.is_ok());
  test::ConformanceCase c;
  c.backend = BackendKind::kCuda;
  EngineOptions o = test::conformance_options(c, 32);
  o.device = 0;
  auto e = Engine::create_local(layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  DecodeReplayOptions base, wired;
  base.batch = 32;
  base.steps = 20;
  base.warmup_steps = 2;
  base.compute_only_baseline = false;
  auto report = std::make_shared<DeviceHashingReport>();
  ASSERT_TRUE(wire_device_hashing(HashPlace::kAuto, **e, **src, base, wired, report).is_ok());
  ASSERT_EQ(report->used, HashPlace::kGpu) << report->note;
  auto rep = run_decode_replay(layout, **src, (*e)->queue(), (*e)->compute(), wired);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(report->verified_ids, int64_t{22} * 32 * layout.heads() * layout.n_layers());
  EXPECT_EQ(report->gpu_ns.size(), 20u);
  EXPECT_EQ(rep->rows_looked_up, int64_t{20} * 32 * layout.heads() * layout.n_layers());
}

}  // namespace
}  // namespace engram

// Steps hashed on the GPU through the engine: decode steps (hash_and_prepare) over a random token stream with
// short documents and sequence cuts give the CPU hasher's ids of the same step (TextIdSource); steps of random
// chunks (hash_chunks_and_prepare: chunked prefill and decode mixed, random look-back slots, restarts, empty
// chunks) give the batch reference's ids from look-back rows kept on the host; in both, the staging the queue
// fills from the device ids equals the scalar reference lookup of the CPU ids, into poisoned buffers. The decode
// and the serving replay with the hashing wired in verify every id themselves. Skips with the reason without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>

#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"
#include "cuda_test_support.hpp"
#include "replay/decode_replay.hpp"
#include "replay/device_hashing.hpp"
#include "replay/serving_hashing.hpp"
#include "replay/serving.hpp"
#include "replay/text_id_source.hpp"
#include "engram/prefetch_queue.hpp"
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

// A cuda engine of `layout` (the conformance options) with room for `max_tokens` tokens per step.
Result<std::unique_ptr<Engine>> cuda_engine(const EngramLayout& layout, int64_t max_tokens) {
  test::ConformanceCase c;
  c.backend = BackendKind::kCuda;
  EngineOptions o = test::conformance_options(c, max_tokens);
  o.device = 0;
  return Engine::create_local(layout, o);
}

// One step through the queue: `prepare` (the device hash in place of prepare) after begin_step, every layer
// consumed into *staging, end_step, then the step's device hash with its ids read back.
template <typename Prepare>
Result<DeviceHashStep> run_hashed_step(Engine& engine, int64_t step, const Prepare& prepare,
                                       std::vector<const uint16_t*>* staging) {
  PrefetchQueue& q = engine.queue();
  q.begin_step(step);
  ENGRAM_RETURN_IF_ERROR(prepare());
  staging->clear();
  for (int li = 0; li < engine.table().layout().n_layers(); ++li) {
    ENGRAM_ASSIGN_OR_RETURN(auto st, q.consume(li));
    staging->push_back(st.data);
  }
  ENGRAM_RETURN_IF_ERROR(q.end_step());
  return engine.last_device_hash(true);
}

// The staging of each layer (tokens x heads x d bf16, on the device) equals the scalar reference lookup of `ids`.
void expect_staging_matches(Engine& engine, const std::vector<const uint16_t*>& staging,
                            const std::vector<std::vector<int64_t>>& ids, int64_t tokens, const std::string& where) {
  const EngramLayout& layout = engine.table().layout();
  const size_t per_token = static_cast<size_t>(layout.heads() * layout.d);
  for (int li = 0; li < layout.n_layers(); ++li) {
    const auto got = to_host(staging[static_cast<size_t>(li)], static_cast<size_t>(tokens) * per_token);
    EXPECT_EQ(test::first_reference_mismatch(engine.table().view(li), ids[static_cast<size_t>(li)], got.data()), -1)
        << where << " layer " << li;
  }
}

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
  auto e = cuda_engine(layout, batch);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  ASSERT_EQ(engine.backend(), BackendKind::kCuda);
  test::randomize_table(engine.table(), rng);
  ASSERT_TRUE(engine.enable_device_hashing(*hasher, batch).is_ok());
  EXPECT_EQ(engine.hash_and_prepare(nullptr, nullptr, batch + 1).code(), Code::kInvalidArgument);

  std::vector<std::vector<int64_t>> ids;
  for (int64_t step = 0; step < 120; ++step) {
    ASSERT_TRUE((*src)->next_step(step, batch, ids).is_ok());
    const auto& st = (*src)->last_step_tokens();
    std::vector<const uint16_t*> staging;
    auto d = run_hashed_step(engine, step, [&] {
      return engine.hash_and_prepare(st.tokens.data(), st.new_sequence.data(), batch);
    }, &staging);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_GT(d->gpu_ns, 0);
    EXPECT_EQ(d->errors, 0u);
    ASSERT_EQ(d->ids, ids) << "seed " << seed << " step " << step << " batch " << batch;
    if (step % 10 == 0)
      expect_staging_matches(engine, staging, ids, batch, "seed " + std::to_string(seed) + " step " + std::to_string(step));
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
  auto e = cuda_engine(layout, 32);
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

TEST(CudaDeviceHashing, ChunkedStepsEqualTheBatchReference) {
  ENGRAM_REQUIRE_GPU();
  const uint64_t seed = test::conformance_seed();
  std::mt19937_64 rng(seed);
  const EngramLayout layout = test::conformance_layout(RowFormat::kFused);
  const int64_t vocab = 4000;
  auto hasher = NgramHasher::create(layout, random_table(rng, vocab, 0.6), NgramHashOptions{.seed = static_cast<int64_t>(rng() % 1000)});
  ASSERT_TRUE(hasher.is_ok()) << hasher.status().to_string();
  const int slots = 2 + static_cast<int>(rng() % 30);
  const int64_t max_tokens = 64 + static_cast<int64_t>(rng() % 400);
  auto e = cuda_engine(layout, max_tokens);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  test::randomize_table(engine.table(), rng);
  ASSERT_TRUE(engine.enable_device_hashing(*hasher, slots, max_tokens).is_ok());
  const int window = layout.max_ngram - 1;
  std::vector<int64_t> lookback(static_cast<size_t>(slots * window), kDeadToken);
  {  // refused before anything is enqueued: a slot twice, too many tokens
    const int64_t t[2] = {1, 2};
    const int32_t n1[2] = {1, 1}, same[2] = {0, 0}, big[1] = {static_cast<int32_t>(max_tokens + 1)};
    EXPECT_EQ(engine.hash_chunks_and_prepare(t, n1, same, nullptr, 2).code(), Code::kInvalidArgument);
    EXPECT_EQ(engine.hash_chunks_and_prepare(t, big, nullptr, nullptr, 1).code(), Code::kInvalidArgument);
  }
  std::vector<int32_t> perm(static_cast<size_t>(slots));
  for (int64_t step = 0; step < 80; ++step) {
    const int n = 1 + static_cast<int>(rng() % static_cast<uint64_t>(slots));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> slot(perm.begin(), perm.begin() + n), counts(static_cast<size_t>(n)), qsl(1, 0);
    std::vector<uint8_t> fresh(static_cast<size_t>(n));
    int64_t left = max_tokens;
    for (int i = 0; i < n; ++i) {
      const int64_t most = std::min<int64_t>(left, rng() % 4 == 0 ? 1 : 50);  // decode tokens, prefill chunks
      counts[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % static_cast<uint64_t>(most + 1));
      left -= counts[static_cast<size_t>(i)];
      qsl.push_back(qsl.back() + counts[static_cast<size_t>(i)]);
      fresh[static_cast<size_t>(i)] = rng() % 5 == 0;
      if (fresh[static_cast<size_t>(i)]) std::fill_n(lookback.begin() + slot[static_cast<size_t>(i)] * window, window, kDeadToken);
    }
    const int64_t total = qsl.back();
    const std::vector<int64_t> tokens = testing::random_tokens(rng, static_cast<size_t>(std::max<int64_t>(total, 1)), vocab);
    std::vector<std::vector<int64_t>> want;
    testing::reference_chunk_step(*hasher, qsl, tokens, slot, slots, lookback, want);
    std::vector<const uint16_t*> staging;
    auto d = run_hashed_step(engine, step, [&] {
      return engine.hash_chunks_and_prepare(tokens.data(), counts.data(), slot.data(), fresh.data(), n);
    }, &staging);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_EQ(d->errors, 0u);
    ASSERT_EQ(d->ids, want) << "seed " << seed << " step " << step << " chunks " << n << " tokens " << total;
    if (step % 8 == 0 && total > 0)
      expect_staging_matches(engine, staging, want, total, "seed " + std::to_string(seed) + " step " + std::to_string(step));
  }
}

TEST(CudaDeviceHashing, ServingReplayWiredOnTheGpuVerifiesEveryId) {
  ENGRAM_REQUIRE_GPU();
  std::mt19937_64 rng(test::conformance_seed());
  const EngramLayout layout = test::conformance_layout(RowFormat::kSplit);
  auto hasher = NgramHasher::create(layout, random_table(rng, 3000, 0.67), NgramHashOptions{.seed = 5});
  ASSERT_TRUE(hasher.is_ok());
  auto ids = make_text_serving_ids(*hasher, random_documents(rng, 30, 3000));
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  auto e = cuda_engine(layout, 64);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  WorkloadOptions w;
  w.rate_rps = 4000;
  w.n_requests = 16;
  w.seed = rng();
  w.prompt = *LengthDist::parse("uniform:1-80");
  w.output = *LengthDist::parse("uniform:1-9");
  auto reqs = make_requests(w, (*ids)->text_tokens());
  ASSERT_TRUE(reqs.is_ok());
  ServingOptions base;
  base.model = *ModelShape::preset("tiny");
  base.rates = {400, 4000, 5};
  base.scheduler = {64, 24, 6, 64};
  const int64_t per_token = static_cast<int64_t>(layout.heads()) * layout.n_layers();
  const int64_t warm = std::min<int64_t>({(*reqs)[0].prompt_tokens, 24, 64}) * base.warmup_steps;
  ServingSchedule sched;
  {
    ServingOptions wired;
    auto report = std::make_shared<DeviceHashingReport>();
    ASSERT_TRUE(wire_serving_device_hashing(HashPlace::kAuto, **e, **ids, *reqs, 6, 64, base, wired, report).is_ok());
    ASSERT_EQ(report->used, HashPlace::kGpu) << report->note;
    auto rep = run_serving_live(layout, *reqs, **ids, (*e)->queue(), (*e)->compute(), wired, &sched);
    ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
    EXPECT_EQ(rep->completed, 16);
    EXPECT_EQ(report->verified_ids, (rep->scheduled_tokens + warm) * per_token);
    EXPECT_EQ(report->gpu_ns.size(), static_cast<size_t>(rep->steps));
    EXPECT_EQ(report->kernel_errors, 0u);
  }
  // The recorded batches again, on a fresh look-back (the engine's hasher is rebuilt for the schedule's needs).
  (*ids)->reset();
  ServingOptions wired;
  auto report = std::make_shared<DeviceHashingReport>();
  ASSERT_TRUE(wire_serving_device_hashing(HashPlace::kGpu, **e, **ids, sched.requests, serving_slots_needed(sched),
                                          std::max<int64_t>(serving_max_step_tokens(sched), 64), base, wired, report)
                  .is_ok());
  auto rep = run_serving_recorded(layout, sched, **ids, (*e)->queue(), (*e)->compute(), wired);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(report->verified_ids, (rep->scheduled_tokens + warm) * per_token);
}

}  // namespace
}  // namespace engram

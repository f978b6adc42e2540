// Device hashing in the decode replay, on the CPU: the step tokens a TextIdSource hands to an engine that hashes on
// the device (raw token per slot, new-sequence flags) give exactly the source's own ids when they are hashed as the
// device does it (the batch reference from look-back rows kept per slot, reset at new sequences, advanced after
// each step), across document boundaries and sequence-length cuts; and the replay's choice of where to hash (auto,
// cpu, gpu) on a cpu engine: auto says why it stays on the CPU, gpu is refused naming why.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "core/hash_batch.hpp"
#include "core/ngram_hash.hpp"
#include "engram/engine.hpp"
#include "engram/layout.hpp"
#include "replay/device_hashing.hpp"
#include "replay/text_id_source.hpp"
#include "support/hash_support.hpp"

namespace engram {
namespace {

using testing::random_table;
using testing::random_token_file;

class DeviceHashing : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = make_preset_layout("tiny");
    ASSERT_TRUE(l.is_ok());
    layout_ = *l;
    auto h = NgramHasher::create(layout_, random_table(rng_, 300, 0.67), NgramHashOptions{.seed = static_cast<int64_t>(rng_() % 1000)});
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    hasher_.emplace(std::move(*h));
  }
  std::mt19937_64 rng_{std::random_device{}()};
  EngramLayout layout_;
  std::optional<NgramHasher> hasher_;
};

TEST_F(DeviceHashing, StepTokensHashedFromLookBackRowsGiveTheSourceIds) {
  const TokenFile tf = random_token_file(rng_, {37, 5, 120, 1, 64}, 300);
  const int seq_len = 3 + static_cast<int>(rng_() % 20);
  auto src = TextIdSource::create(*hasher_, tf, TextIdSourceOptions{.seq_len = seq_len});
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  const int batch = 1 + static_cast<int>(rng_() % 9);
  const int window = layout_.max_ngram - 1;
  const int heads = layout_.heads();
  std::vector<int64_t> lookback(static_cast<size_t>(batch * window), kDeadToken);
  std::vector<int32_t> qsl(static_cast<size_t>(batch + 1));
  for (int r = 0; r <= batch; ++r) qsl[static_cast<size_t>(r)] = r;
  std::vector<std::vector<int64_t>> ids;
  int64_t resets = 0;
  for (int64_t step = 0; step < 300; ++step) {
    ASSERT_TRUE((*src)->next_step(step, batch, ids).is_ok());
    const TextIdSource::StepTokens& st = (*src)->last_step_tokens();
    ASSERT_EQ(st.tokens.size(), static_cast<size_t>(batch));
    ASSERT_EQ(st.new_sequence.size(), static_cast<size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      if (!st.new_sequence[static_cast<size_t>(r)]) continue;
      ++resets;
      std::fill_n(lookback.begin() + r * window, window, kDeadToken);
    }
    HashBatch b;
    b.n_requests = batch;
    b.max_tokens = batch;
    b.query_start_loc = qsl.data();
    b.tokens = st.tokens.data();
    b.lookback = lookback.data();
    b.lookback_rows = batch;
    std::vector<int64_t> out(static_cast<size_t>(layout_.n_layers() * batch * heads), -7);
    ASSERT_TRUE(hash_batch_reference(*hasher_, b, HashIdKind::kGlobalRow, out.data()).is_ok());
    for (int l = 0; l < layout_.n_layers(); ++l) {
      const std::vector<int64_t> got(out.begin() + l * batch * heads, out.begin() + (l + 1) * batch * heads);
      ASSERT_EQ(got, ids[static_cast<size_t>(l)]) << "step " << step << " layer " << l << " seq_len " << seq_len;
    }
    ASSERT_TRUE(update_lookback_reference(window, b, nullptr, lookback.data()).is_ok());
  }
  EXPECT_GT(resets, batch) << "the run crossed sequence starts after the first step";
}

TEST_F(DeviceHashing, AutoStaysOnTheCpuBackendAndGpuIsRefused) {
  EXPECT_EQ(parse_hash_place("gpu").value(), HashPlace::kGpu);
  EXPECT_EQ(parse_hash_place("auto").value(), HashPlace::kAuto);
  EXPECT_EQ(parse_hash_place("GPU").status().code(), Code::kInvalidArgument);
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.max_tokens = 8;
  o.record_timeline = false;
  auto e = Engine::create_local(layout_, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  auto src = TextIdSource::create(*hasher_, random_token_file(rng_, {50}, 300));
  ASSERT_TRUE(src.is_ok());
  DecodeReplayOptions base, wired;
  base.batch = 4;
  auto report = std::make_shared<DeviceHashingReport>();
  ASSERT_TRUE(wire_device_hashing(HashPlace::kAuto, **e, **src, base, wired, report).is_ok());
  EXPECT_EQ(report->used, HashPlace::kCpu);
  EXPECT_NE(report->note.find("cpu backend"), std::string::npos) << report->note;
  EXPECT_FALSE(wired.prepare_step);
  const Status refused = wire_device_hashing(HashPlace::kGpu, **e, **src, base, wired, report);
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_NE(refused.message().find("cpu backend"), std::string::npos) << refused.to_string();
  // The engine's device-hashing entry points say the cpu backend has none.
  EXPECT_EQ((*e)->enable_device_hashing(*hasher_, 4).code(), Code::kUnsupported);
}

}  // namespace
}  // namespace engram

// Description: `engram bench traffic`'s host side: every call of every arm and workload reads token positions no
// other call reads (a repeated lookup is faster even after an L2 flush, so an arm that re-reads ids would be timed
// warm), decode sequences advance one token per call, a short text is refused with the tokens it needs, the option
// checks, and the text's id stream equals the reference hasher's ids document by document.
#include <gtest/gtest.h>

#include <set>

#include "bench/traffic_plan.hpp"
#include "engram/layout.hpp"

namespace engram::bench {
namespace {

TrafficOptions valid_options() {
  TrafficOptions o;
  o.cache_profile = "train.profile";
  return o;
}

TEST(TrafficPlan, EveryCallOfEveryWorkloadReadsItsOwnPositions) {
  const TrafficOptions o = valid_options();
  const auto workloads = traffic_workloads(o);
  ASSERT_EQ(workloads.size(), 3u);
  EXPECT_TRUE(workloads[0].prefill);
  EXPECT_EQ(workloads[0].tokens, 8192);
  const int arms = 4, calls = traffic_calls(2 + 15, arms);
  const int64_t stream = TrafficPlan::tokens_needed(workloads, calls) + 12345;
  auto plan = TrafficPlan::make(stream, workloads, calls, "text");
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  std::set<int64_t> seen;
  int64_t total = 0;
  for (size_t w = 0; w < workloads.size(); ++w)
    for (int c = 0; c < calls; ++c) {
      const auto p = plan->positions(w, c);
      ASSERT_EQ(static_cast<int64_t>(p.size()), workloads[w].tokens);
      for (int64_t x : p) {
        ASSERT_GE(x, 0);
        ASSERT_LT(x, stream);
        seen.insert(x);
      }
      total += static_cast<int64_t>(p.size());
    }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), total) << "a token position is read by two calls";
}

TEST(TrafficPlan, PrefillWindowsAreConsecutiveAndDecodeSequencesAdvanceOneTokenPerCall) {
  const std::vector<TrafficWorkload> w{{true, 16}, {false, 4}};
  auto plan = TrafficPlan::make(1000, w, 5, "text");
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  for (int c = 0; c < 5; ++c) {
    const auto p = plan->positions(0, c);
    for (size_t i = 1; i < p.size(); ++i) EXPECT_EQ(p[i], p[i - 1] + 1);
  }
  for (int c = 0; c + 1 < 5; ++c) {
    const auto a = plan->positions(1, c), b = plan->positions(1, c + 1);
    for (size_t s = 0; s < a.size(); ++s) EXPECT_EQ(b[s], a[s] + 1);
  }
  // Decode sequences start spread over the rest of the text (different documents), not side by side.
  const auto first = plan->positions(1, 0);
  EXPECT_GT(first[1] - first[0], 5);
}

TEST(TrafficPlan, MappingOfRepetitionsAndArmsToCallsIsOneToOneAndTheCheckCallIsLast) {
  const int arms = 3, reps = 6, calls = traffic_calls(reps, arms);
  std::set<int> seen;
  for (int r = 0; r < reps; ++r)
    for (int a = 0; a < arms; ++a) {
      const int c = traffic_call(r, a, arms);
      EXPECT_LT(c, calls - 1);
      EXPECT_TRUE(seen.insert(c).second);
    }
  EXPECT_EQ(static_cast<int>(seen.size()), calls - 1);
}

TEST(TrafficPlan, ATextTooShortIsRefusedWithTheTokensItNeeds) {
  const std::vector<TrafficWorkload> w{{true, 8192}, {false, 256}};
  const int64_t need = TrafficPlan::tokens_needed(w, 10);
  EXPECT_EQ(need, 8192 * 10 + 256 * 10);
  auto plan = TrafficPlan::make(need - 1, w, 10, "same-domain text x.tokens");
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), Code::kInvalidArgument);
  EXPECT_NE(plan.status().message().find(std::to_string(need)), std::string::npos) << plan.status().message();
  EXPECT_NE(plan.status().message().find("x.tokens"), std::string::npos);
  EXPECT_TRUE(TrafficPlan::make(need, w, 10, "t").is_ok());
}

TEST(TrafficOptionsCheck, RefusesWhatCannotApply) {
  EXPECT_TRUE(check_traffic_options(valid_options()).is_ok());
  auto refused = [](TrafficOptions o, const std::string& word) {
    const Status st = check_traffic_options(o);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << word;
    EXPECT_NE(st.message().find(word), std::string::npos) << st.message();
  };
  TrafficOptions o = valid_options();
  o.cache_profile.clear();
  EXPECT_TRUE(check_traffic_options(o).is_ok()) << "without a profile the training split is counted";
  o = valid_options();
  o.train_tokens = "train.tokens";
  refused(o, "--train-tokens");
  o = valid_options();
  o.arms = {"engine", "engine"};
  refused(o, "--arms");
  o.arms = {"bogus"};
  refused(o, "--arms");
  o.arms = {};
  refused(o, "--arms");
  o = valid_options();
  o.domains = {"same", "same"};
  refused(o, "--domains");
  o = valid_options();
  o.decode = {64, 64};
  refused(o, "--decode");
  o.decode = {0};
  refused(o, "--decode");
  o = valid_options();
  o.prefill_tokens = 0;
  o.decode = {};
  refused(o, "no workload");
  o = valid_options();
  o.engine_grid_fraction = 0;
  refused(o, "--engine-grid-fraction");
  o = valid_options();
  o.cache_size = "lots";
  refused(o, "--cache-size");
}

TEST(TrafficStream, IdsAreTheHashersOfEachSequenceFromItsStart) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok());
  auto hasher = NgramHasher::create_precompressed(*layout, 1000);
  ASSERT_TRUE(hasher.is_ok()) << hasher.status().to_string();
  TokenFile tf;
  tf.path = "mem.tokens";
  tf.vocab_size = 1000;
  for (uint32_t i = 0; i < 50; ++i) tf.ids.push_back((i * 37 + 11) % 1000);
  tf.documents = {{"a", 0, 20}, {"b", 20, 30}};
  const int64_t seq_len = 8;
  auto stream = hash_token_stream(*hasher, tf, seq_len, 3);
  ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
  const int heads = layout->heads();
  ASSERT_EQ(stream->size(), tf.ids.size() * static_cast<size_t>(heads));
  for (const auto& doc : tf.documents)
    for (int64_t s = doc.first_token; s < doc.first_token + doc.token_count; s += seq_len) {
      const int64_t e = std::min(s + seq_len, doc.first_token + doc.token_count);
      std::vector<int64_t> raw(tf.ids.begin() + s, tf.ids.begin() + e), want(static_cast<size_t>(e - s) * heads);
      ASSERT_TRUE(hasher->hash(raw, 0, want).is_ok());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*stream)[static_cast<size_t>(s * heads) + i], want[i]);
    }
  std::vector<int64_t> pos{3, 41};
  const auto ids = gather_stream_ids(*stream, heads, pos);
  ASSERT_EQ(ids.size(), 2u * heads);
  for (int h = 0; h < heads; ++h) {
    EXPECT_EQ(ids[static_cast<size_t>(h)], (*stream)[static_cast<size_t>(3 * heads + h)]);
    EXPECT_EQ(ids[static_cast<size_t>(heads + h)], (*stream)[static_cast<size_t>(41 * heads + h)]);
  }
}

}  // namespace
}  // namespace engram::bench

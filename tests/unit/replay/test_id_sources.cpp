// Synthetic id sources: ids stay inside their head's row range, are deterministic per seed, and Zipf ids are skewed
// as the distribution says (the top rank's share close to 1/H(n, alpha)).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "replay/id_source.hpp"

namespace engram {
namespace {

void expect_in_head_ranges(const EngramLayout& l, const std::vector<std::vector<int64_t>>& ids, int batch) {
  ASSERT_EQ(ids.size(), static_cast<size_t>(l.n_layers()));
  for (int li = 0; li < l.n_layers(); ++li) {
    ASSERT_EQ(ids[li].size(), static_cast<size_t>(batch * l.heads()));
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < l.heads(); ++h) {
        const int64_t id = ids[li][static_cast<size_t>(b * l.heads() + h)];
        ASSERT_GE(id, l.head_offsets[li][h]);
        ASSERT_LT(id, l.head_offsets[li][h + 1]);
      }
  }
}

TEST(IdSources, UniformAndZipfStayInHeadRangesAndAreDeterministic) {
  auto l = make_preset_layout("v41-flash-mini", 16LL << 20);
  ASSERT_TRUE(l.is_ok());
  auto z = make_zipf_id_source(*l, 1.1, 42);
  ASSERT_TRUE(z.is_ok());
  std::vector<std::unique_ptr<IdSource>> sources;
  sources.push_back(make_uniform_id_source(*l, 42));
  sources.push_back(std::move(*z));
  for (auto& s : sources) {
    std::vector<std::vector<int64_t>> a, b;
    ASSERT_TRUE(s->next_step(3, 50, a).is_ok());
    expect_in_head_ranges(*l, a, 50);
    ASSERT_TRUE(s->next_step(3, 50, b).is_ok());
    EXPECT_EQ(a, b) << s->describe();
  }
}

TEST(ZipfSampler, TopRankShareMatchesDistribution) {
  const int64_t n = 1000;
  const double alpha = 1.0;
  ZipfSampler z(n, alpha);
  double hn = 0;
  for (int64_t k = 1; k <= n; ++k) hn += std::pow(static_cast<double>(k), -alpha);
  uint64_t st = 12345;
  std::map<int64_t, int> counts;
  const int draws = 200000;
  for (int i = 0; i < draws; ++i) {
    const int64_t k = z.sample(st);
    ASSERT_GE(k, 1);
    ASSERT_LE(k, n);
    ++counts[k];
  }
  for (int64_t k : {1, 2, 10}) {
    const double want = std::pow(static_cast<double>(k), -alpha) / hn;
    const double got = static_cast<double>(counts[k]) / draws;
    EXPECT_NEAR(got, want, 5 * std::sqrt(want / draws)) << "rank " << k;
  }
}

TEST(IdSources, ZipfRejectsBadAlpha) {
  auto l = make_preset_layout("tiny");
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(make_zipf_id_source(*l, 0, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_zipf_id_source(*l, -1, 1).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram

// A direct Engine::lookup of more tokens than the engine's max_tokens failed (the backend's buffers are sized for
// max_tokens): it is now looked up in max_tokens-sized pieces, and equals the same lookup on an engine whose
// max_tokens holds the whole batch, counts included; checked mode still refuses a bad id in the last piece before
// anything is written.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engram/engine.hpp"
#include "engram/layout.hpp"

namespace engram {
namespace {

std::unique_ptr<Engine> cpu_engine(const EngramLayout& l, int64_t max_tokens) {
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.max_tokens = max_tokens;
  o.content.seed = 5;
  auto e = Engine::create_local(l, o);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return e.is_ok() ? std::move(*e) : nullptr;
}

TEST(EngineSplit, ABatchLargerThanMaxTokensEqualsOneLookup) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  const EngramLayout& l = *layout;
  auto small = cpu_engine(l, 4);
  auto large = cpu_engine(l, 64);
  ASSERT_TRUE(small && large);
  const int64_t tokens = 23;  // 5 pieces of 4 and one of 3
  const int H = l.heads(), li = l.n_layers() - 1;
  std::mt19937_64 rng(7);
  std::vector<int64_t> ids(static_cast<size_t>(tokens * H));
  for (auto& id : ids) id = rng() % 8 == 0 ? -1 : static_cast<int64_t>(rng() % static_cast<uint64_t>(l.rows(li)));
  const size_t out_n = static_cast<size_t>(tokens) * static_cast<size_t>(small->staging_heads()) * static_cast<size_t>(l.d);
  std::vector<uint16_t> a(out_n, 0xFFFF), b(out_n, 0x7777);
  auto ra = small->lookup(li, ids.data(), tokens, a.data());
  auto rb = large->lookup(li, ids.data(), tokens, b.data());
  ASSERT_TRUE(ra.is_ok()) << ra.status().to_string();
  ASSERT_TRUE(rb.is_ok()) << rb.status().to_string();
  EXPECT_EQ(a, b);
  EXPECT_EQ(ra->stats.rows, rb->stats.rows);
  EXPECT_EQ(ra->stats.dead_rows, rb->stats.dead_rows);
  EXPECT_EQ(ra->stats.rows, tokens * H);

  // Checked: a bad id in the last piece is refused with nothing written.
  ids.back() = l.rows(li);
  std::vector<uint16_t> c(out_n, 0x1234);
  LookupCall call;
  call.checked = true;
  auto rc = small->lookup(li, ids.data(), tokens, c.data(), call);
  EXPECT_EQ(rc.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c, std::vector<uint16_t>(out_n, 0x1234));
}

}  // namespace
}  // namespace engram

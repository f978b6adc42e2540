// Description: numpy's SeedSequence, PCG64 and Generator.integers(int64) reimplemented in C++ must equal
// the machine's python3-numpy bit for bit: pools, generated states, raw 64-bit draws, bounded draws on
// every code path (rng = 0, 32-bit Lemire, rng = 2^32-1, 64-bit Lemire) and the next_uint32 buffer carried
// across calls. Golden values come from tests/data/gen_hash_golden.py run at test time on fresh random
// inputs; without python3 + numpy those tests skip with the reason.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/numpy_rng.hpp"

namespace engram::numpy_rng {
namespace {

using nlohmann::json;

// A python3 that can import numpy: python3 on PATH first, then Debian's /usr/bin/python3 (a pyenv or venv
// python3 earlier on PATH often lacks numpy). Empty when none can.
std::string find_numpy_python() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string cmd = std::string(py) + " -c 'import numpy' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return {};
}

// Runs gen_hash_golden.py on `request`; an empty object when it failed (the test then fails).
json run_golden(const std::string& python, const json& request) {
  std::random_device rd;
  const auto path = std::filesystem::temp_directory_path() / ("engram-golden-" + std::to_string(rd()) + ".json");
  std::ofstream(path) << request.dump();
  const std::string cmd = python + " " ENGRAM_TEST_DATA_DIR "/gen_hash_golden.py " + path.string();
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int rc = pclose(p);
    EXPECT_EQ(rc, 0) << cmd;
  }
  std::filesystem::remove(path);
  return out.empty() ? json::object() : json::parse(out);
}

class NumpyGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = find_numpy_python();
    if (python_.empty()) GTEST_SKIP() << "python3 with numpy not found (apt-get install python3-numpy)";
  }
  std::string python_;
  std::mt19937_64 rng_{std::random_device{}()};
};

TEST_F(NumpyGolden, SeedSequencePoolAndStates) {
  std::vector<std::vector<uint32_t>> entropies = {
      {0}, {1}, {42}, {10007}, {5, 1}, {0xffffffffu, 0xffffffffu}, {},
  };
  for (int i = 0; i < 4; ++i) {
    const uint64_t v = rng_();
    entropies.push_back({static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32)});
  }
  // Integers wider than the pool (5 and 7 words, top word non-zero) exercise the last mixing pass.
  for (int words : {5, 7}) {
    std::vector<uint32_t> w(words);
    for (auto& x : w) x = static_cast<uint32_t>(rng_());
    w.back() |= 1;
    entropies.push_back(w);
  }
  json req;
  for (const auto& e : entropies) req["seedseq"].push_back({{"entropy_words", e}});
  const json res = run_golden(python_, req);
  ASSERT_EQ(res["seedseq"].size(), entropies.size());
  for (size_t i = 0; i < entropies.size(); ++i) {
    SCOPED_TRACE("entropy case " + std::to_string(i));
    const SeedSequence ss(entropies[i]);
    const json& g = res["seedseq"][i];
    for (int k = 0; k < SeedSequence::kPoolSize; ++k) EXPECT_EQ(ss.pool()[k], g["pool"][k].get<uint32_t>());
    EXPECT_EQ(ss.generate_state_u32(8), g["state32"].get<std::vector<uint32_t>>());
    EXPECT_EQ(ss.generate_state_u64(4), g["state64"].get<std::vector<uint64_t>>());
    if (entropies[i].size() <= 2) {
      const uint64_t v = entropies[i].empty() ? 0
                         : entropies[i].size() == 1
                             ? entropies[i][0]
                             : (static_cast<uint64_t>(entropies[i][1]) << 32) | entropies[i][0];
      EXPECT_EQ(SeedSequence(v).pool(), ss.pool());
    }
  }
}

TEST_F(NumpyGolden, Pcg64StateRawDrawsAndBoundedIntegers) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t k32 = int64_t{1} << 32;
  // Successive calls on one generator; odd counts of 32-bit draws leave a buffered half for the next call.
  std::vector<std::array<int64_t, 3>> calls = {
      {0, 1, 3},           {0, 2, 5},          {0, 7, 9},           {-5, 5, 4},
      {0, 1000, 7},        {0, int64_t{1} << 31, 5}, {0, k32 - 1, 5}, {0, k32, 5},
      {0, k32 + 1, 5},     {0, int64_t{1} << 40, 5}, {0, (int64_t{1} << 62) + 12345, 5},
      {kMin, kMax, 3},     {3, 4, 2},          {-(int64_t{1} << 50), int64_t{1} << 50, 4},
  };
  for (int i = 0; i < 6; ++i) {
    const int64_t hi = static_cast<int64_t>(rng_() >> (1 + rng_() % 62)) + 1;
    calls.push_back({0, hi, static_cast<int64_t>(1 + rng_() % 9)});
  }
  std::vector<uint64_t> seeds = {0, 1, 10007, 140079};
  for (int i = 0; i < 3; ++i) seeds.push_back(rng_() >> 1);
  json req;
  for (uint64_t s : seeds) {
    json c = {{"seed", s}, {"calls", json::array()}};
    for (const auto& call : calls) c["calls"].push_back({call[0], call[1], call[2]});
    req["integers"].push_back(c);
  }
  const json res = run_golden(python_, req);
  ASSERT_EQ(res["integers"].size(), seeds.size());
  for (size_t si = 0; si < seeds.size(); ++si) {
    SCOPED_TRACE("seed " + std::to_string(seeds[si]));
    const json& g = res["integers"][si];
    Pcg64 gen{SeedSequence(seeds[si])};
    EXPECT_EQ(gen.state_high(), g["initial_state"]["state_high"].get<uint64_t>());
    EXPECT_EQ(gen.state_low(), g["initial_state"]["state_low"].get<uint64_t>());
    EXPECT_EQ(gen.inc_high(), g["initial_state"]["inc_high"].get<uint64_t>());
    EXPECT_EQ(gen.inc_low(), g["initial_state"]["inc_low"].get<uint64_t>());
    {
      Pcg64 raw{SeedSequence(seeds[si])};
      for (const auto& v : g["raw"]) EXPECT_EQ(raw.next_uint64(), v.get<uint64_t>());
    }
    for (size_t ci = 0; ci < calls.size(); ++ci) {
      SCOPED_TRACE("call " + std::to_string(ci) + ": [" + std::to_string(calls[ci][0]) + ", " + std::to_string(calls[ci][1]) + ")");
      auto r = integers_int64(gen, calls[ci][0], calls[ci][1], calls[ci][2]);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_EQ(*r, g["results"][ci].get<std::vector<int64_t>>());
    }
    EXPECT_EQ(gen.state_high(), g["final_state"]["state_high"].get<uint64_t>());
    EXPECT_EQ(gen.state_low(), g["final_state"]["state_low"].get<uint64_t>());
    EXPECT_EQ(gen.has_uint32() ? 1 : 0, g["final_state"]["has_uint32"].get<int>());
    if (gen.has_uint32()) {
      EXPECT_EQ(gen.buffered_uint32(), g["final_state"]["uinteger"].get<uint32_t>());
    }
  }
}

TEST(NumpyRng, IntegersRejectsEmptyRangeAndNegativeSize) {
  Pcg64 g{SeedSequence(7)};
  auto r = integers_int64(g, 5, 5, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("low >= high"), std::string::npos);
  EXPECT_FALSE(integers_int64(g, 0, 10, -1).is_ok());
  auto empty = integers_int64(g, 0, 10, 0);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->empty());
}

TEST(NumpyRng, BoundedDrawsStayInRange) {
  std::mt19937_64 rng{std::random_device{}()};
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t low = static_cast<int64_t>(rng() >> 2) - (int64_t{1} << 61);
    const int64_t span = static_cast<int64_t>(rng() >> (2 + rng() % 61)) + 1;
    auto r = default_rng_integers_int64(rng() >> 1, low, low + span, 16);
    ASSERT_TRUE(r.is_ok());
    for (int64_t v : *r) {
      EXPECT_GE(v, low);
      EXPECT_LT(v, low + span);
    }
  }
}

TEST(NumpyRng, Uint32BufferHandsOutBothHalves) {
  Pcg64 a{SeedSequence(123)};
  Pcg64 b{SeedSequence(123)};
  const uint64_t whole = a.next_uint64();
  EXPECT_EQ(b.next_uint32(), static_cast<uint32_t>(whole));
  EXPECT_TRUE(b.has_uint32());
  EXPECT_EQ(b.next_uint32(), static_cast<uint32_t>(whole >> 32));
  EXPECT_FALSE(b.has_uint32());
  EXPECT_EQ(b.next_uint64(), a.next_uint64());
}

}  // namespace
}  // namespace engram::numpy_rng

// The engine conformance matrix (in the spirit of ggml's test-backend-ops): the same EngineOptions cases run on
// every backend over fresh random tables and ids, and every output is compared bit for bit with the scalar
// reference decoder. Shared by tests/backend (cpu cases) and tests/cuda (cuda cases).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engram/engine.hpp"
#include "engram/format.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"

namespace engram::test {

struct ConformanceCase {
  BackendKind backend = BackendKind::kCpu;
  RowFormat format = RowFormat::kFused;
  FastPathMode fast_path = FastPathMode::kPlanner;
  bool cache = false;
  std::string name() const {
    return std::string(backend_kind_name(backend)) + "_" + row_format_name(format) + "_" + fast_path_mode_name(fast_path) +
           (cache ? "_cache" : "_nocache");
  }
};

inline std::vector<ConformanceCase> conformance_matrix(BackendKind backend) {
  std::vector<ConformanceCase> v;
  for (RowFormat f : {RowFormat::kFused, RowFormat::kSplit})
    for (FastPathMode m : {FastPathMode::kPlanner, FastPathMode::kPlain, FastPathMode::kOff})
      for (bool cache : {false, true}) v.push_back({backend, f, m, cache});
  return v;
}

inline uint64_t conformance_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Two Engram layers of d = 64, 2 orders x 3 heads of ~2000 rows: small enough for many cases, big enough that
// batches repeat and miss.
inline EngramLayout conformance_layout(RowFormat f) {
  EngramLayout l;
  l.name = "conformance";
  l.layer_ids = {1, 4};
  l.max_ngram = 3;
  l.heads_per_order = 3;
  l.vocab_size_per_order = {2000, 2500};
  l.d = 64;
  l.format = f;
  EXPECT_TRUE(l.finalize().is_ok());
  return l;
}

inline EngineOptions conformance_options(const ConformanceCase& c, int64_t max_tokens) {
  EngineOptions o;
  o.backend = c.backend;
  o.fast_path = c.fast_path;
  o.content.kind = TableContent::Kind::kZero;  // random bytes are written by the test
  o.max_tokens = max_tokens;
  o.lookup_threads = 2;
  o.grid_cap = GridCap::background_default();
  if (c.cache) {
    o.cache.size = *parse_cache_size("20%");
    o.cache.warmup_steps = 1;
    o.cache.update.every = 1;
    o.cache.update.rows = 64;
  }
  return o;
}

// Every byte of every row random (NaN codes, ue8m0 0x00 / 0xFF, fused padding included).
inline void randomize_table(HostTable& t, std::mt19937_64& rng) {
  for (int li = 0; li < t.n_layers(); ++li) {
    const TableSpan s = t.span(li);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int i = 0; i < s.d; ++i) s.payload_of(r)[i] = static_cast<uint8_t>(rng());
      for (int j = 0; j < s.d / 32; ++j) s.scales_of(r)[j] = static_cast<uint8_t>(rng());
    }
  }
}

// ids [tokens][heads] of layer `li`: valid ids with heavy repetition (a Zipf-like hot set), some dead (-1).
inline std::vector<int64_t> conformance_ids(const EngramLayout& l, int li, int64_t tokens, std::mt19937_64& rng) {
  std::vector<int64_t> ids(static_cast<size_t>(tokens * l.heads()));
  const auto& rows = l.head_rows[static_cast<size_t>(li)];
  const auto& offs = l.head_offsets[static_cast<size_t>(li)];
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < l.heads(); ++h) {
      const uint64_t pick = rng();
      int64_t id = kDeadId;
      if (pick % 16 != 0) {
        const auto n = static_cast<uint64_t>(rows[static_cast<size_t>(h)]);
        const uint64_t local = pick % 4 == 0 ? (pick >> 8) % n : (pick >> 8) % std::min<uint64_t>(n, 24);
        id = offs[static_cast<size_t>(h)] + static_cast<int64_t>(local);
      }
      ids[static_cast<size_t>(t * l.heads() + h)] = id;
    }
  return ids;
}

// An engine of case `c` on device `device` over a fresh random table (the set-up of the engine tests of the
// conformance matrix): the options of conformance_options, the table's rows randomized from `rng`.
inline Result<std::unique_ptr<Engine>> conformance_engine(const ConformanceCase& c, const EngramLayout& layout,
                                                          int64_t max_tokens, std::mt19937_64& rng, int device = -1) {
  EngineOptions o = conformance_options(c, max_tokens);
  o.device = device;
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::create_local(layout, o));
  if (e->backend() != c.backend)
    return Status(Code::kInternal, std::string("the engine runs on ") + e->backend_name() + ", the case asks for another");
  randomize_table(e->table(), rng);
  return e;
}

// Position of the first output element that differs from the scalar reference (-1: none).
inline int64_t first_reference_mismatch(const TableView& v, const std::vector<int64_t>& ids, const uint16_t* out) {
  std::vector<uint16_t> ref(static_cast<size_t>(v.d));
  for (size_t p = 0; p < ids.size(); ++p) {
    const int64_t id = ids[p];
    const uint16_t* got = out + p * static_cast<size_t>(v.d);
    if (id < 0 || id >= v.rows) {
      for (int i = 0; i < v.d; ++i)
        if (got[i] != 0) return static_cast<int64_t>(p);
      continue;
    }
    decode_row_reference(v.payload_of(id), v.scales_of(id), v.d, ref.data());
    if (std::memcmp(ref.data(), got, static_cast<size_t>(v.d) * 2) != 0) return static_cast<int64_t>(p);
  }
  return -1;
}

}  // namespace engram::test

// Reference for tensor-parallel slices (engram/tp_slice.hpp): what a rank's lookup must write, derived from the
// whole table's lookup of the same ids, and random tables and ids that exercise every case of the slice (ids of
// the rank's own rows, of another rank's rows, dead, and past the layer). Shared by tests/backend (cpu) and
// tests/cuda (UVA and engine paths).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "engram/tp_slice.hpp"
#include "host/checkpoint.hpp"
#include "support/conformance.hpp"

namespace engram::test {

inline uint64_t tp_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// A fresh directory under the temp dir, removed with everything in it.
class TpTempDir {
 public:
  TpTempDir()
      : dir_(std::filesystem::temp_directory_path() /
             ("engram_tp_" + std::to_string(getpid()) + "_" + std::to_string(tp_seed() % 1000000007))) {
    std::filesystem::create_directories(dir_);
  }
  ~TpTempDir() { std::filesystem::remove_all(dir_); }
  TpTempDir(const TpTempDir&) = delete;
  TpTempDir& operator=(const TpTempDir&) = delete;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

// Every byte random (randomize_table), but no row all zero: its first payload byte is 1.0 or 1.125, so a zero
// output row always means "not read".
inline void randomize_nonzero(HostTable& t, std::mt19937_64& rng) {
  randomize_table(t, rng);
  for (int li = 0; li < t.n_layers(); ++li) {
    const TableSpan s = t.span(li);
    for (int64_t r = 0; r < s.rows; ++r) s.payload_of(r)[0] = static_cast<uint8_t>(0x38 | (rng() & 1));
  }
}

// A table of `l` holding slice `tp` (whole by default) in memfd memory; nullptr (and a test failure) on error.
inline std::unique_ptr<HostTable> tp_table(const EngramLayout& l, const TpSlice& tp = {}) {
  TableOptions o;
  o.tp = tp;
  auto t = HostTable::create(l, o);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(*t) : nullptr;
}

// The whole table of a layout with fresh random non-zero rows, and its checkpoint in a temp dir (the source every
// rank's slice loads its row range from). `table` is null (a test failure recorded) when it could not be made.
struct WholeCheckpoint {
  std::unique_ptr<HostTable> table;
  TpTempDir dir;
  std::string path;
};

inline std::unique_ptr<WholeCheckpoint> whole_checkpoint(const EngramLayout& l, std::mt19937_64& rng) {
  auto w = std::make_unique<WholeCheckpoint>();
  w->table = tp_table(l);
  if (!w->table) return w;
  randomize_nonzero(*w->table, rng);
  w->path = w->dir.path("whole.safetensors");
  const Status st = host::write_checkpoint(w->path, *w->table);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok()) w->table.reset();
  return w;
}

// Two layouts whose heads do not divide by every TP size: 5 heads (orders 2 x 5 heads: TP=2, 3, 4 pad the last
// holding rank; TP=4 leaves rank 3 without heads) and 6 heads (orders 2/3 x 3 heads).
inline EngramLayout tp_layout(int heads_case, RowFormat f) {
  EngramLayout l;
  l.name = "tp-test";
  l.layer_ids = {2, 7};
  if (heads_case == 5) {
    l.max_ngram = 2;
    l.heads_per_order = 5;
    l.vocab_size_per_order = {1500};
  } else {
    l.max_ngram = 3;
    l.heads_per_order = 3;
    l.vocab_size_per_order = {1200, 1700};
  }
  l.d = 64;
  l.format = f;
  (void)l.finalize();
  return l;
}

// ids [tokens][heads] of layer `li`: mostly each head's own rows (repeated), some dead, some of another head's
// rows (another rank's, or the rank's own other head), a few past the layer (`invalid`: false leaves those out).
inline std::vector<int64_t> tp_ids(const EngramLayout& l, int li, int64_t tokens, bool invalid, std::mt19937_64& rng) {
  const int heads = l.heads();
  const auto& offs = l.head_offsets[static_cast<size_t>(li)];
  const int64_t layer_rows = offs.back();
  std::vector<int64_t> ids(static_cast<size_t>(tokens * heads));
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const uint64_t pick = rng();
      const uint64_t kind = pick % 16;
      int64_t id;
      if (kind == 0) {
        id = kDeadId;
      } else if (kind == 1 || kind == 2) {
        id = static_cast<int64_t>((pick >> 8) % static_cast<uint64_t>(layer_rows));  // any head's row
      } else if (kind == 3 && invalid) {
        id = layer_rows + static_cast<int64_t>((pick >> 8) % 100);
      } else {
        const int64_t n = offs[static_cast<size_t>(h) + 1] - offs[static_cast<size_t>(h)];
        id = offs[static_cast<size_t>(h)] + static_cast<int64_t>((pick >> 8) % static_cast<uint64_t>(std::min<int64_t>(n, 40)));
      }
      ids[static_cast<size_t>(t * heads + h)] = id;
    }
  return ids;
}

// First position (token * local_heads + j) where `got` ([tokens][sl.local_heads][d], a rank's output) differs from
// the whole table's output `full` ([tokens][sl.heads][d]) restricted to the rank's heads: head h = head_begin + j
// must be full[t][h] when ids[t][h] is one of the rank's rows, zeros otherwise (another rank's row, dead, past
// the layer, or h >= heads: padding). -1: none.
inline int64_t first_slice_mismatch(const LayerSlice& sl, const std::vector<int64_t>& ids, int64_t tokens, int d,
                                    const uint16_t* full, const uint16_t* got) {
  const size_t row = static_cast<size_t>(d);
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < sl.local_heads; ++j) {
      const int64_t p = t * sl.local_heads + j;
      const uint16_t* g = got + static_cast<size_t>(p) * row;
      const int h = sl.head_begin + j;
      const int64_t id = h < sl.heads ? ids[static_cast<size_t>(t * sl.heads + h)] : kDeadId;
      if (h < sl.heads && id >= sl.row_begin && id < sl.row_end) {
        if (std::memcmp(g, full + static_cast<size_t>(t * sl.heads + h) * row, row * 2) != 0) return p;
      } else {
        for (size_t k = 0; k < row; ++k)
          if (g[k] != 0) return p;
      }
    }
  return -1;
}

}  // namespace engram::test

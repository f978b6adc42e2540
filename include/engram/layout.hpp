// EngramLayout: the shape of the Engram tables of a model, as the reference Engram builds it.
//
// Per Engram layer there are N-gram orders 2..max_ngram, each with `heads_per_order` hash heads; head j
// of order n is a table of p_{n,j} rows, p a prime. Primes are chosen as the reference
// (NgramHashMapping.calculate_vocab_size_across_layers) does: for each layer (in layer order) and
// order, start from vocab_size[n-2] - 1 and take the next prime above the previous one that no head of
// any layer has used yet. Heads are ordered by n then j and concatenated; `head_offsets` are the
// cumulative row counts, so a global row id of layer l is head_offsets[h] + (hash mod p_h).
//
// A row holds d FP8 values and d/32 ue8m0 scales (format.hpp). Two in-memory row layouts:
//  - kSplit: payload array [rows][d] bytes + scale array [rows][d/32] bytes (as vLLM stores them);
//  - kFused: one record per row, payload then scales, padded to a multiple of 16 bytes, so one row is
//    one contiguous read (46.9 vs 30.7 M rows/s on the H200 for 128-B rows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engram/export.hpp"
#include "engram/status.hpp"

namespace engram {
ENGRAM_API_BEGIN

enum class RowFormat { kSplit, kFused };

const char* row_format_name(RowFormat f) noexcept;                 // "split" / "fused"
Result<RowFormat> parse_row_format(const std::string& name);

inline constexpr int kFusedRecordAlign = 16;  // bytes

struct EngramLayout {
  std::string name;                        // preset name or "custom"
  std::vector<int> layer_ids;              // model layer index of each Engram layer, e.g. {1, 14}
  int max_ngram = 0;                       // N: orders 2..N
  int heads_per_order = 0;                 // K
  std::vector<int64_t> vocab_size_per_order;  // [N-1] start of the prime walk, per order
  int d = 0;                               // values per row (multiple of 32)
  RowFormat format = RowFormat::kFused;
  // Filled by finalize():
  std::vector<std::vector<int64_t>> head_rows;     // [layer][head] prime row counts
  std::vector<std::vector<int64_t>> head_offsets;  // [layer][heads + 1] cumulative rows

  int n_layers() const { return static_cast<int>(layer_ids.size()); }
  int heads() const { return (max_ngram - 1) * heads_per_order; }  // heads per Engram layer
  int scales_per_row() const { return d / 32; }
  int64_t payload_bytes_per_row() const { return d; }
  int64_t scale_bytes_per_row() const { return d / 32; }
  // Logical bytes of one row: d + d/32 (B_source per row read).
  int64_t source_bytes_per_row() const { return d + d / 32; }
  // Bytes a row occupies in memory in this layout (fused: padded record; split: d + d/32).
  int64_t row_stride_bytes() const;
  static int64_t fused_record_bytes(int d);
  int64_t rows(int layer_index) const { return head_offsets.at(layer_index).back(); }
  int64_t table_bytes(int layer_index) const { return rows(layer_index) * row_stride_bytes(); }
  int64_t total_bytes() const;
  int64_t total_rows() const;
  // Index of `layer_id` in layer_ids, or -1.
  int layer_index(int layer_id) const;

  // Checks the fields and computes head_rows / head_offsets. kInvalidArgument names the bad field.
  Status finalize();
};

// The layout as JSON text (name, layer ids, orders, heads per order, vocab sizes, d, row format, and the head rows
// the prime walk gave), and back: the reader recomputes the prime walk and refuses a text whose head rows differ
// (another build's walk would address other rows). kInvalidArgument naming the field otherwise.
std::string layout_to_json(const EngramLayout& layout);
Result<EngramLayout> layout_from_json(const std::string& text);

// Presets:
//  "v41-flash"      DeepSeek-V4.1-Flash shape: d=256, orders 2/3/4 x 8 heads, layers 1 and 14,
//                   ~16.0 M rows per head (~101 GB per layer in split bytes).
//  "v41-flash-mini" same row format and head structure, rows per head chosen so that the whole
//                   model's tables total about `table_size_bytes` (default 512 MiB).
//  "tiny"           d=64, orders 2/3 x 2 heads, one layer (1), ~1k rows per head: for tests.
// kInvalidArgument for an unknown name or a table size too small for one row per head.
Result<EngramLayout> make_preset_layout(const std::string& name, int64_t table_size_bytes = 512LL << 20,
                                        RowFormat format = RowFormat::kFused);
std::vector<std::string> preset_names();

// Deterministic primality (Miller-Rabin with bases valid for all 64-bit n).
bool is_prime_u64(uint64_t n);

ENGRAM_API_END
}  // namespace engram

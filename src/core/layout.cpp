// EngramLayout: prime head sizes, offsets and presets (see include/engram/layout.hpp for the rules).
#include "engram/layout.hpp"

#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "engram/format.hpp"

namespace engram {

const char* row_format_name(RowFormat f) noexcept {
  return f == RowFormat::kSplit ? "split" : "fused";
}

Result<RowFormat> parse_row_format(const std::string& name) {
  if (name == "split") return RowFormat::kSplit;
  if (name == "fused") return RowFormat::kFused;
  return Status(Code::kInvalidArgument, "row layout '" + name + "': expected 'fused' or 'split'");
}

namespace {

constexpr int64_t fused_bytes(int d) {
  const int64_t raw = d + d / kScaleBlock;
  return (raw + kFusedRecordAlign - 1) / kFusedRecordAlign * kFusedRecordAlign;
}

// The budgets the row formats rely on: every layout counts d / 32 ue8m0 scales per row; a fused record is a
// whole number of 16-byte loads (the kernels' unit); the d = 256 record (the DeepSeek shape) is 272 B, 17 loads
// for its 264 logical bytes.
static_assert(kScaleBlock == 32, "rows hold d / 32 scales");
static_assert(kFusedRecordAlign == 16, "the lookup kernels read 16-byte chunks");
static_assert(fused_bytes(256) == 272 && fused_bytes(256) % 16 == 0, "d = 256 fused record");
static_assert(fused_bytes(32) == 48 && fused_bytes(7168) == 7392, "fused records round up to 16 bytes");

}  // namespace

int64_t EngramLayout::fused_record_bytes(int d) { return fused_bytes(d); }

int64_t EngramLayout::row_stride_bytes() const {
  return format == RowFormat::kFused ? fused_record_bytes(d) : source_bytes_per_row();
}

int64_t EngramLayout::total_bytes() const {
  int64_t sum = 0;
  for (int i = 0; i < n_layers(); ++i) sum += table_bytes(i);
  return sum;
}

int64_t EngramLayout::total_rows() const {
  int64_t sum = 0;
  for (int i = 0; i < n_layers(); ++i) sum += rows(i);
  return sum;
}

int EngramLayout::layer_index(int layer_id) const {
  for (int i = 0; i < n_layers(); ++i)
    if (layer_ids[i] == layer_id) return i;
  return -1;
}

namespace {

uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t powmod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  a %= m;
  while (e) {
    if (e & 1) r = mulmod(r, a, m);
    a = mulmod(a, a, m);
    e >>= 1;
  }
  return r;
}

}  // namespace

bool is_prime_u64(uint64_t n) {
  if (n < 2) return false;
  static constexpr uint64_t kSmall[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  for (uint64_t p : kSmall) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  // These 12 bases are a deterministic witness set for every n < 3.3e24.
  for (uint64_t a : kSmall) {
    uint64_t x = powmod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = mulmod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

Status EngramLayout::finalize() {
  auto bad = [](const std::string& m) { return Status(Code::kInvalidArgument, "layout: " + m); };
  if (layer_ids.empty()) return bad("no Engram layers (layer_ids is empty)");
  {
    std::set<int> seen(layer_ids.begin(), layer_ids.end());
    if (seen.size() != layer_ids.size()) return bad("layer_ids contains a duplicate");
    for (int l : layer_ids)
      if (l < 0) return bad("layer id " + std::to_string(l) + " is negative");
  }
  if (max_ngram < 2 || max_ngram > 16) return bad("max_ngram " + std::to_string(max_ngram) + " not in [2, 16]");
  if (heads_per_order < 1 || heads_per_order > 1024)
    return bad("heads_per_order " + std::to_string(heads_per_order) + " not in [1, 1024]");
  if (static_cast<int>(vocab_size_per_order.size()) != max_ngram - 1)
    return bad("vocab_size_per_order has " + std::to_string(vocab_size_per_order.size()) +
               " entries, expected max_ngram-1 = " + std::to_string(max_ngram - 1));
  for (int64_t v : vocab_size_per_order)
    if (v < 2 || v > (int64_t{1} << 40))
      return bad("vocab size " + std::to_string(v) + " not in [2, 2^40]");
  if (d <= 0 || d % 32 != 0 || d > 65536)
    return bad("d = " + std::to_string(d) + " must be a positive multiple of 32 (at most 65536)");

  std::set<int64_t> seen_primes;
  head_rows.assign(layer_ids.size(), {});
  head_offsets.assign(layer_ids.size(), {});
  for (size_t li = 0; li < layer_ids.size(); ++li) {
    head_offsets[li].push_back(0);
    for (int n = 2; n <= max_ngram; ++n) {
      int64_t start = vocab_size_per_order[n - 2] - 1;
      for (int j = 0; j < heads_per_order; ++j) {
        int64_t candidate = start + 1;
        while (!is_prime_u64(static_cast<uint64_t>(candidate)) || seen_primes.count(candidate)) ++candidate;
        seen_primes.insert(candidate);
        head_rows[li].push_back(candidate);
        head_offsets[li].push_back(head_offsets[li].back() + candidate);
        start = candidate;
      }
    }
  }
  // Overflow guard: bytes of each table must fit comfortably in int64.
  for (size_t li = 0; li < layer_ids.size(); ++li) {
    const int64_t r = head_offsets[li].back();
    if (r > std::numeric_limits<int64_t>::max() / (row_stride_bytes() + 1))
      return bad("table of layer " + std::to_string(layer_ids[li]) + " overflows 64-bit byte counts");
  }
  return Status::ok();
}

std::vector<std::string> preset_names() { return {"v41-flash", "v41-flash-mini", "tiny"}; }

Result<EngramLayout> make_preset_layout(const std::string& name, int64_t table_size_bytes,
                                        RowFormat format) {
  EngramLayout l;
  l.name = name;
  l.format = format;
  if (name == "v41-flash" || name == "v41-flash-mini") {
    l.layer_ids = {1, 14};
    l.max_ngram = 4;
    l.heads_per_order = 8;
    l.d = 256;
    int64_t rows_per_head = 16'000'000;
    if (name == "v41-flash-mini") {
      if (table_size_bytes <= 0)
        return Status(Code::kInvalidArgument, "table size must be positive, got " + std::to_string(table_size_bytes));
      const int64_t per_head_bytes = static_cast<int64_t>(l.layer_ids.size()) * 24 * l.row_stride_bytes();
      rows_per_head = table_size_bytes / per_head_bytes;
      if (rows_per_head < 64)
        return Status(Code::kInvalidArgument,
                      "table size " + std::to_string(table_size_bytes) + " B is too small for v41-flash-mini (need at least " +
                          std::to_string(64 * per_head_bytes) + " B: 64 rows per head)");
    }
    l.vocab_size_per_order = {rows_per_head, rows_per_head, rows_per_head};
  } else if (name == "tiny") {
    l.layer_ids = {1};
    l.max_ngram = 3;
    l.heads_per_order = 2;
    l.d = 64;
    l.vocab_size_per_order = {1000, 1000};
  } else {
    std::string names;
    for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    return Status(Code::kInvalidArgument, "unknown layout preset '" + name + "' (expected one of: " + names + ")");
  }
  ENGRAM_RETURN_IF_ERROR(l.finalize());
  return l;
}

std::string layout_to_json(const EngramLayout& l) {
  const nlohmann::json j = {{"name", l.name},
                            {"layer_ids", l.layer_ids},
                            {"max_ngram", l.max_ngram},
                            {"heads_per_order", l.heads_per_order},
                            {"vocab_size_per_order", l.vocab_size_per_order},
                            {"d", l.d},
                            {"format", row_format_name(l.format)},
                            {"head_rows", l.head_rows}};
  return j.dump();
}

Result<EngramLayout> layout_from_json(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status(Code::kInvalidArgument, "layout: not a JSON object");
  try {
    EngramLayout l;
    l.name = j.at("name").get<std::string>();
    l.layer_ids = j.at("layer_ids").get<std::vector<int>>();
    l.max_ngram = j.at("max_ngram").get<int>();
    l.heads_per_order = j.at("heads_per_order").get<int>();
    l.vocab_size_per_order = j.at("vocab_size_per_order").get<std::vector<int64_t>>();
    l.d = j.at("d").get<int>();
    ENGRAM_ASSIGN_OR_RETURN(l.format, parse_row_format(j.at("format").get<std::string>()));
    ENGRAM_RETURN_IF_ERROR(l.finalize().with_context("layout"));
    if (l.head_rows != j.at("head_rows").get<std::vector<std::vector<int64_t>>>())
      return Status(Code::kInvalidArgument, "layout: the given head rows differ from the prime walk of this build");
    return l;
  } catch (const nlohmann::json::exception& e) {
    return Status(Code::kInvalidArgument, std::string("layout: ") + e.what());
  }
}

}  // namespace engram

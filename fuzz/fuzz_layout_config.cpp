// libFuzzer target: the layout and placement configuration parsers -- what a user types after
// --placement, --layout/--row-format and --table-size, and the fields of a custom EngramLayout.
//
// Input: one mode byte, then the text or bytes of that mode.
//   0  parse_placement(text); an accepted policy's canonical text parses back to the same policy, and
//      resolve_placement against fixed node lists (0..3 with memory, 0..1 allowed) either resolves to
//      nodes in that set or refuses with kInvalidArgument
//   1  parse_row_format(text)
//   2  "<preset>\n<size>\n<format>": make_preset_layout with the size parsed by parse_size_bytes; an
//      accepted layout's byte counts are consistent (rows > 0, table bytes = rows x stride)
//   3  a custom EngramLayout from bytes (layers, max_ngram, heads, vocab sizes, d, format) through
//      finalize(); to keep one input under a second the prime walk is capped at 4096 heads in all
// Errors must be kInvalidArgument; nothing may throw, overflow or read out of bounds.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/units.hpp"
#include "engram/layout.hpp"
#include "host/placement.hpp"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}

struct Reader {
  const uint8_t* p;
  size_t n;
  template <typename T>
  T get() {
    T v{};
    const size_t k = std::min(n, sizeof v);
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
};

void check_layout(const engram::EngramLayout& l) {
  check(l.n_layers() >= 1 && l.d > 0 && l.d % 32 == 0);
  for (int i = 0; i < l.n_layers(); ++i) {
    check(l.rows(i) > 0);
    check(l.table_bytes(i) == l.rows(i) * l.row_stride_bytes());
    check(static_cast<int>(l.head_rows[static_cast<size_t>(i)].size()) == l.heads());
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 4;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  using engram::Code;
  if (mode == 0) {
    auto p = engram::host::parse_placement(text);
    if (!p.is_ok()) {
      check(p.status().code() == Code::kInvalidArgument);
      return 0;
    }
    auto again = engram::host::parse_placement(p->to_string());
    check(again.is_ok() && *again == *p);
    if (p->kind == engram::host::PlacementKind::kNone || p->kind == engram::host::PlacementKind::kLocal) return 0;
    auto r = engram::host::resolve_placement(*p, {0, 1, 2, 3}, {0, 1});
    if (!r.is_ok()) {
      check(r.status().code() == Code::kInvalidArgument || r.status().code() == Code::kUnsupported);
      return 0;
    }
    for (int n : r->nodes) check(n == 0 || n == 1);
  } else if (mode == 1) {
    auto f = engram::parse_row_format(text);
    if (!f.is_ok()) check(f.status().code() == Code::kInvalidArgument);
  } else if (mode == 2) {
    const size_t a = text.find('\n');
    const size_t b = a == std::string::npos ? std::string::npos : text.find('\n', a + 1);
    if (b == std::string::npos) return 0;
    auto bytes = engram::parse_size_bytes(text.substr(a + 1, b - a - 1));
    auto fmt = engram::parse_row_format(text.substr(b + 1));
    if (!bytes.is_ok() || !fmt.is_ok()) return 0;
    // The preset's prime walk is linear in its rows per head: keep sizes within 64 GiB here.
    if (*bytes > (int64_t{64} << 30)) return 0;
    auto l = engram::make_preset_layout(text.substr(0, a), *bytes, *fmt);
    if (!l.is_ok()) {
      check(l.status().code() == Code::kInvalidArgument);
      return 0;
    }
    check_layout(*l);
  } else {
    Reader r{data + 1, size - 1};
    engram::EngramLayout l;
    l.name = "custom";
    const int n_layers = r.get<uint8_t>() % 9;
    for (int i = 0; i < n_layers; ++i) l.layer_ids.push_back(r.get<int8_t>());
    l.max_ngram = r.get<int8_t>();
    l.heads_per_order = r.get<int16_t>();
    const int n_vocab = r.get<uint8_t>() % 20;
    for (int i = 0; i < n_vocab; ++i) l.vocab_size_per_order.push_back(r.get<int64_t>() >> (r.get<uint8_t>() % 64));
    l.d = r.get<int32_t>();
    l.format = (r.get<uint8_t>() & 1) ? engram::RowFormat::kSplit : engram::RowFormat::kFused;
    const int64_t heads = static_cast<int64_t>(std::max(0, l.max_ngram - 1)) * std::max<int64_t>(0, l.heads_per_order);
    if (heads * std::max(1, n_layers) > 4096) return 0;
    engram::Status s = l.finalize();
    if (!s.is_ok()) {
      check(s.code() == Code::kInvalidArgument);
      return 0;
    }
    check_layout(l);
  }
  return 0;
}

// libFuzzer target: the token-file and compression-table readers (host/token_io.hpp) on untrusted
// bytes, through their pure forms parse_token_file / parse_compression_table.
//
// Input: one mode byte (bit 0: token file or compression table), a little-endian u16 sidecar length,
// the sidecar's JSON text, then the uint32 data. Promises checked on an accepted file (a broken one
// aborts, which libFuzzer reports): every id below vocab_size, documents contiguous and covering
// every token; a compression table validates and its V' is at most its size. Errors must be
// kInvalidArgument (the sidecar claims something the data contradicts, or is malformed): no throw,
// no overflow (UBSan), no read past the input (ASan).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "host/token_io.hpp"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const bool table = (data[0] & 1) != 0;
  const size_t side_len = std::min<size_t>(size - 3, static_cast<size_t>(data[1] | (data[2] << 8)));
  const std::string_view sidecar(reinterpret_cast<const char*>(data + 3), side_len);
  const std::string_view bytes(reinterpret_cast<const char*>(data + 3 + side_len), size - 3 - side_len);
  if (!table) {
    auto r = engram::parse_token_file("fuzz.tokens", bytes, sidecar);
    if (!r.is_ok()) {
      check(r.status().code() == engram::Code::kInvalidArgument);
      return 0;
    }
    check(!r->ids.empty() && r->vocab_size >= 1);
    for (uint32_t id : r->ids) check(id < r->vocab_size);
    int64_t next = 0;
    for (const auto& d : r->documents) {
      check(d.first_token == next && d.token_count >= 0);
      next += d.token_count;
    }
    check(next == static_cast<int64_t>(r->ids.size()));
  } else {
    auto r = engram::parse_compression_table("fuzz.compress", bytes, sidecar);
    if (!r.is_ok()) {
      check(r.status().code() == engram::Code::kInvalidArgument);
      return 0;
    }
    check(r->validate().is_ok());
    check(r->compressed_vocab >= 1 && r->compressed_vocab <= r->vocab_size());
  }
  return 0;
}

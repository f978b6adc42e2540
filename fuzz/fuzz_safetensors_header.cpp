// libFuzzer target: the safetensors header parser and the engram checkpoint decoder on untrusted bytes.
//
// Input: one mode byte, then the bytes of a file. Mode bit 0 clear: those bytes are the whole file
// (file size = their count), so truncation and data-section checks are reached. Bit 0 set: they are
// only the start of a 1 TiB file, so headers whose tensors describe large tables (any real engram
// checkpoint) get past the size checks and exercise the metadata decoder and the prime walk.
// Besides "no crash, no out-of-bounds read" (ASan/UBSan), an accepted header must satisfy the
// parser's promises; a broken promise aborts, which libFuzzer reports as a crash.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "host/checkpoint.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_header(const engram::host::SafetensorsHeader& h, uint64_t file_size, size_t prefix) {
  check(h.header_bytes > 0 && h.header_bytes <= engram::host::kSafetensorsMaxHeaderBytes);
  check(h.data_offset == 8 + h.header_bytes && h.data_offset <= prefix);
  check(h.data_offset + h.data_bytes == file_size);
  uint64_t reach = 0;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& t = h.tensors[i];
    check(t.begin <= t.end && t.end <= h.data_bytes);
    if (i > 0) check(h.tensors[i - 1].begin <= t.begin);
    if (t.begin != t.end) {
      check(t.begin >= reach);  // no overlap
      reach = t.end;
    }
    const int elem = engram::host::safetensors_dtype_bytes(t.dtype);
    check(elem > 0);
    // Element bytes x every dimension, held at most one past the tensor's byte size (so it cannot overflow) and
    // still multiplied by every later dimension: a zero dimension anywhere makes an empty tensor.
    const unsigned __int128 cap = static_cast<unsigned __int128>(t.size_bytes()) + 1;
    unsigned __int128 n = static_cast<unsigned>(elem);
    for (int64_t dim : t.shape) {
      check(dim >= 0);
      n *= static_cast<uint64_t>(dim);
      if (n > cap) n = cap;
    }
    check(n == t.size_bytes());
    check(h.find(t.name) != nullptr);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool prefix_only = data[0] & 1;
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  const uint64_t file_size = prefix_only ? bytes.size() + (uint64_t{1} << 40) : bytes.size();

  auto length = engram::host::parse_safetensors_header_length(bytes, file_size);
  auto header = engram::host::parse_safetensors_header(bytes, file_size);
  check(length.is_ok() || !header.is_ok());  // a bad length is never a good header
  if (!header.is_ok()) {
    check(header.status().code() == engram::Code::kInvalidArgument);
    return 0;
  }
  check(*length == header->header_bytes);
  check_header(*header, file_size, bytes.size());

  auto info = engram::host::decode_checkpoint_header(*header);
  if (!info.is_ok()) {
    check(info.status().code() == engram::Code::kInvalidArgument);
    return 0;
  }
  // An accepted checkpoint names a tensor pair of the right size for every layer of its layout.
  const engram::EngramLayout& l = info->layout;
  for (int i = 0; i < l.n_layers(); ++i) {
    const auto* p = header->find(engram::host::checkpoint_payload_name(l.layer_ids[static_cast<size_t>(i)]));
    const auto* s = header->find(engram::host::checkpoint_scales_name(l.layer_ids[static_cast<size_t>(i)]));
    check(p && s);
    check(p->size_bytes() == static_cast<uint64_t>(l.rows(i) * l.d));
    check(s->size_bytes() == static_cast<uint64_t>(l.rows(i) * (l.d / 32)));
  }
  return 0;
}

// safetensors files (https://github.com/huggingface/safetensors): the header parser every reader of
// the project shares (engram checkpoints, Hugging Face model shards) and the header encoder of the
// writers.
//
// A file is an 8-byte little-endian header length N, N bytes of a JSON object (the header), then the
// data section. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (byte offsets relative to the data section) and may hold "__metadata__": {string: string}.
//
// Every byte of a file is untrusted: truncation, a bad header length (0, past the end of the file,
// over 100 MB), a header that is not a JSON object, wrong field types, unknown dtypes, offsets out of
// range, overlapping or disagreeing with the shape give kInvalidArgument naming the field. Nothing is
// ever read out of bounds, and no exception leaves these functions.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engram/status.hpp"

namespace engram::sys {
class File;
}

namespace engram::host {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;  // 100 MB, as the reference reader
inline constexpr size_t kSafetensorsDataAlign = 4096;  // writers start the data section on this boundary

// Bytes per element of a safetensors dtype name ("F8_E4M3", "F8_E8M0", "U8" -> 1, "BF16" -> 2,
// "F32" -> 4), or 0 for a name this reader does not know.
int safetensors_dtype_bytes(std::string_view dtype);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // e.g. "F8_E4M3", "U8"
  std::vector<int64_t> shape;   // dimensions, each >= 0
  uint64_t begin = 0;           // data_offsets[0], bytes from the start of the data section
  uint64_t end = 0;             // data_offsets[1], exclusive; end - begin == prod(shape) * dtype bytes
  uint64_t size_bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N: JSON bytes after the 8-byte length
  uint64_t data_offset = 0;   // 8 + N: file offset of the data section
  uint64_t data_bytes = 0;    // file size - data_offset
  std::vector<SafetensorsTensor> tensors;     // sorted by begin (then name)
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
  // The tensor called `name`, or nullptr.
  const SafetensorsTensor* find(std::string_view name) const;
};

// Validates the 8-byte little-endian header length at the start of a file of `file_size` bytes.
// `first_bytes` holds the file's first bytes (at least 8 of them unless the file is shorter).
// kInvalidArgument: file shorter than 8 bytes, N == 0, N > 100 MB, 8 + N > file_size.
Result<uint64_t> parse_safetensors_header_length(std::span<const uint8_t> first_bytes, uint64_t file_size);

// Parses and validates a safetensors header. `bytes` is a prefix of the file (the first 8 + N bytes or
// more; fewer is an error, never a read past the span) and `file_size` the whole file's size, against
// which data_offsets are checked. Pure (no I/O), so tests and the fuzzer call it directly.
// kInvalidArgument with a message naming the field for every malformation listed above; tensors with
// unknown dtypes, negative or non-integer dimensions, begin > end, end past the data section, a byte
// range that disagrees with prod(shape) * dtype bytes, or that overlaps another tensor's range; a
// non-string __metadata__ value; JSON nested deeper than 64 levels. Holes between tensors and bytes
// after the last tensor are accepted. kOutOfMemory if a header allocation fails.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size);

// Reads and parses the header of the open file `f` (two preads: the length, then the header).
// Errors as parse_safetensors_header, plus kIo from reading.
Result<SafetensorsHeader> read_safetensors_header(const sys::File& f);

// The bytes before the data section of a file whose header is `json_text`: the 8-byte length, then
// the text padded with spaces so that the data section starts on a kSafetensorsDataAlign boundary.
// kInvalidArgument when the padded header exceeds the 100 MB limit.
Result<std::vector<uint8_t>> encode_safetensors_header(std::string json_text);

}  // namespace engram::host

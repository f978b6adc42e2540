// safetensors header parsing and encoding (see safetensors.hpp for the contract).
//
// Parsing is in two layers, each pure so tests and the fuzzer reach them without files: the 8-byte
// header length (checked against the file size and the 100 MB cap before anything is allocated),
// then the JSON header, parsed by nlohmann-json inside a try/catch after a nesting-depth guard. Every
// tensor's offsets are checked against the data section and the shape before the header is
// returned, so a reader that trusts a parsed header can never read past the end of the file.
#include "host/safetensors.hpp"

#include <algorithm>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>

#include "host/json_text.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

using json = nlohmann::json;

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- safetensors tensor entries ----------------------------------------------------------------

Result<SafetensorsTensor> parse_tensor_entry(const std::string& name, const json& entry, uint64_t data_bytes) {
  const std::string what = "tensor '" + printable(name) + "'";
  if (name.empty()) return invalid("a tensor has an empty name");
  if (!entry.is_object())
    return invalid(what + ": expected an object with dtype, shape and data_offsets, got " + a_type(entry));
  SafetensorsTensor t;
  t.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return invalid(what + ": field dtype is missing");
  if (!dtype_it->is_string())
    return invalid(what + ": field dtype is " + a_type(*dtype_it) + ", expected a string");
  t.dtype = dtype_it->get<std::string>();
  const int elem_bytes = safetensors_dtype_bytes(t.dtype);
  if (elem_bytes == 0) return invalid(what + ": dtype '" + printable(t.dtype) + "' is not a safetensors dtype");

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return invalid(what + ": field shape is missing");
  if (!shape_it->is_array())
    return invalid(what + ": field shape is " + a_type(*shape_it) + ", expected an array");
  unsigned __int128 elements = 1;
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const json& dim = (*shape_it)[i];
    if (!dim.is_number_unsigned())
      return invalid(what + ": shape[" + std::to_string(i) + "] is not a non-negative integer");
    const uint64_t v = dim.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalid(what + ": shape[" + std::to_string(i) + "] = " + std::to_string(v) + " is too large");
    t.shape.push_back(static_cast<int64_t>(v));
    elements *= v;
    if (elements > std::numeric_limits<uint64_t>::max())  // saturate: the byte check below fails
      elements = static_cast<unsigned __int128>(std::numeric_limits<uint64_t>::max()) + 1;
  }

  const auto off_it = entry.find("data_offsets");
  if (off_it == entry.end()) return invalid(what + ": field data_offsets is missing");
  if (!off_it->is_array() || off_it->size() != 2)
    return invalid(what + ": field data_offsets must be an array [begin, end]");
  for (int i = 0; i < 2; ++i)
    if (!(*off_it)[static_cast<size_t>(i)].is_number_unsigned())
      return invalid(what + ": data_offsets[" + std::to_string(i) + "] is not a non-negative integer");
  t.begin = (*off_it)[size_t{0}].get<uint64_t>();
  t.end = (*off_it)[size_t{1}].get<uint64_t>();
  if (t.begin > t.end)
    return invalid(what + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                   "] has begin > end");
  if (t.end > data_bytes)
    return invalid(what + ": data_offsets end " + std::to_string(t.end) + " is past the end of the data section (" +
                   std::to_string(data_bytes) + " bytes; truncated file?)");
  const unsigned __int128 want = elements * static_cast<unsigned>(elem_bytes);
  if (want != t.end - t.begin)
    return invalid(what + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] hold " +
                   std::to_string(t.end - t.begin) + " bytes but dtype " + t.dtype + " shape " +
                   list_text(t.shape) + " needs " +
                   (want > std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64")
                                                                : std::to_string(static_cast<uint64_t>(want))));
  return t;
}

Result<SafetensorsHeader> parse_header_impl(std::span<const uint8_t> bytes, uint64_t file_size) {
  ENGRAM_ASSIGN_OR_RETURN(const uint64_t n, parse_safetensors_header_length(bytes, file_size));
  if (bytes.size() - 8 < n)
    return invalid("header truncated: " + std::to_string(bytes.size() - 8) + " of its " + std::to_string(n) +
                   " bytes are present");
  SafetensorsHeader h;
  h.header_bytes = n;
  h.data_offset = 8 + n;
  h.data_bytes = file_size - h.data_offset;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (!json_depth_within(text, kMaxJsonDepth))
    return invalid("header: JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");

  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return invalid("header is not valid JSON (error at byte " + std::to_string(e.byte) + " of " + std::to_string(n) +
                   "): " + printable(e.what()));
  }
  if (!j.is_object()) return invalid("header is " + a_type(j) + ", expected a JSON object");

  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        return invalid("__metadata__ is " + a_type(value) + ", expected an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          return invalid("__metadata__." + printable(mk) + " is " + a_type(mv) + ", expected a string");
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    ENGRAM_ASSIGN_OR_RETURN(SafetensorsTensor t, parse_tensor_entry(key, value, h.data_bytes));
    h.tensors.push_back(std::move(t));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.name < b.name;
  });
  // Sorted by begin, a non-empty range overlaps an earlier one exactly when it starts before the
  // largest end seen so far. Empty tensors occupy no bytes and overlap nothing.
  const SafetensorsTensor* reach = nullptr;
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin == t.end) continue;
    if (reach && t.begin < reach->end)
      return invalid("tensor '" + printable(t.name) + "': data_offsets [" + std::to_string(t.begin) + ", " +
                     std::to_string(t.end) + "] overlap those of tensor '" + printable(reach->name) + "' [" +
                     std::to_string(reach->begin) + ", " + std::to_string(reach->end) + "]");
    if (!reach || t.end > reach->end) reach = &t;
  }
  return h;
}


}  // namespace

int safetensors_dtype_bytes(std::string_view dtype) {
  static constexpr std::pair<std::string_view, int> kTypes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},     {"F64", 8},
      {"I64", 8},  {"U64", 8}};
  for (const auto& [name, bytes] : kTypes)
    if (name == dtype) return bytes;
  return 0;
}

const SafetensorsTensor* SafetensorsHeader::find(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Result<uint64_t> parse_safetensors_header_length(std::span<const uint8_t> first_bytes, uint64_t file_size) {
  if (file_size < 8)
    return invalid("file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length (truncated)");
  if (first_bytes.size() < 8)
    return invalid("header length: only " + std::to_string(first_bytes.size()) + " of its 8 bytes are present");
  const uint64_t n = load_le64(first_bytes.data());
  if (n == 0) return invalid("header length is 0 (expected the byte length of the JSON header)");
  if (n > kSafetensorsMaxHeaderBytes)
    return invalid("header length " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(kSafetensorsMaxHeaderBytes) + " bytes (100 MB)");
  if (n > file_size - 8)
    return invalid("header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes; truncated, or not a safetensors file)");
  return n;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size) {
  try {
    return parse_header_impl(bytes, file_size);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "parsing a safetensors header of " + std::to_string(bytes.size()) + " bytes");
  } catch (const std::exception& e) {
    return invalid("header: " + printable(e.what()));
  }
}

Result<SafetensorsHeader> read_safetensors_header(const sys::File& f) {
  ENGRAM_ASSIGN_OR_RETURN(const int64_t size, sys::file_size_bytes(f));
  const uint64_t file_size = static_cast<uint64_t>(size);
  uint8_t first[8] = {};
  const size_t first_len = static_cast<size_t>(std::min<uint64_t>(8, file_size));
  ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, first, first_len, 0));
  ENGRAM_ASSIGN_OR_RETURN(const uint64_t n, parse_safetensors_header_length({first, first_len}, file_size));
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(8 + n);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "header buffer of " + std::to_string(n) + " bytes");
  }
  ENGRAM_RETURN_IF_ERROR(sys::pread_full(f, bytes.data(), bytes.size(), 0));
  return parse_safetensors_header(bytes, file_size);
}

Result<std::vector<uint8_t>> encode_safetensors_header(std::string text) {
  text.append((kSafetensorsDataAlign - (8 + text.size()) % kSafetensorsDataAlign) % kSafetensorsDataAlign, ' ');
  if (text.size() > kSafetensorsMaxHeaderBytes)
    return invalid("header of " + std::to_string(text.size()) + " bytes exceeds the safetensors limit");
  std::vector<uint8_t> head(8 + text.size());
  for (int i = 0; i < 8; ++i)
    head[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::copy(text.begin(), text.end(), head.begin() + 8);
  return head;
}

}  // namespace engram::host

// Checkpoint I/O: Engram tables stored as safetensors files, read into (and written from) host tables.
//
// File format (safetensors, https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of a JSON object (the header), then the data section. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte offsets relative to the data
// section) and may hold "__metadata__": {string: string}. engram-offload stores, per Engram layer with
// model layer id L:
//   "engram.layer<L>.payload"  dtype F8_E4M3  shape [rows, d]     FP8 E4M3 values
//   "engram.layer<L>.scales"   dtype U8       shape [rows, d/32]  ue8m0 scale codes
// i.e. always the split layout (as vLLM stores it); loading converts to the table's in-memory layout
// (fused records or split arrays). The layout travels in __metadata__ as JSON-encoded strings:
// format_version ("1"), layout_name, layer_ids, max_ngram, heads_per_order, vocab_size_per_order, d,
// head_rows, and for synthetic tables generator and seed. Readers rebuild the EngramLayout from it and
// check that the prime walk gives the stored head_rows.
//
// Every byte of the file is untrusted: truncation, a bad header length (0, past the end of the file,
// over 100 MB), a header that is not a JSON object, missing tensors, wrong dtype or shape, offsets out
// of range, overlapping or disagreeing with the shape give kInvalidArgument naming the file and the
// field; read failures give kIo. Nothing is ever read out of bounds.
//
// Loading reads in chunks (64 MiB by default) with several threads and drops what it has read from the
// page cache (posix_fadvise DONTNEED) so a 190 GB table does not leave a second copy in memory.
// Writing goes to a temporary name in the target directory which is renamed over the target only
// when complete and fsync'ed: an error never leaves a half-written checkpoint under the target name.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"

namespace engram::host {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;  // 100 MB, as the reference reader
inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr int64_t kCheckpointDefaultChunkBytes = int64_t{64} << 20;  // 64 MiB

// ---- safetensors header ------------------------------------------------------------------------

// Bytes per element of a safetensors dtype name ("F8_E4M3" -> 1, "BF16" -> 2, "F32" -> 4), or 0 for a
// name the format does not define.
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

// ---- engram checkpoints ------------------------------------------------------------------------

std::string checkpoint_payload_name(int layer_id);  // "engram.layer<L>.payload"
std::string checkpoint_scales_name(int layer_id);   // "engram.layer<L>.scales"

struct CheckpointInfo {
  std::string path;
  int64_t file_bytes = 0;
  int format_version = 0;
  SafetensorsHeader header;
  EngramLayout layout;                // rebuilt from __metadata__ and finalized; format kSplit (as stored)
  std::optional<std::string> generator;  // synthetic tables: the row generator ("synth_row")
  std::optional<uint64_t> seed;          // synthetic tables: its seed
};

// Interprets a parsed header as an engram checkpoint (pure; the fuzzer calls it too): reads the layout
// metadata, checks the payload/scales tensors of every layer (dtype, shape [rows, d] / [rows, d/32],
// rows = sum of head_rows), rebuilds the layout and checks the prime walk reproduces head_rows.
// kInvalidArgument naming the field ("__metadata__.d", "tensor engram.layer1.scales: dtype ...").
Result<CheckpointInfo> decode_checkpoint_header(const SafetensorsHeader& header);

// Opens `path`, reads and validates its header, returns what decode_checkpoint_header gives.
// kNotFound / kPermission / kIo from opening and reading; kInvalidArgument for a malformed file. Every
// message starts with "checkpoint <path>: ".
Result<CheckpointInfo> read_checkpoint_info(const std::string& path);

// The layout a checkpoint holds, with the in-memory row layout set to `format`: `engram run
// --checkpoint FILE` builds its table from this. Errors as read_checkpoint_info.
Result<EngramLayout> read_checkpoint_layout(const std::string& path, RowFormat format);

// OK when `file` and `wanted` describe the same tables (layer_ids, max_ngram, heads_per_order,
// vocab_size_per_order, d, head_rows; names and in-memory row layouts may differ); else
// kInvalidArgument "layout mismatch: d is 64 in the file, 256 in the requested layout".
Status check_layout_matches(const EngramLayout& file, const EngramLayout& wanted);

struct CheckpointProgress {
  const char* phase = "";     // "load" or "write"
  int64_t done_bytes = 0;     // table bytes read or written so far
  int64_t total_bytes = 0;    // table bytes in all (payload + scales of every layer)
  double elapsed_s = 0;       // since the transfer started
};
using CheckpointProgressFn = std::function<void(const CheckpointProgress&)>;

// kAuto: a progress line (bytes, GB/s, ETA, rewritten in place) on stderr when stderr is a terminal,
// nothing otherwise. kOn / kOff force it.
enum class ProgressDisplay { kAuto, kOn, kOff };

struct LoadOptions {
  int threads = 0;                                   // reader threads; 0 = min(8, hardware threads)
  int64_t chunk_bytes = kCheckpointDefaultChunkBytes;  // bytes per pread (rounded to whole rows)
  bool drop_page_cache = true;                       // posix_fadvise DONTNEED on what has been read
  ProgressDisplay display = ProgressDisplay::kAuto;
  // Called on the calling thread about every 100 ms and once at the end (done == total).
  CheckpointProgressFn on_progress;
};

struct WriteOptions {
  bool overwrite = false;                            // replace an existing file at the target path
  int threads = 0;                                   // row generator/writer threads; 0 = min(8, hw)
  int64_t chunk_bytes = kCheckpointDefaultChunkBytes;  // bytes per pwrite (rounded to whole rows)
  bool drop_page_cache = true;                       // write back and drop each chunk as it goes
  ProgressDisplay display = ProgressDisplay::kAuto;
  CheckpointProgressFn on_progress;                  // as in LoadOptions
  // Polled before each chunk (from the writer threads): true stops the write, removes the temp file
  // and returns kIo "... cancelled ..." (sys_error EINTR). The CLI passes sys::stop_requested.
  std::function<bool()> cancelled;
};

// Reads the checkpoint at `path` into `spans` (one per Engram layer of `layout`, in layer order, each
// sized for layout.rows(i) rows of the layout's d and row format). Fused records get their padding
// zeroed. The file's layout must match `layout` (check_layout_matches). Pages of the spans are
// first touched by the reader threads: place them before calling when placement matters.
// Errors: as read_checkpoint_info; kInvalidArgument for a layout mismatch or spans that do not fit the
// layout; kIo when a read fails or comes up short. On error the spans hold partial data.
Status load_checkpoint(const std::string& path, const EngramLayout& layout, std::span<const TableSpan> spans,
                       const LoadOptions& options = {});
// The same into every layer of `table` (whose layout gives the expected tables and row format).
Status load_checkpoint(const std::string& path, HostTable& table, const LoadOptions& options = {});

// Writes a synthetic checkpoint of `layout` whose row r of layer index i is synth_row(seed, i, r, ...),
// generated chunk by chunk (never the whole table in memory). `layout` must be finalized.
// Errors: kInvalidArgument when the target exists and !overwrite (nothing is written) or the layout is
// not finalized; kNotFound when the directory does not exist; kNoSpace / kIo / kPermission from the
// file system (the temporary file is removed, the target is untouched).
Status write_synthetic_checkpoint(const std::string& path, const EngramLayout& layout, uint64_t seed,
                                  const WriteOptions& options = {});

// Writes the rows of `table` (either in-memory layout) as a checkpoint. Errors as above.
Status write_checkpoint(const std::string& path, const HostTable& table, const WriteOptions& options = {});

}  // namespace engram::host

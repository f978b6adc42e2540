// Checkpoint I/O: Engram tables stored as safetensors files, read into (and written from) host tables.
//
// File format: one safetensors file (host/safetensors.hpp). engram-offload stores, per Engram layer
// with model layer id L:
//   "engram.layer<L>.payload"  dtype F8_E4M3  shape [rows, d]     FP8 E4M3 values
//   "engram.layer<L>.scales"   dtype U8       shape [rows, d/32]  ue8m0 scale codes
// i.e. always the split layout (as vLLM stores it); loading converts to the table's in-memory layout
// (fused records or split arrays). The layout travels in __metadata__ as JSON-encoded strings:
// format_version ("1"), layout_name, layer_ids, max_ngram, heads_per_order, vocab_size_per_order, d,
// head_rows, and for synthetic tables generator and seed. Readers rebuild the EngramLayout from it and
// check that the prime walk gives the stored head_rows.
//
// Every byte of the file is untrusted: a malformed safetensors header (see safetensors.hpp), missing
// tensors, wrong dtype or shape give kInvalidArgument naming the file and the field; read failures
// give kIo. Nothing is ever read out of bounds.
//
// Loading streams rows with host/row_load (chunks of 64 MiB by default, several threads, page cache
// dropped behind the readers) so a 190 GB table does not leave a second copy in memory. Writing goes
// to a temporary name in the target directory which is renamed over the target only when complete
// and fsync'ed: an error never leaves a half-written checkpoint under the target name.
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
#include "host/row_load.hpp"
#include "host/safetensors.hpp"
#include "host/transfer.hpp"

namespace engram::host {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr int64_t kCheckpointDefaultChunkBytes = kRowLoadDefaultChunkBytes;  // 64 MiB

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

// Progress of a checkpoint load or write (phase "load" / "write"; bytes of table rows).
using CheckpointProgress = TransferProgress;
using CheckpointProgressFn = TransferProgressFn;

struct LoadOptions {
  int threads = 0;                                   // reader threads; 0 = min(8, CPUs this process may run on)
  int64_t chunk_bytes = kCheckpointDefaultChunkBytes;  // bytes per pread (rounded to whole rows)
  bool drop_page_cache = true;                       // posix_fadvise DONTNEED on what has been read
  // Called on the calling thread about every 100 ms and once at the end (done == total). The loader prints
  // nothing; a caller that wants the terminal line passes report::with_progress_line here.
  CheckpointProgressFn on_progress;
};

struct WriteOptions {
  bool overwrite = false;                            // replace an existing file at the target path
  int threads = 0;                                   // row generator/writer threads; 0 = min(8, usable CPUs)
  int64_t chunk_bytes = kCheckpointDefaultChunkBytes;  // bytes per pwrite (rounded to whole rows)
  bool drop_page_cache = true;                       // write back and drop each chunk as it goes
  CheckpointProgressFn on_progress;                  // as in LoadOptions
  // Polled before each chunk (from the writer threads): true stops the write, removes the temp file
  // and returns kIo "... cancelled ..." (sys_error EINTR). The CLI passes sys::stop_requested.
  std::function<bool()> cancelled;
};

// Reads the checkpoint at `path` into `spans` (one per Engram layer of `layout`, in layer order, each
// sized for layout.rows(i) rows of the layout's d and row format, or the span of a TP slice: then only
// the slice's row range of each tensor is read). Fused records get their padding
// zeroed. The file's layout must match `layout` (check_layout_matches). Pages of the spans are
// first touched by the reader threads: place them before calling when placement matters.
// Errors: as read_checkpoint_info; kInvalidArgument for a layout mismatch or spans that do not fit the
// layout; kIo when a read fails or comes up short. On error the spans hold partial data.
Status load_checkpoint(const std::string& path, const EngramLayout& layout, std::span<const TableSpan> spans,
                       const LoadOptions& options = {});
// The same into every layer of `table` (whose layout gives the expected tables and row format), every replica.
Status load_checkpoint(const std::string& path, HostTable& table, const LoadOptions& options = {});

// Writes a synthetic checkpoint of `layout` whose row r of layer index i is synth_row(seed, i, r, ...),
// generated chunk by chunk (never the whole table in memory). `layout` must be finalized.
// Errors: kInvalidArgument when the target exists and !overwrite (nothing is written) or the layout is
// not finalized; kNotFound when the directory does not exist; kNoSpace / kIo / kPermission from the
// file system (the temporary file is removed, the target is untouched).
Status write_synthetic_checkpoint(const std::string& path, const EngramLayout& layout, uint64_t seed,
                                  const WriteOptions& options = {});

// Writes the rows of `table` (either in-memory layout) as a checkpoint. Errors as above; kInvalidArgument
// for a TP slice (it does not hold whole layers).
Status write_checkpoint(const std::string& path, const HostTable& table, const WriteOptions& options = {});

}  // namespace engram::host

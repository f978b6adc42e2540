// Streaming Engram rows from files into table spans: the loader behind engram checkpoints and
// Hugging Face model directories alike.
//
// Both formats store one Engram layer as two row-major tensors somewhere in a file: the FP8 payload
// [rows, d] and the ue8m0 scales [rows, d/32] (dtype U8 in engram checkpoints, F8_E8M0 in model
// shards; the bytes mean the same). A RowSource says where row 0 of each begins; the loader reads
// the first `layout.rows(i)` rows of layer i (rows after them are never read) into the layer's span,
// or, for the span of a tensor-parallel slice (TableSpan::slice), only the slice's rows
// [row_begin, row_end) of the tensor (the other ranks' rows are never read):
//  - split spans: each chunk of a tensor is pread straight into its array (no copy, no buffer);
//  - fused spans: per chunk of rows, the scales of the chunk are read in one pread and the payload in
//    1 MiB pieces into a per-thread bounce buffer that stays in the core's cache; each record is then
//    written once, whole (payload, scales, zeroed padding).
// Memory besides the table is bounded by threads x (1 MiB + chunk/(d+d/32) x d/32), never a tensor.
// Each chunk is dropped from the page cache behind the reader (posix_fadvise DONTNEED) unless asked
// not to, so loading a 200 GB table does not leave a second copy of it in memory. Reader threads may
// be pinned to CPUs (those of the node holding the table) so the pages they first touch land there
// under a local policy and the copies stay on the node.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engram/layout.hpp"
#include "engram/status.hpp"
#include "engram/table.hpp"
#include "host/transfer.hpp"

namespace engram::sys {
class File;
}

namespace engram::host {

inline constexpr int64_t kRowLoadDefaultChunkBytes = int64_t{64} << 20;  // 64 MiB

// Where one Engram layer's rows are: two open files (may be the same) and the absolute file offset of
// row 0 of each tensor. The files must hold at least rows x d and rows x d/32 bytes from there.
struct RowSource {
  const sys::File* payload_file = nullptr;
  int64_t payload_offset = 0;
  const sys::File* scales_file = nullptr;
  int64_t scales_offset = 0;
};

struct RowLoadOptions {
  int threads = 0;                                   // reader threads; 0 = min(thread_cap, CPUs)
  int thread_cap = 8;                                // bound of the automatic thread count
  int64_t chunk_bytes = kRowLoadDefaultChunkBytes;   // bytes of rows per work item (whole rows)
  bool drop_page_cache = true;                       // posix_fadvise DONTNEED on what has been read
  std::vector<int> reader_cpus;                      // pin the readers here; empty = not pinned
  TransferProgressFn on_progress;                    // phase "load", on the calling thread
};

// kInvalidArgument unless `spans` has one span per Engram layer of `layout`, each with the layer's
// rows (a TP slice: the slice's rows of that layer), d, row format, stride and non-null arrays (a
// slice without rows has none).
Status check_table_spans(const EngramLayout& layout, std::span<const TableSpan> spans);

// Reads rows [0, layout.rows(i)) of every layer i (a TP slice: rows [row_begin, row_end)) from
// sources[i] into spans[i]. `layout` must be finalized and its format that of the spans. Pages of
// the spans are first touched by the readers.
// Errors: kInvalidArgument (spans, sources), kIo (a read failed or came up short: the message names
// the file and offset), kOutOfMemory (buffers, threads), pinning errors as run_chunked. On error the
// spans hold partial data.
Status load_rows(const EngramLayout& layout, std::span<const RowSource> sources, std::span<const TableSpan> spans,
                 const RowLoadOptions& options);

}  // namespace engram::host

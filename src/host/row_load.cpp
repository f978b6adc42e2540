// Streaming Engram rows into table spans (see row_load.hpp for the contract and the memory bound).
//
// Work items are row ranges: for split spans one item per chunk of one tensor, read straight into the
// table; for fused spans one item per chunk of rows covering both tensors, so that each record is
// written once, whole, from a bounce buffer small enough to stay in the core's cache
// (kFusedBounceBytes). All offsets are computed in int64 from a finalized layout whose byte counts
// fit (EngramLayout::finalize checks that), and the callers have checked the file ranges. A span of a
// TP slice takes the tensor's rows [row_begin, row_end) only: its items start at row_begin, and the
// bytes before and after are neither read nor counted.
#include "host/row_load.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "sys/file.hpp"

namespace engram::host {
namespace {

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

constexpr int64_t kFusedBounceBytes = int64_t{1} << 20;

struct LoadItem {
  int layer;
  enum Kind { kPayload, kScales, kRows } kind;
  int64_t row_lo, row_hi;
};

}  // namespace

Status check_table_spans(const EngramLayout& layout, std::span<const TableSpan> spans) {
  if (static_cast<int>(spans.size()) != layout.n_layers())
    return invalid(std::to_string(spans.size()) + " table spans for " + std::to_string(layout.n_layers()) +
                   " Engram layers");
  for (int i = 0; i < layout.n_layers(); ++i) {
    const TableSpan& s = spans[static_cast<size_t>(i)];
    const std::string what = "table span of Engram layer " + std::to_string(layout.layer_ids[i]);
    const LayerSlice& sl = s.slice;
    const int64_t want_rows = sl.sliced() ? sl.rows() : layout.rows(i);
    if (sl.sliced() && (sl.layer_rows != layout.rows(i) || sl.row_begin < 0 || sl.row_end > sl.layer_rows))
      return invalid(what + ": a TP slice of rows [" + std::to_string(sl.row_begin) + ", " + std::to_string(sl.row_end) +
                     ") of " + std::to_string(sl.layer_rows) + "; the layout's layer has " +
                     std::to_string(layout.rows(i)) + " rows");
    if (s.rows != want_rows || s.d != layout.d || s.format != layout.format)
      return invalid(what + ": " + std::to_string(s.rows) + " rows, d " + std::to_string(s.d) + ", " +
                     row_format_name(s.format) + "; the layout needs " + std::to_string(want_rows) + " rows, d " +
                     std::to_string(layout.d) + ", " + row_format_name(layout.format));
    if (s.rows == 0) continue;  // a TP rank without heads
    if (!s.data || (s.format == RowFormat::kSplit && !s.scales)) return invalid(what + ": null base pointer");
    const int64_t want_stride = s.format == RowFormat::kFused ? EngramLayout::fused_record_bytes(s.d) : s.d;
    if (s.stride_bytes != want_stride)
      return invalid(what + ": stride " + std::to_string(s.stride_bytes) + " bytes, expected " +
                     std::to_string(want_stride));
  }
  return Status::ok();
}

Status load_rows(const EngramLayout& layout, std::span<const RowSource> sources, std::span<const TableSpan> spans,
                 const RowLoadOptions& opt) {
  if (layout.head_offsets.size() != layout.layer_ids.size() || layout.layer_ids.empty())
    return invalid("the requested layout is not finalized");
  ENGRAM_RETURN_IF_ERROR(check_table_spans(layout, spans));
  if (static_cast<int>(sources.size()) != layout.n_layers())
    return invalid(std::to_string(sources.size()) + " row sources for " + std::to_string(layout.n_layers()) +
                   " Engram layers");
  for (const RowSource& src : sources)
    if (!src.payload_file || !src.scales_file || src.payload_offset < 0 || src.scales_offset < 0)
      return invalid("row source without a file or with a negative offset");

  const int d = layout.d;
  const int64_t sd = d / 32;
  const bool fused = layout.format == RowFormat::kFused;
  const int64_t chunk = std::max<int64_t>(opt.chunk_bytes, 1);
  std::vector<LoadItem> items;
  std::vector<int64_t> item_bytes;
  int64_t max_item_rows = 1;
  // Items are in the tensors' rows; span row = tensor row - first (the slice's row_begin, 0 for a whole layer).
  auto first_row = [&](int li) { return spans[static_cast<size_t>(li)].slice.row_begin; };
  auto end_row = [&](int li) { return first_row(li) + spans[static_cast<size_t>(li)].rows; };
  auto add_items = [&](int li, LoadItem::Kind kind, int64_t row_bytes) {
    const int64_t rows_per = std::max<int64_t>(1, chunk / row_bytes);
    for (int64_t lo = first_row(li); lo < end_row(li); lo += rows_per) {
      const int64_t hi = std::min(end_row(li), lo + rows_per);
      items.push_back({li, kind, lo, hi});
      item_bytes.push_back((hi - lo) * row_bytes);
      max_item_rows = std::max(max_item_rows, hi - lo);
    }
  };
  for (int li = 0; li < layout.n_layers(); ++li) {
    if (fused) {
      add_items(li, LoadItem::kRows, d + sd);
    } else {
      add_items(li, LoadItem::kPayload, d);
      add_items(li, LoadItem::kScales, sd);
    }
  }
  if (items.empty()) return Status::ok();  // TP slices without heads: nothing to read
  const int64_t bounce_rows = std::max<int64_t>(1, kFusedBounceBytes / d);
  // Fused scratch: the payload bounce, then the scales of a whole item.
  const size_t scratch = fused ? static_cast<size_t>(std::min(bounce_rows, max_item_rows) * d + max_item_rows * sd) : 0;
  if (opt.drop_page_cache)
    for (const RowSource& src : sources) {
      (void)sys::fadvise(*src.payload_file, 0, 0, sys::Advice::kSequential);
      (void)sys::fadvise(*src.scales_file, 0, 0, sys::Advice::kSequential);
    }

  ChunkedRunOptions run;
  // Automatic count: thread_cap, but no more readers than CPUs they are pinned to.
  const int cap = opt.reader_cpus.empty() ? opt.thread_cap
                                          : std::min<int>(opt.thread_cap, static_cast<int>(opt.reader_cpus.size()));
  run.threads = resolve_threads(opt.threads, items.size(), cap);
  run.scratch_bytes = scratch;
  run.cpus = opt.reader_cpus;
  run.phase = "load";
  run.on_progress = opt.on_progress;
  const Status s = run_chunked(item_bytes, run, [&](size_t i, uint8_t* buf) -> Status {
    const LoadItem& it = items[i];
    const TableSpan& sp = spans[static_cast<size_t>(it.layer)];
    const RowSource& src = sources[static_cast<size_t>(it.layer)];
    const int64_t n = it.row_hi - it.row_lo;
    const int64_t p_off = src.payload_offset + it.row_lo * d;
    const int64_t s_off = src.scales_offset + it.row_lo * sd;
    const int64_t at = it.row_lo - sp.slice.row_begin;  // the item's first row in the span
    if (it.kind == LoadItem::kPayload) {
      ENGRAM_RETURN_IF_ERROR(sys::pread_full(*src.payload_file, sp.data + at * d, static_cast<size_t>(n * d), p_off));
    } else if (it.kind == LoadItem::kScales) {
      ENGRAM_RETURN_IF_ERROR(
          sys::pread_full(*src.scales_file, sp.scales + at * sd, static_cast<size_t>(n * sd), s_off));
    } else {
      uint8_t* bounce = buf;
      uint8_t* scales = buf + std::min(bounce_rows, max_item_rows) * d;
      ENGRAM_RETURN_IF_ERROR(sys::pread_full(*src.scales_file, scales, static_cast<size_t>(n * sd), s_off));
      const size_t pad = static_cast<size_t>(sp.stride_bytes - d - sd);
      for (int64_t lo = it.row_lo; lo < it.row_hi; lo += bounce_rows) {
        const int64_t m = std::min(bounce_rows, it.row_hi - lo);
        ENGRAM_RETURN_IF_ERROR(
            sys::pread_full(*src.payload_file, bounce, static_cast<size_t>(m * d), p_off + (lo - it.row_lo) * d));
        const uint8_t* sc = scales + (lo - it.row_lo) * sd;
        for (int64_t r = 0; r < m; ++r) {
          uint8_t* rec = sp.payload_of(lo - sp.slice.row_begin + r);
          std::memcpy(rec, bounce + r * d, static_cast<size_t>(d));
          std::memcpy(rec + d, sc + r * sd, static_cast<size_t>(sd));
          if (pad) std::memset(rec + d + sd, 0, pad);
        }
      }
    }
    // Advisory: a failure only leaves pages cached; the data is already correct.
    if (opt.drop_page_cache) {
      if (it.kind != LoadItem::kScales) (void)sys::fadvise(*src.payload_file, p_off, n * d, sys::Advice::kDontNeed);
      if (it.kind != LoadItem::kPayload) (void)sys::fadvise(*src.scales_file, s_off, n * sd, sys::Advice::kDontNeed);
    }
    return Status::ok();
  });
  // Item edges inside a page leave that page behind; one pass over each tensor's range drops them.
  if (opt.drop_page_cache)
    for (int li = 0; li < layout.n_layers(); ++li) {
      const RowSource& src = sources[static_cast<size_t>(li)];
      const int64_t rows = end_row(li) - first_row(li);
      if (rows == 0) continue;  // length 0 would mean "to the end of the file"
      (void)sys::fadvise(*src.payload_file, src.payload_offset + first_row(li) * d, rows * d, sys::Advice::kDontNeed);
      (void)sys::fadvise(*src.scales_file, src.scales_offset + first_row(li) * sd, rows * sd, sys::Advice::kDontNeed);
    }
  return s;
}

}  // namespace engram::host

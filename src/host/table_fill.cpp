// Synthetic row content of a HostTable: synth_row's bytes depend only on (seed, layer, row), so a fill's result
// does not depend on its thread count and a checkpoint writer can stream rows one at a time. Filling is parallel
// over row ranges; the reporting fill goes in chunks and says how many bytes are written after each.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/parallel.hpp"
#include "core/splitmix.hpp"
#include "engram/table.hpp"
#include "sys/affinity.hpp"

namespace engram {

void synth_row(uint64_t seed, int layer_index, int64_t row, int d, uint8_t* payload, uint8_t* scales) {
  uint64_t state = mix_seed(seed, static_cast<uint64_t>(layer_index), static_cast<uint64_t>(row));
  for (int i = 0; i < d; i += 8) {
    uint64_t r = splitmix64(state);
    for (int k = 0; k < 8 && i + k < d; ++k) {
      uint8_t b = static_cast<uint8_t>(r >> (8 * k));
      if ((b & 0x7F) == 0x7F) b ^= 0x01;  // never a NaN code
      if ((b & 0x7F) == 0) b |= 0x08;     // non-zero data: zeros hide unwritten outputs
      payload[i + k] = b;
    }
  }
  uint64_t r = splitmix64(state);
  for (int j = 0; j < d / 32; ++j) {
    if (j % 8 == 0 && j > 0) r = splitmix64(state);
    scales[j] = static_cast<uint8_t>(119 + (r >> (8 * (j % 8))) % 17);
  }
}

void fill_synthetic_span(const TableSpan& s, int layer_index, uint64_t seed, int threads) {
  threads = sys::threads_or_auto(threads);
  const int64_t pad = s.format == RowFormat::kFused ? s.stride_bytes - s.d - s.d / 32 : 0;
  parallel_ranges(s.rows, threads, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      synth_row(seed, layer_index, s.slice.row_begin + r, s.d, s.payload_of(r), s.scales_of(r));
      if (pad > 0) std::memset(s.scales_of(r) + s.d / 32, 0, static_cast<size_t>(pad));
    }
  });
}

void HostTable::fill_synthetic(uint64_t seed, int threads) {
  for (int rl = 0; rl < n_layers() * n_replicas(); ++rl)
    fill_synthetic_span(span(rl % n_layers(), rl / n_layers()), rl % n_layers(), seed, threads);
}

// In chunks of 1/64 of the table's bytes (64 KiB to 256 MiB of rows), reporting the bytes written after each chunk.
// A chunk's rows keep their index in the layer, so the rows equal the plain fill's.
void HostTable::fill_synthetic(uint64_t seed, int threads,
                               const std::function<void(int64_t, int64_t, double)>& progress) {
  const auto row_bytes = [](const TableSpan& s) {
    return s.format == RowFormat::kFused ? s.stride_bytes : static_cast<int64_t>(s.d + s.d / 32);
  };
  std::vector<std::pair<TableSpan, int>> spans;  // (span, layer index)
  int64_t total = 0;
  for (int rl = 0; rl < n_layers() * n_replicas(); ++rl) {
    const int li = rl % n_layers();
    spans.emplace_back(span(li, rl / n_layers()), li);
    total += spans.back().first.rows * row_bytes(spans.back().first);
  }
  const int64_t chunk_bytes = std::clamp<int64_t>(total / 64, int64_t{64} << 10, int64_t{256} << 20);
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  int64_t done = 0;
  for (const auto& [s, li] : spans) {
    const int64_t rb = row_bytes(s);
    const int64_t chunk_rows = std::max<int64_t>(1, chunk_bytes / std::max<int64_t>(1, rb));
    for (int64_t lo = 0; lo < s.rows; lo += chunk_rows) {
      TableSpan part = s;
      part.rows = std::min(chunk_rows, s.rows - lo);
      part.data = s.payload_of(lo);
      if (s.format == RowFormat::kSplit) part.scales = s.scales_of(lo);
      part.slice.row_begin += lo;
      fill_synthetic_span(part, li, seed, threads);
      done += part.rows * rb;
      if (done < total) progress(done, total, elapsed());
    }
  }
  progress(total, total, elapsed());
}

}  // namespace engram

// HostTable: private anonymous memory for each Engram layer's table, and synthetic row content.
//
// Filling is parallel over row ranges; each row's bytes depend only on (seed, layer, row), so the
// result does not depend on the thread count and a checkpoint writer can stream rows one at a time.
#include "engram/table.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/splitmix.hpp"
#include "sys/memory.hpp"

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

Result<std::unique_ptr<HostTable>> HostTable::allocate(const EngramLayout& layout) {
  if (layout.head_offsets.size() != layout.layer_ids.size())
    return Status(Code::kInvalidArgument, "HostTable: layout is not finalized");
  std::unique_ptr<HostTable> t(new HostTable());
  t->layout_ = layout;
  for (int li = 0; li < layout.n_layers(); ++li) {
    const int64_t rows = layout.rows(li);
    const size_t bytes = static_cast<size_t>(rows * layout.row_stride_bytes());
    auto m = sys::map_anonymous(bytes);
    if (!m.is_ok())
      return m.status().with_context("table of Engram layer " + std::to_string(layout.layer_ids[li]));
    t->mappings_.emplace_back(*m, bytes);
    TableSpan s;
    s.data = static_cast<uint8_t*>(*m);
    s.rows = rows;
    s.d = layout.d;
    s.format = layout.format;
    if (layout.format == RowFormat::kFused) {
      s.stride_bytes = layout.row_stride_bytes();
    } else {
      s.stride_bytes = layout.d;
      s.scales = s.data + rows * layout.d;
    }
    t->spans_.push_back(s);
  }
  return t;
}

HostTable::~HostTable() {
  for (auto& [p, n] : mappings_) (void)sys::unmap(p, n);
}

void HostTable::fill_synthetic(uint64_t seed, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int li = 0; li < n_layers(); ++li) {
    const TableSpan s = spans_[li];
    const int64_t per = (s.rows + threads - 1) / threads;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      const int64_t lo = t * per, hi = std::min(s.rows, lo + per);
      if (lo >= hi) break;
      pool.emplace_back([=] {
        const int64_t pad = s.format == RowFormat::kFused ? s.stride_bytes - s.d - s.d / 32 : 0;
        for (int64_t r = lo; r < hi; ++r) {
          synth_row(seed, li, r, s.d, s.payload_of(r), s.scales_of(r));
          if (pad > 0) std::memset(s.scales_of(r) + s.d / 32, 0, static_cast<size_t>(pad));
        }
      });
    }
    for (auto& th : pool) th.join();
  }
}

}  // namespace engram

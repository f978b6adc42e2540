// TableView and HostTable: where one Engram layer's rows live and how a backend addresses them.
//
// A TableView is a non-owning description of one layer's table: base pointer(s), row count, row
// width d, row layout and stride. Backends (CPU lookup, CUDA kernel) take TableViews only, so the
// same lookup code serves private memory, shared memfd backings and UVA device pointers alike.
// HostTable owns the memory of every Engram layer of a layout (one mapping per layer). Issue #4's
// backings (memfd, /dev/shm, hugetlb) and placement build on the same view.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engram/layout.hpp"
#include "engram/status.hpp"

namespace engram {

struct TableView {
  const uint8_t* data = nullptr;    // fused: records [rows][stride]; split: payload [rows][d]
  const uint8_t* scales = nullptr;  // split: scales [rows][d/32]; fused: nullptr
  int64_t rows = 0;
  int d = 0;
  RowFormat format = RowFormat::kFused;
  int64_t stride_bytes = 0;  // fused: record bytes (multiple of 16); split: d

  const uint8_t* payload_of(int64_t row) const { return data + row * stride_bytes; }
  const uint8_t* scales_of(int64_t row) const {
    return format == RowFormat::kFused ? data + row * stride_bytes + d : scales + row * (d / 32);
  }
};

// Mutable counterpart used while filling or loading a table.
struct TableSpan {
  uint8_t* data = nullptr;
  uint8_t* scales = nullptr;
  int64_t rows = 0;
  int d = 0;
  RowFormat format = RowFormat::kFused;
  int64_t stride_bytes = 0;

  uint8_t* payload_of(int64_t row) const { return data + row * stride_bytes; }
  uint8_t* scales_of(int64_t row) const {
    return format == RowFormat::kFused ? data + row * stride_bytes + d : scales + row * (d / 32);
  }
  TableView view() const { return {data, scales, rows, d, format, stride_bytes}; }
};

// Deterministic synthetic row content: non-zero pseudo-random FP8 payload (never a NaN code) and
// scales in [2^-8, 2^8] (codes 119..135), a pure function of (seed, layer_index, row). Used by
// `engram table create` and by the in-memory default table of `engram run`.
void synth_row(uint64_t seed, int layer_index, int64_t row, int d, uint8_t* payload, uint8_t* scales);

class HostTable {
 public:
  // Allocates (private anonymous mapping, not yet touched) one table per Engram layer of `layout`.
  static Result<std::unique_ptr<HostTable>> allocate(const EngramLayout& layout);
  ~HostTable();
  HostTable(const HostTable&) = delete;
  HostTable& operator=(const HostTable&) = delete;

  const EngramLayout& layout() const { return layout_; }
  int n_layers() const { return layout_.n_layers(); }
  TableView view(int layer_index) const { return spans_.at(layer_index).view(); }
  TableSpan span(int layer_index) const { return spans_.at(layer_index); }
  // Fills every row with synth_row(seed, ...) using `threads` threads (0 = hardware concurrency).
  void fill_synthetic(uint64_t seed, int threads = 0);

 private:
  HostTable() = default;
  EngramLayout layout_;
  std::vector<TableSpan> spans_;
  std::vector<std::pair<void*, size_t>> mappings_;
};

}  // namespace engram

// Helpers shared by the CUDA tests: the GPU-or-skip guard, device buffers, random tables and ids, and the CPU
// reference lookup every GPU result is compared with (bit for bit).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/lookup.hpp"
#include "cuda/device.cuh"
#include "engram/layout.hpp"
#include "engram/lookup.hpp"
#include "engram/table.hpp"

// Skips the test (with the runtime's reason) when no usable CUDA device is present.
#define ENGRAM_REQUIRE_GPU()                                                              \
  do {                                                                                    \
    auto engram_dev_ = ::engram::cuda::device_info(0);                                    \
    if (!engram_dev_.is_ok()) GTEST_SKIP() << engram_dev_.status().message(); \
  } while (0)

#define ASSERT_CUDA_OK(call)                                                              \
  do {                                                                                    \
    const cudaError_t engram_e_ = (call);                                                 \
    ASSERT_EQ(engram_e_, cudaSuccess) << #call << ": " << cudaGetErrorName(engram_e_);    \
  } while (0)

namespace engram::testing {

// Owning device allocation.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n && cudaMalloc(&p_, n * sizeof(T)) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

inline uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// One-layer-per-entry custom layout: orders 2..2 with `heads` heads of about rows_per_head rows each.
inline EngramLayout make_layout(int d, RowFormat f, int heads, int64_t rows_per_head, std::vector<int> layer_ids = {1}) {
  EngramLayout l;
  l.name = "test";
  l.layer_ids = std::move(layer_ids);
  l.max_ngram = 2;
  l.heads_per_order = heads;
  l.vocab_size_per_order = {rows_per_head};
  l.d = d;
  l.format = f;
  EXPECT_TRUE(l.finalize().is_ok());
  return l;
}

// A HostTable (page-aligned anonymous memory) whose every byte is random: NaN codes, ue8m0 0x00/0xFF and
// fused padding included, so the kernel is checked on the whole code space.
inline std::unique_ptr<HostTable> random_host_table(const EngramLayout& l, std::mt19937_64& rng) {
  auto t = HostTable::allocate(l);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return nullptr;
  for (int li = 0; li < l.n_layers(); ++li) {
    const TableSpan s = (*t)->span(li);
    const int64_t bytes = s.rows * s.stride_bytes + (s.format == RowFormat::kSplit ? s.rows * (s.d / 32) : 0);
    uint8_t* p = s.data;
    int64_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      const uint64_t r = rng();
      std::memcpy(p + i, &r, 8);
    }
    for (; i < bytes; ++i) p[i] = static_cast<uint8_t>(rng());
  }
  return std::move(*t);
}

// ids[tokens][heads]: head h draws from its own head range (as hashing does); ~1/16 dead (-1 or another
// negative value), optional fraction of out-of-range ids (>= rows, up to INT64_MAX).
inline std::vector<int64_t> random_ids(const EngramLayout& l, int layer_index, int64_t tokens, std::mt19937_64& rng,
                                       double invalid_fraction = 0.0) {
  const int heads = l.heads();
  const auto& off = l.head_offsets.at(layer_index);
  const int64_t rows = l.rows(layer_index);
  std::vector<int64_t> ids(static_cast<size_t>(tokens * heads));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      int64_t& id = ids[static_cast<size_t>(t * heads + h)];
      const double x = u(rng);
      if (x < 1.0 / 16) {
        id = (rng() & 1) ? kDeadId : -static_cast<int64_t>(1 + rng() % 1000);
      } else if (x < 1.0 / 16 + invalid_fraction) {
        id = (rng() & 3) == 0 ? INT64_MAX : rows + static_cast<int64_t>(rng() % 100000);
      } else {
        id = off[static_cast<size_t>(h)] + static_cast<int64_t>(rng() % static_cast<uint64_t>(off[h + 1] - off[h]));
      }
    }
  }
  return ids;
}

// CPU reference staging (release semantics: negative and out-of-range ids -> zero rows).
inline std::vector<uint16_t> reference_staging(const TableView& v, const std::vector<int64_t>& ids, int heads,
                                               LookupStats* stats = nullptr) {
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(v.d), 0x5A5A);
  LookupRequest req{ids.data(), static_cast<int64_t>(ids.size()) / heads, heads, out.data(), false};
  auto st = cpu::lookup(v, req, nullptr);
  EXPECT_TRUE(st.is_ok()) << st.status().to_string();
  if (stats && st.is_ok()) *stats = *st;
  return out;
}

// n bf16 values copied from device memory into a poisoned host vector.
inline std::vector<uint16_t> to_host(const uint16_t* dev, size_t n) {
  std::vector<uint16_t> h(n, 0xFFFF);
  EXPECT_EQ(cudaMemcpy(h.data(), dev, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Index of the first differing bf16 element, or -1.
inline int64_t first_mismatch(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace engram::testing

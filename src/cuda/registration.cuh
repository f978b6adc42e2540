// Registration of host memory with CUDA, so that GPUs read table rows over UVA without a device copy.
//
// A table of ~100 GB is registered in chunks (cudaHostRegister(Mapped|Portable), default at most 64 GiB each;
// the "register" step of the shared-table protocol, host/group_protocol.hpp): every chunk starts on a page boundary and every boundary between
// chunks falls on a row boundary, so that no row straddles two registrations and a kernel that translates
// addresses per chunk never splits a row. Pages are prefaulted (touched) first, so registration pins pages that
// already exist under the placement policy instead of letting the driver allocate them. If a chunk fails, the
// chunks already registered are unregistered (rollback), CUDA's pending error is cleared, and the Status names
// the chunk, its size and the CUDA error. The device address of every chunk comes from
// cudaHostGetDevicePointer; when it differs from the host address (devices without
// cudaDevAttrCanUseHostPointerForRegisteredMem) each chunk keeps its own base and UvaTable translates per chunk.
// Nothing is ever copied into device memory.
//
// This header exposes no CUDA types (it is included by g++-compiled tools and tests).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engram/status.hpp"

namespace engram::cuda {

struct RegistrationOptions {
  int64_t max_chunk_bytes = int64_t{64} << 30;  // upper bound of one cudaHostRegister call
  // Chunk boundaries (other than the end of the range) are placed at offsets from the start that are
  // multiples of lcm(page size, boundary_bytes): pass the row stride (fused record bytes; for a split
  // table whose scale array follows its payload array, d). 1 = page boundaries only.
  int64_t boundary_bytes = 1;
  bool prefault = true;       // touch every page before registering
  int prefault_threads = 0;   // 0 = min(16, CPUs this process may run on)
  // Prefault by reading only (for read-only mappings) and register with cudaHostRegisterReadOnly.
  bool read_only = false;
  // Progress of this range: bytes of [ptr, ptr + bytes) registered so far and `bytes`, on the calling thread after
  // each chunk's cudaHostRegister (the last call has done == bytes). Not called when registration fails.
  std::function<void(int64_t done, int64_t total)> on_progress;
  // Test hook: make the registration of chunk `inject_failure_at_chunk` fail with a real CUDA error
  // (cudaHostRegister with invalid flags -> cudaErrorInvalidValue). -1 = off.
  int inject_failure_at_chunk = -1;
};

// One planned chunk: [offset, offset + bytes) relative to the page-aligned start of the range.
struct ChunkPlan {
  int64_t offset = 0;
  int64_t bytes = 0;
};

// Splits the page-aligned range [begin, begin + bytes) (bytes is rounded up to the page size) into chunks of
// at most opt.max_chunk_bytes whose inner boundaries are multiples of lcm(page_bytes, opt.boundary_bytes).
// Pure function (no CUDA). kInvalidArgument: bytes <= 0, begin not page-aligned, page_bytes <= 0,
// boundary_bytes <= 0, or lcm(page, boundary) > max_chunk_bytes (no valid boundary fits in a chunk).
Result<std::vector<ChunkPlan>> plan_chunks(uintptr_t begin, int64_t bytes, int64_t page_bytes,
                                           const RegistrationOptions& opt);

struct RegisteredChunk {
  const uint8_t* host = nullptr;    // page-aligned host address of the chunk
  int64_t bytes = 0;
  const uint8_t* device = nullptr;  // from cudaHostGetDevicePointer
  double register_ns = 0;           // time of this chunk's cudaHostRegister
};

// RAII handle of one registered host range (all its chunks). Move-only; the destructor unregisters every chunk
// (errors there are ignored and cleared; call release() to see them). Thread safety: none (one owner).
class HostRegistration {
 public:
  // Registers [ptr, ptr + bytes) for the current CUDA device (the range is widened to whole pages).
  // Errors: kInvalidArgument (null, bytes <= 0, a multi-chunk range whose start is not page-aligned, bad
  // options); kUnsupported (no device / driver); kCuda or kOutOfMemory naming the chunk index, its offset and
  // size, and the CUDA error of the chunk that failed, after every earlier chunk was unregistered.
  static Result<HostRegistration> register_range(const void* ptr, int64_t bytes,
                                                 const RegistrationOptions& opt = {});

  HostRegistration() = default;
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration();

  // Unregisters every chunk now; returns the first error (kCuda) after trying all chunks.
  Status release();

  bool empty() const { return chunks_.empty(); }
  const std::vector<RegisteredChunk>& chunks() const { return chunks_; }
  const uint8_t* host_begin() const { return chunks_.empty() ? nullptr : chunks_.front().host; }
  int64_t bytes() const;           // registered bytes (whole pages)
  double prefault_ns() const { return prefault_ns_; }
  double register_ns() const { return register_ns_; }  // sum over chunks, cudaHostGetDevicePointer included
  // True when every chunk's device address equals its host address (no translation needed).
  bool device_equals_host() const;
  // Whether [p, p + n) lies inside this registration.
  bool covers(const void* p, int64_t n) const;

 private:
  std::vector<RegisteredChunk> chunks_;
  double prefault_ns_ = 0;
  double register_ns_ = 0;
};

// Touches every page of [ptr, ptr + bytes) with `threads` threads (0 = min(16, CPUs this process may run on)): an atomic
// add of 0 to one byte per page (allocates the page, never changes its content; safe against concurrent
// writers), or a plain read when read_only. Returns the elapsed nanoseconds.
double prefault_pages(const void* ptr, int64_t bytes, bool read_only, int threads);

}  // namespace engram::cuda

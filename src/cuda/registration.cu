// Chunked cudaHostRegister with prefault and rollback (see registration.cuh for the contract).
//
// Why chunks: one cudaHostRegister call over 100 GB pins every page in one driver call that can fail late
// (after pinning most of it) and holds the driver's lock for seconds; chunks of <= 64 GiB give a failure a
// precise location and let the rollback undo exactly what was done. Why prefault: the driver pins whatever
// pages exist when it is called; touching them first (threads, one byte per page) makes the placement policy,
// not the driver's thread, decide where each page lives, and moves the page-fault cost out of the timed
// registration. The atomic add of zero allocates a page without changing a byte of it.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>

#include "sys/fault.hpp"
#include "cuda/cuda_status.cuh"
#include "cuda/registration.cuh"
#include "core/parallel.hpp"
#include "sys/affinity.hpp"
#include "sys/memory.hpp"

namespace engram::cuda {

namespace {

double now_ns() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::string mib(int64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

Result<std::vector<ChunkPlan>> plan_chunks(uintptr_t begin, int64_t bytes, int64_t page_bytes,
                                           const RegistrationOptions& opt) {
  if (bytes <= 0) return Status(Code::kInvalidArgument, "host registration: length " + std::to_string(bytes) + " B (must be > 0)");
  if (page_bytes <= 0) return Status(Code::kInvalidArgument, "host registration: page size " + std::to_string(page_bytes));
  if (begin % static_cast<uintptr_t>(page_bytes) != 0)
    return Status(Code::kInvalidArgument, "host registration: start is not page-aligned");
  if (opt.boundary_bytes <= 0)
    return Status(Code::kInvalidArgument, "host registration: boundary_bytes " + std::to_string(opt.boundary_bytes));
  if (opt.max_chunk_bytes <= 0)
    return Status(Code::kInvalidArgument, "host registration: max_chunk_bytes " + std::to_string(opt.max_chunk_bytes));
  const int64_t total = (bytes + page_bytes - 1) / page_bytes * page_bytes;
  std::vector<ChunkPlan> plan;
  if (total <= opt.max_chunk_bytes) {
    plan.push_back({0, total});
    return plan;
  }
  const int64_t granule = std::lcm(page_bytes, opt.boundary_bytes);
  if (granule > opt.max_chunk_bytes)
    return Status(Code::kInvalidArgument, "host registration: lcm(page " + std::to_string(page_bytes) + " B, row " +
                                              std::to_string(opt.boundary_bytes) + " B) = " + std::to_string(granule) +
                                              " B exceeds max chunk " + std::to_string(opt.max_chunk_bytes) + " B");
  const int64_t step = opt.max_chunk_bytes / granule * granule;
  for (int64_t off = 0; off < total; off += step) plan.push_back({off, std::min(step, total - off)});
  return plan;
}

double prefault_pages(const void* ptr, int64_t bytes, bool read_only, int threads) {
  const double t0 = now_ns();
  if (!ptr || bytes <= 0) return 0;
  const int64_t page = static_cast<int64_t>(sys::page_size_bytes());
  const uintptr_t first = reinterpret_cast<uintptr_t>(ptr) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(ptr) + static_cast<uintptr_t>(bytes);
  const int64_t n_pages = static_cast<int64_t>((end - first + page - 1) / page);
  if (threads <= 0) threads = std::min(16, sys::usable_cpu_count());
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, n_pages / 256)));
  auto body = [=](int64_t lo, int64_t hi) {
    uint8_t sink = 0;
    for (int64_t i = lo; i < hi; ++i) {
      uint8_t* p = reinterpret_cast<uint8_t*>(first + static_cast<uintptr_t>(i) * page);
      if (read_only) {
        sink ^= *reinterpret_cast<volatile uint8_t*>(p);
      } else {
        __atomic_fetch_add(p, static_cast<uint8_t>(0), __ATOMIC_RELAXED);
      }
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);
    (void)sink;
  };
  parallel_ranges(n_pages, threads, body);  // threads == 1: on the calling thread
  return now_ns() - t0;
}

Result<HostRegistration> HostRegistration::register_range(const void* ptr, int64_t bytes,
                                                          const RegistrationOptions& opt) {
  if (!ptr) return Status(Code::kInvalidArgument, "host registration: null pointer");
  if (bytes <= 0)
    return Status(Code::kInvalidArgument, "host registration: length " + std::to_string(bytes) + " B (must be > 0)");
  int device = 0;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "host registration: cudaGetDevice");
  const int64_t page = static_cast<int64_t>(sys::page_size_bytes());
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t begin = p / page * page;
  const int64_t widened = static_cast<int64_t>(p - begin) + bytes;
  if (begin != p && widened > opt.max_chunk_bytes)
    return Status(Code::kInvalidArgument,
                  "host registration: a range of more than one chunk must start on a page boundary");
  ENGRAM_ASSIGN_OR_RETURN(std::vector<ChunkPlan> plan, plan_chunks(begin, widened, page, opt));

  HostRegistration reg;
  if (opt.prefault) {
    nvtxRangePushA("engram prefault");
    reg.prefault_ns_ = prefault_pages(reinterpret_cast<const void*>(begin), widened, opt.read_only,
                                      opt.prefault_threads);
    nvtxRangePop();
  }
  unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable;
  if (opt.read_only) flags |= cudaHostRegisterReadOnly;
  nvtxRangePushA("engram cudaHostRegister");
  for (size_t i = 0; i < plan.size(); ++i) {
    void* host = reinterpret_cast<void*>(begin + static_cast<uintptr_t>(plan[i].offset));
    const size_t len = static_cast<size_t>(plan[i].bytes);
    const double t0 = now_ns();
    const unsigned chunk_flags = static_cast<int>(i) == opt.inject_failure_at_chunk ? 0xFFFFFFFFu : flags;
    // Injected fault (sys/fault.hpp, ENGRAM_FAULT=host_register=ENOMEM): the chunk fails as if the driver
    // had refused it, and the chunks already registered are rolled back the same way. No CUDA error is
    // pending in this case, so there is nothing to clear.
    if (const int injected = sys::fault_errno(sys::kFaultHostRegister); injected != 0) {
      Status st = errno_status(injected, "cudaHostRegister chunk " + std::to_string(i) + " of " +
                                             std::to_string(plan.size()) + " (injected fault)");
      const Status rb = reg.release();
      nvtxRangePop();
      if (!rb.is_ok()) return st.with_context("rollback also failed (" + rb.message() + ")");
      return st;
    }
    cudaError_t err = cudaHostRegister(host, len, chunk_flags);
    void* dev = nullptr;
    if (err == cudaSuccess) {
      err = cudaHostGetDevicePointer(&dev, host, 0);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaHostUnregister(host);
      }
    }
    if (err != cudaSuccess) {
      const std::string what = "cudaHostRegister chunk " + std::to_string(i) + " of " + std::to_string(plan.size()) +
                               " (offset " + std::to_string(plan[i].offset) + " B, " + std::to_string(plan[i].bytes) +
                               " B = " + mib(plan[i].bytes) + ", device " + std::to_string(device) + ")";
      Status st = cuda_status(err, what);  // clears the pending error
      const Status rb = reg.release();     // roll back the chunks already registered
      nvtxRangePop();
      if (!rb.is_ok()) return st.with_context("rollback also failed (" + rb.message() + ")");
      return st;
    }
    RegisteredChunk c;
    c.host = static_cast<const uint8_t*>(host);
    c.bytes = plan[i].bytes;
    c.device = static_cast<const uint8_t*>(dev);
    c.register_ns = now_ns() - t0;
    reg.register_ns_ += c.register_ns;
    reg.chunks_.push_back(c);
    if (opt.on_progress) {  // offsets are from the page-aligned begin; report bytes of the range as asked
      const int64_t lead = static_cast<int64_t>(p - begin);
      opt.on_progress(std::clamp<int64_t>(plan[i].offset + plan[i].bytes - lead, 0, bytes), bytes);
    }
  }
  nvtxRangePop();
  return std::move(reg);  // C++17: no implicit move into Result<T>(T)
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : chunks_(std::move(other.chunks_)), prefault_ns_(other.prefault_ns_), register_ns_(other.register_ns_) {
  other.chunks_.clear();
}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    (void)release();
    chunks_ = std::move(other.chunks_);
    other.chunks_.clear();
    prefault_ns_ = other.prefault_ns_;
    register_ns_ = other.register_ns_;
  }
  return *this;
}

HostRegistration::~HostRegistration() { (void)release(); }

Status HostRegistration::release() {
  Status first;
  // Unregister in reverse order of registration.
  for (auto it = chunks_.rbegin(); it != chunks_.rend(); ++it) {
    const cudaError_t err = cudaHostUnregister(const_cast<uint8_t*>(it->host));
    if (err != cudaSuccess) {
      Status st = cuda_status(err, "cudaHostUnregister(" + std::to_string(it->bytes) + " B)");
      if (first.is_ok()) first = st;
    }
  }
  chunks_.clear();
  return first;
}

int64_t HostRegistration::bytes() const {
  int64_t sum = 0;
  for (const auto& c : chunks_) sum += c.bytes;
  return sum;
}

bool HostRegistration::device_equals_host() const {
  for (const auto& c : chunks_)
    if (c.device != c.host) return false;
  return true;
}

bool HostRegistration::covers(const void* p, int64_t n) const {
  if (chunks_.empty() || n < 0) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(chunks_.front().host);
  const uintptr_t hi = reinterpret_cast<uintptr_t>(chunks_.back().host) + static_cast<uintptr_t>(chunks_.back().bytes);
  return a >= lo && a + static_cast<uintptr_t>(n) <= hi;
}

}  // namespace engram::cuda

// DeviceStepHash: the public face of cuda::DeviceHasher (src/cuda/hash_kernel.cuh) for consumers that keep the
// look-back rows themselves. Like cuda_backend.cpp this file makes no CUDA API call; without the toolkit create()
// says the backend was not built.
#include "engram/device_hash.hpp"

#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"

#if defined(ENGRAM_HAVE_CUDA)
#include "cuda/device.cuh"
#include "cuda/hash_kernel.cuh"
#endif

namespace engram {

struct DeviceStepHash::Impl {
  int device = -1;
#if defined(ENGRAM_HAVE_CUDA)
  std::unique_ptr<cuda::DeviceHasher> hasher;
#endif
};

DeviceStepHash::DeviceStepHash() : impl_(std::make_unique<Impl>()) {}
DeviceStepHash::~DeviceStepHash() = default;

Result<std::unique_ptr<DeviceStepHash>> DeviceStepHash::create(const NgramHasher& hasher, int device) {
#if defined(ENGRAM_HAVE_CUDA)
  ENGRAM_ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::device_info(device));
  (void)info;
  std::unique_ptr<DeviceStepHash> h(new DeviceStepHash());
  h->impl_->device = device;
  cuda::ScopedDevice scope(device);
  ENGRAM_ASSIGN_OR_RETURN(h->impl_->hasher,
                          cuda::DeviceHasher::create(ngram_hash_params(hasher, HashIdKind::kGlobalRow)));
  return h;
#else
  (void)hasher, (void)device;
  return Status(Code::kUnsupported, "device hashing: the CUDA backend was not built");
#endif
}

int DeviceStepHash::device() const { return impl_->device; }

#if defined(ENGRAM_HAVE_CUDA)
int DeviceStepHash::n_layers() const { return impl_->hasher->n_layers(); }
int DeviceStepHash::heads() const { return impl_->hasher->heads(); }
int DeviceStepHash::window() const { return impl_->hasher->window(); }

Status DeviceStepHash::launch(const int64_t* tokens, int64_t n_tokens, const int32_t* query_start_loc, int n_requests,
                              const int64_t* lookback, int64_t lookback_rows, const int32_t* slots,
                              const uint8_t* dead_mask, int64_t* out, void* stream) const {
  if (n_tokens < 0 || n_requests < 0)
    return Status(Code::kInvalidArgument, "device hashing: negative token or request count");
  HashBatch b;
  b.n_requests = n_requests;
  b.max_tokens = n_tokens;
  b.query_start_loc = query_start_loc;
  b.tokens = tokens;
  b.dead_mask = dead_mask;
  b.lookback = lookback;
  b.lookback_rows = lookback_rows;
  b.lookback_slot = slots;
  cuda::ScopedDevice scope(impl_->device);
  return impl_->hasher->launch_hash(b, out, 0, nullptr, stream);
}
#else
int DeviceStepHash::n_layers() const { return 0; }
int DeviceStepHash::heads() const { return 0; }
int DeviceStepHash::window() const { return 0; }
Status DeviceStepHash::launch(const int64_t*, int64_t, const int32_t*, int, const int64_t*, int64_t, const int32_t*,
                              const uint8_t*, int64_t*, void*) const {
  return Status(Code::kUnsupported, "device hashing: the CUDA backend was not built");
}
#endif

}  // namespace engram

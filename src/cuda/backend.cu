// make_cuda_backend (see backend.cuh). Destruction runs in reverse dependency order: the queue (its kernels read
// the tables and its events live on the streams), the compute, the UVA tables, the registrations, the stream.
#include <cuda_runtime.h>

#include <string>

#include "cuda/backend.cuh"
#include "cuda/cuda_status.cuh"

namespace engram::cuda {

std::vector<HostRange> host_ranges_of(const TableView& v) {
  std::vector<HostRange> out;
  if (!v.data || v.rows <= 0 || v.d <= 0) return out;
  if (v.format == RowFormat::kFused) {
    out.push_back({v.data, v.rows * v.stride_bytes, v.stride_bytes});
  } else if (v.scales == v.data + v.rows * v.d) {
    // Offsets that are multiples of d are row boundaries of both arrays (d/32 divides d and rows * d).
    out.push_back({v.data, v.rows * v.d + v.rows * (v.d / 32), v.d});
  } else {
    out.push_back({v.data, v.rows * v.d, v.d});
    out.push_back({v.scales, v.rows * (v.d / 32), v.d / 32});
  }
  return out;
}

Result<std::unique_ptr<CudaBackend>> make_cuda_backend(const CudaBackendOptions& opt,
                                                       const std::vector<TableView>& views) {
  auto bad = [](const std::string& m) { return Status(Code::kInvalidArgument, "cuda backend: " + m); };
  if (views.empty() || views.size() != opt.layer_ids.size())
    return bad("need one table per Engram layer (got " + std::to_string(views.size()) + " tables, " +
               std::to_string(opt.layer_ids.size()) + " layer ids)");
  if (opt.heads <= 0) return bad("heads must be > 0");
  ENGRAM_ASSIGN_OR_RETURN(DeviceInfo info, device_info(opt.device));
  if (!info.unified_addressing)
    return Status(Code::kUnsupported, "cuda backend: device " + std::to_string(opt.device) + " (" + info.name +
                                          ") has no unified addressing");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaSetDevice(opt.device), "cuda backend: cudaSetDevice(" + std::to_string(opt.device) + ")");

  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->device_ = info;
  if (opt.main_stream) {
    be->main_stream_ = opt.main_stream;
  } else {
    cudaStream_t s = nullptr;
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda backend: main stream");
    be->main_stream_ = s;
    be->owns_stream_ = true;
  }

  // Register every distinct host range once.
  for (size_t li = 0; li < views.size(); ++li) {
    for (const HostRange& r : host_ranges_of(views[li])) {
      bool done = false;
      for (const auto& reg : be->regs_) done = done || reg.covers(r.ptr, r.bytes);
      if (done) continue;
      RegistrationOptions ro = opt.registration;
      ro.boundary_bytes = r.boundary_bytes;
      auto reg = HostRegistration::register_range(r.ptr, r.bytes, ro);
      if (!reg.is_ok())
        return reg.status().with_context("table of Engram layer " + std::to_string(opt.layer_ids[li]));
      auto& rep = be->reg_report_;
      rep.bytes += reg->bytes();
      rep.chunks += static_cast<int>(reg->chunks().size());
      rep.prefault_ns += reg->prefault_ns();
      rep.register_ns += reg->register_ns();
      rep.device_equals_host = rep.device_equals_host && reg->device_equals_host();
      be->regs_.push_back(std::move(*reg));
    }
  }
  std::vector<const HostRegistration*> regs;
  for (const auto& r : be->regs_) regs.push_back(&r);
  for (size_t li = 0; li < views.size(); ++li) {
    auto t = UvaTable::make(views[li], regs, opt.force_segment_translation);
    if (!t.is_ok()) return t.status().with_context("table of Engram layer " + std::to_string(opt.layer_ids[li]));
    be->tables_.push_back(std::move(*t));
  }
  std::vector<const UvaTable*> tables;
  for (const auto& t : be->tables_) tables.push_back(&t);

  if (opt.fast_path) {
    for (auto& t : be->tables_) {
      FastLookupOptions fo;
      fo.max_rows = opt.max_tokens * opt.heads;
      fo.planner.enabled = opt.planner;
      auto f = FastLookup::create(&t, fo);
      if (!f.is_ok()) {
        if (f.status().code() != Code::kUnsupported) return f.status().with_context("fast path");
        be->fast_note_ = f.status().message();
        be->fast_.clear();
        for (auto& u : be->tables_) u.set_hook(nullptr);
        break;
      }
      t.set_hook(f->get());
      be->fast_.push_back(std::move(*f));
    }
  } else {
    be->fast_note_ = "fast path off (requested)";
  }

  CudaPrefetchOptions qo;
  qo.rank = opt.rank;
  qo.max_tokens = opt.max_tokens;
  qo.grid_fraction = opt.grid_fraction;
  qo.record_timeline = opt.record_timeline;
  qo.checked = opt.checked;
  ENGRAM_ASSIGN_OR_RETURN(be->queue_, CudaPrefetchQueue::create(tables, opt.layer_ids, opt.heads, be->main_stream_, qo));
  if (opt.layer_us > 0) {
    ENGRAM_ASSIGN_OR_RETURN(be->compute_, CudaLayerCompute::create(be->main_stream_, opt.layer_us));
  }
  return std::move(be);  // C++17: no implicit move into Result<T>(T)
}

CudaBackend::~CudaBackend() {
  if (main_stream_) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(main_stream_));
  queue_.reset();
  compute_.reset();
  for (auto& t : tables_) t.set_hook(nullptr);
  fast_.clear();
  tables_.clear();
  regs_.clear();
  if (owns_stream_ && main_stream_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(main_stream_));
  (void)cudaGetLastError();
}

Status CudaBackend::synchronize() {
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(main_stream_)),
                              "cuda backend: synchronize main stream");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(queue_->prefetch_stream())),
                              "cuda backend: synchronize prefetch stream");
  return Status::ok();
}

}  // namespace engram::cuda

// Engine: the serving stack an engine links (include/engram/engine.hpp). create_local builds a table of the
// "tiny" layout (shared memfd backing, synthetic rows), picks the backend (argv[1]: cpu | cuda | auto, default
// cpu), registers the table and builds the prefetch queue; one direct lookup then runs through the same lookup
// path as the queue. On the CPU the staging is checked against the scalar reference decoder; with the CUDA
// backend (a package built with it, and a usable device) ids and staging are device memory.
// Exits 0 on success, 1 on a failure or mismatch, 77 when the asked-for backend cannot run on this machine.
#include <cstdio>
#include <string>
#include <vector>

#include "engram/engine.hpp"
#include "engram/format.hpp"
#if ENGRAM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

int fail(const char* what, const engram::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  return s.code() == engram::Code::kUnsupported ? 77 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto layout = engram::make_preset_layout("tiny");
  if (!layout.is_ok()) return fail("layout", layout.status());
  engram::EngineOptions options;
  const std::string backend = argc > 1 ? argv[1] : "cpu";
  if (auto s = engram::set_engine_option(options, "backend", backend); !s.is_ok()) return fail("--backend", s);
  options.content.seed = 11;
  options.lookup_threads = 2;
  auto engine = engram::Engine::create_local(*layout, options);
  if (!engine.is_ok()) return fail("Engine::create_local", engine.status());
  engram::Engine& e = **engine;
  std::printf("engine: backend %s%s%s\n", e.backend_name(), e.backend_note().empty() ? "" : ", ",
              e.backend_note().c_str());

  const engram::TableView view = e.table().view(0);
  const int heads = layout->heads(), d = layout->d;
  const int64_t tokens = 4;
  std::vector<int64_t> ids(static_cast<size_t>(tokens * heads));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 131 + 17) % view.rows);
  std::vector<uint16_t> out(ids.size() * static_cast<size_t>(d), 0xFFFF);  // poisoned

  if (e.backend() == engram::BackendKind::kCpu) {
    auto r = e.lookup(0, ids.data(), tokens, out.data());
    if (!r.is_ok()) return fail("Engine::lookup", r.status());
  } else {
#if ENGRAM_HAVE_CUDA
    int64_t* d_ids = nullptr;
    uint16_t* d_out = nullptr;
    if (cudaMalloc(&d_ids, ids.size() * sizeof(int64_t)) != cudaSuccess ||
        cudaMalloc(&d_out, out.size() * sizeof(uint16_t)) != cudaSuccess)
      return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
    cudaMemcpy(d_ids, ids.data(), ids.size() * sizeof(int64_t), cudaMemcpyHostToDevice);
    auto r = e.lookup(0, d_ids, tokens, d_out);
    if (!r.is_ok()) return fail("Engine::lookup", r.status());
    if (auto s = e.synchronize(); !s.is_ok()) return fail("Engine::synchronize", s);
    cudaMemcpy(out.data(), d_out, out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    cudaFree(d_ids);
    cudaFree(d_out);
#else
    return std::fprintf(stderr, "backend %s without the CUDA component\n", e.backend_name()), 1;
#endif
  }

  int bad = 0;
  std::vector<uint16_t> want(static_cast<size_t>(d));
  for (size_t p = 0; p < ids.size(); ++p) {
    engram::decode_row_reference(view.payload_of(ids[p]), view.scales_of(ids[p]), d, want.data());
    for (int i = 0; i < d; ++i) bad += out[p * static_cast<size_t>(d) + static_cast<size_t>(i)] != want[i];
  }
  std::printf("engine lookup of %zu rows on %s: %s\n", ids.size(), e.backend_name(),
              bad == 0 ? "matches the reference" : "MISMATCH");
  return bad == 0 ? 0 : 1;
}

// `engram bench copy` (CUDA builds; kernels in copy_kernels.cu, host code here because the .cu files are C++17): host <-> GPU copy bandwidth by source memory and engine, the overlap of a copy
// with a kernel, and double-buffered pinned staging.
//   - H2D and D2H of --copy-bytes from pinned (cudaMallocHost), pageable (malloc, touched) and a registered shm
//     table (memfd placed bind:N on each memory node, prefaulted, censused, cudaHostRegister'd); engine CE
//     (cudaMemcpyAsync) or SM (a kernel reading/writing the mapped host pointer with 16-B accesses; n/a for
//     pageable). Timed with events around the one copy; GB/s = bytes / t (1e9).
//   - overlap: a kernel that spins for about the copy's time on one stream and the H2D copy on another
//     (non-blocking streams); overlap = (t_copy + t_kernel - t_both) / min(t_copy, t_kernel), from host
//     clocks around each configuration. Pageable copies are staged by the driver through its own pinned
//     buffer synchronously, so they overlap little; pinned copies overlap fully.
//   - staging: --copy-bytes moved from pageable memory to the GPU through 8 MiB pinned chunks, a CPU memcpy
//     into the staging buffer then cudaMemcpyAsync: one buffer (fill, copy, wait) vs two buffers guarded by
//     events (fill one while the other copies).
// All variants of a group run interleaved in shuffled order per repetition (measure.hpp).
#if ENGRAM_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstring>
#include <fmt/format.h>

#include "bench/copy_kernels.hpp"
#include "bench/gpu.hpp"
#include "cuda/cuda_status.cuh"
#include "host/census.hpp"
#include "host/placement.hpp"
#include "sys/numa.hpp"

namespace engram::bench {
namespace {

#define CK_(x) ENGRAM_RETURN_IF_ERROR(cuda::cuda_status((x), #x))

struct Bufs {
  void* pinned = nullptr;
  void* pageable = nullptr;
  void* dev = nullptr;
  void* dev2 = nullptr;
  int* sink = nullptr;
  cudaStream_t s1 = nullptr, s2 = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<host::PlacedBacking> shm;  // one per memory node
  std::vector<int> shm_nodes;
  std::vector<bool> shm_registered;
  ~Bufs() {
    cudaDeviceSynchronize();
    for (size_t i = 0; i < shm.size(); ++i)
      if (shm_registered[i]) cudaHostUnregister(shm[i].backing.data());
    if (pinned) cudaFreeHost(pinned);
    std::free(pageable);
    if (dev) cudaFree(dev);
    if (dev2) cudaFree(dev2);
    if (sink) cudaFree(sink);
    if (s1) cudaStreamDestroy(s1);
    if (s2) cudaStreamDestroy(s2);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
  }
};

Result<Sample> timed_copy(Bufs& b, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, bool sm) {
  CK_(cudaEventRecord(b.e0, b.s1));
  if (sm) {
    void* dsrc = const_cast<void*>(src);
    void* ddst = dst;
    if (kind == cudaMemcpyHostToDevice) CK_(cudaHostGetDevicePointer(&dsrc, const_cast<void*>(src), 0));
    if (kind == cudaMemcpyDeviceToHost) CK_(cudaHostGetDevicePointer(&ddst, dst, 0));
    CK_(launch_sm_copy(dsrc, ddst, bytes / 16, b.s1));
  } else {
    CK_(cudaMemcpyAsync(dst, src, bytes, kind, b.s1));
  }
  CK_(cudaEventRecord(b.e1, b.s1));
  CK_(cudaEventSynchronize(b.e1));
  float ms = 0;
  CK_(cudaEventElapsedTime(&ms, b.e0, b.e1));
  Sample s;
  s.ns = static_cast<double>(ms) * 1e6;
  return s;
}

}  // namespace

Result<Report> run_copy_bench(Context& ctx) {
  const size_t bytes = ctx.smoke ? (size_t{64} << 20) : (size_t{1} << 30);
  const size_t chunk = size_t{8} << 20;
  Bufs b;
  CK_(cudaSetDevice(0));
  CK_(cudaStreamCreateWithFlags(&b.s1, cudaStreamNonBlocking));
  CK_(cudaStreamCreateWithFlags(&b.s2, cudaStreamNonBlocking));
  CK_(cudaEventCreate(&b.e0));
  CK_(cudaEventCreate(&b.e1));
  CK_(cudaMallocHost(&b.pinned, bytes));
  b.pageable = std::malloc(bytes);
  if (!b.pageable) return Status(Code::kOutOfMemory, "bench copy: malloc(" + std::to_string(bytes) + ")");
  std::memset(b.pageable, 0x5A, bytes);
  std::memset(b.pinned, 0x5A, bytes);
  CK_(cudaMalloc(&b.dev, bytes));
  CK_(cudaMalloc(&b.dev2, bytes));
  CK_(cudaMalloc(&b.sink, sizeof(int)));
  Report rep;
  rep.key = "copy";
  // Registered shm source per memory node.
  for (int node : sys::memory_nodes()) {
    host::BackingOptions bo;
    bo.size_bytes = bytes;
    bo.name = "engram:bench-copy";
    auto pol = host::parse_placement("bind:" + std::to_string(node));
    if (!pol.is_ok()) return pol.status();
    auto placed = host::create_placed_backings(bo, *pol);
    if (!placed.is_ok()) {
      rep.notes.push_back(fmt::format("shm on node {}: n/a: {}", node, placed.status().to_string()));
      continue;
    }
    host::TableIdentity id;
    id.bytes = bytes;
    const auto c = host::take_census((*placed)[0].backing.data(), bytes, id, host::CensusPoint::kAfterPlacement);
    rep.notes.push_back(fmt::format("registered shm source on node {}: census {:.1f}% on node {}", node,
                                    100.0 * c.fraction_on(node), node));
    std::memset((*placed)[0].backing.data(), 0x5A, bytes);
    const cudaError_t e = cudaHostRegister((*placed)[0].backing.data(), bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      rep.notes.push_back(fmt::format("shm on node {}: cudaHostRegister failed: {}", node, cudaGetErrorName(e)));
      continue;
    }
    b.shm.push_back(std::move((*placed)[0]));
    b.shm_nodes.push_back(node);
    b.shm_registered.push_back(true);
  }

  // ---- bandwidth table --------------------------------------------------------------------------------------
  struct Src {
    std::string name;
    void* host;
    bool sm_ok;
  };
  std::vector<Src> srcs = {{"pinned", b.pinned, true}, {"pageable", b.pageable, false}};
  for (size_t i = 0; i < b.shm.size(); ++i)
    srcs.push_back({fmt::format("registered shm N{}", b.shm_nodes[i]), b.shm[i].backing.data(), true});
  std::vector<Variant> vs;
  struct Key {
    std::string src, dir, engine;
  };
  std::vector<Key> keys;
  for (const auto& s : srcs)
    for (const char* dir : {"H2D", "D2H"})
      for (const char* eng : {"CE", "SM"}) {
        if (!s.sm_ok && std::string(eng) == "SM") continue;
        const bool h2d = std::string(dir) == "H2D";
        const bool sm = std::string(eng) == "SM";
        void* host = s.host;
        vs.push_back({fmt::format("{} {} {}", s.name, dir, eng), [&b, host, h2d, sm, bytes](int) {
                        return h2d ? timed_copy(b, b.dev, host, bytes, cudaMemcpyHostToDevice, sm)
                                   : timed_copy(b, host, b.dev, bytes, cudaMemcpyDeviceToHost, sm);
                      }});
        keys.push_back({s.name, dir, eng});
      }
  const int warm = std::max(1, ctx.warmup);
  ENGRAM_ASSIGN_OR_RETURN(auto bw, time_variants(vs, warm, ctx.reps, ctx.rng));
  Table t;
  t.key = "copy_gbps";
  t.title = fmt::format("Host <-> GPU copies of {} MiB: GB/s (1e9) from the median [p5, p95 of time]", bytes >> 20);
  t.columns = {{"source", 0}, {"direction", 0}, {"engine", 0}, {"median [GB/s]", 2}, {"p5 [GB/s]", 2}, {"p95 [GB/s]", 2},
               {"median [ms]", 3}};
  t.label_columns = 3;
  nlohmann::json raw = nlohmann::json::array();
  plot::Figure fig;
  fig.style = plot::Style::kBars;
  fig.title = "Host <-> GPU copy bandwidth";
  fig.x_label = "source, engine";
  fig.y_label = "bandwidth [GB/s]";
  plot::Series h2d_s{"H2D", {}, {}, {}, {}}, d2h_s{"D2H", {}, {}, {}, {}};
  for (size_t i = 0; i < bw.size(); ++i) {
    const auto s = bw[i].summary();
    const double gb = static_cast<double>(bytes);
    t.rows.push_back({Cell(keys[i].src), Cell(keys[i].dir), Cell(keys[i].engine), Cell(gb / s.median), Cell(gb / s.p95),
                      Cell(gb / s.p5), Cell(s.median / 1e6)});
    raw.push_back({{"source", keys[i].src}, {"direction", keys[i].dir}, {"engine", keys[i].engine},
                   {"bytes", bytes}, {"ns", summary_json(s)}, {"gbps", json_num(gb / s.median)}});
    const std::string cat = keys[i].src + " " + keys[i].engine;
    if (keys[i].dir == "H2D") {
      fig.categories.push_back(cat);
      h2d_s.y.push_back(gb / s.median);
    } else {
      d2h_s.y.push_back(gb / s.median);
    }
  }
  fig.series = {h2d_s, d2h_s};
  rep.tables.push_back(t);
  rep.figures.push_back(fig);
  rep.data["copies"] = raw;

  // ---- overlap: copy (pinned vs pageable) with a spin kernel ------------------------------------------------
  // Calibrate the spin kernel to about the pinned copy's time.
  int clock_khz = 0;
  CK_(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double copy_ns = bw[0].summary().median;  // pinned H2D CE
  const long long cycles = static_cast<long long>(copy_ns * 1e-9 * clock_khz * 1e3);
  auto run_cfg = [&b, bytes, cycles](void* src, bool copy, bool kernel) -> Result<Sample> {
    CK_(cudaDeviceSynchronize());
    const double t0 = now_ns();
    if (kernel) CK_(launch_spin(cycles, b.sink, b.s2));
    if (copy) CK_(cudaMemcpyAsync(b.dev, src, bytes, cudaMemcpyHostToDevice, b.s1));
    CK_(cudaDeviceSynchronize());
    Sample s;
    s.ns = now_ns() - t0;
    return s;
  };
  std::vector<Variant> ov;
  for (auto& [name, src] : std::vector<std::pair<std::string, void*>>{{"pinned", b.pinned}, {"pageable", b.pageable}}) {
    void* p = src;
    ov.push_back({name + " copy alone", [run_cfg, p](int) { return run_cfg(p, true, false); }});
    ov.push_back({name + " copy + kernel", [run_cfg, p](int) { return run_cfg(p, true, true); }});
  }
  ov.push_back({"kernel alone", [run_cfg](int) { return run_cfg(nullptr, false, true); }});
  ENGRAM_ASSIGN_OR_RETURN(auto ot, time_variants(ov, warm, ctx.reps, ctx.rng));
  const double tk = ot[4].summary().median;
  Table o;
  o.key = "overlap";
  o.title = "Overlap of an H2D copy with a kernel on another stream (non_blocking needs pinned memory)";
  o.columns = {{"source", 0}, {"copy alone [ms]", 3}, {"kernel alone [ms]", 3}, {"both [ms]", 3}, {"overlap [%]", 1}};
  for (int i = 0; i < 2; ++i) {
    const double tc = ot[static_cast<size_t>(2 * i)].summary().median;
    const double tb = ot[static_cast<size_t>(2 * i + 1)].summary().median;
    const double overlap = (tc + tk - tb) / std::min(tc, tk) * 100;
    o.rows.push_back({Cell(i == 0 ? "pinned" : "pageable"), Cell(tc / 1e6), Cell(tk / 1e6), Cell(tb / 1e6), Cell(overlap)});
    rep.data["overlap"].push_back({{"source", i == 0 ? "pinned" : "pageable"}, {"copy_ns", json_num(tc)},
                                   {"kernel_ns", json_num(tk)}, {"both_ns", json_num(tb)}, {"overlap_pct", json_num(overlap)}});
  }
  o.notes.push_back("overlap = (copy + kernel - both) / min(copy, kernel); 100% = fully hidden, 0% = serialised");
  rep.tables.push_back(o);

  // ---- staging: single vs double buffer ---------------------------------------------------------------------
  auto* pin = static_cast<uint8_t*>(b.pinned);  // two chunk buffers at pin and pin + chunk
  cudaEvent_t guard[2];
  CK_(cudaEventCreateWithFlags(&guard[0], cudaEventDisableTiming));
  CK_(cudaEventCreateWithFlags(&guard[1], cudaEventDisableTiming));
  auto staging = [&b, pin, bytes, chunk, &guard](bool dbl) -> Result<Sample> {
    const auto* src = static_cast<const uint8_t*>(b.pageable);
    auto* dst = static_cast<uint8_t*>(b.dev);
    CK_(cudaDeviceSynchronize());
    const double t0 = now_ns();
    for (size_t off = 0, i = 0; off < bytes; off += chunk, ++i) {
      const size_t n = std::min(chunk, bytes - off);
      uint8_t* buf = pin + (dbl ? (i % 2) * chunk : 0);
      if (dbl) {
        CK_(cudaEventSynchronize(guard[i % 2]));  // the copy that last read this buffer is done
      } else {
        CK_(cudaStreamSynchronize(b.s1));
      }
      std::memcpy(buf, src + off, n);
      CK_(cudaMemcpyAsync(dst + off, buf, n, cudaMemcpyHostToDevice, b.s1));
      if (dbl) CK_(cudaEventRecord(guard[i % 2], b.s1));
    }
    CK_(cudaStreamSynchronize(b.s1));
    Sample s;
    s.ns = now_ns() - t0;
    return s;
  };
  std::vector<Variant> sv = {{"single buffer", [staging](int) { return staging(false); }},
                             {"double buffer", [staging](int) { return staging(true); }},
                             {"pageable cudaMemcpy", [&b, bytes](int) -> Result<Sample> {
                                const double t0 = now_ns();
                                CK_(cudaMemcpyAsync(b.dev, b.pageable, bytes, cudaMemcpyHostToDevice, b.s1));
                                CK_(cudaStreamSynchronize(b.s1));
                                Sample s;
                                s.ns = now_ns() - t0;
                                return s;
                              }}};
  auto st = time_variants(sv, warm, ctx.reps, ctx.rng);
  cudaEventDestroy(guard[0]);
  cudaEventDestroy(guard[1]);
  if (!st.is_ok()) return st.status();
  Table sg;
  sg.key = "staging";
  sg.title = fmt::format("Pageable -> GPU through 8 MiB pinned staging chunks ({} MiB): GB/s", bytes >> 20);
  sg.columns = {{"variant", 0}, {"median [GB/s]", 2}, {"p5 [GB/s]", 2}, {"p95 [GB/s]", 2}};
  for (const auto& v : *st) {
    const auto s = v.summary();
    sg.rows.push_back({Cell(v.name), Cell(bytes / s.median), Cell(bytes / s.p95), Cell(bytes / s.p5)});
    rep.data["staging"].push_back({{"variant", v.name}, {"ns", summary_json(s)}});
  }
  rep.tables.push_back(sg);
  rep.method = {{"warmup", warm}, {"reps", ctx.reps}, {"order", "shuffled per repetition within each group"},
                {"copy_timer", "cudaEvent around one copy"}, {"overlap_timer", "steady_clock, device synchronised"},
                {"sm_copy", "264 blocks x 512 threads, 16-B loads/stores through the mapped host pointer"}};
  rep.setup = {{"bytes", bytes}, {"staging_chunk_bytes", chunk}, {"shm_nodes", b.shm_nodes},
               {"spin_cycles", cycles}, {"clock_khz", clock_khz}};
  return rep;
}

}  // namespace engram::bench
#endif  // ENGRAM_HAVE_CUDA

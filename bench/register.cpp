// `engram bench register` (CUDA builds): what it costs to make a host table GPU-readable, per GiB, by backing
// (memfd 4 KiB pages, anon-thp, hugetlb 2 MiB when the pool has room) and by registration chunk size; and how
// long a neighbour thread's cudaMemGetInfo stalls while cudaHostRegister runs (the driver lock a serving
// process's other threads meet).
// Per repetition and configuration: create + place + prefault a fresh backing (host::create_placed_backings,
// placement none, timed: "prefault s/GiB"), then cudaHostRegister(Mapped|Portable) in chunks of the given size
// (cuda::HostRegistration with prefault off: its own timer, "register s/GiB"), while a neighbour thread calls
// cudaMemGetInfo in a loop; its per-call latencies during the registration give the stall (median, p99, max),
// beside a baseline of the same loop with nothing else running. Then unregister and release.
#if ENGRAM_HAVE_CUDA
#include <cuda_runtime.h>

#include <atomic>
#include <fmt/format.h>
#include <thread>

#include "bench/gpu.hpp"
#include "cuda/registration.cuh"
#include "engram/units.hpp"
#include "host/placement.hpp"

namespace engram::bench {
namespace {

struct Probe {
  std::atomic<bool> stop{false};
  std::vector<double> lat_ns;
  std::thread th;
  void start() {
    stop = false;
    lat_ns.clear();
    th = std::thread([this] {
      cudaSetDevice(0);
      size_t f = 0, t = 0;
      while (!stop.load()) {
        const double t0 = now_ns();
        cudaMemGetInfo(&f, &t);
        lat_ns.push_back(now_ns() - t0);
      }
    });
  }
  void finish() {
    stop = true;
    if (th.joinable()) th.join();
  }
};

}  // namespace

Result<Report> run_register_bench(Context& ctx) {
  const int64_t total = ctx.smoke ? (int64_t{64} << 20) : (int64_t{4} << 30);
  std::vector<int64_t> chunks = ctx.smoke ? std::vector<int64_t>{int64_t{16} << 20, total}
                                          : std::vector<int64_t>{int64_t{256} << 20, int64_t{1} << 30, total};
  if (cudaSetDevice(0) != cudaSuccess) {
    cudaGetLastError();
    return Status(Code::kUnsupported, "bench register: no usable CUDA device");
  }
  Report rep;
  rep.key = "register";
  // Baseline of the neighbour's cudaMemGetInfo.
  Probe base;
  base.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  base.finish();
  const auto bs = stats::summarize(base.lat_ns);
  Table t;
  t.key = "register";
  t.title = fmt::format("Prefault + cudaHostRegister of {} per configuration: s/GiB (median [p5, p95]); neighbour "
                        "cudaMemGetInfo during registration (baseline median {:.1f} us, p99 {:.1f} us)",
                        format_bytes(total), bs.median / 1e3, bs.p99 / 1e3);
  t.columns = {{"backing", 0},       {"page", 0},         {"chunk", 0},           {"prefault [s/GiB]", 4},
               {"register [s/GiB]", 4}, {"reg p5", 4},     {"reg p95", 4},         {"neighbour med [us]", 1},
               {"neighbour p99 [us]", 1}, {"neighbour max [ms]", 2}};
  t.label_columns = 3;
  const double g = static_cast<double>(total) / double(1ull << 30);
  plot::Figure fig;
  fig.style = plot::Style::kBars;
  fig.title = "cudaHostRegister cost";
  fig.x_label = "backing, chunk";
  fig.y_label = "register [s/GiB]";
  plot::Series fs{"register", {}, {}, {}, {}}, fp{"prefault", {}, {}, {}, {}};
  for (const char* backing : {"memfd", "anon-thp", "hugetlb"}) {
    for (int64_t chunk : chunks) {
      std::vector<double> pre, reg, nb;
      std::string skip;
      for (int r = 0; r < std::max(1, ctx.warmup) + ctx.reps && skip.empty(); ++r) {
        host::BackingOptions bo;
        uint64_t hp = 0;
        auto kind = host::parse_backing_kind(backing, &hp);
        if (!kind.is_ok()) return kind.status();
        bo.kind = *kind;
        if (hp) bo.huge_page_bytes = hp;
        bo.size_bytes = static_cast<uint64_t>(total);
        bo.name = "engram:bench-register";
        const double t0 = now_ns();
        auto placed = host::create_placed_backings(bo, host::PlacementPolicy{});
        const double t1 = now_ns();
        if (!placed.is_ok()) {
          skip = placed.status().to_string();
          break;
        }
        cuda::RegistrationOptions ro;
        ro.max_chunk_bytes = chunk;
        ro.prefault = false;
        Probe p;
        p.start();
        auto hr = cuda::HostRegistration::register_range((*placed)[0].backing.data(), total, ro);
        p.finish();
        if (!hr.is_ok()) {
          skip = hr.status().to_string();
          break;
        }
        const double reg_s = hr->register_ns() * 1e-9;
        (void)hr->release();
        if (r >= std::max(1, ctx.warmup)) {
          pre.push_back((t1 - t0) * 1e-9 / g);
          reg.push_back(reg_s / g);
          nb.insert(nb.end(), p.lat_ns.begin(), p.lat_ns.end());
        }
      }
      const std::string page = std::string(backing) == "hugetlb" ? "2 MiB" : std::string(backing) == "anon-thp" ? "THP" : "4 KiB";
      if (!skip.empty()) {
        t.rows.push_back({Cell(backing), Cell(page), Cell(format_bytes(chunk)), Cell(NAN), Cell(NAN), Cell(NAN), Cell(NAN),
                          Cell(NAN), Cell(NAN), Cell(NAN)});
        rep.notes.push_back(fmt::format("{} chunk {}: n/a: {}", backing, format_bytes(chunk), skip));
        break;  // the backing is not available: no other chunk size will do better
      }
      const auto ps = stats::summarize(pre), rs = stats::summarize(reg), ns = stats::summarize(nb);
      t.rows.push_back({Cell(backing), Cell(page), Cell(format_bytes(chunk)), Cell(ps.median), Cell(rs.median),
                        Cell(rs.p5), Cell(rs.p95), Cell(ns.median / 1e3), Cell(ns.p99 / 1e3), Cell(ns.max / 1e6)});
      rep.data["configs"].push_back({{"backing", backing}, {"chunk_bytes", chunk}, {"bytes", total},
                                     {"prefault_s_per_gib", summary_json(ps)}, {"register_s_per_gib", summary_json(rs)},
                                     {"neighbour_memgetinfo_ns", summary_json(ns)}});
      fig.categories.push_back(fmt::format("{} {}", backing, format_bytes(chunk)));
      fs.y.push_back(rs.median);
      fp.y.push_back(ps.median);
    }
  }
  fig.series = {fs, fp};
  rep.tables.push_back(t);
  if (!fig.categories.empty()) rep.figures.push_back(fig);
  rep.data["neighbour_baseline_ns"] = summary_json(bs);
  rep.method = {{"warmup", std::max(1, ctx.warmup)}, {"reps", ctx.reps},
                {"prefault", "create_placed_backings (create + fallocate/populate), host clock"},
                {"register", "cuda::HostRegistration chunk timers (cudaHostRegister + cudaHostGetDevicePointer)"},
                {"neighbour", "a thread calling cudaMemGetInfo in a loop; per-call latency"}};
  rep.setup = {{"bytes", total}, {"chunks", chunks}};
  return rep;
}

}  // namespace engram::bench
#endif  // ENGRAM_HAVE_CUDA

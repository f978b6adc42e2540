// The fast path's start-up measurements (see fast_lookup.cuh): the calibration of the planner's costs on this
// table, and the first launch of every kernel shape a batch may run (before the calibration, and of the
// cache-probing gather once a cache is attached).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "cuda/cuda_status.cuh"
#include "cuda/fast_lookup.cuh"

namespace engram::cuda {
namespace {

// Median of 3 synchronised calls of `work` on `s`, each after `upload` (which enqueues that call's ids), timed on the
// host clock around the call (us).
Result<double> median3_us(cudaStream_t s, const std::function<Status()>& upload, const std::function<Status()>& work) {
  double t[3];
  for (double& us : t) {
    ENGRAM_RETURN_IF_ERROR(upload());
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "calibrate: sync");
    const auto t0 = std::chrono::steady_clock::now();
    ENGRAM_RETURN_IF_ERROR(work());
    ENGRAM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "calibrate: sync");
    us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  std::sort(t, t + 3);
  return t[1];
}

}  // namespace

Status FastLookup::warm_gather(bool probe, void* stream) {
  if (probe && !cache_) return Status::ok();
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t n = std::min<int64_t>(opt_.max_rows, 16);
  // Dead ids: zero rows, nothing read from the table or the cache's map.
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sanitized_, 0xFF, 8 * static_cast<size_t>(n), s), "fast lookup: warm ids");
  FastGatherArgs g = table_gather();
  g.ids = sanitized_;
  g.n = n;
  g.out = compact_;
  g.id_limit = table_->host_view().rows;
  if (probe) g.cache = cache_->map_view(nullptr);
  return warm_fast_gather(g, stream).with_context("fast lookup: warm the gather kernels");
}

Status FastLookup::warm_cache_kernels(void* stream) { return warm_gather(/*probe=*/true, stream); }

Status FastLookup::warm_kernels(void* stream) {
  LookupArgs a;  // one dead id (a fast lookup's table is never a tensor-parallel slice: one head is a valid batch)
  a.table = table_;
  a.heads = 1;
  a.tokens = 1;
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sanitized_, 0xFF, 8, static_cast<cudaStream_t>(stream)),
                              "fast lookup: warm ids");
  a.ids = sanitized_;
  a.out = compact_;
  ENGRAM_RETURN_IF_ERROR(warm_lookup(a, stream).with_context("fast lookup: warm the lookup kernels"));
  ENGRAM_RETURN_IF_ERROR(warm_gather(/*probe=*/false, stream));
  return warm_gather(/*probe=*/true, stream);
}

Status FastLookup::calibrate_cache(void* stream) {
  if (!cache_) return Status::ok();
  const auto s = static_cast<cudaStream_t>(stream);
  if (capturing(s)) return Status(Code::kInvalidArgument, "fast lookup: calibration cannot run while capturing");
  std::vector<int64_t> cached;
  cached.reserve(static_cast<size_t>(cache_->filled()));
  for (int64_t id : cache_->slot_ids())
    if (id >= 0) cached.push_back(id);
  // Neither batch reads a row twice; a cache smaller than the small batch is not timed.
  const int64_t n_big = std::min({opt_.max_rows, int64_t{65536}, static_cast<int64_t>(cached.size())});
  const int64_t n_small = std::min<int64_t>(opt_.max_rows / 2, 2048);
  if (n_small < 1 || n_big <= n_small) return Status::ok();
  // Each timed call reads cached rows no call before it read while the cache holds enough of them (then it starts
  // over): a row already in the GPU's L2 would make the hit price a cache-of-the-cache price.
  std::mt19937_64 rng(54321);
  std::shuffle(cached.begin(), cached.end(), rng);
  size_t next = 0;
  std::vector<int64_t> ids;
  ENGRAM_ASSIGN_OR_RETURN(const int sm, resolve_sm_count(0));
  // The gather with the cache's map alone, as a served cache batch runs it on ids that all hit: sanitized ids
  // (none dead), no statistics counted, the fast path's own scratch buffers in stream order.
  auto hit_us = [&](int64_t n) -> Result<double> {
    auto upload = [&]() -> Status {
      ids.resize(static_cast<size_t>(n));
      for (auto& x : ids) {
        x = cached[next];
        next = (next + 1) % cached.size();
      }
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sanitized_, ids.data(), 8 * n, cudaMemcpyHostToDevice, s),
                                  "calibrate cache: copy");
      return Status::ok();
    };
    return median3_us(s, upload, [&]() -> Status {
      FastGatherArgs g = table_gather();
      g.ids = sanitized_;
      g.n = n;
      g.out = compact_;
      g.cap = GridCap::all_sms().blocks_for(sm);
      g.cache = cache_->map_view(nullptr);
      return launch_fast_gather(g, stream).with_context("calibrate cache");
    });
  };
  ENGRAM_ASSIGN_OR_RETURN(const double big, hit_us(n_big));
  ENGRAM_ASSIGN_OR_RETURN(const double small, hit_us(n_small));
  opt_.costs.cache_hit_ns_per_row = std::max(0.0, big - small) / static_cast<double>(n_big - n_small) * 1e3;
  return Status::ok();
}

Status FastLookup::calibrate(void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (capturing(s)) return Status(Code::kInvalidArgument, "fast lookup: calibration cannot run while capturing");
  const TableView& v = table_->host_view();
  const int64_t n_big = std::min<int64_t>(opt_.max_rows, 65536);
  const int64_t n_small = std::min<int64_t>(opt_.max_rows, 2048);
  std::mt19937_64 rng(12345);
  int64_t* d_ids = nullptr;
  uint16_t* d_out = nullptr;
  // Curve sizes: decode-sized to prefill-sized batches (the rate is not constant across them).
  std::vector<int64_t> curve_rows;
  for (int64_t r : {int64_t{512}, int64_t{2048}, int64_t{8192}, int64_t{32768}, int64_t{131072}, opt_.max_rows})
    if (r <= opt_.max_rows && r <= 196608 && (curve_rows.empty() || r > curve_rows.back())) curve_rows.push_back(r);
  const int64_t n_alloc = std::max(n_big, curve_rows.empty() ? int64_t{0} : curve_rows.back());
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_ids, 8 * n_alloc), "calibrate: ids");
  ENGRAM_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_out, 2 * static_cast<size_t>(v.d) * n_alloc), "calibrate: out");
  // Every timed call reads rows no call of the calibration read before (uniform over the table, so a repeat is
  // rare): a repeated id set comes back several times faster (GPU L2, translation caches), and a price taken on
  // warm rows would be wrong for every path whose own rows are cold.
  std::vector<int64_t> host_ids;
  auto fresh = [&](int64_t n, bool sorted) {
    host_ids.resize(static_cast<size_t>(n));
    for (auto& x : host_ids) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(v.rows));
    if (sorted) std::sort(host_ids.begin(), host_ids.end());
  };
  // Median of 3 synchronised calls of `work`, each on n fresh ids uploaded first.
  auto median_us = [&](int64_t n, bool sorted, const std::function<Status()>& work) -> Result<double> {
    auto upload = [&]() -> Status {
      fresh(n, sorted);
      ENGRAM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_ids, host_ids.data(), 8 * n, cudaMemcpyHostToDevice, s),
                                  "calibrate: copy");
      return Status::ok();
    };
    return median3_us(s, upload, work);
  };
  // A whole lookup of plan p.
  auto lookup_us = [&](int64_t n, const plan::Plan& p, bool sorted = false) -> Result<double> {
    return median_us(n, sorted, [&]() -> Status {
      LookupArgs a;
      a.table = table_;
      a.ids = d_ids;
      a.ids_host = host_ids.data();
      a.tokens = n;
      a.heads = 1;
      a.out = d_out;
      a.grid_cap = GridCap::all_sms();
      return launch_plan(a, p, stream).status();
    });
  };
  // What dedup adds to the gather of the unique rows, timed alone: the dedup kernels and the scatter of the
  // batch's rows from the compact buffer (all ids distinct: every row is scattered).
  auto dedup_us = [&](int64_t n, DedupMethod m) -> Result<double> {
    return median_us(n, false, [&]() -> Status {
      ENGRAM_RETURN_IF_ERROR(dedup_->run(d_ids, n, v.rows, m, nullptr, stream));
      return launch_scatter_rows(compact_, dedup_->inverse(), n, v.d, d_out, stream);
    });
  };
  plan::Plan plain, host;
  host.host_share = 1.0;
  auto run = [&]() -> Status {
    // Every launch shape of the lookup and of the gather is loaded before anything is timed: the calibration times
    // only some of them, and the first launch of a kernel in the process (CUDA loads it then) costs far more than
    // the batch.
    ENGRAM_RETURN_IF_ERROR(warm_kernels(stream));
    ENGRAM_ASSIGN_OR_RETURN(double plain_big, lookup_us(n_big, plain));
    ENGRAM_ASSIGN_OR_RETURN(double plain_small, lookup_us(n_small, plain));
    ENGRAM_ASSIGN_OR_RETURN(double sorted_big, lookup_us(n_big, plain, /*sorted=*/true));
    ENGRAM_ASSIGN_OR_RETURN(double hash_big, dedup_us(n_big, DedupMethod::kHash));
    ENGRAM_ASSIGN_OR_RETURN(double hash_small, dedup_us(n_small, DedupMethod::kHash));
    ENGRAM_ASSIGN_OR_RETURN(double sort_big, dedup_us(n_big, DedupMethod::kSort));
    ENGRAM_ASSIGN_OR_RETURN(double sort_small, dedup_us(n_small, DedupMethod::kSort));
    plan::Costs& k = opt_.costs;
    const double dn = static_cast<double>(n_big - n_small);
    k.uva_rows_per_s = dn / std::max(1e-3, plain_big - plain_small) * 1e6;
    k.uva_fixed_us = std::max(0.0, plain_small - n_small / k.uva_rows_per_s * 1e6);
    k.uva_sorted_rows_per_s = n_big / std::max(1e-3, sorted_big - k.uva_fixed_us) * 1e6;
    // Dedup overheads per input row and per batch, linear between the two sizes (the scatter included).
    const double hash_row = std::max(0.0, hash_big - hash_small) / dn * 1e3;
    k.dedup_hash_ns_per_row = hash_row;
    k.dedup_hash_fixed_us = std::max(0.0, hash_small - n_small * hash_row * 1e-3);
    k.scatter_ns_per_row = 0;  // inside the dedup figures above
    const double sort_row = std::max(0.0, sort_big - sort_small) / dn * 1e3;
    k.dedup_sort_ns_per_row = sort_row;
    k.dedup_sort_fixed_us = std::max(0.0, sort_small - n_small * sort_row * 1e-3);
    // Sort threshold: the unique-row count above which sort dedup beats hash dedup (linear in both).
    const double a_h = k.dedup_hash_fixed_us, b_h = hash_row * 1e-3 + 1e6 / k.uva_rows_per_s;
    const double a_s = k.dedup_sort_fixed_us, b_s = sort_row * 1e-3 + 1e6 / k.uva_sorted_rows_per_s;
    k.sort_min_unique_rows = b_s < b_h ? static_cast<int64_t>(std::ceil(std::max(0.0, (a_s - a_h) / (b_h - b_s)))) + 1 : 0;
    if (cache_) {
      // Cache path on mostly-missing random ids: its map walks over the plain gather.
      plan::Plan cached;
      cached.cache = true;
      ENGRAM_ASSIGN_OR_RETURN(double cache_small, lookup_us(n_small, cached));
      k.cache_fixed_us = std::max(0.0, cache_small - plain_small);
      ENGRAM_RETURN_IF_ERROR(calibrate_cache(stream));
    }
    if (host_) {
      ENGRAM_ASSIGN_OR_RETURN(double host_big, lookup_us(n_big, host));
      ENGRAM_ASSIGN_OR_RETURN(double host_small, lookup_us(n_small, host));
      k.host_rows_per_s = dn / std::max(1e-3, host_big - host_small) * 1e6;
      k.host_fixed_us = std::max(0.0, host_small - n_small / k.host_rows_per_s * 1e6);
    }
    k.uva_curve.clear();
    k.host_curve.clear();
    k.hybrid_curve.clear();
    k.hybrid_share = host_ ? plan::balanced_host_share(k.uva_rows_per_s, k.host_rows_per_s) : 0;
    plan::Plan hybrid;
    hybrid.host_share = k.hybrid_share;
    for (int64_t r : curve_rows) {
      ENGRAM_ASSIGN_OR_RETURN(double t_uva, lookup_us(r, plain));
      k.uva_curve.emplace_back(static_cast<double>(r), t_uva);
      if (host_) {
        ENGRAM_ASSIGN_OR_RETURN(double t_host, lookup_us(r, host));
        k.host_curve.emplace_back(static_cast<double>(r), t_host);
        if (k.hybrid_share > 0) {
          ENGRAM_ASSIGN_OR_RETURN(double t_hyb, lookup_us(r, hybrid));
          k.hybrid_curve.emplace_back(static_cast<double>(r), t_hyb);
        }
      }
    }
    k.source = "start-up calibration on this table (median of 3 calls on fresh random rows: lookups of " +
               std::to_string(n_big) + " and " + std::to_string(n_small) + " rows, dedup and its scatter alone, " +
               "plain and host-gather times at " + std::to_string(curve_rows.size()) + " batch sizes)";
    return Status::ok();
  };
  // Calibration batches are not traffic: they are not counted as served paths, not timed, not learned from, and
  // the statistics they moved are restored.
  const FastLookupStats saved = totals_;
  calibrating_ = true;
  const Status st = run();
  calibrating_ = false;
  totals_ = saved;
  (void)cudaStreamSynchronize(s);
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stats_stream_));
  (void)cudaMemset(dev_stats_, 0, 3 * kStatWords * sizeof(unsigned long long));
  std::memset(pin_stats_, 0, 2 * kStatWords * sizeof(unsigned long long));
  active_stats_ = 0;
  snapshot_pending_ = false;
  read_seq_ = cut_seq_;
  counted_since_cut_ = false;
  discard_hit_intervals_ = 0;
  for (TimedBatch& t : ring_) t.pending = false;  // timed against the old costs
  snap_dedup_rows_ = snap_probes_host_ = used_dedup_rows_ = used_unique_ = used_probes_ = used_hits_ = host_probes_ = 0;
  dedup_rows_b_ = snap_dedup_rows_b_ = used_dedup_rows_b_ = used_unique_b_ = {};
  ema_hit_ = plan::kUnknown;
  // New costs: what was learned against the old ones no longer applies.
  learner_.reset();
  (void)cudaFree(d_ids);
  (void)cudaFree(d_out);
  return st;
}

}  // namespace engram::cuda

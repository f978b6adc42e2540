// Prefill counting: 7 steps x L layers of tokens x heads ids (Zipf over a 64 GiB layer's rows), submitted as the
// engine does (one batch per layer per step), `gap_ms` of step time between steps; dropped / sampled batches.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
#include "plan/hot_counts.hpp"
int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 2;
  const int64_t tokens = argc > 2 ? std::atoll(argv[2]) : 8192;
  const int gap_ms = argc > 3 ? std::atoi(argv[3]) : 0;
  const int heads = 24, steps = 7;
  const int64_t rows = (int64_t{64} << 30) / 2 / 264;  // one of two layers of a 64 GiB table, d = 256 FP8 rows
  std::mt19937_64 rng(1);
  // Zipf(1.0) ranks by inverse CDF on a log scale (fast, approximate), spread by a multiplicative hash.
  auto draw = [&](void) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const int64_t r = static_cast<int64_t>(std::exp(u * std::log(static_cast<double>(rows))));
    return static_cast<int64_t>((static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull) % static_cast<uint64_t>(rows));
  };
  std::vector<std::vector<int64_t>> batch(static_cast<size_t>(steps * layers));
  for (auto& b : batch) { b.resize(static_cast<size_t>(tokens * heads)); for (auto& x : b) x = draw(); }
  engram::plan::HotCountsOptions o;
  o.id_limit = rows;
  engram::plan::HotCountsWorker w(layers, o);
  const auto t0 = std::chrono::steady_clock::now();
  double submit_us_max = 0;
  for (int s = 0; s < steps; ++s) {
    for (int l = 0; l < layers; ++l) {
      const auto a = std::chrono::steady_clock::now();
      const auto& b = batch[static_cast<size_t>(s * layers + l)];
      w.submit(l, b.data(), static_cast<int64_t>(b.size()));
      submit_us_max = std::max(submit_us_max, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
    }
    if (gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
  }
  w.drain();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("layers %d, %lld ids per batch, %d ms between steps: %d batches, %lld counted, %lld dropped",
              layers, static_cast<long long>(tokens * heads), gap_ms, steps * layers,
              static_cast<long long>(w.counted_batches()), static_cast<long long>(w.dropped_batches()));
#ifdef SAMPLED
  std::printf(", %lld sampled (%lld ids left out)", static_cast<long long>(w.sampled_batches()),
              static_cast<long long>(w.sampled_out_ids()));
#endif
  std::printf("; submit max %.0f us; all counted after %.0f ms\n", submit_us_max, ms);
}

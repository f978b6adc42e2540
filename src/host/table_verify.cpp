// See table_verify.hpp: rows are split into ranges over the threads; each thread regenerates its rows' expected
// bytes and compares payload and scales.
#include "host/table_verify.hpp"

#include <atomic>
#include <cstring>
#include <vector>

#include "core/parallel.hpp"
#include "sys/affinity.hpp"

namespace engram::host {

int64_t count_synthetic_mismatches(const HostTable& t, uint64_t seed, int threads) {
  threads = sys::threads_or_auto(threads);
  std::atomic<int64_t> mismatched{0};
  for (int li = 0; li < t.n_layers(); ++li) {
    const TableView v = t.view(li);
    parallel_ranges(v.rows, threads, [&, li, v](int64_t lo, int64_t hi) {
      std::vector<uint8_t> p(static_cast<size_t>(v.d)), s(static_cast<size_t>(v.d / 32));
      int64_t n = 0;
      for (int64_t r = lo; r < hi; ++r) {
        synth_row(seed, li, r, v.d, p.data(), s.data());
        n += std::memcmp(v.payload_of(r), p.data(), p.size()) != 0 ||
             std::memcmp(v.scales_of(r), s.data(), s.size()) != 0;
      }
      mismatched += n;
    });
  }
  return mismatched.load();
}

}  // namespace engram::host

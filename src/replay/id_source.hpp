// IdSource: where a replay's Engram hash ids come from. Synthetic sources (uniform, Zipf) stand in for traffic
// shapes; the text source (src/replay/text_id_source.*) hashes real text with the reference N-gram hash.
// A decode step appends one token to each of `batch` sequences and yields, per Engram layer, ids [batch][heads]
// (global row ids of that layer's table, head offsets added).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engram/layout.hpp"
#include "engram/status.hpp"

namespace engram {

class IdSource {
 public:
  virtual ~IdSource() = default;
  // Fills ids[layer_index] with batch*heads ids for decode step `step`. Deterministic for a given step order.
  virtual Status next_step(int64_t step, int batch, std::vector<std::vector<int64_t>>& ids) = 0;
  virtual std::string describe() const = 0;
};

// Uniform ids over each head's rows. Deterministic for a seed.
std::unique_ptr<IdSource> make_uniform_id_source(const EngramLayout& layout, uint64_t seed);
// Zipf(alpha) ids per head: rank k has probability ∝ k^-alpha; ranks are scattered over the head's rows by a
// fixed permutation (k*a mod p, p the head's prime row count) so hot rows are not adjacent. alpha > 0.
Result<std::unique_ptr<IdSource>> make_zipf_id_source(const EngramLayout& layout, double alpha, uint64_t seed);

// Zipf sampler by rejection-inversion (Hörmann & Derflinger 1996): O(1) per draw, exact for any alpha > 0.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double alpha);
  // Returns a rank in [1, n]; advances the SplitMix64 state `rng_state`.
  int64_t sample(uint64_t& rng_state) const;

 private:
  double h(double x) const;
  double h_inv(double x) const;
  int64_t n_;
  double alpha_, h_x1_, h_n_, s_;
};

// The row (0-based, within its head) of Zipf rank `rank` (1-based) in a head of `rows` rows: (rank-1)*a mod rows
// with a fixed multiplier a coprime with the prime `rows`, a permutation that keeps hot rows apart. The one
// scatter of every Zipf id source (replay and serving).
int64_t zipf_rank_row(int64_t rank, int64_t rows);

}  // namespace engram

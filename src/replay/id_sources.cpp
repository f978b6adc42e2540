// Synthetic id sources: uniform and Zipf (see id_source.hpp). Zipf uses rejection-inversion so that a head of
// 16 M rows needs no CDF table.
#include <cmath>

#include "core/splitmix.hpp"
#include "replay/id_source.hpp"

namespace engram {

namespace {
// helper1(x) = log1p(x)/x and helper2(x) = expm1(x)/x, stable near 0.
double helper1(double x) { return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)); }
double helper2(double x) { return std::fabs(x) > 1e-8 ? std::expm1(x) / x : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x)); }
double u01_from(uint64_t& st) { return static_cast<double>(splitmix64(st) >> 11) * 0x1.0p-53; }
}  // namespace

int64_t zipf_rank_row(int64_t rank, int64_t rows) {
  // 2654435761 (0x9E3779B1) is prime: coprime with every prime row count but itself.
  const int64_t a = 2654435761 % rows == 0 ? 1 : 2654435761 % rows;
  return static_cast<int64_t>((static_cast<unsigned __int128>(rank - 1) * static_cast<uint64_t>(a)) %
                              static_cast<uint64_t>(rows));
}

ZipfSampler::ZipfSampler(int64_t n, double alpha) : n_(n), alpha_(alpha) {
  h_x1_ = h(1.5) - 1.0;
  h_n_ = h(static_cast<double>(n) + 0.5);
  s_ = 2.0 - h_inv(h(2.5) - std::exp(-alpha_ * std::log(2.0)));
}

// H(x) = ((x)^(1-alpha) - 1)/(1-alpha), written with helper2 so alpha = 1 is the log limit.
double ZipfSampler::h(double x) const {
  const double lx = std::log(x);
  return helper2((1.0 - alpha_) * lx) * lx;
}

double ZipfSampler::h_inv(double x) const {
  double t = x * (1.0 - alpha_);
  if (t < -1.0) t = -1.0;
  return std::exp(helper1(t) * x);
}

int64_t ZipfSampler::sample(uint64_t& rng_state) const {
  for (;;) {
    const double u = h_n_ + u01_from(rng_state) * (h_x1_ - h_n_);
    const double x = h_inv(u);
    // x >= 1 here, so truncating x + 0.5 rounds to nearest; kept as is: it is the reference sampler's rounding.
    int64_t k = static_cast<int64_t>(x + 0.5);  // NOLINT(bugprone-incorrect-roundings)
    if (k < 1) k = 1;
    if (k > n_) k = n_;
    if (static_cast<double>(k) - x <= s_ || u >= h(static_cast<double>(k) + 0.5) - std::exp(-alpha_ * std::log(static_cast<double>(k))))
      return k;
  }
}

namespace {

class UniformIdSource final : public IdSource {
 public:
  UniformIdSource(const EngramLayout& l, uint64_t seed) : layout_(l), seed_(seed) {}
  Status next_step(int64_t step, int batch, std::vector<std::vector<int64_t>>& ids) override {
    ids.resize(static_cast<size_t>(layout_.n_layers()));
    const int heads = layout_.heads();
    for (int li = 0; li < layout_.n_layers(); ++li) {
      uint64_t st = mix_seed(seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(li));
      auto& v = ids[static_cast<size_t>(li)];
      v.resize(static_cast<size_t>(batch) * static_cast<size_t>(heads));
      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h) {
          const int64_t p = layout_.head_rows[li][h];
          const uint64_t r = static_cast<uint64_t>((static_cast<unsigned __int128>(splitmix64(st)) * static_cast<uint64_t>(p)) >> 64);
          v[static_cast<size_t>(b) * heads + h] = layout_.head_offsets[li][h] + static_cast<int64_t>(r);
        }
    }
    return Status::ok();
  }
  std::string describe() const override { return "uniform"; }

 private:
  EngramLayout layout_;
  uint64_t seed_;
};

class ZipfIdSource final : public IdSource {
 public:
  ZipfIdSource(const EngramLayout& l, double alpha, uint64_t seed) : layout_(l), alpha_(alpha), seed_(seed) {
    for (int li = 0; li < l.n_layers(); ++li) {
      samplers_.emplace_back();
      for (int h = 0; h < l.heads(); ++h) samplers_.back().emplace_back(l.head_rows[li][h], alpha);
    }
  }
  Status next_step(int64_t step, int batch, std::vector<std::vector<int64_t>>& ids) override {
    ids.resize(static_cast<size_t>(layout_.n_layers()));
    const int heads = layout_.heads();
    for (int li = 0; li < layout_.n_layers(); ++li) {
      uint64_t st = mix_seed(seed_, static_cast<uint64_t>(step), 1000 + static_cast<uint64_t>(li));
      auto& v = ids[static_cast<size_t>(li)];
      v.resize(static_cast<size_t>(batch) * static_cast<size_t>(heads));
      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h) {
          const int64_t p = layout_.head_rows[li][h];
          const int64_t k = samplers_[li][h].sample(st);
          v[static_cast<size_t>(b) * heads + h] = layout_.head_offsets[li][h] + zipf_rank_row(k, p);
        }
    }
    return Status::ok();
  }
  std::string describe() const override {
    char buf[64];
    std::snprintf(buf, sizeof buf, "zipf(alpha=%.2f)", alpha_);
    return buf;
  }

 private:
  EngramLayout layout_;
  double alpha_;
  uint64_t seed_;
  std::vector<std::vector<ZipfSampler>> samplers_;
};

}  // namespace

std::unique_ptr<IdSource> make_uniform_id_source(const EngramLayout& layout, uint64_t seed) {
  return std::make_unique<UniformIdSource>(layout, seed);
}

Result<std::unique_ptr<IdSource>> make_zipf_id_source(const EngramLayout& layout, double alpha, uint64_t seed) {
  if (!(alpha > 0) || !std::isfinite(alpha))
    return Status(Code::kInvalidArgument, "zipf alpha must be a positive number, got " + std::to_string(alpha));
  return std::unique_ptr<IdSource>(std::make_unique<ZipfIdSource>(layout, alpha, seed));
}

}  // namespace engram

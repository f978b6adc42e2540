// Cost arithmetic as plain functions: transfer paths, KV swap-in vs recompute, Engram byte accounting,
// request-bound lookup time, placement capacity. Units: bytes, seconds,
// bytes per second, FLOP per second. GB = 1e9 B. Inputs must be positive; functions do not validate (the CLI does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engram::cost_model {

struct NamedPath {
  std::string name;
  double bytes_per_s;     // practical rate, not the datasheet peak
  std::string source;     // where the figure comes from
};
// Practical rates of the common paths plus the H200 machine's measured copies (each names its source).
const std::vector<NamedPath>& named_paths();

// t = bytes / rate.
inline double transfer_s(double bytes, double bytes_per_s) { return bytes / bytes_per_s; }

struct KvShape {
  int layers = 0, kv_heads = 0, head_dim = 0;
  double bytes_per_elem = 2;  // bf16
};
// K and V of one token: layers * kv_heads * head_dim * 2 * bytes_per_elem.
inline double kv_bytes_per_token(const KvShape& s) {
  return static_cast<double>(s.layers) * s.kv_heads * s.head_dim * 2.0 * s.bytes_per_elem;
}
// Prefill recompute FLOPs of `tokens` for a dense model of `params` parameters: 2 * params * tokens
// (attention's quadratic term ignored).
inline double recompute_flops(double params, double tokens) { return 2.0 * params * tokens; }

// Engram byte accounting (docs/terms.md) for N tokens and H heads of width d: B_source = N*H*(d + d/32) (FP8 rows +
// ue8m0 scales read from host), B_staging = 2*N*H*d (BF16 written on the device). Different paths: never summed.
inline double engram_source_bytes(double n, double h, int d) { return n * h * (d + d / 32.0); }
inline double engram_staging_bytes(double n, double h, int d) { return 2.0 * n * h * d; }
// Request-bound lookup time: rows / measured rows per second (random row reads are bound by requests, not bytes).
inline double lookup_s(double rows, double rows_per_s) { return rows / rows_per_s; }

}  // namespace engram::cost_model

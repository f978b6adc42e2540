// numpy's SeedSequence, PCG64 and bounded int64 draws (see numpy_rng.hpp for the algorithms and their
// sources). All arithmetic is on unsigned words with the wrap-around numpy's C and Cython code relies on;
// the 128-bit LCG uses the compiler's unsigned __int128 (GCC/Clang, as numpy itself does on Linux).
#include "core/numpy_rng.hpp"

#include <string>

namespace engram::numpy_rng {

namespace {

// SeedSequence constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;  // 4 bytes * 8 / 2

// hashmix(): the running hash constant is threaded through every call of one mixing pass.
uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// PCG_DEFAULT_MULTIPLIER_128.
constexpr unsigned __int128 kPcgMultiplier =
    (static_cast<unsigned __int128>(0x2360ed051fc65da4ull) << 64) | 0x4385df649fccf645ull;

unsigned __int128 make_u128(uint64_t high, uint64_t low) {
  return (static_cast<unsigned __int128>(high) << 64) | low;
}

uint64_t rotr64(uint64_t value, unsigned rot) {
  return (value >> rot) | (value << ((64 - rot) & 63));
}

// Lemire's nearly divisionless bounded draw in [0, rng] for rng < 2^32 - 1, from 32-bit draws.
uint32_t bounded_lemire_uint32(Pcg64& g, uint32_t rng) {
  const uint32_t rng_excl = rng + 1;
  uint64_t m = static_cast<uint64_t>(g.next_uint32()) * rng_excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < rng_excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(g.next_uint32()) * rng_excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

// The same on 64-bit draws, for 2^32 - 1 < rng < 2^64 - 1.
uint64_t bounded_lemire_uint64(Pcg64& g, uint64_t rng) {
  const uint64_t rng_excl = rng + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(g.next_uint64()) * rng_excl;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < rng_excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<unsigned __int128>(g.next_uint64()) * rng_excl;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

SeedSequence::SeedSequence(uint64_t entropy)
    : SeedSequence(std::vector<uint32_t>{static_cast<uint32_t>(entropy), static_cast<uint32_t>(entropy >> 32)}) {}

SeedSequence::SeedSequence(const std::vector<uint32_t>& entropy_words) {
  // numpy drops no words: an integer's upper zero words are simply absent, and an absent word mixes
  // exactly like a zero word in the first pass below, so {lo, 0} and {lo} give the same pool. Words
  // beyond the pool size are folded in by the last pass (there a trailing zero would matter, but
  // numpy never produces one: its split stops at the most significant non-zero word).
  std::vector<uint32_t> words = entropy_words;
  while (words.size() > static_cast<size_t>(kPoolSize) && words.back() == 0) words.pop_back();
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    const uint32_t w = i < static_cast<int>(words.size()) ? words[i] : 0;
    pool_[i] = hashmix(w, hash_const);
  }
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src], hash_const));
    }
  }
  for (size_t src = kPoolSize; src < words.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) pool_[dst] = mix(pool_[dst], hashmix(words[src], hash_const));
  }
}

std::vector<uint32_t> SeedSequence::generate_state_u32(int n_words) const {
  std::vector<uint32_t> state(n_words > 0 ? n_words : 0);
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < state.size(); ++i) {
    uint32_t v = pool_[i % kPoolSize];
    v ^= hash_const;
    hash_const *= kMultB;
    v *= hash_const;
    v ^= v >> kXShift;
    state[i] = v;
  }
  return state;
}

std::vector<uint64_t> SeedSequence::generate_state_u64(int n_words) const {
  const std::vector<uint32_t> w = generate_state_u32(2 * (n_words > 0 ? n_words : 0));
  std::vector<uint64_t> out(w.size() / 2);
  // numpy views the uint32 array as uint64 on a little-endian host: low word first.
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint64_t>(w[2 * i]) | (static_cast<uint64_t>(w[2 * i + 1]) << 32);
  return out;
}

Pcg64::Pcg64(const SeedSequence& seed) {
  const std::vector<uint64_t> v = seed.generate_state_u64(4);
  // pcg_setseq_128_srandom_r(initstate = (v0, v1), initseq = (v2, v3)).
  const unsigned __int128 initstate = make_u128(v[0], v[1]);
  const unsigned __int128 initseq = make_u128(v[2], v[3]);
  state_ = 0;
  inc_ = (initseq << 1) | 1u;
  state_ = state_ * kPcgMultiplier + inc_;
  state_ += initstate;
  state_ = state_ * kPcgMultiplier + inc_;
}

Pcg64::Pcg64(uint64_t state_high, uint64_t state_low, uint64_t inc_high, uint64_t inc_low)
    : state_(make_u128(state_high, state_low)), inc_(make_u128(inc_high, inc_low)) {}

uint64_t Pcg64::next_uint64() {
  state_ = state_ * kPcgMultiplier + inc_;
  const uint64_t xored = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  return rotr64(xored, static_cast<unsigned>(state_ >> 122));
}

uint32_t Pcg64::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  uinteger_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

Result<std::vector<int64_t>> integers_int64(Pcg64& bitgen, int64_t low, int64_t high, int64_t n) {
  if (n < 0) return Status(Code::kInvalidArgument, "integers: negative size " + std::to_string(n));
  if (low >= high)
    return Status(Code::kInvalidArgument,
                  "integers: low >= high (low " + std::to_string(low) + ", high " + std::to_string(high) + ")");
  const uint64_t rng = static_cast<uint64_t>(high) - 1 - static_cast<uint64_t>(low);
  const uint64_t off = static_cast<uint64_t>(low);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (auto& v : out) {
    uint64_t draw;
    if (rng == 0) {
      draw = 0;
    } else if (rng < 0xffffffffull) {
      draw = bounded_lemire_uint32(bitgen, static_cast<uint32_t>(rng));
    } else if (rng == 0xffffffffull) {
      draw = bitgen.next_uint32();
    } else {
      // rng == 2^64 - 1 cannot occur: high - 1 - low < 2^63 for int64 bounds.
      draw = bounded_lemire_uint64(bitgen, rng);
    }
    v = static_cast<int64_t>(off + draw);
  }
  return out;
}

Result<std::vector<int64_t>> default_rng_integers_int64(uint64_t seed, int64_t low, int64_t high, int64_t n) {
  Pcg64 g{SeedSequence(seed)};
  return integers_int64(g, low, high, n);
}

}  // namespace engram::numpy_rng

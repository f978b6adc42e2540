// SHA-256 (FIPS 180-4), incremental: how a compression table names the tokenizer.json it was built
// from (tools/tokenize writes the digest with Node's crypto; `sha256sum FILE` prints the same hex).
// Not used for anything secret; it only has to agree with the other implementations bit for bit,
// which tests/unit/core/test_sha256.cpp checks on the FIPS example vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace engram {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> bytes);
  // The digest of everything passed to update(); the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  // digest() as 64 lowercase hex digits.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
};

// SHA-256 of `bytes` as lowercase hex.
std::string sha256_hex(std::span<const uint8_t> bytes);

}  // namespace engram

// SHA-256 against the FIPS 180-4 example vectors (one block, two blocks, a million 'a'), fed whole
// and in uneven pieces, so that it names tokenizer.json files exactly as Node's crypto and sha256sum.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/sha256.hpp"

namespace engram {
namespace {

std::span<const uint8_t> bytes_of(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex(bytes_of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(bytes_of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(bytes_of(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesGiveTheWholeDigest) {
  std::mt19937_64 rng(std::random_device{}());
  for (size_t len : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 1000u, 4097u}) {
    std::vector<uint8_t> data(len);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const std::string whole = sha256_hex(data);
    Sha256 h;
    size_t at = 0;
    while (at < len) {
      const size_t n = std::min<size_t>(len - at, 1 + rng() % 70);
      h.update({data.data() + at, n});
      at += n;
    }
    EXPECT_EQ(h.hex_digest(), whole) << "length " << len;
  }
}

}  // namespace
}  // namespace engram

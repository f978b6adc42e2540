// FlatIdMap: a map from non-negative int64 ids to int64 values in two flat arrays (open addressing, linear probing,
// Fibonacci hashing, tombstones for erased keys). For the host side of a hot-row cache, which holds millions of
// ids: building one takes a pass over the keys with no allocation per key, and a lookup touches one or two cache
// lines (a node-based std::unordered_map of 5.6 M ids took seconds to build and a pointer chase per lookup).
// The load (keys + tombstones) stays at most 3/4: past it the map is rebuilt, doubled when the keys alone pass
// 3/8. Ids must be >= 0 (negative keys mark empty and erased entries). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace engram {

class FlatIdMap {
 public:
  // Room for n keys without a rebuild (the map keeps what it holds).
  void reserve(size_t n) {
    size_t cap = kMinCapacity;
    while (cap * 3 < n * 4) cap <<= 1;  // n keys within the 3/4 load
    if (cap > keys_.size()) rebuild(cap);
  }
  void clear() {
    keys_.assign(keys_.size(), kEmpty);
    size_ = used_ = 0;
  }
  size_t size() const { return size_; }
  bool contains(int64_t id) const { return find(id) != nullptr; }
  // The value of `id`, or nullptr.
  const int64_t* find(int64_t id) const {
    if (id < 0 || keys_.empty()) return nullptr;
    for (size_t h = index(id);; h = (h + 1) & mask_) {
      if (keys_[h] == id) return &values_[h];
      if (keys_[h] == kEmpty) return nullptr;
    }
  }
  // Sets the value of id (>= 0; a negative id is ignored).
  void insert_or_assign(int64_t id, int64_t value) {
    if (id < 0) return;
    if ((used_ + 1) * 4 > keys_.size() * 3) rebuild((size_ + 1) * 8 > keys_.size() * 3 ? 2 * keys_.size() : keys_.size());
    size_t tomb = kNone;
    for (size_t h = index(id);; h = (h + 1) & mask_) {
      if (keys_[h] == id) {
        values_[h] = value;
        return;
      }
      if (keys_[h] == kTombstone && tomb == kNone) tomb = h;
      if (keys_[h] == kEmpty) {
        const size_t at = tomb != kNone ? tomb : h;
        if (at == h) ++used_;
        keys_[at] = id;
        values_[at] = value;
        ++size_;
        return;
      }
    }
  }
  // Removes id; false when it was not there.
  bool erase(int64_t id) {
    if (id < 0 || keys_.empty()) return false;
    for (size_t h = index(id);; h = (h + 1) & mask_) {
      if (keys_[h] == id) {
        keys_[h] = kTombstone;
        --size_;
        return true;
      }
      if (keys_[h] == kEmpty) return false;
    }
  }

 private:
  static constexpr int64_t kEmpty = -1, kTombstone = -2;
  static constexpr size_t kMinCapacity = 16, kNone = ~size_t{0};
  size_t index(int64_t id) const { return static_cast<size_t>((static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift_); }
  void rebuild(size_t cap) {
    if (cap < kMinCapacity) cap = kMinCapacity;
    std::vector<int64_t> old_keys(cap, kEmpty), old_values(cap);
    old_keys.swap(keys_);
    old_values.swap(values_);
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
    size_ = used_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] >= 0) insert_or_assign(old_keys[i], old_values[i]);
  }
  std::vector<int64_t> keys_, values_;
  size_t mask_ = 0, size_ = 0, used_ = 0;  // used_: keys + tombstones
  int shift_ = 64;
};

}  // namespace engram

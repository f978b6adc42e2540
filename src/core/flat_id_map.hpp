// FlatIdMap<V>: a map from non-negative int64 ids to values V in two flat arrays (open addressing, linear probing,
// Fibonacci hashing, tombstones for erased keys). For the host side of a hot-row cache, which holds millions of
// ids and counts millions more: building one takes a pass over the keys with no allocation per key, and a lookup
// touches one or two cache lines (a node-based std::unordered_map of 5.6 M ids took seconds to build and a pointer
// chase per lookup). Iteration order is the table's, not insertion order.
// The load (keys + tombstones) stays at most 3/4: past it the map is rebuilt, doubled when the keys alone pass
// 3/8. Ids must be >= 0 (negative keys mark empty and erased entries). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace engram {

template <typename V>
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
  const V* find(int64_t id) const {
    if (id < 0 || keys_.empty()) return nullptr;
    for (size_t h = index(id);; h = (h + 1) & mask_) {
      if (keys_[h] == id) return &values_[h];
      if (keys_[h] == kEmpty) return nullptr;
    }
  }
  // Sets the value of id (>= 0; a negative id is ignored).
  void insert_or_assign(int64_t id, V value) {
    if (id >= 0) slot(id, value) = value;
  }
  // The value of id (>= 0), inserted as `init` when absent.
  V& get_or_insert(int64_t id, V init) { return slot(id, init); }
  // f(id, value&) for every key.
  template <typename F>
  void for_each(F&& f) {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] >= 0) f(keys_[i], values_[i]);
  }
  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] >= 0) f(keys_[i], static_cast<const V&>(values_[i]));
  }
  // Removes every key for which pred(id, value) holds; returns how many.
  template <typename P>
  size_t erase_if(P&& pred) {
    size_t n = 0;
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] >= 0 && pred(keys_[i], static_cast<const V&>(values_[i]))) {
        keys_[i] = kTombstone;
        --size_;
        ++n;
      }
    return n;
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
  // The entry of id (>= 0), inserted with `init` when absent.
  V& slot(int64_t id, const V& init) {
    if ((used_ + 1) * 4 > keys_.size() * 3) rebuild((size_ + 1) * 8 > keys_.size() * 3 ? 2 * keys_.size() : keys_.size());
    size_t tomb = kNone;
    for (size_t h = index(id);; h = (h + 1) & mask_) {
      if (keys_[h] == id) return values_[h];
      if (keys_[h] == kTombstone && tomb == kNone) tomb = h;
      if (keys_[h] == kEmpty) {
        const size_t at = tomb != kNone ? tomb : h;
        if (at == h) ++used_;
        keys_[at] = id;
        values_[at] = init;
        ++size_;
        return values_[at];
      }
    }
  }
  void rebuild(size_t cap) {
    if (cap < kMinCapacity) cap = kMinCapacity;
    std::vector<int64_t> old_keys(cap, kEmpty);
    std::vector<V> old_values(cap);
    old_keys.swap(keys_);
    old_values.swap(values_);
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
    size_ = used_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] >= 0) insert_or_assign(old_keys[i], old_values[i]);
  }
  std::vector<int64_t> keys_;
  std::vector<V> values_;
  size_t mask_ = 0, size_ = 0, used_ = 0;  // used_: keys + tombstones
  int shift_ = 64;
};

}  // namespace engram

// FlatIdMap<V>: a map from non-negative int64 ids to values V in one flat array of (key, value) entries (open
// addressing, linear probing, Fibonacci hashing, tombstones for erased keys). For the host side of a hot-row cache,
// which holds millions of ids and counts millions more: building one takes a pass over the keys with no allocation
// per key, and a lookup of a map far larger than the caches touches one cache line, which prefetch(id) can ask for
// ahead of the lookup (a node-based std::unordered_map of 5.6 M ids took seconds to build and a pointer chase per
// lookup). Iteration order is the table's, not insertion order.
// The load (keys + tombstones) stays at most 3/4: past it the map is rebuilt at the size that puts its keys at
// 3/8 (doubling a growing map, shrinking one that erases emptied). Keys are ids >= 0 (negative values mark empty
// and erased entries; a negative id is never stored). Not thread-safe.
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
    if (cap > entries_.size()) rebuild(cap);
  }
  void clear() {
    for (Entry& e : entries_) e.key = kEmpty;
    size_ = used_ = 0;
  }
  size_t size() const { return size_; }
  bool contains(int64_t id) const { return find(id) != nullptr; }
  // The value of `id`, or nullptr.
  const V* find(int64_t id) const {
    if (id < 0 || entries_.empty()) return nullptr;
    for (size_t h = index(id);; h = (h + 1) & mask_) {
      if (entries_[h].key == id) return &entries_[h].value;
      if (entries_[h].key == kEmpty) return nullptr;
    }
  }
  V* find(int64_t id) { return const_cast<V*>(static_cast<const FlatIdMap*>(this)->find(id)); }
  // A hint that `id` is looked up soon: its first entry is fetched into the caches meanwhile.
  void prefetch(int64_t id) const {
    if (id >= 0 && !entries_.empty()) __builtin_prefetch(&entries_[index(id)]);
  }
  // Sets the value of id (>= 0; a negative id is ignored).
  void insert_or_assign(int64_t id, V value) {
    if (id >= 0) slot(id, value) = value;
  }
  // The value of id, inserted as `init` when absent. The reference holds until the next insertion of an absent id
  // (which may rebuild the map). A negative id is not a key: the reference is to a scratch value set to `init`.
  V& get_or_insert(int64_t id, V init) {
    if (id < 0) return scratch_ = init;
    if (const V* v = find(id)) return const_cast<V&>(*v);
    return slot(id, init);
  }
  // f(id, value&) for every key.
  template <typename F>
  void for_each(F&& f) {
    for (Entry& e : entries_)
      if (e.key >= 0) f(e.key, e.value);
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Entry& e : entries_)
      if (e.key >= 0) f(e.key, e.value);
  }
  // Removes every key for which pred(id, value) holds; returns how many.
  template <typename P>
  size_t erase_if(P&& pred) {
    size_t n = 0;
    for (Entry& e : entries_)
      if (e.key >= 0 && pred(e.key, static_cast<const V&>(e.value))) {
        e.key = kTombstone;
        --size_;
        ++n;
      }
    return n;
  }
  // Removes id; false when it was not there.
  bool erase(int64_t id) {
    if (id < 0 || entries_.empty()) return false;
    for (size_t h = index(id);; h = (h + 1) & mask_) {
      if (entries_[h].key == id) {
        entries_[h].key = kTombstone;
        --size_;
        return true;
      }
      if (entries_[h].key == kEmpty) return false;
    }
  }

 private:
  static constexpr int64_t kEmpty = -1, kTombstone = -2;
  static constexpr size_t kMinCapacity = 16, kNone = ~size_t{0};
  size_t index(int64_t id) const { return static_cast<size_t>((static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift_); }
  // The entry of id (>= 0), inserted with `init` when absent.
  V& slot(int64_t id, const V& init) {
    if ((used_ + 1) * 4 > entries_.size() * 3) rebuild(capacity_for(size_ + 1));
    size_t tomb = kNone;
    for (size_t h = index(id);; h = (h + 1) & mask_) {
      Entry& e = entries_[h];
      if (e.key == id) return e.value;
      if (e.key == kTombstone && tomb == kNone) tomb = h;
      if (e.key == kEmpty) {
        const size_t at = tomb != kNone ? tomb : h;
        if (at == h) ++used_;
        entries_[at].key = id;
        entries_[at].value = init;
        ++size_;
        return entries_[at].value;
      }
    }
  }
  // Entries for n keys at a load of 3/8 (power of two, at least kMinCapacity): a rebuild's size, which doubles a
  // growing map, keeps one whose erases left tombstones, and shrinks one that pruning emptied.
  static size_t capacity_for(size_t n) {
    size_t cap = kMinCapacity;
    while (cap * 3 < n * 8) cap <<= 1;
    return cap;
  }
  void rebuild(size_t cap) {
    if (cap < kMinCapacity) cap = kMinCapacity;
    std::vector<Entry> old(cap, Entry{kEmpty, V{}});
    old.swap(entries_);
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
    size_ = used_ = 0;
    for (const Entry& e : old)
      if (e.key >= 0) insert_or_assign(e.key, e.value);
  }
  struct Entry {
    int64_t key;
    V value;
  };
  std::vector<Entry> entries_;
  V scratch_{};  // get_or_insert's answer for a negative id
  size_t mask_ = 0, size_ = 0, used_ = 0;  // used_: keys + tombstones
  int shift_ = 64;
};

}  // namespace engram

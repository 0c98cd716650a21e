// Open-addressing hash tables for the tokenizer's hot paths: merge ranks keyed by a pair of
// ids, and vocabulary lookups keyed by a string view. std::unordered_map allocates a node per
// entry and (before heterogeneous lookup) a std::string per query; these tables do neither:
// keys live in one arena, slots in one array, and a lookup is a hash plus a short probe.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::tok {

uint64_t hash_bytes(std::string_view bytes);

inline uint64_t hash_u64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// uint64 key -> V. The key ~0 is reserved (never a valid pair of 32-bit ids here).
template <typename V>
class U64Map {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
  }
  size_t size() const { return size_; }

  const V* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }

  void insert_or_assign(uint64_t key, const V& value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.key == key) {
        s.value = value;
        return;
      }
      if (s.key == kEmpty) {
        s.key = key;
        s.value = value;
        ++size_;
        return;
      }
    }
  }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };
  void rehash(size_t cap) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(cap, Slot{});
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty) insert_or_assign(s.key, s.value);
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// string -> int32. Keys are copied into an internal arena.
class StringIdMap {
 public:
  void reserve(size_t n, size_t key_bytes = 0);
  size_t size() const { return size_; }
  std::optional<int32_t> find(std::string_view key) const {
    return find_hashed(key, hash_bytes(key));
  }
  std::optional<int32_t> find_hashed(std::string_view key, uint64_t hash) const;
  void insert_or_assign(std::string_view key, int32_t value);
  void clear();
  // Bytes held by keys (for bounding caches).
  size_t key_bytes() const { return arena_.size(); }

  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.len != kEmptyLen) f(std::string_view(arena_.data() + s.offset, s.len), s.value);
    }
  }

 private:
  static constexpr uint32_t kEmptyLen = ~uint32_t{0};
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t len = kEmptyLen;
    int32_t value = 0;
  };
  void rehash(size_t cap);
  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0;
};

}  // namespace vllm::tok

// String-keyed open-addressing table (see flat_map.h).
#include "tokenizer/flat_map.h"

#include <xxhash.h>

namespace vllm::tok {

uint64_t hash_bytes(std::string_view bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

void StringIdMap::reserve(size_t n, size_t key_bytes) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap > slots_.size()) rehash(cap);
  arena_.reserve(key_bytes);
}

std::optional<int32_t> StringIdMap::find_hashed(std::string_view key, uint64_t hash) const {
  if (slots_.empty()) return std::nullopt;
  size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.len == kEmptyLen) return std::nullopt;
    if (s.hash == hash && s.len == key.size() &&
        (key.empty() || std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)) {
      return s.value;
    }
  }
}

void StringIdMap::insert_or_assign(std::string_view key, int32_t value) {
  if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
  uint64_t hash = hash_bytes(key);
  size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.len == kEmptyLen) {
      s.hash = hash;
      s.offset = static_cast<uint32_t>(arena_.size());
      s.len = static_cast<uint32_t>(key.size());
      s.value = value;
      arena_.append(key);
      ++size_;
      return;
    }
    if (s.hash == hash && s.len == key.size() &&
        (key.empty() || std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)) {
      s.value = value;
      return;
    }
  }
}

void StringIdMap::clear() {
  for (Slot& s : slots_) s = Slot{};
  arena_.clear();
  size_ = 0;
}

void StringIdMap::rehash(size_t cap) {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{});
  size_t mask = cap - 1;
  for (const Slot& s : old) {
    if (s.len == kEmptyLen) continue;
    for (size_t i = s.hash & mask;; i = (i + 1) & mask) {
      if (slots_[i].len == kEmptyLen) {
        slots_[i] = s;
        break;
      }
    }
  }
}

}  // namespace vllm::tok

// Block hashing for the prefix cache: XXH3-128 over an unambiguous byte encoding of
// (parent hash, block tokens, extra keys). See block_hash.h for the contract.
#include "engine/block_hash.h"

#include <xxhash.h>

#include <cstring>
#include <string_view>

#include "base/status.h"

namespace vllm::engine {
namespace {

BlockHash from_xxh128(XXH128_hash_t digest) {
  return BlockHash{digest.low64, digest.high64};
}

// Appends the little-endian bytes of an integer (the encoding must not depend on the host).
template <typename T>
void put_le(std::vector<uint8_t>& out, T value) {
  using U = std::make_unsigned_t<T>;
  U bits = static_cast<U>(value);
  for (size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  }
}

}  // namespace

BlockHash none_hash() {
  static const BlockHash kNoneHash = [] {
    constexpr std::string_view kSeed = "vllm.cpp prefix cache NONE_HASH v1";
    return from_xxh128(XXH3_128bits(kSeed.data(), kSeed.size()));
  }();
  return kNoneHash;
}

BlockHash hash_block_tokens(const std::optional<BlockHash>& parent_block_hash,
                            std::span<const int32_t> block_token_ids,
                            std::span<const std::string> extra_keys) {
  const BlockHash parent = parent_block_hash.value_or(none_hash());
  std::vector<uint8_t> bytes;
  size_t extra_bytes = 0;
  for (const std::string& key : extra_keys) extra_bytes += 8 + key.size();
  bytes.reserve(16 + 8 + 4 * block_token_ids.size() + 8 + extra_bytes);

  put_le(bytes, parent.low);
  put_le(bytes, parent.high);
  put_le(bytes, static_cast<uint64_t>(block_token_ids.size()));
  for (int32_t token : block_token_ids) put_le(bytes, token);
  put_le(bytes, static_cast<uint64_t>(extra_keys.size()));
  for (const std::string& key : extra_keys) {
    put_le(bytes, static_cast<uint64_t>(key.size()));
    bytes.insert(bytes.end(), key.begin(), key.end());
  }
  return from_xxh128(XXH3_128bits(bytes.data(), bytes.size()));
}

std::vector<std::string> generate_block_hash_extra_keys(const BlockHashExtras& extras,
                                                        int64_t start_token_idx) {
  std::vector<std::string> keys;
  if (!extras.lora_name.empty()) keys.push_back(extras.lora_name);
  if (start_token_idx == 0 && !extras.cache_salt.empty()) keys.push_back(extras.cache_salt);
  return keys;
}

int append_request_block_hashes(std::span<const int32_t> all_token_ids, int block_size,
                                const BlockHashExtras& extras,
                                std::vector<BlockHash>& block_hashes) {
  VLLM_CHECK_MSG(block_size > 0, "block_size {} must be positive", block_size);
  const int64_t num_tokens = static_cast<int64_t>(all_token_ids.size());
  int64_t start = static_cast<int64_t>(block_hashes.size()) * block_size;
  VLLM_CHECK_MSG(start <= num_tokens, "{} block hashes cover more than the {} tokens",
                 block_hashes.size(), num_tokens);
  std::optional<BlockHash> parent;
  if (!block_hashes.empty()) parent = block_hashes.back();
  int appended = 0;
  while (start + block_size <= num_tokens) {
    std::vector<std::string> extra_keys = generate_block_hash_extra_keys(extras, start);
    BlockHash hash = hash_block_tokens(
        parent, all_token_ids.subspan(static_cast<size_t>(start), block_size), extra_keys);
    block_hashes.push_back(hash);
    parent = hash;
    start += block_size;
    ++appended;
  }
  return appended;
}

}  // namespace vllm::engine

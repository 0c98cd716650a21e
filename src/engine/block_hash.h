// Prefix-cache keys: the hash of one full block of tokens, chained to its parent block.
//
// Port of vLLM V1's hash_block_tokens and request block hasher (vllm/v1/core/kv_cache_utils.py).
// A block's hash covers (parent block's hash, the block's token ids, extra keys), so equal
// hashes mean equal whole prefixes, not just equal blocks. The first block's parent is a fixed
// seed (vLLM's NONE_HASH).
//
// Hash function: XXH3 128-bit over a length-prefixed byte encoding (parent hash, token count,
// token ids as little-endian int32, extra-key count, each key's length and bytes). vLLM
// uses sha256 over a pickle/CBOR encoding (or Python's hash()), so the values differ from
// vLLM's, but the chaining semantics are the same. 128 bits make an accidental collision
// (which would silently reuse the wrong KV) negligible at any cache size. NONE_HASH is a fixed
// constant here (vLLM: random per process unless PYTHONHASHSEED is set), so hashes are
// reproducible across runs.
//
// Extra keys, as vLLM: the LoRA name is part of every block's key; the cache salt only of the
// first block (which, by chaining, separates every later block too). vLLM's multimodal keys
// have no counterpart yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace vllm::engine {

struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;

  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& hash) const {
    return static_cast<size_t>(hash.low ^ (hash.high * 0x9e3779b97f4a7c15ULL));
  }
};

// The parent of a request's first block.
BlockHash none_hash();

// hash(parent or NONE_HASH, block_token_ids, extra_keys). An empty extra_keys list is vLLM's
// `extra_keys=None`.
BlockHash hash_block_tokens(const std::optional<BlockHash>& parent_block_hash,
                            std::span<const int32_t> block_token_ids,
                            std::span<const std::string> extra_keys = {});

// What besides the tokens keys a request's blocks (vLLM: lora_request.lora_name, cache_salt).
struct BlockHashExtras {
  std::string lora_name;   // empty: no LoRA
  std::string cache_salt;  // empty: no salt
};

// The extra keys of the block covering tokens [start_token_idx, ...), as vLLM's
// generate_block_hash_extra_keys: [lora_name] + [cache_salt if start_token_idx == 0].
std::vector<std::string> generate_block_hash_extra_keys(const BlockHashExtras& extras,
                                                        int64_t start_token_idx);

// vLLM's request block hasher: appends to `block_hashes` the hashes of every full block of
// `all_token_ids` (prompt + output so far) that it does not cover yet. Call it when the
// request is created and after tokens are appended; a partial last block is left for later.
// Returns how many hashes were appended.
int append_request_block_hashes(std::span<const int32_t> all_token_ids, int block_size,
                                const BlockHashExtras& extras,
                                std::vector<BlockHash>& block_hashes);

}  // namespace vllm::engine

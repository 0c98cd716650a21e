// The inputs of one model step, as the engine's model runner builds them (vLLM's names).
//
// One flat batch of tokens from R requests: request r contributes rows
// [query_start_loc[r], query_start_loc[r + 1]) -- a prefill chunk or a single decode token --
// continuing from what its KV cache (and GDN state) already hold.
//
// GDN state (hybrid models): request r reads and updates state slot state_indices[r]; the
// slots of one batch must be distinct. A request starting at position 0 gets fresh state:
// when its first scheduled token is position 0 (seq_lens[r] equals its query length), the
// model zeroes its slot at the start of the step, so a slot may be reused without clearing.
// A request that continues (seq_lens[r] > query length) must keep the slot it had.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace vllm {

struct ForwardBatch {
  Tensor token_ids;     // I64 [T]
  Tensor positions;     // I64 [T]: each token's position in its sequence
  Tensor slot_mapping;  // I64 [T]: block_id * block_size + offset where its K/V go (-1: skip)
  Tensor block_tables;  // I32 [R, max_blocks_per_request]
  std::vector<int32_t> query_start_loc;  // [R + 1]
  std::vector<int32_t> seq_lens;         // [R]: context length including this step's tokens
  std::vector<int32_t> state_indices;    // [R]: GDN state slot of each request (hybrid models)
  std::vector<int64_t> logits_indices;   // rows of T whose logits are returned, in order

  int64_t num_tokens() const { return token_ids.defined() ? token_ids.size(0) : 0; }
  int64_t num_requests() const { return static_cast<int64_t>(seq_lens.size()); }
};

}  // namespace vllm

// How the layers split a model over the ranks of a tensor-parallel group (ExecContext::comm),
// as vLLM's parallel layers do (vllm/model_executor/layers/linear.py,
// vocab_parallel_embedding.py):
//   - column-parallel (q/k/v, gate/up, the GDN input projections): each rank holds the output
//     rows of its heads or its intermediate slice, contiguous ranges split evenly;
//   - row-parallel (o_proj, down_proj, the GDN out_proj): each rank holds the matching input
//     columns, and the partial outputs are summed by an all-reduce (a bias only on rank 0);
//   - KV heads: split like the query heads when there are at least as many as ranks; with
//     fewer, each rank holds one, shared by tp_size / num_kv_heads consecutive ranks;
//   - the vocabulary (embedding, LM head): padded to a multiple of 64, then split evenly; the
//     padding rows are zero and their logits are dropped after the all-gather.
// A dimension that does not divide is an error naming it.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "loader/hf_config.h"
#include "ops/exec_context.h"

namespace vllm {

struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// This rank's share of `total` items (heads, intermediate features) split evenly.
Expected<ShardRange> tp_split(const ExecContext& ctx, int64_t total, std::string_view what);
// This rank's KV heads of `num_kv_heads` (see above).
Expected<ShardRange> tp_kv_heads(const ExecContext& ctx, int64_t num_kv_heads);

// vLLM's vocabulary padding (DEFAULT_VOCAB_PADDING_SIZE).
inline constexpr int64_t kVocabPadding = 64;

struct VocabShard {
  int64_t begin = 0;    // first token id of this rank's rows
  int64_t rows = 0;     // rows per rank (the padded vocabulary / tp_size)
  int64_t present = 0;  // rows that are real tokens (the rest is padding)
  int64_t vocab_size = 0;
};
// One rank: the whole vocabulary, unpadded.
Expected<VocabShard> tp_vocab_shard(const ExecContext& ctx, int64_t vocab_size);

// Every divisibility the model's layers need at `tp_size`, checked up front (before any
// worker is started): the first that fails is the error, naming the dimension.
Status check_tensor_parallel(const ModelConfig& config, int tp_size);

}  // namespace vllm

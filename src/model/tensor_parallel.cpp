#include "model/tensor_parallel.h"

#include <algorithm>

namespace vllm {
namespace {

Expected<ShardRange> split(int rank, int size, int64_t total, std::string_view what) {
  if (total % size != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tensor parallelism: {} ({}) is not divisible by --tensor-parallel-size {}",
                      what, total, size);
  }
  const int64_t per = total / size;
  return ShardRange{rank * per, (rank + 1) * per};
}

Expected<ShardRange> kv_heads(int rank, int size, int64_t num_kv_heads) {
  if (num_kv_heads >= size) return split(rank, size, num_kv_heads, "num_key_value_heads");
  // Fewer KV heads than ranks: each is replicated on size / num_kv_heads consecutive ranks
  // (vLLM's num_kv_head_replicas; rank r holds head r / replicas).
  if (num_kv_heads <= 0 || size % num_kv_heads != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tensor parallelism: --tensor-parallel-size {} is not a multiple of "
                      "num_key_value_heads ({}), which it exceeds (each KV head must be "
                      "replicated on the same number of ranks)",
                      size, num_kv_heads);
  }
  const int64_t head = rank / (size / num_kv_heads);
  return ShardRange{head, head + 1};
}

Expected<VocabShard> vocab(int rank, int size, int64_t vocab_size) {
  VocabShard s;
  s.vocab_size = vocab_size;
  if (size == 1) {
    s.rows = s.present = vocab_size;
    return s;
  }
  const int64_t padded = (vocab_size + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
  if (padded % size != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tensor parallelism: vocab_size ({}, padded to {}) is not divisible by "
                      "--tensor-parallel-size {}",
                      vocab_size, padded, size);
  }
  s.rows = padded / size;
  s.begin = rank * s.rows;
  s.present = std::clamp<int64_t>(vocab_size - s.begin, 0, s.rows);
  return s;
}

}  // namespace

Expected<ShardRange> tp_split(const ExecContext& ctx, int64_t total, std::string_view what) {
  return split(ctx.tp_rank(), ctx.tp_size(), total, what);
}

Expected<ShardRange> tp_kv_heads(const ExecContext& ctx, int64_t num_kv_heads) {
  return kv_heads(ctx.tp_rank(), ctx.tp_size(), num_kv_heads);
}

Expected<VocabShard> tp_vocab_shard(const ExecContext& ctx, int64_t vocab_size) {
  return vocab(ctx.tp_rank(), ctx.tp_size(), vocab_size);
}

Status check_tensor_parallel(const ModelConfig& c, int tp_size) {
  if (tp_size < 1) {
    return make_error(ErrorCode::kInvalidArgument, "--tensor-parallel-size {} must be at least 1",
                      tp_size);
  }
  if (tp_size == 1) return Status::ok();
  const bool attention =
      c.layer_types.empty() ||
      std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kFullAttention) > 0;
  if (attention) {
    VLLM_RETURN_IF_ERROR(split(0, tp_size, c.num_attention_heads, "num_attention_heads").status());
    VLLM_RETURN_IF_ERROR(kv_heads(0, tp_size, c.num_key_value_heads).status());
  }
  if (std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kLinearAttention) > 0) {
    VLLM_RETURN_IF_ERROR(
        split(0, tp_size, c.linear_num_key_heads, "linear_num_key_heads").status());
  }
  return vocab(0, tp_size, c.vocab_size).status();
}

}  // namespace vllm

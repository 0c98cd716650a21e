#include "model/layers/logits.h"

#include <algorithm>

#include "base/profile.h"
#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace vllm {

Expected<Tensor> load_vocab_rows(WeightSource& w, const std::string& name, int64_t vocab_size,
                                 int64_t hidden, const ExecContext& ctx) {
  VLLM_ASSIGN_OR_RETURN(VocabShard shard, tp_vocab_shard(ctx, vocab_size));
  VLLM_ASSIGN_OR_RETURN(Tensor rows,
                        w.get_slice(name, {vocab_size, hidden},
                                    WeightSlice{0, shard.begin, shard.begin + shard.present}));
  if (shard.present == shard.rows) return rows;
  // The padding rows past the vocabulary: zero, so their logits are 0 (and dropped).
  VLLM_ASSIGN_OR_RETURN(Tensor padded,
                        empty_weight({shard.rows, hidden}, rows.dtype(), rows.device(), &ctx));
  VLLM_RETURN_IF_ERROR(ops::zero(ctx, padded));
  if (shard.present > 0) {
    Tensor dst = padded.slice(0, 0, shard.present);
    VLLM_RETURN_IF_ERROR(ops::copy(ctx, rows, dst));
  }
  return padded;
}

Status embed_tokens(const ExecContext& ctx, const Tensor& token_ids, const Tensor& table,
                    int64_t vocab_size, Tensor& h) {
  if (ctx.tp_size() == 1) return ops::embedding(ctx, token_ids, table, h);
  VLLM_ASSIGN_OR_RETURN(VocabShard shard, tp_vocab_shard(ctx, vocab_size));
  VLLM_RETURN_IF_ERROR(ops::embedding_shard(ctx, token_ids, table, shard.begin, vocab_size, h));
  return ops::all_reduce(ctx, h);
}

Expected<Tensor> compute_logits(const ExecContext& ctx, const Tensor& hidden,
                                const Tensor& residual, const Tensor& rows,
                                const LogitsHead& head) {
  VLLM_PROFILE_SCOPE("compute_logits");
  const int64_t count = rows.size(0), width = hidden.size(1);
  VLLM_ASSIGN_OR_RETURN(Tensor selected, ctx.act({count, width}));
  VLLM_ASSIGN_OR_RETURN(Tensor selected_residual, ctx.alloc({count, width}, residual.dtype()));
  VLLM_RETURN_IF_ERROR(ops::gather_rows(ctx, hidden, rows, selected));
  VLLM_RETURN_IF_ERROR(ops::gather_rows(ctx, residual, rows, selected_residual));
  VLLM_RETURN_IF_ERROR(ops::fused_add_rms_norm(ctx, selected, selected_residual, head.final_norm,
                                               head.eps, head.unit_offset));
  const int64_t vocab = head.vocab_size > 0 ? head.vocab_size : head.lm_head.size(0);
  const Shape shape{count, vocab};
  Tensor logits;
  if (ctx.device.is_cpu()) {
    VLLM_ASSIGN_OR_RETURN(logits, Tensor::try_empty(shape, DType::kF32));
  } else {
    VLLM_ASSIGN_OR_RETURN(logits, ctx.alloc(shape, DType::kF32));
  }
  const int tp = ctx.tp_size();
  if (tp == 1) {
    VLLM_RETURN_IF_ERROR(ops::linear(ctx, selected, head.lm_head, Tensor(), logits));
    return logits;
  }
  // This rank's columns, then every rank's in rank order, the padding left out.
  const int64_t per_rank = head.lm_head.size(0);
  VLLM_ASSIGN_OR_RETURN(Tensor local, ctx.alloc({count, per_rank}, DType::kF32));
  VLLM_ASSIGN_OR_RETURN(Tensor gathered, ctx.alloc({tp, count, per_rank}, DType::kF32));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, selected, head.lm_head, Tensor(), local));
  VLLM_RETURN_IF_ERROR(ops::all_gather(ctx, local, gathered));
  for (int r = 0; r < tp && count > 0; ++r) {
    const int64_t begin = r * per_rank, end = std::min(vocab, begin + per_rank);
    if (end <= begin) break;
    Tensor src = gathered.slice(0, r, r + 1).view({count, per_rank}).slice(1, 0, end - begin);
    Tensor dst = logits.slice(1, begin, end);
    VLLM_RETURN_IF_ERROR(ops::copy(ctx, src, dst));
  }
  return logits;
}

}  // namespace vllm

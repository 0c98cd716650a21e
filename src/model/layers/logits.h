// The two ends of every decoder, vocab-parallel under tensor parallelism (vLLM's
// VocabParallelEmbedding / ParallelLMHead): each rank holds its rows of the embedding table
// and of lm_head (tensor_parallel.h: the padded vocabulary split evenly). The embedding is
// each rank's rows (zeros for other ranks' tokens) all-reduced; the logits are each rank's
// columns all-gathered, padding dropped.
//
// The last step: gather the rows whose logits are wanted, apply the final RMSNorm, project
// with lm_head. Only the gathered rows pay for the vocab-sized matmul.
#pragma once

#include <string>

#include "base/status.h"
#include "model/weights.h"
#include "ops/exec_context.h"
#include "tensor/tensor.h"

namespace vllm {

// This rank's rows of a [vocab_size, hidden] weight (embed_tokens, lm_head), zero-padded to
// the shard's size; the whole tensor on a single rank.
Expected<Tensor> load_vocab_rows(WeightSource& w, const std::string& name, int64_t vocab_size,
                                 int64_t hidden, const ExecContext& ctx);

// h [T, hidden] = the rows of token_ids from this rank's `table` (load_vocab_rows), summed
// over the ranks.
Status embed_tokens(const ExecContext& ctx, const Tensor& token_ids, const Tensor& table,
                    int64_t vocab_size, Tensor& h);

struct LogitsHead {
  Tensor final_norm;  // [hidden]
  float eps = 1e-6f;
  bool unit_offset = false;  // (1 + w) norms (Qwen3.5 / Qwen3-Next)
  Tensor lm_head;            // [vocab, hidden], or this rank's rows (load_vocab_rows)
  int64_t vocab_size = 0;    // the full vocabulary
};

// The last layer's output `hidden` [T, H] (activation dtype) still to be added to the F32
// residual stream `residual` [T, H]; rows I64 [N] on ctx.device -> logits F32 [N, vocab] on
// ctx.device: only the gathered rows are added, normalised and projected. On the CPU the
// logits are a fresh tensor the caller owns; on CUDA they come from the workspace (valid
// until it is reset). Every rank of a tensor-parallel group gets the whole logits.
Expected<Tensor> compute_logits(const ExecContext& ctx, const Tensor& hidden,
                                const Tensor& residual, const Tensor& rows, const LogitsHead& head);

}  // namespace vllm

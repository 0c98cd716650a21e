// The sparse mixture-of-experts MLP of Qwen3.5-MoE and Qwen3-Next: a softmax router over E
// experts, the top-k experts' SwiGLU MLPs weighted by their (optionally renormalised)
// probabilities, plus a shared expert whose output is scaled by sigmoid(shared_expert_gate(x)).
//
// The experts are kept stacked per layer on the model's device: gate_up [E, 2I, H] (each
// expert's gate rows, then its up rows) and down [E, H, I]. Checkpoints ship them per expert
// (mlp.experts.{e}.gate_proj.weight, ...: each copied into its place in the stack as it is
// read, so no second host copy exists) or fused (mlp.experts.gate_up_proj [E, 2I, H],
// mlp.experts.down_proj [E, H, I]: taken as they are). The shared expert's gate is one more row
// of the router's matrix when their dtypes agree, so one GEMM gives both.
//
// Tensor parallelism (vLLM's default, without --enable-expert-parallel): the router and the
// shared expert's gate are replicated; every rank holds every expert's (and the shared
// expert's) slice of the intermediate features, and the block's output is all-reduced once.
// With expert parallelism each rank holds its whole experts instead (the shared expert stays
// sliced): every rank has every token (the hidden states are replicated), computes the pairs
// routed to its experts, and the same all-reduce sums them -- the token exchange expert
// parallelism needs, within one tensor-parallel group.
#pragma once

#include <string>

#include "base/status.h"
#include "model/layers/mlp.h"
#include "model/weights.h"
#include "ops/exec_context.h"
#include "ops/ops.h"

namespace vllm {

struct MoeSpec {
  int64_t hidden_size = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t intermediate_size = 0;         // per expert
  int64_t shared_intermediate_size = 0;  // 0: no shared expert
  bool renormalize = true;
  // vLLM's --enable-expert-parallel, under tensor parallelism: each rank holds whole
  // experts (a contiguous range, the remainder to the first ranks, vLLM's "linear"
  // placement) instead of a slice of every expert.
  bool expert_parallel = false;
};

class ExpertStack;

class MoeLayer {
 public:
  // prefix ends with "mlp.". A checkpoint whose experts disagree with `spec` (count, shapes)
  // fails naming the tensor.
  Status load(WeightSource& w, const std::string& prefix, const MoeSpec& spec,
              const ExecContext& ctx);
  // x [T, H] -> out [T, H].
  Status forward(const ExecContext& ctx, const Tensor& x, Tensor& out) const;
  // The decoder's residual add and post-attention RMSNorm, then forward(): residual_out =
  // residual + x, out = forward(norm(residual_out)), with the norm inside the router's product
  // (one launch fewer; ops::add_rms_norm_linear). Only where fuses_norm() says so.
  bool fuses_norm(const ExecContext& ctx, const Tensor& x, const Tensor& norm_weight) const;
  Status forward_add_norm(const ExecContext& ctx, const Tensor& x, const Tensor& residual,
                          const Tensor& norm_weight, float eps, bool unit_offset,
                          Tensor& residual_out, Tensor& out) const;
  // The router alone: logits F32 [T, E (+ 1: the shared gate's logit)], topk_weights F32 and
  // topk_ids I64 [T, top_k (+ 1: the shared expert, when it runs as expert E)], all from
  // ctx's workspace.
  struct Routing {
    Tensor logits, topk_weights, topk_ids;
    bool shared_slot = false;  // the last slot is the shared expert (expert E)
  };
  Expected<Routing> route(const ExecContext& ctx, const Tensor& x) const;

  // [E, ...], or [E + 1, ...] with the shared expert as expert E (shared_in_experts()).
  const ops::MoeWeights& experts() const { return experts_; }
  bool shared_in_experts() const { return shared_in_experts_; }
  // Batches of at most this many tokens route the stacked shared expert as a (k + 1)-th
  // slot: the expert GEMV reads its weights once for up to 8 tokens, while larger batches
  // do better with it as a plain GEMM of all their tokens.
  static constexpr int64_t kSharedSlotMaxTokens = 8;
  bool shared_slot(int64_t tokens) const {
    return shared_in_experts_ && tokens <= kSharedSlotMaxTokens;
  }

 private:
  Status load_experts(WeightSource& w, const std::string& prefix, const ExecContext& ctx);
  // Expert parallelism: this rank's whole experts.
  Status load_local_experts(WeightSource& w, const std::string& prefix, const ExecContext& ctx);
  bool expert_parallel() const { return spec_.expert_parallel; }
  // route() from the router's logits; the experts and the shared expert for x.
  Expected<Routing> route_logits(const ExecContext& ctx, Tensor logits) const;
  Status experts_forward(const ExecContext& ctx, const Tensor& x, const Routing& r,
                         Tensor& out) const;
  // {x}gate_proj / up_proj / down_proj.weight into slot `slot` of the stacks.
  Status put_mlp(WeightSource& w, const std::string& x, int64_t slot, const ExecContext& ctx,
                 ExpertStack& gate_up, ExpertStack& down) const;

  MoeSpec spec_;
  // [E, H], or [E + 1, H] with the shared expert's gate as row E; on CUDA zero rows pad it to
  // a multiple of 8 rows, so the F32 logits' rows are 32-byte aligned and cuBLASLt takes its
  // Hopper kernels (an unpadded 257-row router ran an sm_75 kernel at ~7% of peak in prefill).
  Tensor router_;
  Tensor shared_gate_;  // [1, H] when it could not join the router (another dtype)
  bool gate_in_router_ = false;
  bool shared_in_experts_ = false;
  ops::MoeWeights experts_;
  MlpLayer shared_;
};

}  // namespace vllm

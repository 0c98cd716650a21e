// The sparse mixture-of-experts MLP of Qwen3.5-MoE and Qwen3-Next: a softmax router over E
// experts, the top-k experts' SwiGLU MLPs weighted by their (optionally renormalised)
// probabilities, plus a shared expert whose output is scaled by sigmoid(shared_expert_gate(x)).
// Experts come per expert (mlp.experts.{e}.gate_proj.weight, ...) or fused
// (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]).
#pragma once

#include <string>

#include "backend/cpu/moe.h"
#include "base/status.h"
#include "model/layers/mlp.h"
#include "model/weights.h"
#include "ops/exec_context.h"

namespace vllm {

struct MoeSpec {
  int64_t hidden_size = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t intermediate_size = 0;         // per expert
  int64_t shared_intermediate_size = 0;  // 0: no shared expert
  bool renormalize = true;
};

class MoeLayer {
 public:
  // prefix ends with "mlp.".
  Status load(WeightSource& w, const std::string& prefix, const MoeSpec& spec,
              const ExecContext& ctx);
  Status forward(const ExecContext& ctx, const Tensor& x, Tensor& out) const;

 private:
  MoeSpec spec_;
  Tensor router_;  // [E, H]
  cpu::MoeExpertWeights experts_;
  MlpLayer shared_;
  Tensor shared_gate_;  // [1, H]
};

}  // namespace vllm

#include "model/layers/moe.h"

#include "ops/ops.h"

namespace vllm {

Status MoeLayer::load(WeightSource& w, const std::string& m, const MoeSpec& spec,
                      const ExecContext& ctx) {
  spec_ = spec;
  const int64_t hidden = spec.hidden_size, experts = spec.num_experts;
  const int64_t inter = spec.intermediate_size;
  VLLM_ASSIGN_OR_RETURN(router_, w.get(m + "gate.weight", {experts, hidden}));
  cpu::MoeExpertWeights& e = experts_;
  if (w.contains(m + "experts.gate_up_proj")) {
    VLLM_ASSIGN_OR_RETURN(Tensor gate_up,
                          w.get(m + "experts.gate_up_proj", {experts, 2 * inter, hidden}));
    VLLM_ASSIGN_OR_RETURN(Tensor down, w.get(m + "experts.down_proj", {experts, hidden, inter}));
    for (int64_t i = 0; i < experts; ++i) {
      Tensor one = gate_up.slice(0, i, i + 1).view({2 * inter, hidden});
      e.gate_proj.push_back(one.slice(0, 0, inter));
      e.up_proj.push_back(one.slice(0, inter, 2 * inter));
      e.down_proj.push_back(down.slice(0, i, i + 1).view({hidden, inter}));
    }
  } else {
    for (int64_t i = 0; i < experts; ++i) {
      const std::string x = m + "experts." + std::to_string(i) + ".";
      VLLM_ASSIGN_OR_RETURN(Tensor gate, w.get(x + "gate_proj.weight", {inter, hidden}));
      VLLM_ASSIGN_OR_RETURN(Tensor up, w.get(x + "up_proj.weight", {inter, hidden}));
      VLLM_ASSIGN_OR_RETURN(Tensor down, w.get(x + "down_proj.weight", {hidden, inter}));
      e.gate_proj.push_back(gate);
      e.up_proj.push_back(up);
      e.down_proj.push_back(down);
    }
  }
  if (spec.shared_intermediate_size > 0) {
    VLLM_RETURN_IF_ERROR(
        shared_.load(w, m + "shared_expert.", hidden, spec.shared_intermediate_size, ctx));
    VLLM_ASSIGN_OR_RETURN(shared_gate_, w.get(m + "shared_expert_gate.weight", {1, hidden}));
  }
  return Status::ok();
}

Status MoeLayer::forward(const ExecContext& ctx, const Tensor& x, Tensor& out) const {
  const int64_t tokens = x.size(0), k = spec_.top_k;
  VLLM_ASSIGN_OR_RETURN(Tensor logits, ctx.alloc({tokens, spec_.num_experts}, DType::kF32));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, router_, Tensor(), logits));
  VLLM_ASSIGN_OR_RETURN(Tensor weights, ctx.alloc({tokens, k}, DType::kF32));
  VLLM_ASSIGN_OR_RETURN(Tensor ids, ctx.alloc({tokens, k}, DType::kI64));
  VLLM_RETURN_IF_ERROR(ops::moe_route(ctx, logits, k, spec_.renormalize, weights, ids));
  VLLM_RETURN_IF_ERROR(ops::moe_experts(ctx, x, experts_, weights, ids, out));
  if (!shared_.loaded()) return Status::ok();
  VLLM_ASSIGN_OR_RETURN(Tensor shared, ctx.act({tokens, spec_.hidden_size}));
  VLLM_ASSIGN_OR_RETURN(Tensor gate, ctx.act({tokens, 1}));
  VLLM_RETURN_IF_ERROR(shared_.forward(ctx, x, shared));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, shared_gate_, Tensor(), gate));
  return ops::add_sigmoid_gated(ctx, out, shared, gate);
}

}  // namespace vllm

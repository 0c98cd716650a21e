// Gated DeltaNet and mixture-of-experts ops of the op layer (ops.h).
#include <cmath>

#include "backend/cpu/gates.h"
#include "backend/cpu/gdn.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "base/profile.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if VLLM_WITH_CUDA
#include "backend/cuda/gdn.cuh"
#include "backend/cuda/moe.cuh"
#endif

namespace vllm::ops {

using detail::unsupported;
#if VLLM_WITH_CUDA
using detail::stream;

namespace {
cuda::GdnBatch cuda_batch(const BatchLayout& layout) {
  cuda::GdnBatch b;
  b.query_start_loc = layout.query_start_loc_device;
  b.state_indices = layout.state_indices_device;
  b.max_query_len = layout.max_query_len;
  b.states_settled = true;  // a step's layout, and a layer's own states (cuda::GdnBatch)
  return b;
}
}  // namespace
#endif

Status causal_conv1d(const ExecContext& ctx, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, const BatchLayout& layout, Tensor& conv_state,
                     Tensor& out) {
  VLLM_PROFILE_SCOPE("causal_conv1d");
  if (out.device().is_cpu()) {
    return cpu::causal_conv1d(x, weight, bias,
                              cpu::GdnBatch{layout.query_start_loc, layout.state_indices},
                              conv_state, out);
  }
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) {
    return cuda::causal_conv1d(x, weight, bias, cuda_batch(layout), conv_state, out, stream(ctx));
  }
#endif
  return unsupported("causal_conv1d", out);
}

Status gdn_gating(const ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& A_log,
                  const Tensor& dt_bias, Tensor& g, Tensor& beta) {
  VLLM_PROFILE_SCOPE("gdn_gating");
  if (g.device().is_cpu()) return cpu::gdn_gating(a, b, A_log, dt_bias, g, beta);
#if VLLM_WITH_CUDA
  if (g.device().is_cuda()) return cuda::gdn_gating(a, b, A_log, dt_bias, g, beta, stream(ctx));
#endif
  return unsupported("gdn_gating", g);
}

Status gated_delta_rule(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& g, const Tensor& beta, const BatchLayout& layout,
                        const DeltaRuleArgs& args, Tensor& state, Tensor& out) {
  VLLM_PROFILE_SCOPE("gated_delta_rule");
  if (out.device().is_cpu()) {
    cpu::GatedDeltaRuleParams p;
    p.use_qk_l2norm = args.use_qk_l2norm;
    p.l2norm_eps = args.l2norm_eps;
    p.scale = args.scale;
    return cpu::gated_delta_rule(q, k, v, g, beta,
                                 cpu::GdnBatch{layout.query_start_loc, layout.state_indices}, p,
                                 state, out);
  }
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) {
    cuda::GatedDeltaRuleParams p;
    p.use_qk_l2norm = args.use_qk_l2norm;
    p.l2norm_eps = args.l2norm_eps;
    p.scale = args.scale;
    const cuda::GdnBatch batch = cuda_batch(layout);
    // Scratch of the chunked form (long prefill rows): per-chunk products of every chunk.
    const size_t bytes = cuda::gated_delta_rule_workspace_size(q, state, batch, p);
    if (bytes > 0) {
      VLLM_ASSIGN_OR_RETURN(p.workspace, ctx.alloc({static_cast<int64_t>(bytes)}, DType::kU8));
    }
    return cuda::gated_delta_rule(q, k, v, g, beta, batch, p, state, out, stream(ctx));
  }
#endif
  return unsupported("gated_delta_rule", out);
}

Status gated_rms_norm(const ExecContext& ctx, const Tensor& x, const Tensor& z,
                      const Tensor& weight, float eps, Tensor& out) {
  VLLM_PROFILE_SCOPE("gated_rms_norm");
  if (out.device().is_cpu()) return cpu::gated_rms_norm(x, z, weight, eps, out);
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) return cuda::gated_rms_norm(x, z, weight, eps, out, stream(ctx));
#endif
  return unsupported("gated_rms_norm", out);
}

Status moe_route(const ExecContext& ctx, const Tensor& router_logits, int64_t top_k,
                 bool renormalize, Tensor& topk_weights, Tensor& topk_ids, bool shared_slot) {
  VLLM_PROFILE_SCOPE("moe_route");
  if (topk_weights.device().is_cpu()) {
    if (!shared_slot) {
      return cpu::moe_route(router_logits, top_k, renormalize, topk_weights, topk_ids);
    }
    const int64_t tokens = router_logits.size(0), experts = router_logits.size(1) - 1;
    if (router_logits.ndim() != 2 || experts < 1 || topk_weights.ndim() != 2 ||
        topk_weights.size(1) != top_k + 1 || topk_ids.shape() != topk_weights.shape() ||
        !topk_weights.is_contiguous() || !topk_ids.is_contiguous()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "moe_route with a shared slot: router_logits {} must be [T, E + 1] and "
                        "topk_weights {} / topk_ids {} contiguous [T, top_k + 1]",
                        router_logits.to_string(), topk_weights.to_string(), topk_ids.to_string());
    }
    VLLM_ASSIGN_OR_RETURN(Tensor logits, detail::contiguous(ctx, router_logits));
    Tensor w = Tensor::empty({tokens, top_k}, DType::kF32);
    Tensor ids = Tensor::empty({tokens, top_k}, DType::kI64);
    VLLM_RETURN_IF_ERROR(cpu::moe_route(logits.slice(1, 0, experts), top_k, renormalize, w, ids));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < top_k; ++i) {
        topk_weights.data<float>()[t * (top_k + 1) + i] = w.data<float>()[t * top_k + i];
        topk_ids.data<int64_t>()[t * (top_k + 1) + i] = ids.data<int64_t>()[t * top_k + i];
      }
      const float gate = logits.data<float>()[t * (experts + 1) + experts];
      topk_weights.data<float>()[t * (top_k + 1) + top_k] = 1.0f / (1.0f + std::exp(-gate));
      topk_ids.data<int64_t>()[t * (top_k + 1) + top_k] = experts;
    }
    return Status::ok();
  }
#if VLLM_WITH_CUDA
  if (topk_weights.device().is_cuda()) {
    return cuda::moe_route(router_logits, top_k, renormalize, topk_weights, topk_ids, stream(ctx),
                           shared_slot);
  }
#endif
  return unsupported("moe_route", topk_weights);
}

Status moe_experts(const ExecContext& ctx, const Tensor& x, const MoeWeights& experts,
                   const Tensor& topk_weights, const Tensor& topk_ids,
                   const MoeSharedExpert& shared, Tensor& out) {
  VLLM_PROFILE_SCOPE("moe_experts");
  if (out.device().is_cpu()) {
    const bool shaped = x.ndim() == 2 && topk_ids.ndim() == 2 && experts.gate_up.ndim() == 3 &&
                        experts.down.ndim() == 3;  // else moe_experts_stacked says what is wrong
    const int64_t bytes = !shaped ? 0
                                  : static_cast<int64_t>(cpu::moe_experts_scratch_bytes(
                                        x.size(0), topk_ids.size(1), x.size(1),
                                        experts.down.size(2), experts.gate_up.size(0)));
    VLLM_ASSIGN_OR_RETURN(Tensor scratch, ctx.alloc({bytes}, DType::kU8));
    VLLM_RETURN_IF_ERROR(cpu::moe_experts_stacked(
        x, experts.gate_up_weight(), experts.down_weight(), topk_weights, topk_ids, scratch, out,
        experts.first_expert, experts.num_experts));
    if (!shared.out.defined()) return Status::ok();
    VLLM_ASSIGN_OR_RETURN(Tensor gate, detail::contiguous(ctx, shared.gate));
    return cpu::add_sigmoid_gated(out, shared.out, gate);
  }
  const bool expert_parallel =
      experts.first_expert != 0 || (experts.num_experts != 0 && experts.gate_up.defined() &&
                                    experts.num_experts != experts.gate_up.size(0));
  if (expert_parallel) return unsupported("moe_experts with expert parallelism", out);
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) {
    cuda::MoeExpertsArgs args;
    args.gate_up = experts.gate_up;
    args.down = experts.down;
    if (experts.is_fp8()) {
      args.gate_up_scale_inv = experts.gate_up_scale_inv;
      args.gate_up_block = experts.gate_up_block;
      args.down_scale_inv = experts.down_scale_inv;
      args.down_block = experts.down_block;
    }
    args.shared_out = shared.out;
    args.shared_gate = shared.gate;
    args.shared_last_slot = shared.in_last_slot;
    VLLM_ASSIGN_OR_RETURN(size_t bytes, cuda::moe_experts_scratch_bytes(x, topk_ids, args));
    VLLM_ASSIGN_OR_RETURN(Tensor scratch, ctx.alloc({static_cast<int64_t>(bytes)}, DType::kU8));
    return cuda::moe_experts(x, topk_weights, topk_ids, args, scratch, out, stream(ctx));
  }
#endif
  return unsupported("moe_experts", out);
}

}  // namespace vllm::ops

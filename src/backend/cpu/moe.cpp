// Mixture-of-experts routing and expert dispatch on the CPU (see moe.h).
//
// Dispatch groups the tokens by expert, gathers each expert's rows into one small batch and
// runs its three projections through cpu::linear, so each expert weight is read once per
// step however many tokens chose it (what a grouped GEMM does on the GPU).
#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/ops.h"

namespace vllm::cpu {

MoeExpertWeights experts_from_stacked(const Tensor& gate_up, const Tensor& down) {
  MoeExpertWeights e;
  if (gate_up.ndim() != 3 || down.ndim() != 3) return e;  // moe_experts names the problem
  const int64_t experts = gate_up.size(0), inter = gate_up.size(1) / 2;
  for (int64_t i = 0; i < experts; ++i) {
    Tensor one = gate_up.slice(0, i, i + 1).view({gate_up.size(1), gate_up.size(2)});
    e.gate_proj.push_back(one.slice(0, 0, inter));
    e.up_proj.push_back(one.slice(0, inter, 2 * inter));
  }
  for (int64_t i = 0; i < down.size(0); ++i) {
    e.down_proj.push_back(down.slice(0, i, i + 1).view({down.size(1), down.size(2)}));
  }
  return e;
}

Status moe_route(const Tensor& router_logits, int64_t top_k, bool renormalize, Tensor& topk_weights,
                 Tensor& topk_ids) {
  constexpr std::string_view kOp = "moe_route";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "router_logits", router_logits, {DType::kF32}, 2));
  const int64_t tokens = router_logits.size(0);
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "topk_weights", topk_weights, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(
      detail::check_shape(kOp, "topk_weights", topk_weights, {tokens, top_k}, "([tokens, top_k])"));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "topk_weights", topk_weights));
  Tensor probs = Tensor::empty(router_logits.shape(), DType::kF32);
  VLLM_RETURN_IF_ERROR(softmax(router_logits, probs));
  VLLM_RETURN_IF_ERROR(cpu::top_k(probs, top_k, topk_weights, topk_ids));
  if (!renormalize) return Status::ok();
  float* w = topk_weights.data<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    float sum = 0.0f;
    for (int64_t i = 0; i < top_k; ++i) sum += w[t * top_k + i];
    for (int64_t i = 0; i < top_k; ++i) w[t * top_k + i] /= sum;
  }
  return Status::ok();
}

Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const Tensor& topk_weights,
                   const Tensor& topk_ids, Tensor& out) {
  constexpr std::string_view kOp = "moe_experts";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  const int64_t tokens = x.size(0), hidden = x.size(1);
  const int64_t num_experts = experts.num_experts();
  if (num_experts == 0 || static_cast<int64_t>(experts.up_proj.size()) != num_experts ||
      static_cast<int64_t>(experts.down_proj.size()) != num_experts) {
    return make_error(ErrorCode::kInvalidArgument,
                      "moe_experts: experts have {} gate, {} up and {} down projections; expected "
                      "the same positive number of each",
                      experts.gate_proj.size(), experts.up_proj.size(), experts.down_proj.size());
  }
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "topk_weights", topk_weights, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "topk_weights", topk_weights));
  const int64_t k = topk_weights.size(1);
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "topk_weights", topk_weights, {tokens, k},
                                           "([tokens of x, top_k])"));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "topk_ids", topk_ids, {DType::kI64}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "topk_ids", topk_ids));
  VLLM_RETURN_IF_ERROR(
      detail::check_shape(kOp, "topk_ids", topk_ids, {tokens, k}, "(shape of topk_weights)"));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "out", out, {tokens, hidden}, "(shape of x)"));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));

  // Token rows (and their weight) per expert, in token order.
  const int64_t* ids = topk_ids.data<int64_t>();
  const float* weights = topk_weights.data<float>();
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t e = ids[t * k + i];
      if (e < 0 || e >= num_experts) {
        return make_error(ErrorCode::kOutOfRange,
                          "moe_experts: topk_ids[{}, {}] = {} is not one of the {} experts", t, i,
                          e, num_experts);
      }
      routed[static_cast<size_t>(e)].push_back({t, weights[t * k + i]});
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    std::fill_n(out_rows.row<float>(t), hidden, 0.0f);
  }

  for (int64_t e = 0; e < num_experts; ++e) {
    const auto& rows = routed[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const Tensor& gate_w = experts.gate_proj[static_cast<size_t>(e)];
    const Tensor& up_w = experts.up_proj[static_cast<size_t>(e)];
    const Tensor& down_w = experts.down_proj[static_cast<size_t>(e)];
    const int64_t inter = gate_w.size(0);
    const auto n = static_cast<int64_t>(rows.size());
    Tensor xe = Tensor::empty({n, hidden}, DType::kF32);
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(x_rows.row<float>(rows[j].first), hidden, xe.data<float>() + j * hidden);
    }
    Tensor gate_up = Tensor::empty({n, 2 * inter}, DType::kF32);
    Tensor gate = gate_up.slice(1, 0, inter), up = gate_up.slice(1, inter, 2 * inter);
    Tensor act = Tensor::empty({n, inter}, DType::kF32);
    Tensor ye = Tensor::empty({n, hidden}, DType::kF32);
    Status s = linear(xe, gate_w, Tensor(), gate);
    if (s.is_ok()) s = linear(xe, up_w, Tensor(), up);
    if (s.is_ok()) s = silu_and_mul(gate_up, act);
    if (s.is_ok()) s = linear(act, down_w, Tensor(), ye);
    if (!s.is_ok()) return s.with_context(fmt::format("moe_experts: expert {}", e));
    for (int64_t j = 0; j < n; ++j) {
      float* o = out_rows.row<float>(rows[j].first);
      const float* y = ye.data<float>() + j * hidden;
      const float w = rows[j].second;
      for (int64_t c = 0; c < hidden; ++c) o[c] += y[c] * w;
    }
  }
  return Status::ok();
}

}  // namespace vllm::cpu

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
#include "backend/cpu/linear_kernels.h"
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

namespace {

constexpr size_t kScratchAlign = 64;

size_t align_up(size_t n) {
  return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

// The scratch layout: per routed (token, expert) pair, sorted by expert, its token and weight;
// then the gathered rows x [P, H], gate|up [P, 2I], act [P, I] and expert outputs [P, H].
struct MoeScratch {
  int64_t* start = nullptr;  // [E + 1]: expert e's pairs are [start[e], start[e + 1])
  int64_t* fill = nullptr;   // [E]
  int64_t* token = nullptr;
  float* weight = nullptr;
  float* xe = nullptr;
  float* gate_up = nullptr;
  float* act = nullptr;
  float* ye = nullptr;
};

size_t scratch_layout(int64_t pairs, int64_t hidden, int64_t inter, int64_t experts, char* base,
                      MoeScratch* s) {
  size_t offset = 0;
  auto take = [&](size_t bytes) {
    char* p = base == nullptr ? nullptr : base + offset;
    offset += align_up(bytes);
    return p;
  };
  const auto P = static_cast<size_t>(pairs);
  char* start = take(static_cast<size_t>(experts + 1) * sizeof(int64_t));
  char* fill = take(static_cast<size_t>(experts) * sizeof(int64_t));
  char* token = take(P * sizeof(int64_t));
  char* weight = take(P * sizeof(float));
  char* xe = take(P * static_cast<size_t>(hidden) * sizeof(float));
  char* gate_up = take(P * static_cast<size_t>(2 * inter) * sizeof(float));
  char* act = take(P * static_cast<size_t>(inter) * sizeof(float));
  char* ye = take(P * static_cast<size_t>(hidden) * sizeof(float));
  if (s != nullptr) {
    s->start = reinterpret_cast<int64_t*>(start);
    s->fill = reinterpret_cast<int64_t*>(fill);
    s->token = reinterpret_cast<int64_t*>(token);
    s->weight = reinterpret_cast<float*>(weight);
    s->xe = reinterpret_cast<float*>(xe);
    s->gate_up = reinterpret_cast<float*>(gate_up);
    s->act = reinterpret_cast<float*>(act);
    s->ye = reinterpret_cast<float*>(ye);
  }
  return offset + kScratchAlign;  // room to align the base
}

}  // namespace

size_t moe_experts_scratch_bytes(int64_t tokens, int64_t top_k, int64_t hidden, int64_t inter,
                                 int64_t num_experts) {
  return scratch_layout(tokens * top_k, hidden, inter, num_experts, nullptr, nullptr);
}

Status moe_experts_stacked(const Tensor& x, const LinearWeight& gate_up_weight,
                           const LinearWeight& down_weight, const Tensor& topk_weights,
                           const Tensor& topk_ids, Tensor& scratch, Tensor& out,
                           int64_t first_expert, int64_t num_global_experts) {
  constexpr std::string_view kOp = "moe_experts";
  const Tensor& gate_up = gate_up_weight.weight;
  const Tensor& down = down_weight.weight;
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_RETURN_IF_ERROR(detail::check_linear_weight(kOp, "gate_up", gate_up_weight));
  VLLM_RETURN_IF_ERROR(detail::check_linear_weight(kOp, "down", down_weight));
  const int64_t tokens = x.size(0), hidden = x.size(1);
  if (gate_up.ndim() != 3 || down.ndim() != 3 || gate_up.size(1) % 2 != 0 ||
      gate_up.size(2) != hidden || down.size(0) != gate_up.size(0) || down.size(1) != hidden ||
      down.size(2) != gate_up.size(1) / 2 || gate_up.size(0) == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "moe_experts: gate_up {} and down {} are not [E, 2I, {}] and [E, {}, I]",
                      shape_to_string(gate_up.shape()), shape_to_string(down.shape()), hidden,
                      hidden);
  }
  const int64_t num_experts = gate_up.size(0), inter = down.size(2);
  const int64_t global = num_global_experts > 0 ? num_global_experts : num_experts;
  if (first_expert < 0 || first_expert + num_experts > global) {
    return make_error(ErrorCode::kInvalidArgument,
                      "moe_experts: experts [{}, {}) are not a range of the {} experts",
                      first_expert, first_expert + num_experts, global);
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
  VLLM_RETURN_IF_ERROR(detail::check_cpu(kOp, "scratch", scratch));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "scratch", scratch));
  const size_t need = moe_experts_scratch_bytes(tokens, k, hidden, inter, num_experts);
  if (scratch.nbytes() < need) {
    return make_error(ErrorCode::kInvalidArgument, "moe_experts: scratch has {} bytes, needs {}",
                      scratch.nbytes(), need);
  }

  // Counting sort of the (token, expert) pairs by expert, tokens in order within an expert.
  const int64_t* ids = topk_ids.data<int64_t>();
  const float* weights = topk_weights.data<float>();
  auto base_addr = reinterpret_cast<uintptr_t>(scratch.data_ptr());
  char* base = static_cast<char*>(scratch.data_ptr()) +
               (kScratchAlign - base_addr % kScratchAlign) % kScratchAlign;
  MoeScratch sc;
  scratch_layout(tokens * k, hidden, inter, num_experts, base, &sc);
  int64_t* start = sc.start;
  std::fill_n(start, num_experts + 1, 0);
  auto local = [&](int64_t e) { return e - first_expert; };  // outside [0, E): another rank's
  for (int64_t i = 0; i < tokens * k; ++i) {
    const int64_t e = ids[i];
    if (e < 0 || e >= global) {
      return make_error(ErrorCode::kOutOfRange,
                        "moe_experts: topk_ids[{}, {}] = {} is not one of the {} experts", i / k,
                        i % k, e, global);
    }
    if (local(e) >= 0 && local(e) < num_experts) ++start[local(e) + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) start[e + 1] += start[e];
  std::copy_n(start, num_experts, sc.fill);
  for (int64_t i = 0; i < tokens * k; ++i) {
    const int64_t e = local(ids[i]);
    if (e < 0 || e >= num_experts) continue;
    const int64_t at = sc.fill[e]++;
    sc.token[at] = i / k;
    sc.weight[at] = weights[i];
  }
  for (int64_t t = 0; t < tokens; ++t) std::fill_n(out_rows.row<float>(t), hidden, 0.0f);

  const size_t gate_up_stride =
      static_cast<size_t>(2 * inter * hidden) * dtype_size(gate_up.dtype());
  const size_t down_stride = static_cast<size_t>(hidden * inter) * dtype_size(down.dtype());
  // FP8 experts: each expert's scale grid follows the previous one's.
  auto scale_grid = [](const LinearWeight& w) {
    return w.is_fp8() ? w.scale_inv.size(1) * w.scale_inv.size(2) : int64_t{0};
  };
  const int64_t gate_up_grid = scale_grid(gate_up_weight), down_grid = scale_grid(down_weight);
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t first = start[e], n = start[e + 1] - start[e];
    if (n == 0) continue;
    float* xe = sc.xe + first * hidden;
    float* gu = sc.gate_up + first * 2 * inter;
    float* act = sc.act + first * inter;
    float* ye = sc.ye + first * hidden;
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(x_rows.row<float>(sc.token[first + j]), hidden, xe + j * hidden);
    }
    detail::LinearArgs a;
    a.x = xe;
    a.ldx = hidden;
    a.w = static_cast<const char*>(gate_up.data_ptr()) + static_cast<size_t>(e) * gate_up_stride;
    a.w_dtype = gate_up.dtype();
    detail::set_weight_scales(gate_up_weight, &a);
    if (a.w_scale != nullptr) a.w_scale += e * gate_up_grid;
    a.out = gu;
    a.ldo = 2 * inter;
    a.M = n;
    a.N = 2 * inter;
    a.K = hidden;
    detail::run_linear(a);
    for (int64_t j = 0; j < n; ++j) {
      const float* g = gu + j * 2 * inter;
      const float* u = g + inter;
      float* o = act + j * inter;
      for (int64_t i = 0; i < inter; ++i) o[i] = (g[i] / (1.0f + std::exp(-g[i]))) * u[i];
    }
    a.x = act;
    a.ldx = inter;
    a.w = static_cast<const char*>(down.data_ptr()) + static_cast<size_t>(e) * down_stride;
    a.w_dtype = down.dtype();
    a.w_scale = nullptr;
    detail::set_weight_scales(down_weight, &a);
    if (a.w_scale != nullptr) a.w_scale += e * down_grid;
    a.out = ye;
    a.ldo = hidden;
    a.N = hidden;
    a.K = inter;
    detail::run_linear(a);
    for (int64_t j = 0; j < n; ++j) {
      float* o = out_rows.row<float>(sc.token[first + j]);
      const float* y = ye + j * hidden;
      const float w = sc.weight[first + j];
      for (int64_t c = 0; c < hidden; ++c) o[c] += y[c] * w;
    }
  }
  return Status::ok();
}

}  // namespace vllm::cpu

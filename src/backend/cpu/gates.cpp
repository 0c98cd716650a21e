#include "backend/cpu/gates.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/common.h"

namespace vllm::cpu {
namespace {

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace

Status split_q_gate(const Tensor& q_gate, int64_t head_dim, Tensor& query, Tensor& gate) {
  constexpr std::string_view kOp = "split_q_gate";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "q_gate", q_gate, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "query", query, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "gate", gate, {DType::kF32}, 2));
  const int64_t tokens = q_gate.size(0);
  if (head_dim <= 0 || q_gate.size(1) % (2 * head_dim) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "split_q_gate: q_gate {} does not split into heads of 2 * {}",
                      q_gate.to_string(), head_dim);
  }
  const int64_t q_dim = q_gate.size(1) / 2, heads = q_dim / head_dim;
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "query", query, {tokens, q_dim}));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "gate", gate, {tokens, q_dim}));
  VLLM_ASSIGN_OR_RETURN(detail::Rows src, detail::as_rows(kOp, "q_gate", q_gate));
  VLLM_ASSIGN_OR_RETURN(detail::Rows q, detail::as_rows(kOp, "query", query));
  VLLM_ASSIGN_OR_RETURN(detail::Rows g, detail::as_rows(kOp, "gate", gate));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* head = src.row<float>(t) + h * 2 * head_dim;
      std::copy_n(head, head_dim, q.row<float>(t) + h * head_dim);
      std::copy_n(head + head_dim, head_dim, g.row<float>(t) + h * head_dim);
    }
  }
  return Status::ok();
}

Status sigmoid_gate_mul(Tensor& x, const Tensor& gate) {
  constexpr std::string_view kOp = "sigmoid_gate_mul";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "gate", gate, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "gate", gate, x.shape(), "(the shape of x)"));
  VLLM_ASSIGN_OR_RETURN(detail::Rows xr, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows gr, detail::as_rows(kOp, "gate", gate));
  for (int64_t t = 0; t < xr.rows; ++t) {
    float* a = xr.row<float>(t);
    const float* g = gr.row<float>(t);
    for (int64_t i = 0; i < xr.cols; ++i) a[i] *= sigmoid(g[i]);
  }
  return Status::ok();
}

Status add_sigmoid_gated(Tensor& out, const Tensor& x, const Tensor& gate) {
  constexpr std::string_view kOp = "add_sigmoid_gated";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "x", x, out.shape(), "(the shape of out)"));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "gate", gate, {DType::kF32}, -1));
  if (gate.numel() != out.size(0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "add_sigmoid_gated: gate {} must hold one value per row of out {}",
                      gate.to_string(), out.to_string());
  }
  VLLM_ASSIGN_OR_RETURN(detail::Rows o, detail::as_rows(kOp, "out", out));
  VLLM_ASSIGN_OR_RETURN(detail::Rows xr, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows gr, detail::as_rows(kOp, "gate", gate.view({-1, 1})));
  for (int64_t t = 0; t < o.rows; ++t) {
    const float s = sigmoid(*gr.row<float>(t));
    float* dst = o.row<float>(t);
    const float* src = xr.row<float>(t);
    for (int64_t i = 0; i < o.cols; ++i) dst[i] += s * src[i];
  }
  return Status::ok();
}

Status gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
  constexpr std::string_view kOp = "gather_rows";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "rows", rows, {DType::kI64}, 1));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "rows", rows));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "out", out, {rows.size(0), x.size(1)}));
  VLLM_ASSIGN_OR_RETURN(detail::Rows src, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows dst, detail::as_rows(kOp, "out", out));
  const int64_t* idx = rows.data<int64_t>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    if (idx[i] < 0 || idx[i] >= x.size(0)) {
      return make_error(ErrorCode::kOutOfRange, "gather_rows: rows[{}] = {} outside {} rows", i,
                        idx[i], x.size(0));
    }
    std::copy_n(src.row<float>(idx[i]), src.cols, dst.row<float>(i));
  }
  return Status::ok();
}

Status zero_slots(Tensor& state, const Tensor& slots) {
  constexpr std::string_view kOp = "zero_slots";
  VLLM_RETURN_IF_ERROR(
      detail::check_tensor(kOp, "state", state, {DType::kF32, DType::kBF16, DType::kF16}, -1));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "state", state));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "slots", slots, {DType::kI32}, 1));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "slots", slots));
  if (state.ndim() < 1) {
    return make_error(ErrorCode::kInvalidArgument, "zero_slots: state is a scalar");
  }
  const int64_t num_slots = state.size(0);
  // Zero is all-zero bits in every allowed dtype.
  const size_t slot_bytes = num_slots > 0 ? state.nbytes() / static_cast<size_t>(num_slots) : 0;
  const int32_t* s = slots.data<int32_t>();
  for (int64_t i = 0; i < slots.size(0); ++i) {
    if (s[i] < 0) continue;
    if (s[i] >= num_slots) {
      return make_error(ErrorCode::kOutOfRange, "zero_slots: slots[{}] = {} outside {} slots", i,
                        s[i], num_slots);
    }
    std::memset(static_cast<char*>(state.data_ptr()) + static_cast<size_t>(s[i]) * slot_bytes, 0,
                slot_bytes);
  }
  return Status::ok();
}

}  // namespace vllm::cpu

// RMSNorm and vLLM's fused residual-add + RMSNorm.
//
// Numerics follow transformers' float32 RMSNorm: mean(x^2) (accumulated here in double, which
// is at least as accurate as torch's pairwise float sum), rsqrt(mean + eps) in f32, then
// (x * rsqrt) * w in f32, with w = 1 + weight (in f32) for the unit-offset (Gemma/Qwen3.5) form.
#include <cmath>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/ops.h"
#include "base/thread_pool.h"

namespace vllm::cpu {
namespace {

using detail::Rows;

// Checks x/out [T, H] F32 and weight [H]; returns the decoded multiplier w, in a per-thread
// buffer reused across calls (valid until this thread's next call).
Expected<const float*> norm_weight(std::string_view op, const Tensor& x, const Tensor& weight,
                                   bool unit_offset) {
  VLLM_RETURN_IF_ERROR(detail::check_tensor(op, "x", x, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_weight(op, "weight", weight));
  const int64_t hidden = x.size(1);
  VLLM_RETURN_IF_ERROR(
      detail::check_shape(op, "weight", weight, {hidden}, "(the hidden size of x)"));
  thread_local std::vector<float> w;
  w.resize(static_cast<size_t>(hidden));
  detail::decode_to_f32(weight.data_ptr(), weight.dtype(), hidden, w.data());
  if (unit_offset) {
    for (float& v : w) v = 1.0f + v;
  }
  return static_cast<const float*>(w.data());
}

// out = x / sqrt(mean(x^2) + eps) * w for one row; out may equal x.
void rms_norm_row(const float* x, const float* w, int64_t hidden, float eps, float* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < hidden; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  float variance = static_cast<float>(sum_sq / static_cast<double>(hidden));
  float denom = variance + eps;
  float inv_rms = static_cast<float>(1.0 / std::sqrt(static_cast<double>(denom)));
  for (int64_t i = 0; i < hidden; ++i) out[i] = (x[i] * inv_rms) * w[i];
}

}  // namespace

Status rms_norm(const Tensor& x, const Tensor& weight, float eps, bool unit_offset, Tensor& out) {
  constexpr std::string_view kOp = "rms_norm";
  VLLM_ASSIGN_OR_RETURN(const float* w, norm_weight(kOp, x, weight, unit_offset));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "out", out, x.shape(), "(the shape of x)"));
  VLLM_ASSIGN_OR_RETURN(Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(Rows out_rows, detail::as_rows(kOp, "out", out));
  const int64_t hidden = x_rows.cols;
  if (x_rows.rows == 0 || hidden == 0) return Status::ok();
  parallel_for(0, x_rows.rows, detail::grain_for(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      rms_norm_row(x_rows.row<float>(t), w, hidden, eps, out_rows.row<float>(t));
    }
  });
  return Status::ok();
}

Status fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                          bool unit_offset) {
  constexpr std::string_view kOp = "fused_add_rms_norm";
  VLLM_ASSIGN_OR_RETURN(const float* w, norm_weight(kOp, x, weight, unit_offset));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "residual", residual, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(
      detail::check_shape(kOp, "residual", residual, x.shape(), "(the shape of x)"));
  VLLM_ASSIGN_OR_RETURN(Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(Rows res_rows, detail::as_rows(kOp, "residual", residual));
  const int64_t hidden = x_rows.cols;
  if (x_rows.rows == 0 || hidden == 0) return Status::ok();
  parallel_for(0, x_rows.rows, detail::grain_for(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* xr = x_rows.row<float>(t);
      float* rr = res_rows.row<float>(t);
      for (int64_t i = 0; i < hidden; ++i) rr[i] = xr[i] + rr[i];
      rms_norm_row(rr, w, hidden, eps, xr);
    }
  });
  return Status::ok();
}

}  // namespace vllm::cpu

// Elementwise ops of the MLP and the residual stream: vLLM's silu_and_mul (SwiGLU) over
// [gate | up] rows, and the residual add.
#include <cmath>

#include "backend/cpu/common.h"
#include "backend/cpu/ops.h"
#include "base/thread_pool.h"

namespace vllm::cpu {

Status silu_and_mul(const Tensor& x, Tensor& out) {
  constexpr std::string_view kOp = "silu_and_mul";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  if (x.size(1) % 2 != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "silu_and_mul: x has shape {}, expected [num_tokens, 2 * intermediate_size] "
                      "(an even last dim: gate | up)",
                      shape_to_string(x.shape()));
  }
  const int64_t inter = x.size(1) / 2;
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(
      detail::check_shape(kOp, "out", out, {x.size(0), inter}, "([num_tokens, x.size(1) / 2])"));
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));
  if (x_rows.rows == 0 || inter == 0) return Status::ok();
  parallel_for(0, x_rows.rows, detail::grain_for(inter * 8), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = x_rows.row<float>(t);
      const float* up = gate + inter;
      float* o = out_rows.row<float>(t);
      for (int64_t i = 0; i < inter; ++i) {
        float g = gate[i];
        o[i] = (g / (1.0f + std::exp(-g))) * up[i];
      }
    }
  });
  return Status::ok();
}

Status add_inplace(Tensor& dst, const Tensor& src) {
  constexpr std::string_view kOp = "add_inplace";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "dst", dst, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "src", src, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "src", src, {dst.size(0), dst.size(1)},
                                           "(the shape of dst)"));
  VLLM_ASSIGN_OR_RETURN(detail::Rows d_rows, detail::as_rows(kOp, "dst", dst));
  VLLM_ASSIGN_OR_RETURN(detail::Rows s_rows, detail::as_rows(kOp, "src", src));
  const int64_t cols = dst.size(1);
  if (d_rows.rows == 0 || cols == 0) return Status::ok();
  parallel_for(0, d_rows.rows, detail::grain_for(cols), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* d = d_rows.row<float>(t);
      const float* s = s_rows.row<float>(t);
      for (int64_t i = 0; i < cols; ++i) d[i] += s[i];
    }
  });
  return Status::ok();
}

}  // namespace vllm::cpu

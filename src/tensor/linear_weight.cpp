#include "tensor/linear_weight.h"

#include <fmt/format.h>

namespace vllm {

std::string LinearWeight::to_string() const {
  if (!is_fp8()) return weight.to_string();
  return fmt::format("{}, scales {} per {}x{} block", weight.to_string(),
                     scale_inv.defined() ? scale_inv.to_string() : std::string("(none)"), block.n,
                     block.k);
}

Shape fp8_scale_shape(const Shape& weight_shape, WeightBlock block) {
  Shape s = weight_shape;
  if (s.size() < 2 || block.n <= 0 || block.k <= 0) return s;
  int64_t& n = s[s.size() - 2];
  int64_t& k = s[s.size() - 1];
  n = (n + block.n - 1) / block.n;
  k = (k + block.k - 1) / block.k;
  return s;
}

Status check_linear_weight(std::string_view what, const LinearWeight& w) {
  if (!w.weight.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "{} is undefined", what);
  }
  if (w.weight.ndim() < 2) {
    return make_error(ErrorCode::kInvalidArgument, "{} has shape {}, expected at least 2-D", what,
                      shape_to_string(w.weight.shape()));
  }
  const DType dtype = w.weight.dtype();
  if (dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16) {
    if (w.scale_inv.defined()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{} is {} but carries block scales; only F8_E4M3 weights have scales", what,
                        dtype_name(dtype));
    }
    return Status::ok();
  }
  if (dtype != DType::kF8E4M3) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} has dtype {}; weights must be F32, BF16, F16 or F8_E4M3", what,
                      dtype_name(dtype));
  }
  if (w.block.n <= 0 || w.block.k <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} is F8_E4M3 with block {}x{}, expected a "
                      "positive block size",
                      what, w.block.n, w.block.k);
  }
  if (!w.scale_inv.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "{} is F8_E4M3 without its scales", what);
  }
  if (w.scale_inv.dtype() != DType::kF32) {
    return make_error(ErrorCode::kInvalidArgument, "{}: scales have dtype {}, expected F32", what,
                      dtype_name(w.scale_inv.dtype()));
  }
  const Shape want = fp8_scale_shape(w.weight.shape(), w.block);
  if (w.scale_inv.shape() != want) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: scales have shape {}, expected {} (one per {}x{} block of {})", what,
                      shape_to_string(w.scale_inv.shape()), shape_to_string(want), w.block.n,
                      w.block.k, shape_to_string(w.weight.shape()));
  }
  if (!(w.scale_inv.device() == w.weight.device())) {
    return make_error(ErrorCode::kInvalidArgument, "{}: scales are on {}, the weight on {}", what,
                      w.scale_inv.device().to_string(), w.weight.device().to_string());
  }
  return Status::ok();
}

}  // namespace vllm

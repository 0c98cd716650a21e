#include "model/layers/logits.h"

#include <algorithm>

#include "backend/cpu/ops.h"

namespace vllm {

Expected<Tensor> compute_logits(const Tensor& hidden, const std::vector<int64_t>& rows,
                                const LogitsHead& head) {
  const int64_t tokens = hidden.size(0), width = hidden.size(1);
  const auto count = static_cast<int64_t>(rows.size());
  Tensor selected = Tensor::empty({count, width}, DType::kF32);
  for (int64_t r = 0; r < count; ++r) {
    const int64_t row = rows[static_cast<size_t>(r)];
    if (row < 0 || row >= tokens) {
      return make_error(ErrorCode::kOutOfRange, "logits_indices[{}] = {} outside {} tokens", r, row,
                        tokens);
    }
    std::copy_n(hidden.data<float>() + row * width, width, selected.data<float>() + r * width);
  }
  VLLM_RETURN_IF_ERROR(
      cpu::rms_norm(selected, head.final_norm, head.eps, head.unit_offset, selected));
  Tensor logits = Tensor::empty({count, head.lm_head.size(0)}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::linear(selected, head.lm_head, Tensor(), logits));
  return logits;
}

}  // namespace vllm

#include "model/layers/logits.h"

#include "base/profile.h"
#include "ops/ops.h"

namespace vllm {

Expected<Tensor> compute_logits(const ExecContext& ctx, const Tensor& hidden,
                                const Tensor& residual, const Tensor& rows,
                                const LogitsHead& head) {
  VLLM_PROFILE_SCOPE("compute_logits");
  const int64_t count = rows.size(0), width = hidden.size(1);
  VLLM_ASSIGN_OR_RETURN(Tensor selected, ctx.act({count, width}));
  VLLM_ASSIGN_OR_RETURN(Tensor selected_residual, ctx.alloc({count, width}, residual.dtype()));
  VLLM_RETURN_IF_ERROR(ops::gather_rows(ctx, hidden, rows, selected));
  VLLM_RETURN_IF_ERROR(ops::gather_rows(ctx, residual, rows, selected_residual));
  VLLM_RETURN_IF_ERROR(ops::fused_add_rms_norm(ctx, selected, selected_residual, head.final_norm,
                                               head.eps, head.unit_offset));
  const Shape shape{count, head.lm_head.size(0)};
  Tensor logits;
  if (ctx.device.is_cpu()) {
    VLLM_ASSIGN_OR_RETURN(logits, Tensor::try_empty(shape, DType::kF32));
  } else {
    VLLM_ASSIGN_OR_RETURN(logits, ctx.alloc(shape, DType::kF32));
  }
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, selected, head.lm_head, Tensor(), logits));
  return logits;
}

}  // namespace vllm

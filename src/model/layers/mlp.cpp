#include "model/layers/mlp.h"

#include "ops/ops.h"

namespace vllm {

Status MlpLayer::load(WeightSource& w, const std::string& p, int64_t hidden, int64_t inter,
                      const ExecContext& ctx) {
  VLLM_ASSIGN_OR_RETURN(Tensor gate, w.get(p + "gate_proj.weight", {inter, hidden}));
  VLLM_ASSIGN_OR_RETURN(Tensor up, w.get(p + "up_proj.weight", {inter, hidden}));
  if (gate.dtype() != up.dtype()) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '{}gate_proj.weight' has dtype {} but '{}up_proj.weight' has {}; "
                      "they must match",
                      p, dtype_name(gate.dtype()), p, dtype_name(up.dtype()));
  }
  VLLM_ASSIGN_OR_RETURN(gate_up_, concat_rows({gate, up}, &ctx));
  VLLM_ASSIGN_OR_RETURN(down_, w.get(p + "down_proj.weight", {hidden, inter}));
  return Status::ok();
}

Status MlpLayer::forward(const ExecContext& ctx, const Tensor& x, Tensor& out) const {
  const int64_t tokens = x.size(0), inter = down_.size(1);
  VLLM_ASSIGN_OR_RETURN(Tensor gate_up, ctx.act({tokens, 2 * inter}));
  VLLM_ASSIGN_OR_RETURN(Tensor act, ctx.act({tokens, inter}));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, gate_up_, Tensor(), gate_up));
  VLLM_RETURN_IF_ERROR(ops::silu_and_mul(ctx, gate_up, act));
  return ops::linear(ctx, act, down_, Tensor(), out);
}

}  // namespace vllm

#include "model/layers/mlp.h"

#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace vllm {

Status MlpLayer::load(WeightSource& w, const std::string& p, int64_t hidden, int64_t inter,
                      const ExecContext& ctx, bool reduce_results) {
  reduce_results_ = reduce_results;
  VLLM_ASSIGN_OR_RETURN(ShardRange part,
                        tp_split(ctx, inter, "the intermediate size of " + p + "gate_proj"));
  const WeightSlice rows{0, part.begin, part.end};
  VLLM_ASSIGN_OR_RETURN(LinearWeight gate,
                        w.get_linear_slice(p + "gate_proj.weight", {inter, hidden}, rows));
  VLLM_ASSIGN_OR_RETURN(LinearWeight up,
                        w.get_linear_slice(p + "up_proj.weight", {inter, hidden}, rows));
  if (!same_weight_format(gate, up)) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '{}gate_proj.weight' is {} but '{}up_proj.weight' is {}; they must "
                      "match",
                      p, weight_format(gate), p, weight_format(up));
  }
  VLLM_ASSIGN_OR_RETURN(gate_up_, concat_linear_rows({gate, up}, &ctx));
  VLLM_ASSIGN_OR_RETURN(down_, w.get_linear_slice(p + "down_proj.weight", {hidden, inter},
                                                  WeightSlice{1, part.begin, part.end}));
  return Status::ok();
}

Status MlpLayer::forward(const ExecContext& ctx, const Tensor& x, Tensor& out) const {
  VLLM_ASSIGN_OR_RETURN(Tensor gate_up, ctx.act({x.size(0), gate_up_.size(0)}));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, gate_up_, Tensor(), gate_up));
  return down(ctx, gate_up, out);
}

bool MlpLayer::fuses_norm(const ExecContext& ctx, const Tensor& x,
                          const Tensor& norm_weight) const {
  return ops::add_rms_norm_linear_fits(ctx, x, norm_weight, gate_up_);
}

Status MlpLayer::forward_add_norm(const ExecContext& ctx, const ops::AddRmsNorm& norm,
                                  Tensor& out) const {
  VLLM_ASSIGN_OR_RETURN(Tensor gate_up, ctx.act({norm.x.size(0), gate_up_.size(0)}));
  VLLM_RETURN_IF_ERROR(ops::add_rms_norm_linear(ctx, norm, gate_up_, gate_up));
  return down(ctx, gate_up, out);
}

Status MlpLayer::down(const ExecContext& ctx, const Tensor& gate_up, Tensor& out) const {
  VLLM_ASSIGN_OR_RETURN(Tensor act, ctx.act({gate_up.size(0), down_.size(1)}));
  VLLM_RETURN_IF_ERROR(ops::silu_and_mul(ctx, gate_up, act));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, act, down_, Tensor(), out));
  return reduce_results_ ? ops::all_reduce(ctx, out) : Status::ok();
}

}  // namespace vllm

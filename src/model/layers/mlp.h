// The dense SwiGLU MLP every model shares: out = down(silu(gate(x)) * up(x)), with gate and
// up fused into one [2I, H] matrix (one GEMM). Weights are float or block-scaled FP8
// (model/weights.h); gate and up must share a format. Under tensor parallelism each rank
// holds its slice of the intermediate features (gate/up rows, down columns) and out is
// all-reduced -- unless the caller reduces it together with more (the MoE block's shared
// expert).
#pragma once

#include <string>
#include <utility>

#include "base/status.h"
#include "model/weights.h"
#include "ops/exec_context.h"
#include "ops/ops.h"

namespace vllm {

class MlpLayer {
 public:
  // Reads this rank's shard of {prefix}gate_proj.weight, up_proj.weight [I, H] and
  // down_proj.weight [H, I]. reduce_results false: forward leaves each rank's partial sum.
  Status load(WeightSource& w, const std::string& prefix, int64_t hidden, int64_t intermediate,
              const ExecContext& ctx, bool reduce_results = true);
  // x [T, H] -> out [T, H].
  Status forward(const ExecContext& ctx, const Tensor& x, Tensor& out) const;
  // Whether the gate/up product can take the residual add and RMSNorm in front of it
  // (ops::add_rms_norm_linear_fits: CUDA decode batches of 1-2 rows); x is what
  // forward_add_norm would add to the residual stream.
  bool fuses_norm(const ExecContext& ctx, const Tensor& x, const Tensor& norm_weight) const;
  // forward() of RMSNorm(norm.residual + norm.x), the residual sum stored in norm.residual_out,
  // the norm run inside the gate/up product. Only where fuses_norm() says so.
  Status forward_add_norm(const ExecContext& ctx, const ops::AddRmsNorm& norm, Tensor& out) const;

  // Weights from elsewhere (this rank's shard): gate_up [2I, H] (gate rows, then up rows),
  // down [H, I]; forward leaves partial sums.
  void set(LinearWeight gate_up, LinearWeight down) {
    gate_up_ = std::move(gate_up);
    down_ = std::move(down);
    reduce_results_ = false;
  }

  bool loaded() const { return down_.defined(); }

 private:
  // out = down(silu_and_mul(gate_up)), all-reduced unless the caller reduces it.
  Status down(const ExecContext& ctx, const Tensor& gate_up, Tensor& out) const;

  LinearWeight gate_up_;  // [2I, H]: gate rows then up rows
  LinearWeight down_;     // [H, I]
  bool reduce_results_ = true;
};

}  // namespace vllm

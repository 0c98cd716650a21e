// The last step of every decoder: gather the rows whose logits are wanted, apply the final
// RMSNorm, project with lm_head. Only the gathered rows pay for the vocab-sized matmul.
#pragma once

#include "base/status.h"
#include "ops/exec_context.h"
#include "tensor/tensor.h"

namespace vllm {

struct LogitsHead {
  Tensor final_norm;  // [hidden]
  float eps = 1e-6f;
  bool unit_offset = false;  // (1 + w) norms (Qwen3.5 / Qwen3-Next)
  Tensor lm_head;            // [vocab, hidden]
};

// The last layer's output `hidden` [T, H] (activation dtype) still to be added to the F32
// residual stream `residual` [T, H]; rows I64 [N] on ctx.device -> logits F32 [N, vocab] on
// ctx.device: only the gathered rows are added, normalised and projected. On the CPU the
// logits are a fresh tensor the caller owns; on CUDA they come from the workspace (valid
// until it is reset).
Expected<Tensor> compute_logits(const ExecContext& ctx, const Tensor& hidden,
                                const Tensor& residual, const Tensor& rows,
                                const LogitsHead& head);

}  // namespace vllm

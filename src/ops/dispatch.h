// Internal to src/ops: the pieces every dispatching op uses.
#pragma once

#include <string_view>

#include "base/status.h"
#include "ops/exec_context.h"
#include "tensor/tensor.h"

#if VLLM_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace vllm::ops::detail {

// kUnsupported: "<op>: unsupported on <device> (...)".
Status unsupported(std::string_view op, const Tensor& out);

// A contiguous version of t on ctx.device: t itself, or a workspace copy.
Expected<Tensor> contiguous(const ExecContext& ctx, const Tensor& t);

#if VLLM_WITH_CUDA
inline cudaStream_t stream(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}
#endif

}  // namespace vllm::ops::detail

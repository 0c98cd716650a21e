// Linear layers on the GPU: out = x @ weight^T (+ bias), the layout of torch.nn.Linear and of
// vllm::cpu::linear, through cuBLASLt.
//
// A BlasContext owns the cuBLASLt handle and its workspace for one device and one stream at
// a time (the execution context holds one per stream); it is created once at start, never
// inside a step.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

class BlasContext {
 public:
  // Creates the handle and a workspace of `workspace_bytes` on `device`.
  static Expected<std::unique_ptr<BlasContext>> create(Device device,
                                                       size_t workspace_bytes = 32u << 20);
  ~BlasContext();
  BlasContext(const BlasContext&) = delete;
  BlasContext& operator=(const BlasContext&) = delete;

  // Matmul plans (descriptors + the heuristic's algorithm) cached so far; see gemm.cu.
  size_t cached_plans() const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  explicit BlasContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// x [M, K] F32/BF16 (row stride allowed); weight [N, K] contiguous, in x's dtype;
// bias [N] (x's dtype or F32) or undefined; out [M, N] (row stride allowed) in x's dtype, or
// F32 when x is BF16 (the lm_head's logits). f32 accumulation; F32 inputs use full-precision
// f32 math (no TF32), so the F32 path matches the CPU op closely. M = 0 is a no-op; K = 0
// writes the bias (or zeros), as cpu::linear does. The first call with a new shape, dtype or
// pointer alignment queries cuBLASLt's heuristic (host time); later ones reuse its plan.
Status linear(BlasContext& blas, const Tensor& x, const Tensor& weight, const Tensor& bias,
              Tensor& out, cudaStream_t stream);

}  // namespace vllm::cuda

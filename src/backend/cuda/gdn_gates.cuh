// Internal to the Gated DeltaNet .cu files: the element-wise arithmetic that gdn_gating and
// gated_rms_norm (gdn.cu) and the fused decode kernel (gdn_rule.cu) share, in the CPU ops'
// order (cpu/gdn.h), so the fused kernel's numbers are the separate kernels' bit for bit.
#pragma once

#include "backend/cuda/common.cuh"

namespace vllm::cuda::detail {

// torch.nn.functional.softplus with beta 1 and threshold 20.
__device__ __forceinline__ float softplus(float v) {
  return v > 20.0f ? v : log1pf(expf(v));
}

// The log decay g = -exp(A_log) * softplus(a + dt_bias) of one (token, value head).
__device__ __forceinline__ float gdn_log_decay(float A_log, float dt_bias, float a) {
  const float neg_a = -expf(A_log);
  return neg_a * softplus(a + dt_bias);
}

// beta = sigmoid(b).
__device__ __forceinline__ float gdn_beta(float b) {
  return 1.0f / (1.0f + expf(-b));
}

// The gated RMSNorm's 1 / rms of a group of `dim` values whose squares sum to sum_sq.
__device__ __forceinline__ float gated_norm_inv_rms(float sum_sq, int dim, float eps) {
  const float variance = sum_sq / static_cast<float>(dim);
  return 1.0f / sqrtf(variance + eps);
}

// One output of the gated RMSNorm: x normalised, times its weight and SiLU(z).
__device__ __forceinline__ float gated_norm_value(float weight, float x, float inv_rms, float z) {
  return (weight * (x * inv_rms)) * silu(z);
}

}  // namespace vllm::cuda::detail

// RMSNorm on the GPU: the CUDA counterparts of vllm::cpu::rms_norm and fused_add_rms_norm
// (src/backend/cpu/ops.h holds the exact semantics; tests/cuda/test_norm_cuda.cpp checks
// these against them).
//
// Plain C++ header: callers need no CUDA types except cudaStream_t (nullptr: the legacy
// default stream). Activations (x, out, residual) are F32 or BF16, all the same dtype;
// weight is F32, BF16 or F16; the arithmetic is f32 and the result is rounded once on store.
// Tensors are CUDA tensors on one device, [..., H] with unit stride along H; a 2-D tensor may
// have a row stride larger than H (a slice), other ranks must be contiguous. Ops launch
// asynchronously on `stream` and return launch errors only.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// out = x / sqrt(mean(x^2) + eps) * w, per row, where w = weight or (1 + weight) when
// unit_offset. x [T, H]; weight [H]; out [T, H] (may alias x).
Status rms_norm(const Tensor& x, const Tensor& weight, float eps, bool unit_offset, Tensor& out,
                cudaStream_t stream = nullptr);

// vLLM's fused_add_rms_norm, in place: residual += x; x = rms_norm(residual). The sum is
// rounded to the residual's dtype when stored, and the norm is taken of that stored value
// (what an unfused "residual = x + residual; x = norm(residual)" computes). The residual may
// be F32 under BF16 x: the residual stream then keeps f32 precision between layers.
// x, residual [T, H]; weight [H].
Status fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                          bool unit_offset, cudaStream_t stream = nullptr);

}  // namespace vllm::cuda

// Rotary position embedding on the GPU: the counterpart of vllm::cpu::rotary_embedding
// (src/backend/cpu/ops.h), optionally fused with the per-head RMSNorm of q and k that Qwen3
// and the Qwen3.5 hybrids apply first (one pass over q and k instead of three).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

struct RopeParams {
  int64_t head_size = 0;  // D
  bool is_neox = true;    // rotate halves; false: GPT-J interleaved pairs
  // Per-head RMSNorm before the rotation (undefined weights: none). Weight F32/BF16 [D];
  // unit_offset scales by (1 + w) (Qwen3.5), else by w (Qwen3).
  Tensor q_norm_weight, k_norm_weight;
  float norm_eps = 1e-6f;
  bool norm_unit_offset = false;
};

// In place on query [T, Hq * D] and key [T, Hk * D] (row strides allowed, or contiguous
// [T, H, D]; key may be undefined). positions I64 (or I32) [T] on the device; cos_sin_cache
// F32 [max_position, rot_dim] (cos in the first rot_dim / 2 columns, sin in the rest). Each
// head is first normalised over all D dims when its norm weight is given (the result equals
// cpu::rms_norm per head, then cpu::rotary_embedding, without rounding in between); then its
// first rot_dim dims rotate and the rest pass through. A position outside the cache leaves
// its row unrotated (still normalised) instead of failing: the device cannot report it, and
// the engine keeps positions below max_model_len. D <= 1024.
Status rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key,
                        const Tensor& cos_sin_cache, const RopeParams& params,
                        cudaStream_t stream);

}  // namespace vllm::cuda

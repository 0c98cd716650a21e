// Rotary position embedding tables: the cos/sin cache that cpu::rotary_embedding (and the CUDA
// rope kernel) read, computed once per model.
//
// Inverse frequencies follow transformers' rope init functions (modeling_rope_utils.py) for
// rope_type default, linear, llama3 and yarn, reproducing their float32 arithmetic step by
// step: transformers computes inv_freq in float32 and forms position * inv_freq as a float32
// product, and at long positions that product's rounding moves the angle by far more than
// 1e-4, so a double-precision table would not match transformers' logits. Only cos and sin
// themselves are evaluated in double (then rounded to f32), i.e. correctly rounded where
// torch's float kernels are within an ulp. yarn's attention factor (mscale) multiplies
// cos and sin, as in transformers and vLLM.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "loader/hf_config.h"
#include "tensor/tensor.h"

namespace vllm {

// The rotated dims per head: int(head_dim * partial_rotary_factor) as Python truncates it;
// an odd, non-positive or > head_dim result is kInvalidArgument.
Expected<int64_t> rotary_dim(const RopeConfig& rope, int64_t head_dim);

struct RopeFrequencies {
  std::vector<float> inv_freq;    // [rot_dim / 2], as transformers computes it in float32
  double attention_factor = 1.0;  // multiplies cos and sin (yarn; 1 otherwise)
};

// inv_freq and attention factor for `rope` over rot_dim rotated dims. For llama3 and yarn an
// original_max_position_embeddings of 0 (absent) falls back to `max_position`, as
// transformers falls back to max_position_embeddings. Unknown rope_type: kUnsupported.
Expected<RopeFrequencies> compute_rope_frequencies(const RopeConfig& rope, int64_t rot_dim,
                                                   int64_t max_position);

// F32 [max_position, rot_dim]: row p = cos(p * inv_freq) | sin(p * inv_freq), each times the
// attention factor (vLLM's cos_sin_cache layout).
Expected<Tensor> compute_cos_sin_cache(const RopeConfig& rope, int64_t head_dim,
                                       int64_t max_position);

}  // namespace vllm

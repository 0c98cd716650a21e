// Block-scaled FP8 (e4m3) weights: quantizing a float weight, and the dequantized weight that
// defines what an FP8 weight means (linear_weight.h). Both run on the CPU, at load time or in
// tests; they are the specification every backend's FP8 path is checked against.
//
// Quantization is vLLM's online block FP8 (per_block_cast_to_fp8, used by its
// Fp8PerBlockOnlineLinearMethod for `--quantization fp8`), per block of block.n x block.k:
//   amax      = max |x| over the block, in f32, clamped below to 1e-4 (kFp8MinAmax)
//   scale_inv = amax / 448                     (448: e4m3's largest finite value)
//   q         = e4m3(x * (1 / scale_inv))      rounded to nearest, ties to even
// so the block's largest magnitude lands on 448 and nothing overflows; an all-zero block gets
// scale_inv = 1e-4 / 448 and q = 0, which dequantizes to exact zeros. Partial blocks at the
// edges are blocks of the elements they have. A non-finite input value has no e4m3 image and
// is refused, naming the tensor and the element.
#pragma once

#include <string_view>

#include "base/status.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor.h"

namespace vllm {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8MinAmax = 1e-4f;

// A block's scale_inv for its largest magnitude `amax` (>= 0).
inline float fp8_block_scale_inv(float amax) {
  return (amax < kFp8MinAmax ? kFp8MinAmax : amax) / kFp8E4M3Max;
}

// Dynamic per-token-group activation quantization: the activation side of W8A8 block FP8
// (vLLM's per_token_group_quant_fp8, which its block-FP8 linear layers run on their input).
// Per group of `group` consecutive elements of one row of x:
//   amax  = max |x| over the group, in f32, clamped below to kFp8ActivationMinAmax
//   scale = amax / 448
//   q     = e4m3(clamp(x / scale, -448, 448))  rounded to nearest, ties to even
// Only the rounding of x / scale can take it past 448, so the clamp (vLLM's) changes no value
// by more than that rounding. A partial last group is a group of the elements it has.
inline constexpr float kFp8ActivationMinAmax = 1e-10f;

struct Fp8TokenGroups {
  Tensor q;       // F8_E4M3 [M, K]
  Tensor scales;  // F32 [M, ceil(K / group)]
  int64_t group = 0;
};

// x: a CPU F32 / BF16 tensor [M, K] (row stride allowed) -> its quantized groups. A non-finite
// value has no e4m3 image and is refused, naming `name` and the element.
Expected<Fp8TokenGroups> quantize_fp8_token_groups(const Tensor& x, int64_t group,
                                                   std::string_view name);

// The values the groups stand for, F32 [M, K]: q * scale, the product rounded once.
Expected<Tensor> dequantize_fp8_token_groups(const Fp8TokenGroups& a);

// w: a contiguous CPU F32 / BF16 / F16 tensor [N, K] or [E, N, K] (E experts, each its own
// grid) -> a new FP8 weight on the CPU. `name` names the tensor in errors.
Expected<LinearWeight> quantize_fp8_blocks(const Tensor& w, WeightBlock block,
                                           std::string_view name);

// The weight as F32 values (a new contiguous CPU tensor of w's shape): FP8 weights by the
// definition in linear_weight.h, float weights widened. w must be on the CPU and pass
// check_linear_weight.
Expected<Tensor> dequantize_fp8_blocks(const LinearWeight& w);

}  // namespace vllm

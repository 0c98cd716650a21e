// Exact conversions between f32 and the 16- and 8-bit float formats, as PyTorch casts them.
//
// f32 -> narrow rounds to nearest, ties to even (f32 subnormals included; what is at most
// half the smallest subnormal goes to a zero of the same sign). Special values follow
// PyTorch's c10 scalar casts (c10/util/{BFloat16,Half,Float8_e4m3fn,Float8_e5m2}.h):
//   bf16: NaN -> 0x7FC0 (sign and payload dropped); overflow rounds to +-Inf.
//   f16:  NaN -> sign | 0x7E00; |x| >= 65520 rounds to +-Inf.
//   fp8 e4m3fn: no Inf; |x| > 464 (rounds past 448), Inf and NaN -> sign | 0x7F (NaN);
//         464 itself ties down to 448.
//   fp8 e5m2: |x| >= 61440 and Inf -> +-Inf (sign | 0x7C); NaN -> sign | 0x7F.
// narrow -> f32 is exact. NaNs decode as PyTorch's CPU casts do: bf16 keeps all its bits;
// f16 and e5m2 keep the payload and set the quiet bit; e4m3fn NaN -> sign | 0x7FF00000.
//
// Checked against torch 2.11 (CPU scalar and vectorised loops, and CUDA) on every 8/16-bit
// pattern and ~1.9M f32 inputs: every non-NaN result is bit-identical on all three paths.
// Only NaN bit patterns differ elsewhere: the vectorised CPU bf16 cast gives 0xFFFF and CUDA
// 0x7FFF; x86 builds with F16C keep the top f16 payload bits (sign | 0x7E00 | mant >> 13,
// the same for the default NaN); CUDA decodes every f16 / e5m2 NaN as 0x7FFFFFFF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vllm {

inline float bf16_to_f32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}
uint16_t f32_to_bf16(float value);

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

float fp8e4m3_to_f32(uint8_t bits);
uint8_t f32_to_fp8e4m3(float value);
// CUDA's saturating cast (__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3), what
// vLLM's FP8 KV-cache kernels use): |x| > 448 and +-Inf -> +-448 (sign | 0x7E), any NaN ->
// 0x7F; everything else as f32_to_fp8e4m3.
uint8_t f32_to_fp8e4m3_satfinite(float value);

float fp8e5m2_to_f32(uint8_t bits);
uint8_t f32_to_fp8e5m2(float value);

}  // namespace vllm

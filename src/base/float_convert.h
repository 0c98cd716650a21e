// Exact conversions between f32 and the 16- and 8-bit float formats, as PyTorch casts them.
//
// f32 -> narrow rounds to nearest, ties to even. Special values follow PyTorch (c10):
//   bf16: NaN -> 0x7FC0 (sign dropped); overflow rounds to +-Inf.
//   f16:  NaN -> sign | 0x7E00; overflow rounds to +-Inf.
//   fp8 e4m3fn: no Inf; |x| that rounds past 448, Inf and NaN -> sign | 0x7F (NaN).
//   fp8 e5m2: overflow rounds to +-Inf (0x7C); NaN -> sign | 0x7F.
// narrow -> f32 is exact (NaN payloads kept where the format has them).
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

float fp8e5m2_to_f32(uint8_t bits);
uint8_t f32_to_fp8e5m2(float value);

}  // namespace vllm

// Device helpers of the W8A16 kernels (gemv_fp8.cu, the FP8 MoE expert kernels): e4m3 bytes
// to floats, exactly (cvt.rn.f16x2.e4m3x2 on sm_89+, then f16 -> f32), and the BF16 rounding
// under which BF16 activations meet a block-scaled weight.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/common.cuh"

namespace vllm::cuda::detail {

// e4m3 weights per 16-byte load.
constexpr int kFp8Chunk = 16;

// Two e4m3 values (the low byte first) as floats, exactly.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(v, __NV_E4M3);
  return __half22float2(__half2(h));
}
__device__ __forceinline__ float e4m3_to_float(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3)));
}

// 16 e4m3 weights (one 16-byte chunk) as floats.
__device__ __forceinline__ void fp8_chunk_to_float(const uint4& v, float* out) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 lo = e4m3x2_to_float2(static_cast<uint16_t>(words[i] & 0xffffu));
    const float2 hi = e4m3x2_to_float2(static_cast<uint16_t>(words[i] >> 16));
    out[4 * i] = lo.x;
    out[4 * i + 1] = lo.y;
    out[4 * i + 2] = hi.x;
    out[4 * i + 3] = hi.y;
  }
}

// 16 consecutive activations (16-byte aligned) as floats: a coherent load (an earlier kernel
// may have written them; see pdl_wait in common.cuh), from global or shared memory.
__device__ __forceinline__ void load_x16(const float* p, float* out) {
#pragma unroll
  for (int i = 0; i < 4; ++i) load16_as_float(p + 4 * i, out + 4 * i);
}
__device__ __forceinline__ void load_x16(const __nv_bfloat16* p, float* out) {
  load16_as_float(p, out);
  load16_as_float(p + 8, out + 8);
}

// A dequantized weight (e4m3 value times its block's scale) as the BF16 value the
// dequantization kernel writes for cuBLASLt: what BF16 activations multiply.
__device__ __forceinline__ float round_weight_bf16(float w) {
  return to_float(from_float<__nv_bfloat16>(w));
}

// The weight that activations of type T multiply: the e4m3 value q times its block's scale,
// rounded once to BF16 under BF16 activations, the f32 product under F32 ones.
template <typename T>
__device__ __forceinline__ float fp8_weight(float q, float scale) {
  const float w = q * scale;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return round_weight_bf16(w);
  } else {
    return w;
  }
}

}  // namespace vllm::cuda::detail

// Device helpers of the W8A16 kernels (gemv_fp8.cu, the FP8 MoE expert kernels): e4m3 bytes
// to floats, exactly (cvt.rn.f16x2.e4m3x2 on sm_89+, then f16 -> f32), and the BF16 rounding
// under which BF16 activations meet a block-scaled weight.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
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

// 16 e4m3 codes (one 16-byte chunk, the lowest byte first) as their exact f32 values without
// conversion instructions: each code's sign goes to bit 31 and its exponent and mantissa bits
// to bits 26..20, the f32 whose exponent field is the code's (the code's value times 2^-120,
// subnormal codes as f32 subnormals), and one f32 multiply by 2^120 restores the value (exact:
// the kernels are built without flushing subnormals). The NaN codes 0x7f / 0xff come out as
// +-480, which no quantizer writes.
__device__ __forceinline__ void fp8_chunk_to_float_exact(const uint4& v, float* out) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint32_t p = words[i] << (24 - 8 * b);  // byte b in bits 24..31
      const uint32_t bits = (p & 0x80000000u) | ((p >> 4) & 0x07f00000u);
      float f;
      memcpy(&f, &bits, sizeof f);
      out[4 * i + b] = f * 0x1p120f;
    }
  }
}

// A dequantized weight (e4m3 value times its block's scale) as the BF16 value the
// dequantization kernel writes for cuBLASLt: what BF16 activations multiply.
__device__ __forceinline__ float round_weight_bf16(float w) {
  return to_float(from_float<__nv_bfloat16>(w));
}

// Four e4m3 codes (one word, the lowest byte first) as their exact BF16 values, without
// conversion instructions (they issue 16 a clock per SM): bytes 0-1 in x (byte 0 in the low
// half), bytes 2-3 in y. Each code's sign goes to bit 15 and its exponent and mantissa bits to
// bits 10..4: the BF16 whose exponent field is the code's, i.e. the code's value times 2^-120,
// exactly, its subnormal codes as BF16 subnormals. One BF16 multiply by 2^120 (exact: BF16
// arithmetic keeps subnormal inputs) restores the value. The NaN codes 0x7f / 0xff come out as
// +-480, which no quantizer writes for a weight (e4m3x4_keep_nan restores them).
__device__ __forceinline__ uint2 e4m3x4_to_bf16x4_exact(uint32_t w) {
  const uint32_t b01 = (w & 0xffu) | ((w & 0xff00u) << 8);  // byte 0 -> bits 0-7, 1 -> 16-23
  const uint32_t b23 = ((w >> 16) & 0xffu) | ((w >> 8) & 0xff0000u);
  const uint32_t x = ((b01 & 0x00800080u) << 8) | ((b01 & 0x007f007fu) << 4);
  const uint32_t y = ((b23 & 0x00800080u) << 8) | ((b23 & 0x007f007fu) << 4);
  uint2 out;
#if defined(__CUDA_ARCH__)
  constexpr uint32_t kTwoTo120 = 0x7b807b80u;   // 2^120 in both halves
  constexpr uint32_t kMinusZero = 0x80008000u;  // x * 2^120 + (-0) keeps the sign of a zero
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(out.x) : "r"(x), "r"(kTwoTo120), "r"(kMinusZero));
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(out.y) : "r"(y), "r"(kTwoTo120), "r"(kMinusZero));
#else
  auto scale = [](uint32_t v) {  // the same products in f32 (exact), back to BF16 bits
    uint32_t r = 0;
    for (int h = 0; h < 2; ++h) {
      const uint32_t f_bits = ((v >> (16 * h)) & 0xffffu) << 16;
      float f;
      std::memcpy(&f, &f_bits, 4);
      f *= 1.329227995784916e36f;  // 2^120
      uint32_t g;
      std::memcpy(&g, &f, 4);
      r |= (g >> 16) << (16 * h);
    }
    return r;
  };
  out.x = scale(x);
  out.y = scale(y);
#endif
  return out;
}

// e4m3x4_to_bf16x4_exact's result v for the word w with the NaN codes (0x7f / 0xff) made BF16
// NaNs, as the conversion instructions and the CPU read them: for data that can hold NaN (an
// FP8 KV cache stores a NaN activation as 0x7f), where the weights' paths need not pay for it.
// A byte's low seven bits plus one reach its bit 7 only from 0x7f, and never carry into the next
// byte; so one AND, one add and one test find them.
__device__ __forceinline__ uint2 e4m3x4_keep_nan(uint32_t w, uint2 v) {
  const uint32_t nan = ((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
  if (nan != 0) {
    constexpr uint32_t kNan = 0x7fc0u;
    if (nan & 0x00000080u) v.x = (v.x & 0xffff0000u) | kNan;
    if (nan & 0x00008000u) v.x = (v.x & 0x0000ffffu) | (kNan << 16);
    if (nan & 0x00800000u) v.y = (v.y & 0xffff0000u) | kNan;
    if (nan & 0x80000000u) v.y = (v.y & 0x0000ffffu) | (kNan << 16);
  }
  return v;
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

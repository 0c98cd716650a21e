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

// The two f16 of a word (the low half first) as floats, exactly.
__device__ __forceinline__ float2 f16x2_bits_to_float2(uint32_t v) {
#if defined(__CUDA_ARCH__)
  float2 f;
  asm("{.reg .f16 lo, hi;\n"
      " mov.b32 {lo, hi}, %2;\n"
      " cvt.f32.f16 %0, lo;\n"
      " cvt.f32.f16 %1, hi;}"
      : "=f"(f.x), "=f"(f.y)
      : "r"(v));
  return f;
#else
  __half_raw lo, hi;
  lo.x = static_cast<unsigned short>(v);
  hi.x = static_cast<unsigned short>(v >> 16);
  return make_float2(__half2float(__half(lo)), __half2float(__half(hi)));
#endif
}

// Four e4m3 weights (one word, the lowest byte first) times their block's scale, each rounded
// to BF16 -- round_weight_bf16's values for every finite code -- as two bf16x2 words: x holds
// bytes 0-1 (byte 0 in the low half), y bytes 2-3. The A fragments of the tensor-core GEMV
// (gemv.cu). Type conversions run on a narrow pipe (the CUDA guide gives 16 a clock per SM for
// most on sm_80-sm_90, against 64 integer and 128 FP32 operations), and one conversion a weight
// (cvt.rn.f16x2.e4m3x2, then cvt.rn.bf16x2.f32, two weights each) would need ~90% of it just to
// keep pace with an H100's HBM. So only the rounding converts: each byte becomes an f16 by bit
// moves (sign to bit 15, the exponent and mantissa bits to 13..7: the code's value / 256
// exactly, subnormal codes included), is widened to f32 (exact), multiplied by scale * 256 in
// f32 (the same real product as code * scale, hence the same f32 rounding, for scales below
// 2^120) and rounded to BF16 in pairs. The NaN codes 0x7f / 0xff, which no quantizer writes,
// come out as +-480 * scale.
__device__ __forceinline__ uint2 e4m3x4_to_bf16x4(uint32_t w, float scale) {
  const uint32_t odd = (w & 0x80008000u) | ((w >> 1) & 0x3f803f80u);  // bytes 1 | 3
  const uint32_t u = w << 7;
  const uint32_t even = ((u << 1) & 0x80008000u) | (u & 0x3f803f80u);  // bytes 0 | 2
  const float2 f02 = f16x2_bits_to_float2(even), f13 = f16x2_bits_to_float2(odd);
  const float s = scale * 256.0f;
  const __nv_bfloat162 l = __floats2bfloat162_rn(f02.x * s, f13.x * s);
  const __nv_bfloat162 h = __floats2bfloat162_rn(f02.y * s, f13.y * s);
  uint2 out;
  memcpy(&out.x, &l, sizeof out.x);
  memcpy(&out.y, &h, sizeof out.y);
  return out;
}

// Four e4m3 codes (one word, the lowest byte first) as their exact BF16 values, without
// conversion instructions (they issue 16 a clock per SM): bytes 0-1 in x (byte 0 in the low
// half), bytes 2-3 in y. Each code's sign goes to bit 15 and its exponent and mantissa bits to
// bits 10..4: the BF16 whose exponent field is the code's, i.e. the code's value times 2^-120,
// exactly, its subnormal codes as BF16 subnormals. One BF16 multiply by 2^120 (exact: BF16
// arithmetic keeps subnormal inputs) restores the value. The NaN codes 0x7f / 0xff come out as
// +-480, which no quantizer writes.
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

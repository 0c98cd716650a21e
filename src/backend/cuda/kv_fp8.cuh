// The FP8 KV cache on the device (tensor/kv_cache.h defines it): the element type the cache
// kernels and the paged-attention kernels are instantiated with for an F8_E4M3 cache, the
// write's saturating conversion, and the reads every attention kernel shares, for the
// activation-dtype cache (F32, BF16) and the FP8 one alike.
//
// The attention kernels read e4m3 values exactly (e4m3 -> f16 by cvt, then f32 or BF16, which
// hold every e4m3 value) and never multiply by the scales element by element: k_scale joins
// the softmax scale (S = (q . k_e4m3) * scale * k_scale) and v_scale the final normalisation
// (O = v_scale * sum p v_e4m3 / sum p), so the tensor-core kernels multiply the same BF16
// operands whatever the scales.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"

namespace vllm::cuda::detail {

// One e4m3 byte of an F8_E4M3 KV cache.
struct KvFp8 {
  uint8_t bits;
};

// The byte stored for x under `scale`: e4m3(x / scale), saturated to +-448 (NaN -> 0x7F).
__device__ __forceinline__ KvFp8 kv_fp8_quantize(float x, float scale) {
  return KvFp8{static_cast<uint8_t>(__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3))};
}

__device__ __forceinline__ float to_float(KvFp8 v) {
  return e4m3_to_float(v.bits);
}

// N consecutive cache elements at p (aligned to their N * sizeof(C) bytes) as floats: a 16-byte
// load for F32 (N 4) and BF16 (N 8), an N-byte one for FP8.
template <int N>
__device__ __forceinline__ void load_kv_as_float(const float* p, float* out) {
  static_assert(N == 4);
  load16_as_float(p, out);
}
template <int N>
__device__ __forceinline__ void load_kv_as_float(const __nv_bfloat16* p, float* out) {
  static_assert(N == 8);
  load16_as_float(p, out);
}
template <int N>
__device__ __forceinline__ void load_kv_as_float(const KvFp8* p, float* out) {
  static_assert(N == 4 || N == 8 || N == 16);
  uint32_t words[N / 4];
  if constexpr (N == 4) {
    words[0] = *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (N == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    words[0] = v.x;
    words[1] = v.y;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    words[0] = v.x;
    words[1] = v.y;
    words[2] = v.z;
    words[3] = v.w;
  }
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {  // byte 4i is the lowest of word i
    const float2 lo = e4m3x2_to_float2(static_cast<uint16_t>(words[i] & 0xffffu));
    const float2 hi = e4m3x2_to_float2(static_cast<uint16_t>(words[i] >> 16));
    out[4 * i] = lo.x;
    out[4 * i + 1] = lo.y;
    out[4 * i + 2] = hi.x;
    out[4 * i + 3] = hi.y;
  }
}

// The BF16 bits of one cache element (an e4m3 value is exact in BF16).
__device__ __forceinline__ uint16_t kv_bf16_bits(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}
__device__ __forceinline__ uint16_t kv_bf16_bits(const KvFp8* p) {
  const __nv_bfloat16_raw r = __float2bfloat16_rn(to_float(*p));
  return r.x;
}

// Two e4m3 bytes (the first in the low byte) as a BF16 pair in one register, the first in the
// low half (exact).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint16_t bits) {
  const float2 v = e4m3x2_to_float2(bits);
  const __nv_bfloat16_raw lo = __float2bfloat16_rn(v.x);
  const __nv_bfloat16_raw hi = __float2bfloat16_rn(v.y);
  return (static_cast<uint32_t>(hi.x) << 16) | lo.x;
}

// Two consecutive cache elements (4-byte aligned for BF16, 2-byte for FP8) as a BF16 pair in
// one register, the first in the low half: an mma.sync fragment register.
__device__ __forceinline__ uint32_t load_kv_bf16x2(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
__device__ __forceinline__ uint32_t load_kv_bf16x2(const KvFp8* p) {
  return e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(p));
}

// Eight consecutive cache elements (aligned to their 8 * sizeof(C) bytes: one 16-byte load for
// BF16, one 8-byte load for FP8) as four BF16 pairs, elements 2i and 2i + 1 in w[i].
__device__ __forceinline__ void load_kv_bf16x8(const __nv_bfloat16* p, uint32_t (&w)[4]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}
__device__ __forceinline__ void load_kv_bf16x8(const KvFp8* p, uint32_t (&w)[4]) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  w[0] = e4m3x2_to_bf16x2(static_cast<uint16_t>(v.x & 0xffffu));
  w[1] = e4m3x2_to_bf16x2(static_cast<uint16_t>(v.x >> 16));
  w[2] = e4m3x2_to_bf16x2(static_cast<uint16_t>(v.y & 0xffffu));
  w[3] = e4m3x2_to_bf16x2(static_cast<uint16_t>(v.y >> 16));
}

}  // namespace vllm::cuda::detail

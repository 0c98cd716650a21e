// Tensor-core building blocks for the CUDA kernels: the warp-wide BF16 matrix multiply
// mma.sync m16n8k16 (f32 accumulate) and the packing of its bf16x2 registers. Internal to the
// CUDA backend's .cu files.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), for
// lane l with g = l / 4 and t = l % 4; every 32-bit register holds two bf16, the one with the
// lower column (A) or row (B) index in its low half:
//   A (16 x 16, row major)  a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
//                           a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8)              b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, f32)      c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
// So the accumulator of two adjacent n8 blocks, rounded to bf16, is the A fragment of the next
// product's 16-wide k chunk (flash attention's P = softmax(S) never leaves registers).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace vllm::cuda::detail {

#if defined(VLLM_CUDA_EMULATION)
// Provided by the CPU emulator (tests/cuda_emulation): the same product, computed from the
// fragments of the warp's 32 emulated lanes.
void emulated_mma_m16n8k16_bf16(float* c, const uint32_t* a, const uint32_t* b);
#endif

// c = A B + c on the calling warp's fragments. Every lane of the warp must call it together.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
  __trap();  // no BF16 tensor cores before sm_80; the host never selects this path there
#elif defined(VLLM_CUDA_EMULATION)
  emulated_mma_m16n8k16_bf16(c, a, b);
#endif
}

// N accumulator fragments (n8 tiles) set to zero.
template <int N>
__device__ __forceinline__ void zero_fragments(float (&c)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) c[i][e] = 0.0f;
  }
}

// Two floats rounded to bf16 in one register, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat16_raw l = __float2bfloat16_rn(lo);
  const __nv_bfloat16_raw h = __float2bfloat16_rn(hi);
  return (static_cast<uint32_t>(h.x) << 16) | l.x;
}

// Two bf16 bit patterns in one register, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2_bits(uint16_t lo, uint16_t hi) {
  return (static_cast<uint32_t>(hi) << 16) | lo;
}

}  // namespace vllm::cuda::detail

// Inner kernels of cpu::linear (internal to the CPU backend). Both compute
// out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for the weight rows [n_begin, n_end), in f32.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_isa.h"
#include "tensor/dtype.h"

namespace vllm::cpu::detail {

struct LinearArgs {
  const float* x = nullptr;  // [M, K], row stride ldx
  int64_t ldx = 0;
  const void* w = nullptr;  // [N, K] contiguous, F32/BF16/F16
  DType w_dtype = DType::kF32;
  const void* bias = nullptr;  // [N] or nullptr, F32/BF16/F16
  DType bias_dtype = DType::kF32;
  // Optional, for the AVX-512 BF16 kernel: x with each 32-column block reordered as its 16
  // even columns then its 16 odd columns (row stride K / 32 * 32), see linear_avx512.cpp.
  const float* x_pairs = nullptr;
  float* out = nullptr;  // [M, N], row stride ldo
  int64_t ldo = 0;
  int64_t M = 0, N = 0, K = 0;
};

// Largest M the direct kernel takes (it reads each weight row once for all M rows).
constexpr int64_t kDirectMaxM = 8;

// Direct kernel for M <= kDirectMaxM: weight tiles are decoded once and dotted with every row.
// The portable kernel (the reference) and its AVX2 / AVX-512 variants (linear_avx2.cpp,
// linear_avx512.cpp; call only where cpu_isa.h says the CPU has them).
void linear_direct(const LinearArgs& args, int64_t n_begin, int64_t n_end);
void linear_direct_avx2(const LinearArgs& args, int64_t n_begin, int64_t n_end);
void linear_direct_avx512(const LinearArgs& args, int64_t n_begin, int64_t n_end);

// BF16/F16 -> f32 widening (exact, so every variant gives the same bits as decode_to_f32).
void decode_to_f32_avx2(const uint16_t* src, DType dtype, int64_t count, float* dst);
void decode_to_f32_avx512(const uint16_t* src, DType dtype, int64_t count, float* dst);
// Fills dst [M, K / 32 * 32] with args.x reordered for x_pairs.
void pair_columns_avx512(const LinearArgs& args, float* dst);

// BLAS kernel: sgemm on the weight rows, decoding BF16/F16 blocks into per-thread scratch
// with the widening of `isa`.
void linear_blas(const LinearArgs& args, int64_t n_begin, int64_t n_end, CpuIsa isa);

// out = x @ w^T (+ bias) for arguments already checked: the direct kernel of the active ISA
// at M <= kDirectMaxM, BLAS above, both split over output rows on the thread pool.
void run_linear(const LinearArgs& args);

// Sets OpenBLAS to one thread (once per process): parallelism comes from our pool.
void use_single_threaded_blas();

}  // namespace vllm::cpu::detail

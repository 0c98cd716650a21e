// Inner kernels of cpu::linear (internal to the CPU backend). Both compute
// out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for the weight rows [n_begin, n_end), in f32.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace vllm::cpu::detail {

struct LinearArgs {
  const float* x = nullptr;  // [M, K], row stride ldx
  int64_t ldx = 0;
  const void* w = nullptr;  // [N, K] contiguous, F32/BF16/F16
  DType w_dtype = DType::kF32;
  const void* bias = nullptr;  // [N] or nullptr, F32/BF16/F16
  DType bias_dtype = DType::kF32;
  float* out = nullptr;  // [M, N], row stride ldo
  int64_t ldo = 0;
  int64_t M = 0, N = 0, K = 0;
};

// Largest M the direct kernel takes (it reads each weight row once for all M rows).
constexpr int64_t kDirectMaxM = 8;

// Direct kernel for M <= kDirectMaxM: weight tiles are decoded once and dotted with every row.
void linear_direct(const LinearArgs& args, int64_t n_begin, int64_t n_end);

// BLAS kernel: sgemm on the weight rows, decoding BF16/F16 blocks into per-thread scratch.
void linear_blas(const LinearArgs& args, int64_t n_begin, int64_t n_end);

// Sets OpenBLAS to one thread (once per process): parallelism comes from our pool.
void use_single_threaded_blas();

}  // namespace vllm::cpu::detail

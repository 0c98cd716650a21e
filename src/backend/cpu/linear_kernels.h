// Inner kernels of cpu::linear (internal to the CPU backend). Both compute
// out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for the weight rows [n_begin, n_end), in f32.
// FP8 weights (tensor/linear_weight.h) are dequantized a row segment at a time into f32 and
// then take the same arithmetic as F32 weights; only the portable kernels read them.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_isa.h"
#include "tensor/dtype.h"
#include "tensor/linear_weight.h"

namespace vllm::cpu::detail {

struct LinearArgs {
  const float* x = nullptr;  // [M, K], row stride ldx
  int64_t ldx = 0;
  const void* w = nullptr;  // [N, K] contiguous, F32/BF16/F16/F8_E4M3
  DType w_dtype = DType::kF32;
  // F8_E4M3 only: the scale grid F32 [ceil(N / block_n), scale_cols] of `w`'s first row on,
  // one scale per block_n x block_k block.
  const float* w_scale = nullptr;
  int64_t scale_cols = 0, block_n = 0, block_k = 0;
  const void* bias = nullptr;  // [N] or nullptr, F32/BF16/F16
  DType bias_dtype = DType::kF32;
  // Optional, for the AVX-512 BF16 kernel: x with each 32-column block reordered as its 16
  // even columns then its 16 odd columns (row stride K / 32 * 32), see linear_avx512.cpp.
  const float* x_pairs = nullptr;
  float* out = nullptr;  // [M, N], row stride ldo
  int64_t ldo = 0;
  int64_t M = 0, N = 0, K = 0;
};

// Points args at w's scales (FP8 weights; nothing for float ones), for w's first matrix.
void set_weight_scales(const LinearWeight& w, LinearArgs* args);

// Largest M the direct kernel takes (it reads each weight row once for all M rows).
constexpr int64_t kDirectMaxM = 8;

// Direct kernel for M <= kDirectMaxM: weight tiles are decoded once and dotted with every row.
// The portable kernel (the reference) and its AVX2 / AVX-512 variants (linear_avx2.cpp,
// linear_avx512.cpp; call only where cpu_isa.h says the CPU has them).
void linear_direct(const LinearArgs& args, int64_t n_begin, int64_t n_end);
void linear_direct_avx2(const LinearArgs& args, int64_t n_begin, int64_t n_end);
void linear_direct_avx512(const LinearArgs& args, int64_t n_begin, int64_t n_end);

// Columns [k0, k0 + len) of FP8 weight row n, dequantized: fp8 value times its block's scale.
void decode_fp8_row(const LinearArgs& args, int64_t n, int64_t k0, int64_t len, float* dst);

// BF16/F16 -> f32 widening (exact, so every variant gives the same bits as decode_to_f32).
void decode_to_f32_avx2(const uint16_t* src, DType dtype, int64_t count, float* dst);
void decode_to_f32_avx512(const uint16_t* src, DType dtype, int64_t count, float* dst);
// Fills dst [M, K / 32 * 32] with args.x reordered for x_pairs.
void pair_columns_avx512(const LinearArgs& args, float* dst);

// BLAS kernel: sgemm on the weight rows, decoding BF16/F16/FP8 blocks into per-thread
// scratch (BF16/F16 with the widening of `isa`).
void linear_blas(const LinearArgs& args, int64_t n_begin, int64_t n_end, CpuIsa isa);

// out = x @ w^T (+ bias) for arguments already checked: the direct kernel of the active ISA
// (the portable one for FP8 weights) at M <= kDirectMaxM, BLAS above, both split over output
// rows on the thread pool.
void run_linear(const LinearArgs& args);

// Sets OpenBLAS to one thread (once per process): parallelism comes from our pool.
void use_single_threaded_blas();

}  // namespace vllm::cpu::detail

// Internal to the CUDA backend (gemm.cu's FP8 linear, gemv_fp8.cu's kernels): block-scaled
// FP8 weights (tensor/linear_weight.h) read by the W8A16 kernels. Plain C++ (no device code).
//
//   GEMV, M <= kFp8GemvMaxRows: out[m, n] = sum_k x[m, k] * (fp8(w[n, k]) * scale[n / bn][k /
//   bk]) (+ bias), each weight row read once for all M rows, sums in f32.
//   Dequantize: w as BF16 or F32 (fp8 value times its block's scale, rounded once), the
//   operand of cuBLASLt for larger M.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "tensor/dtype.h"

namespace vllm::cuda::detail {

// Largest M the FP8 GEMV takes (it holds one set of sums per row of x); larger products
// dequantize the weight and go through cuBLASLt.
constexpr int64_t kFp8GemvMaxRows = 8;

// A block-scaled FP8 weight on the device: e4m3 [n, k] contiguous, F32 scales [ceil(n / bn),
// scale_cols] contiguous.
struct Fp8Matrix {
  const uint8_t* data = nullptr;
  const float* scales = nullptr;
  int64_t n = 0, k = 0;
  int64_t scale_cols = 0;
  int64_t block_n = 0, block_k = 0;
};

struct Fp8GemvProblem {
  DType x_dtype = DType::kBF16;    // BF16 or F32
  DType out_dtype = DType::kBF16;  // BF16 or F32
  const void* x = nullptr;         // [m, k], row stride ldx elements
  int64_t ldx = 0;
  Fp8Matrix w;
  const void* bias = nullptr;  // [n] or nullptr
  DType bias_dtype = DType::kF32;
  void* out = nullptr;  // [m, n], row stride ldo elements
  int64_t ldo = 0;
  int64_t m = 0;  // 1 <= m <= kFp8GemvMaxRows
};

// kInvalidArgument when m is outside [1, kFp8GemvMaxRows] (refused, never clamped) or the
// sizes do not fit the kernel's 32-bit indexing.
Status launch_fp8_gemv(const Fp8GemvProblem& problem, cudaStream_t stream);

// out [n, k] (BF16 or F32, contiguous) = the weight's values.
Status launch_fp8_dequantize(const Fp8Matrix& w, DType out_dtype, void* out, cudaStream_t stream);

}  // namespace vllm::cuda::detail

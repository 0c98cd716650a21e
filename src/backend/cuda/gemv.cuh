// Internal to the CUDA backend (gemm.cu's op entries, gemv.cu's kernels): the batched GEMV
// that cuda::linear uses for small batches, out[M, N] = x[M, K] @ weight[N, K]^T (+ bias),
// reading each weight row from memory once for all M rows. Plain C++ (no device code): the
// timing mode includes it to try launch shapes other than the chosen one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm.cuh"
#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda::detail {

// One product's operands, already checked by the op entry (gemm.cu).
struct GemvProblem {
  DType dtype = DType::kBF16;      // x, and the weight unless it is FP8: BF16 or F32
  DType out_dtype = DType::kBF16;  // dtype, or F32 when dtype is BF16 (logits)
  const void* x = nullptr;         // [m, k], row stride ldx elements
  int64_t ldx = 0;
  const void* weight = nullptr;  // [n, k] contiguous, in dtype, or e4m3 with scales
  // A block-scaled FP8 weight's scales (tensor/linear_weight.h), null for a weight in dtype:
  // F32 [ceil(n / block_n), scale_cols]. x then multiplies each weight's e4m3 value times its
  // block's scale rounded to BF16, the values of the dequantized weight (gemv_fp8.cuh).
  const float* scales = nullptr;
  int64_t scale_cols = 0;
  int64_t block_n = 0, block_k = 0;
  const void* bias = nullptr;  // [n] or nullptr
  DType bias_dtype = DType::kF32;
  void* out = nullptr;  // [m, n], row stride ldo elements
  int64_t ldo = 0;
  int64_t m = 0, n = 0, k = 0;  // 1 <= m <= kGemvMaxRows; n, k >= 1
  int device = 0;               // CUDA device index: its SM count picks the launch shape
};

// Whether launch_gemv takes a problem with an FP8 weight (scales set): BF16 x of 1 to
// kFp8GemvMaxRows rows, k a multiple of 16 (a 16-byte load of e4m3 is all in or all out),
// 16-byte aligned rows of x and the weight, and blocks as gemv_fp8_blocks_fit() takes them.
// The others take launch_fp8_gemv (gemv_fp8.cuh).
bool gemv_fp8_fits(const GemvProblem& problem);
// block_n a multiple of 16 (a 16-row weight tile has one scale row) and block_k a power of two
// from 64 (a 64-wide step of the kernel lies in one scale block; the block is a shift away).
bool gemv_fp8_blocks_fit(int64_t block_n, int64_t block_k);

// How the BF16 kernel splits the work: a block owns `rows_per_block` (16 or 32) consecutive
// output features and its `warps` (1 to 16) warps split K between them. The F32 kernel and
// the BF16 element-wise path (K not a multiple of 8, rows off 16-byte boundaries) always use
// blocks of 16 rows; they take only `warps` from here (BF16) or nothing (F32).
struct GemvLaunch {
  int rows_per_block = 16;
  int warps = 8;
};

// The launch shape for n output features on a GPU of sm_count SMs. It depends on n alone,
// never on m, so one row's result does not depend on how many rows share its batch.
GemvLaunch choose_gemv_launch(int64_t n, int sm_count);

// Queues the GEMV on `stream` with the chosen (or the given) launch shape. kInvalidArgument
// when m is outside [1, kGemvMaxRows] (the kernels hold one set of sums per row of x: more
// rows are refused, never dropped), an FP8 problem is not one gemv_fp8_fits() takes, or the
// launch shape is not one of the above.
Status launch_gemv(const GemvProblem& problem, cudaStream_t stream);
Status launch_gemv(const GemvProblem& problem, const GemvLaunch& launch, cudaStream_t stream);

// The residual add and RMSNorm that launch_gemv_norm runs before the product (the norm weight
// BF16, the residuals F32): residual_out = residual + x, normed = residual_out / rms(residual_out)
// * (weight (+ 1 with unit_offset)) rounded to BF16, out = normed @ weight^T. residual_out and
// normed must not overlap x or residual.
struct GemvNormProblem {
  const float* residual = nullptr;  // [m, k], row stride ld_residual elements
  int64_t ld_residual = 0;
  float* residual_out = nullptr;  // [m, k], row stride ld_residual_out
  int64_t ld_residual_out = 0;
  const void* weight = nullptr;  // [k] BF16
  void* normed = nullptr;        // [m, k] BF16, row stride ld_normed; null: not stored
  int64_t ld_normed = 0;
  float eps = 1e-6f;
  bool unit_offset = false;
};
// Rows of x the fused norm takes. Measured on the H200 (35B-A3B decode step, the router): 0.05
// ms shorter at 1 token, 0.015 at 2, 0.42 longer at 8 (the rows are normalised in turn).
constexpr int64_t kGemvNormMaxRows = 2;
// The launch shape of launch_gemv_norm for n output features: 16-row blocks of 16 warps, one
// a tile, for outputs of at most one such block per SM (the MoE router); for wider ones
// (the mixers' input projections) 16-row tiles of 8 warps over as many blocks as are resident
// at once, each normalising x once for all its tiles. launch_gemv with this shape sums every
// output in the same order.
GemvLaunch gemv_norm_launch(int64_t n, int sm_count);
// Whether launch_gemv_norm takes a product of these sizes on a GPU of sm_count SMs, its weight
// BF16 or (fp8_weight) block-scaled FP8 as gemv_fp8_fits() takes it.
bool gemv_norm_fits(int64_t m, int64_t n, int64_t k, int sm_count, bool fp8_weight = false);
// Queues the product with the norm in its prologue: one launch where the norm would take one
// of its own. kInvalidArgument when gemv_norm_fits() says no or a row is off 16 bytes.
Status launch_gemv_norm(const GemvProblem& problem, const GemvNormProblem& norm,
                        cudaStream_t stream);

// The checked operands of linear() / gemv() (gemm.cu) as a GemvProblem, for the timing mode's
// launches with a given shape: `op` names the caller in messages.
Expected<GemvProblem> gemv_problem(std::string_view op, const Tensor& x, const Tensor& weight,
                                   const Tensor& bias, Tensor& out);

}  // namespace vllm::cuda::detail

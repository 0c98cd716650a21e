// Linear layers on the GPU: out = x @ weight^T (+ bias), the layout of torch.nn.Linear and of
// vllm::cpu::linear: a batched GEMV of our own for small batches (decode; gemv.cu), cuBLASLt
// above.
//
// A BlasContext owns the cuBLASLt handle and its workspace for one device and one stream at
// a time (the execution context holds one per stream); it is created once at start, never
// inside a step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// The batched GEMV's capacity: its kernels keep one set of sums per row of x, fixed at compile
// time, so gemv() refuses more rows.
inline constexpr int64_t kGemvMaxRows = 16;
// linear() takes the GEMV for M up to this many rows and cuBLASLt above. Measured on an H200
// (GemvCudaBench, BENCHMARKS.md): over a whole decode step cuBLASLt reads the weights faster
// (Qwen3.5-27B 88.7% of 4.3 TB/s against the GEMV's 78.4%; 4B 69.7% against 68.4%), the GEMV
// winning only on the N = 2560 matrices (1.1x). So linear() uses cuBLASLt at every M until the
// GEMV is faster; set_gemv_max_rows() turns it on for measurements.
inline constexpr int64_t kGemvCrossoverRows = 0;
// ... except for narrow outputs: at most this many output features (the MoE router, the GDN
// b/a projection, the output projections and MLP down of models of hidden size <= 2560) and
// M <= kGemvMaxRows take the GEMV whatever set_gemv_max_rows says (unless
// set_gemv_narrow(false)). cuBLASLt runs these products as a split-K GEMM plus a reduce
// launch (~16 us on the 35B-A3B router; 8 + 2.5 us on its [2048, 4096] out_proj, 37% of the
// bandwidth, Nsight Compute); the GEMV reads the same bytes in one launch (1.05-1.11x
// cuBLASLt on the N = 2560 matrices of Qwen3.5-4B, GemvCudaBench).
inline constexpr int64_t kGemvNarrowMaxN = 2560;

class BlasContext {
 public:
  // Creates the handle and a workspace of `workspace_bytes` on `device`.
  static Expected<std::unique_ptr<BlasContext>> create(Device device,
                                                       size_t workspace_bytes = 32u << 20);
  ~BlasContext();
  BlasContext(const BlasContext&) = delete;
  BlasContext& operator=(const BlasContext&) = delete;

  // Matmul plans (descriptors + the heuristic's algorithm) cached so far; see gemm.cu.
  size_t cached_plans() const;

  // The M up to which linear() uses the batched GEMV (kGemvCrossoverRows unless set; 0 sends
  // every product but the narrow ones to cuBLASLt). More than kGemvMaxRows: kInvalidArgument.
  Status set_gemv_max_rows(int64_t rows);
  // Whether narrow products (kGemvNarrowMaxN) take the GEMV at small M (default true).
  void set_gemv_narrow(bool on);
  int64_t gemv_max_rows() const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  explicit BlasContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// x [M, K] F32/BF16 (row stride allowed); weight [N, K] contiguous, in x's dtype;
// bias [N] (x's dtype or F32) or undefined; out [M, N] (row stride allowed) in x's dtype, or
// F32 when x is BF16 (the lm_head's logits). f32 accumulation; F32 inputs use full-precision
// f32 math (no TF32), so the F32 path matches the CPU op closely. M = 0 is a no-op; K = 0
// writes the bias (or zeros), as cpu::linear does. M <= blas.gemv_max_rows() runs gemv()
// below; otherwise the first call with a new shape, dtype or pointer alignment queries
// cuBLASLt's heuristic (host time) and later ones reuse its plan.
Status linear(BlasContext& blas, const Tensor& x, const Tensor& weight, const Tensor& bias,
              Tensor& out, cudaStream_t stream);

// The batched GEMV alone, with linear()'s operands and results, for 1 <= M <= kGemvMaxRows
// (M = 0 is a no-op; larger M: kInvalidArgument). Each weight row is read once for all rows
// of x; a row's result does not depend on M. Needs no BlasContext: it launches on the device
// of its operands.
Status gemv(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
            cudaStream_t stream);

// residual_out = residual + x (F32), normed = residual_out / rms(residual_out) *
// (norm_weight (+ 1 with unit_offset)) rounded to BF16 (fused_add_rms_norm's numbers, norm.cuh),
// out = normed @ weight^T (linear()'s): one launch of the batched GEMV, which normalises x in
// every block before its product. x BF16 [M, K] (row stride allowed), residual and
// residual_out F32 [M, K], norm_weight BF16 [K], weight BF16 [N, K] or block-scaled FP8 (the
// W8A16 product linear_fp8's GEMV runs, in blocks as gemv_fp8_fits() takes them), normed BF16
// [M, K] or undefined (not stored), out [M, N] BF16 or F32; residual_out and normed must not
// overlap x, residual or each other. Only the sizes add_rms_norm_linear_fits() accepts
// (products of 1 or 2 rows at K = 1024-2048 with 8-warp blocks (2560 for 1 row), or up to 8192
// for outputs narrow enough for 16-warp blocks: the MoE router, the mixers' input projections
// and the dense MLP's gate/up at decode, gemv.cuh; FP8 steps are twice as wide, so FP8 weights
// need K >= 2048 and 4096 there); others are kUnsupported, for the caller to run the two ops.
bool add_rms_norm_linear_fits(const Tensor& x, const LinearWeight& weight);
Status add_rms_norm_linear(const Tensor& x, const Tensor& residual, const Tensor& norm_weight,
                           float eps, bool unit_offset, const LinearWeight& weight,
                           Tensor& residual_out, Tensor& normed, Tensor& out, cudaStream_t stream);

// linear() with a block-scaled FP8 weight (W8A16): x F32 or BF16 [M, K], weight F8_E4M3
// [N, K] with its F32 scales, all on the context's device; out as linear(). Up to
// kFp8GemvMaxRows rows (gemv_fp8.cuh) a GEMV reads the e4m3 weight directly: the batched
// GEMV's tensor-core kernel where gemv_fp8_fits() (gemv.cuh) takes it (BF16 x, K a multiple
// of 16, blocks of a multiple of 16 rows by a power of two from 64 columns, 16-byte aligned
// rows), which multiplies x by the f32 dequantized weight (each 64-wide step's sums times its
// block's scale), the FP8 GEMV otherwise, which multiplies x by the weights rounded to BF16
// under BF16 activations. Larger M dequantizes the weight into a buffer the context keeps (grown on
// first need, which a stream that is being captured into a CUDA graph refuses) and runs linear() on
// that.
Status linear_fp8(BlasContext& blas, const Tensor& x, const LinearWeight& weight,
                  const Tensor& bias, Tensor& out, cudaStream_t stream);

// Block-scaled FP8 products of this many rows or more run as W8A8 (use_fp8_w8a8), below as
// W8A16 (linear_fp8): from here the weight is read by an FP8 tensor-core GEMM once, where
// linear_fp8 writes and reads it again dequantized, and the activations' quantization costs
// one pass over x.
inline constexpr int64_t kFp8W8A8MinRows = 9;

// linear() with a block-scaled FP8 weight as W8A8, the form of vLLM's block-FP8 linear
// layers: x quantized per token group of 128 (tensor/block_fp8.h, quantize_fp8_token_groups),
// then one cuBLASLt FP8 matmul with the weight's 128 x 128 block scales and those per-group
// scales, accumulating in f32; bias added after, out rounded once. The result is
// (dequantized x_q) @ (dequantized weight)^T up to f32 summation order.
//
// cuBLASLt takes the per-group scales as vectors of M_pad = fp8_w8a8_rows(M) (a multiple of
// 4) values, so the caller provides contiguous scratch for that many rows: x_q F8_E4M3
// [M_pad, K] and x_scales F32 [K / 128, M_pad] always, and out_pad [M_pad, N] in out's dtype
// when M_pad > M (the product's rows, of which the first M are copied to out; undefined
// otherwise). Padding rows are zero codes and never reach out.
//
// linear_fp8_w8a8_fits() says which products it takes (the weight in 128 x 128 blocks, N a
// multiple of 128, K of kFp8W8A8KMultiple, compute capability 9.0: the block scale modes are
// Hopper's); others are kUnsupported. use_fp8_w8a8() adds the row crossover. cuBLASLt reads
// the weight's scale grid [N / 128, K / 128] with its rows padded to a multiple of 4 scales,
// so K / 128 must be one (every K of Qwen3.5's projections is); measured on an H100, other K
// with N > 128 gave unrelated results.
inline constexpr int64_t kFp8W8A8KMultiple = 512;
inline int64_t fp8_w8a8_rows(int64_t m) {
  return (m + 3) / 4 * 4;
}
bool linear_fp8_w8a8_fits(const Tensor& x, const LinearWeight& weight);
bool use_fp8_w8a8(const Tensor& x, const LinearWeight& weight);
Status linear_fp8_w8a8(BlasContext& blas, const Tensor& x, const LinearWeight& weight,
                       const Tensor& bias, Tensor& x_q, Tensor& x_scales, Tensor& out_pad,
                       Tensor& out, cudaStream_t stream);

}  // namespace vllm::cuda

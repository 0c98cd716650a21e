// Internal to the CUDA backend (gemm.cu's W8A8 linear, moe.cu's W8A8 experts): the activation side
// of W8A8 block FP8, the per-token-group quantization tensor/block_fp8.h defines
// (quantize_fp8_token_groups), written in the layouts cuBLASLt's block-scaled FP8 matmul reads.
// Plain C++ (no device code).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "tensor/dtype.h"

namespace vllm::cuda::detail {

// Elements per activation scale: the K width of one weight scale block, the only one
// cuBLASLt's VEC128 / BLK128x128 scale modes know.
constexpr int64_t kFp8ActivationGroup = 128;

struct Fp8QuantizeProblem {
  DType x_dtype = DType::kBF16;  // BF16 or F32
  const void* x = nullptr;       // [m, k], row stride ldx elements
  int64_t ldx = 0;
  uint8_t* q = nullptr;     // e4m3 [m_pad, k] contiguous
  float* scales = nullptr;  // [k / kFp8ActivationGroup, m_pad]: group g of row r at g * m_pad + r
  int64_t m = 0, k = 0;     // k a multiple of kFp8ActivationGroup
  // Rows [m, m_pad) are padding: codes 0 under scale 1, so they add nothing to a product
  // (cuBLASLt's per-group scale vectors want m_pad a multiple of 4). 0: m_pad = m.
  int64_t m_pad = 0;
  // Grouped MoE rows (moe_plan.cuh), both device pointers or null: rows r with row_pairs[r] < 0
  // (padding) or r >= *rows_used (past the plan's last expert) are not read or written. The
  // W8A8 down projection reads neither (it zero-fills padding rows).
  const int32_t* row_pairs = nullptr;
  const int32_t* rows_used = nullptr;
};

// One warp per (row, group): the group's amax, its scale, its 128 e4m3 values, exactly the
// CPU's (IEEE division, round-to-nearest-even conversion). A group holding a non-finite value
// gets a NaN scale, so every output it feeds is NaN rather than a finite wrong value.
Status launch_fp8_quantize_token_groups(const Fp8QuantizeProblem& problem, cudaStream_t stream);

}  // namespace vllm::cuda::detail

// The per-token-group activation quantization of W8A8 block FP8 (fp8_quant.cuh).
//
// A warp takes one group of 128 elements of one row: each lane loads 4 elements 32 apart
// (coalesced across the warp), the warp reduces their magnitudes, and every lane divides its
// elements by the group's scale and converts them with e4m3's saturating conversion after
// vLLM's clamp to +-448. The scales go out M-major (group g of row m at g * M + m), the layout
// of cuBLASLt's VEC128_32F scale mode for the x operand.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8_quant.cuh"
#include "backend/cuda/runtime.h"
#include "tensor/block_fp8.h"

namespace vllm::cuda::detail {
namespace {

constexpr int kQuantWarps = 8;
constexpr int kPerLane = static_cast<int>(kFp8ActivationGroup) / kWarpSize;

template <typename TX>
__global__ void __launch_bounds__(kQuantWarps* kWarpSize)
    fp8_quantize_token_groups_kernel(const TX* __restrict__ x, int64_t ldx, uint8_t* __restrict__ q,
                                     float* __restrict__ scales, int64_t m, int64_t m_pad,
                                     int64_t groups, const int32_t* __restrict__ row_pairs,
                                     const int32_t* __restrict__ rows_used) {
  pdl_wait();
  pdl_launch_next();
  const int lane = threadIdx.x % kWarpSize;
  const int64_t task = static_cast<int64_t>(blockIdx.x) * kQuantWarps + threadIdx.x / kWarpSize;
  if (task >= m_pad * groups) return;
  const int64_t row = task / groups, g = task % groups;
  // Grouped MoE rows: padding and rows past the plan's last are left as they are.
  if (rows_used != nullptr && row >= *rows_used) return;
  if (row_pairs != nullptr && row_pairs[row] < 0) return;
  const int64_t k0 = g * kFp8ActivationGroup;
  if (row >= m) {  // padding: zero codes under a unit scale
    uint8_t* dst = q + row * groups * kFp8ActivationGroup + k0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) dst[lane + i * kWarpSize] = 0;
    if (lane == 0) scales[g * m_pad + row] = 1.0f;
    return;
  }
  const TX* src = x + row * ldx + k0;
  float v[kPerLane];
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    v[i] = to_float(src[lane + i * kWarpSize]);
    finite = finite && isfinite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_max(amax);
  finite = __all_sync(0xffffffffu, finite);
  const float scale =
      finite ? fmaxf(amax, kFp8ActivationMinAmax) / kFp8E4M3Max : __int_as_float(0x7fc00000);
  uint8_t* dst = q + row * groups * kFp8ActivationGroup + k0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const float s = fminf(fmaxf(__fdiv_rn(v[i], scale), -kFp8E4M3Max), kFp8E4M3Max);
    dst[lane + i * kWarpSize] =
        static_cast<uint8_t>(__nv_cvt_float_to_fp8(s, __NV_SATFINITE, __NV_E4M3));
  }
  if (lane == 0) scales[g * m_pad + row] = scale;
}

}  // namespace

Status launch_fp8_quantize_token_groups(const Fp8QuantizeProblem& p, cudaStream_t stream) {
  if (p.m < 0 || p.k < 0 || p.k % kFp8ActivationGroup != 0 ||
      (p.x_dtype != DType::kBF16 && p.x_dtype != DType::kF32)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "fp8 token-group quantization: [{}, {}] {} (K must be a multiple of {}; "
                      "x BF16 or F32)",
                      p.m, p.k, dtype_name(p.x_dtype), kFp8ActivationGroup);
  }
  const int64_t m_pad = p.m_pad == 0 ? p.m : p.m_pad;
  if (m_pad < p.m) {
    return make_error(ErrorCode::kInvalidArgument,
                      "fp8 token-group quantization: {} padded rows for {} rows", m_pad, p.m);
  }
  const int64_t groups = p.k / kFp8ActivationGroup;
  const int64_t tasks = m_pad * groups;
  if (tasks == 0) return Status::ok();
  const int64_t blocks = ceil_div(tasks, int64_t{kQuantWarps});
  if (blocks > 0x7fffffff) {
    return make_error(ErrorCode::kUnsupported,
                      "fp8 token-group quantization: [{}, {}] is too large", p.m, p.k);
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  if (p.x_dtype == DType::kBF16) {
    launch_pdl(fp8_quantize_token_groups_kernel<__nv_bfloat16>, grid, kQuantWarps * kWarpSize, 0,
               stream, static_cast<const __nv_bfloat16*>(p.x), p.ldx, p.q, p.scales, p.m, m_pad,
               groups, p.row_pairs, p.rows_used);
  } else {
    launch_pdl(fp8_quantize_token_groups_kernel<float>, grid, kQuantWarps * kWarpSize, 0, stream,
               static_cast<const float*>(p.x), p.ldx, p.q, p.scales, p.m, m_pad, groups,
               p.row_pairs, p.rows_used);
  }
  return check_launch("fp8_quantize_token_groups_kernel");
}

}  // namespace vllm::cuda::detail

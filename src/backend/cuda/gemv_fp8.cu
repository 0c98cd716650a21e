// The W8A16 kernels behind cuda::linear for block-scaled FP8 weights (gemv_fp8.cuh).
//
// GEMV (M <= kFp8GemvMaxRows): a warp owns kRowsPerWarp consecutive output features over all
// of K; its lanes take 16-weight chunks (one 16-byte load of e4m3 each) in turn, kUnroll per
// row in flight. e4m3 -> f32 is exact (cvt.rn.f16x2.e4m3x2 on sm_89+, then f16 -> f32).
// With BF16 activations each weight is scaled and rounded to BF16 -- the very values the
// dequantization kernel writes for the cuBLASLt path above kFp8GemvMaxRows rows -- so a
// token's logits do not depend on whether its step ran on the GEMV (decode, short chunks) or
// on cuBLASLt (prefill) beyond summation order, as with BF16 weights. With F32 activations
// (`--dtype float32`) a chunk never straddles two scale blocks (the vector path needs block_k
// and K to be multiples of 16), so each chunk's 16 products are summed in f32 and multiplied
// once by its block's scale; the CPU reference scales every weight first, so the two differ
// only by f32 rounding. The warp sums its lanes at the end; the order of every row's sum
// depends on K alone, never on M or on the other rows. Without the vector path's alignment (K
// or block_k not a multiple of 16, x rows off 16-byte boundaries) the same warps walk K one
// element at a time, scaling each weight before the product.
//
// Dequantize: every weight as its fp8 value times its block's scale, rounded once to the
// output type; 16 weights a thread per step where the vector path's conditions hold.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/gemv_fp8.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda::detail {
namespace {

constexpr int kFp8Warps = 8;
constexpr int kFp8Threads = kFp8Warps * kWarpSize;
constexpr int kRowsPerWarp = 2;
constexpr int kChunk = kFp8Chunk;
constexpr int kUnroll = 2;  // chunks of each row a lane keeps in flight
constexpr int kDequantThreads = 256;

struct Fp8Params {
  const void* x;
  int64_t ldx;
  const uint8_t* w;
  const float* scales;
  int64_t scale_cols;
  int block_n, block_k;
  ParamVec bias;
  void* out;
  int64_t ldo;
  bool out_f32;
  int m, n, k;
};

// kM: rows of x the kernel holds sums for (p.m <= kM; rows past p.m are skipped).

template <typename TX, int kM, bool kVec>
__global__ void __launch_bounds__(kFp8Threads) fp8_gemv_kernel(Fp8Params p) {
  // BF16 activations multiply the weights rounded to BF16 (as the dequantized path above the
  // GEMV's rows does), F32 activations the exact chunk sums scaled once.
  constexpr bool kRoundWeights = std::is_same_v<TX, __nv_bfloat16>;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kFp8Warps + warp) * kRowsPerWarp;
  const uint8_t* wrow[kRowsPerWarp];
  const float* srow[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    // Rows past N re-read row N - 1 (their outputs are dropped).
    const int64_t n = row0 + r < p.n ? row0 + r : p.n - 1;
    wrow[r] = p.w + n * p.k;
    srow[r] = p.scales + (n / p.block_n) * p.scale_cols;
  }
  float acc[kM][kRowsPerWarp];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[m][r] = 0.0f;
  }
  pdl_wait();
  pdl_launch_next();
  const TX* x = static_cast<const TX*>(p.x);
  if constexpr (kVec) {
    const int chunks = p.k / kChunk;
    for (int c0 = lane; c0 < chunks; c0 += kWarpSize * kUnroll) {
      uint4 wv[kUnroll][kRowsPerWarp];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarpSize;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          if (c < chunks) wv[u][r] = load_weight16(wrow[r] + int64_t{c} * kChunk);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kWarpSize;
        if (c >= chunks) break;
        const int kb = c * kChunk / p.block_k;
        float wf[kRowsPerWarp][kChunk];
        float s[kRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          fp8_chunk_to_float(wv[u][r], wf[r]);
          s[r] = __ldg(srow[r] + kb);
        }
        if constexpr (kRoundWeights) {
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
            for (int j = 0; j < kChunk; ++j) wf[r][j] = round_weight_bf16(wf[r][j] * s[r]);
          }
        }
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if (m >= p.m) break;
          float xf[kChunk];
          load_x16(x + m * p.ldx + int64_t{c} * kChunk, xf);
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
            if constexpr (kRoundWeights) {
#pragma unroll
              for (int j = 0; j < kChunk; ++j) acc[m][r] = fmaf(xf[j], wf[r][j], acc[m][r]);
            } else {
              float part = 0.0f;
#pragma unroll
              for (int j = 0; j < kChunk; ++j) part = fmaf(xf[j], wf[r][j], part);
              acc[m][r] = fmaf(part, s[r], acc[m][r]);
            }
          }
        }
      }
    }
  } else {
    for (int kk = lane; kk < p.k; kk += kWarpSize) {
      float wv[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float w = e4m3_to_float(__ldg(wrow[r] + kk)) * __ldg(srow[r] + kk / p.block_k);
        wv[r] = kRoundWeights ? round_weight_bf16(w) : w;
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if (m >= p.m) break;
        const float xv = to_float(x[m * p.ldx + kk]);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[m][r] = fmaf(xv, wv[r], acc[m][r]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[m][r] = warp_sum(acc[m][r]);
  }
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t n = row0 + r;
    if (n >= p.n) break;
    const float b = load_param(p.bias, n);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (m >= p.m) break;
      const int64_t at = m * p.ldo + n;
      if (p.out_f32) {
        static_cast<float*>(p.out)[at] = acc[m][r] + b;
      } else {
        static_cast<__nv_bfloat16*>(p.out)[at] = from_float<__nv_bfloat16>(acc[m][r] + b);
      }
    }
  }
}

struct DequantParams {
  const uint8_t* w;
  const float* scales;
  int64_t scale_cols;
  int64_t block_n, block_k;
  int64_t n, k;
  void* out;
};

template <typename TO, bool kVec>
__global__ void __launch_bounds__(kDequantThreads) fp8_dequantize_kernel(DequantParams p) {
  pdl_wait();
  pdl_launch_next();
  TO* out = static_cast<TO*>(p.out);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVec) {
    const int64_t row_chunks = p.k / kChunk, total = p.n * row_chunks;
    for (int64_t i = first; i < total; i += stride) {
      const int64_t n = i / row_chunks, k0 = (i % row_chunks) * kChunk;
      const float s = __ldg(p.scales + (n / p.block_n) * p.scale_cols + k0 / p.block_k);
      float wf[kChunk];
      fp8_chunk_to_float(load_weight16(p.w + n * p.k + k0), wf);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) out[n * p.k + k0 + j] = from_float<TO>(wf[j] * s);
    }
  } else {
    const int64_t total = p.n * p.k;
    for (int64_t i = first; i < total; i += stride) {
      const int64_t n = i / p.k, kk = i % p.k;
      const float s = __ldg(p.scales + (n / p.block_n) * p.scale_cols + kk / p.block_k);
      out[i] = from_float<TO>(e4m3_to_float(__ldg(p.w + i)) * s);
    }
  }
}

template <typename Kernel, typename P>
Status run(Kernel kernel, const char* name, int64_t blocks, int threads, const P& p,
           cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(blocks));
#if defined(VLLM_CUDA_EMULATION)
  (void)name;
  (void)stream;
  emu::launch(grid, static_cast<unsigned>(threads), nullptr, 0, [&] { kernel(p); });
  return Status::ok();
#else
  launch_pdl(kernel, grid, threads, 0, stream, p);
  return check_launch(name);
#endif
}

template <typename TX, bool kVec>
Status launch_rows(const Fp8Params& p, cudaStream_t stream) {
  const int64_t blocks = ceil_div(p.n, int64_t{kFp8Warps} * kRowsPerWarp);
  constexpr const char* kName = "fp8_gemv_kernel";
  if (p.m <= 1) return run(fp8_gemv_kernel<TX, 1, kVec>, kName, blocks, kFp8Threads, p, stream);
  if (p.m <= 2) return run(fp8_gemv_kernel<TX, 2, kVec>, kName, blocks, kFp8Threads, p, stream);
  if (p.m <= 4) return run(fp8_gemv_kernel<TX, 4, kVec>, kName, blocks, kFp8Threads, p, stream);
  return run(fp8_gemv_kernel<TX, 8, kVec>, kName, blocks, kFp8Threads, p, stream);
}

bool vector_path(const Fp8Matrix& w) {
  return w.k % kChunk == 0 && w.block_k % kChunk == 0 && is_aligned(w.data, 16);
}

}  // namespace

Status launch_fp8_gemv(const Fp8GemvProblem& pr, cudaStream_t stream) {
  if (pr.m < 1 || pr.m > kFp8GemvMaxRows) {
    return make_error(ErrorCode::kInvalidArgument,
                      "fp8 gemv: {} rows of x; the FP8 GEMV holds 1 to {} (larger batches "
                      "dequantize the weight for cuBLASLt)",
                      pr.m, kFp8GemvMaxRows);
  }
  const Fp8Matrix& w = pr.w;
  if (w.n < 1 || w.k < 1 || w.n > 0x7fffffff || w.k > 0x7fffffff || w.block_n < 1 ||
      w.block_k < 1 || w.block_n > 0x7fffffff || w.block_k > 0x7fffffff) {
    return make_error(ErrorCode::kInvalidArgument,
                      "fp8 gemv: [{}, {}] x [{}, {}]^T in {}x{} blocks is out of range", pr.m,
                      w.k, w.n, w.k, w.block_n, w.block_k);
  }
  Fp8Params p{};
  p.x = pr.x;
  p.ldx = pr.ldx;
  p.w = w.data;
  p.scales = w.scales;
  p.scale_cols = w.scale_cols;
  p.block_n = static_cast<int>(w.block_n);
  p.block_k = static_cast<int>(w.block_k);
  p.bias = ParamVec{pr.bias, pr.bias_dtype};
  p.out = pr.out;
  p.ldo = pr.ldo;
  p.out_f32 = pr.out_dtype == DType::kF32;
  p.m = static_cast<int>(pr.m);
  p.n = static_cast<int>(w.n);
  p.k = static_cast<int>(w.k);
  const size_t es = dtype_size(pr.x_dtype);
  const bool vec = vector_path(w) && is_aligned(pr.x, 16) &&
                   (static_cast<size_t>(pr.ldx) * es) % 16 == 0;
  if (pr.x_dtype == DType::kF32) {
    return vec ? launch_rows<float, true>(p, stream) : launch_rows<float, false>(p, stream);
  }
  return vec ? launch_rows<__nv_bfloat16, true>(p, stream)
             : launch_rows<__nv_bfloat16, false>(p, stream);
}

Status launch_fp8_dequantize(const Fp8Matrix& w, DType out_dtype, void* out, cudaStream_t stream) {
  if (w.n < 1 || w.k < 1 || w.block_n < 1 || w.block_k < 1) {
    return make_error(ErrorCode::kInvalidArgument, "fp8 dequantize: [{}, {}] in {}x{} blocks",
                      w.n, w.k, w.block_n, w.block_k);
  }
  DequantParams p{w.data, w.scales, w.scale_cols, w.block_n, w.block_k, w.n, w.k, out};
  const bool vec = vector_path(w);
  const int64_t work = vec ? w.n * (w.k / kChunk) : w.n * w.k;
  const int64_t blocks = std::min<int64_t>(ceil_div(work, kDequantThreads), 4096);
  constexpr const char* kName = "fp8_dequantize_kernel";
  if (out_dtype == DType::kF32) {
    return vec ? run(fp8_dequantize_kernel<float, true>, kName, blocks, kDequantThreads, p, stream)
               : run(fp8_dequantize_kernel<float, false>, kName, blocks, kDequantThreads, p, stream);
  }
  return vec ? run(fp8_dequantize_kernel<__nv_bfloat16, true>, kName, blocks, kDequantThreads, p,
                   stream)
             : run(fp8_dequantize_kernel<__nv_bfloat16, false>, kName, blocks, kDequantThreads, p,
                   stream);
}

}  // namespace vllm::cuda::detail

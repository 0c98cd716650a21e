// The batched GEMV behind cuda::linear for small batches (gemv.cuh): out[M, N] = x[M, K] @
// weight[N, K]^T (+ bias) for M <= kGemvMaxRows, each weight row read from memory once for
// all M rows. A decode step is bound by the bytes of its weights, so the job is to stream
// them at the HBM roofline: enough 16-byte loads in flight on every SM, and little else.
//
// BF16, on tensor cores. A block owns 16 or 32 consecutive output features (one or two
// "row tiles" of 16 weight rows) and its W warps split K: k is cut into 32-wide steps, warp w
// takes steps [w S, w S + S), then [(w + W) S, ...), and so on, with S = 4 / row tiles, so
// each lane issues 8 16-byte weight loads (4 KB per warp) before it multiplies; 2-3 blocks
// of 8 warps per SM keep 64-96 KB in flight there (outputs too narrow for more than one
// 16-row block per SM take blocks of 16 warps instead, and those of one to two such blocks
// per SM blocks of 12, two of which fit an SM). The product is mma.sync m16n8k16 (mma.cuh)
// with a weight tile as A (16 rows) and x^T as B (8 rows of x per n8 tile; one tile for
// M <= 8, two for M <= 16): at M = 16 a CUDA-core GEMV needs as many FMAs per weight byte as
// an SM can issue, the tensor cores two instructions per 16 x 32 x 8 products. With one row
// tile each fragment keeps two sums (the two halves of a step), so no chain of dependent mma
// is longer than 4 and a warp soon reaches its next loads.
//   Fragments. The sum over k does not care about the order of k, so A and B are loaded in
// 16-byte chunks and k is permuted identically for both inside each step: lane (g = lane / 4,
// t = lane % 4) loads k [8t, 8t + 8) of weight rows g and g + 8 and of x row g; words 0-1 of
// each chunk are the first m16n8k16's k {2t, 2t + 1} and {2t + 8, 2t + 9} (mma.cuh's tables),
// words 2-3 the second's. Rows of x at or past M are never loaded (zero B columns, outputs
// dropped); weight rows past N re-read row N - 1 (outputs dropped).
//   Ending. Each warp writes its accumulator fragments to shared memory; the block sums
// them over its warps in warp order, adds the bias in f32 and rounds once. Which warp sums
// which k, and in which order, depends on K, the launch shape, the row tiles and the weight
// format, never on M.
//   K not a multiple of 8, or x / weight rows off 16-byte boundaries: the same kernel loads
// each chunk one element at a time (zeros past K), one step per iteration.
// Weights are loaded with L1::no_allocate: they are used once, and x (read by every block)
// keeps L1 to itself.
//
// FP8 weights (block-scaled e4m3 under BF16 x, M <= 8: linear_fp8's decode products where
// gemv_fp8_fits) take the same kernel, launch shapes and fused norm. A 16-byte load now holds
// 16 weights, so a step is 64 k wide: lane (g, t) loads k [16t, 16t + 16) of weight rows g and
// g + 8 and, as two 16-byte loads, of x row g, and the step is four m16n8k16, product i taking
// the chunk's k [4i, 4i + 4) (word i of each weight chunk, words 2i and 2i + 1 of x's). A lane
// still has 8 weight loads in flight (4 steps of one row tile or 2 of two: 4 KB per warp).
// Each word of four e4m3 becomes two bf16x2 A registers holding the codes' exact values
// (e4m3x4_to_bf16x4_exact, fp8.cuh: bit moves and one BF16 multiply, no conversion
// instructions, whose narrow pipe would otherwise bound the kernel). A step's four products
// sum into fresh f32 registers, which its block's scale multiplies once into the running sums:
// x meets the f32 dequantized weight (code times scale), as on the CPU, summed in another
// order. block_n a multiple of 16 gives a row tile one scale row, and block_k a power of two
// from 64 puts a whole step in one block (its scale a shift away); the scales are loaded with
// the weights (before pdl_wait), and x step by step just before its products (the raw weights
// leave too few registers for all steps' x at once). Two row tiles need ~110 registers, so
// their blocks run 2 to an SM (kMinBlocks).
//
// F32, on CUDA cores in full f32 precision (no TF32): a warp owns 2 output features over all
// of K, lanes take 16-byte chunks (or single elements) in turn, 2 per feature in flight, one
// f32 sum per (feature, row of x), and a warp sum at the end.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_fp8.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda::detail {
namespace {

constexpr int kMaxRows = static_cast<int>(kGemvMaxRows);
constexpr int kBlockWarps = 8;       // warps of a block, unless the output is narrow
constexpr int kWideBlockWarps = 16;  // for outputs of at most one 16-row block per SM
constexpr int kMidBlockWarps = 12;   // for outputs of one to two 16-row blocks per SM (two fit)
constexpr int kMaxWarps = kWideBlockWarps;
constexpr int kStepK = 32;     // k per step: 4 lanes x 8 elements
constexpr int kTileRows = 16;  // weight rows of one m16n8k16 A tile
constexpr int kStepLoads = 4;  // steps x row tiles per iteration: 8 weight loads per lane
// Resident 8-warp blocks per SM of the fused norm's wide launches (kMinBlocks).
constexpr int kNormWideBlocksPerSm = 3;
// The fused norm's prologue: rms_norm_kernel's decode block of 256 threads (norm.cu), each
// summing up to 4 chunks of 8 columns (columns [8 i, 8 i + 8) for i = thread + 256 c), so
// hidden sizes up to 8192 are normalised with that kernel's sums in its order.
constexpr int kNormThreads = 256;
constexpr int kNormChunks = 4;
// Hidden sizes up to which the wide launches (8-warp blocks walking several tiles) take the
// norm: their products then leave cuBLASLt for the GEMV, which reads these wider matrices
// slower than cuBLASLt does, so the launch saved pays only for the smaller ones. Measured on
// the H200 (decode steps): 35B-A3B (2048) 0.075 ms shorter at 1 row and 0.03 at 2;
// Qwen3.5-4B (2560) 0.04 ms shorter at 1 row, 0.05 longer at 2; Qwen3.5-27B (5120) 0.58 ms
// longer at 1 row.
constexpr int64_t kNormWideMaxK = 2560;   // one row
constexpr int64_t kNormWideMaxK2 = 2048;  // two rows
constexpr int kF32Warps = 8;
constexpr int kF32Rows = 2;    // output features per warp
constexpr int kF32Unroll = 2;  // chunks of each feature in flight per lane

#if defined(VLLM_CUDA_EMULATION)
// The emulated blocks' shared memory (tests/cuda_emulation): the 48 KB a launch may take.
alignas(16) unsigned char gemv_smem[48 * 1024];
#endif

struct GemvParams {
  const void* x;
  int64_t ldx;
  const void* weight;
  // FP8 weights: the scale of row n, column k is
  // scales[n / block_n * scale_cols + (k >> block_k_log2)].
  const float* scales;
  int64_t scale_cols;
  int block_n;
  int block_k_log2;
  ParamVec bias;
  void* out;
  int64_t ldo;
  bool out_f32;
  int m, n, k;
};

// The residual add and RMSNorm that the BF16 kernel can run before its product (kNorm):
// residual_out = residual + x in F32, normed = residual_out / rms * (weight (+ 1)) in BF16,
// and the product reads normed. Every block computes normed for itself; block 0 stores it and
// residual_out. The rounding is rms_norm_kernel's (norm.cu): F32 sums of each thread's 8
// squares in order, a warp shuffle tree, then one across the warps.
struct GemvNorm {
  const float* residual;  // [m, k] at ld_residual
  int64_t ld_residual;
  float* residual_out;  // [m, k] at ld_residual_out
  int64_t ld_residual_out;
  const __nv_bfloat16* weight;  // [k]
  __nv_bfloat16* normed;        // [m, k] at ld_normed; null: not stored
  int64_t ld_normed;
  float eps;
  bool unit_offset;
};

// 16 bytes of x, which every block reads: a coherent load (an earlier kernel wrote x; see
// pdl_wait in common.cuh), cached in L1.
__device__ __forceinline__ uint4 load_input16(const void* p) {
  return *static_cast<const uint4*>(p);
}

// Elements [k0, k0 + 8) of a BF16 row as four words, zeros from k on. kVec: the 8 elements
// are one aligned 16-byte chunk (k is a multiple of 8, so the chunk is all in or all out).
// Unsigned offsets: k0 runs a few steps past k, and k may be close to 2^31.
template <bool kVec, bool kWeight>
__device__ __forceinline__ uint4 load_chunk8(const uint16_t* row, uint32_t k0, uint32_t k) {
  if constexpr (kVec) {
    if (k0 >= k) return make_uint4(0, 0, 0, 0);
    return kWeight ? load_weight16(row + k0) : load_input16(row + k0);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = k0 + 2 * i < k ? row[k0 + 2 * i] : 0u;
      const uint32_t hi = k0 + 2 * i + 1 < k ? row[k0 + 2 * i + 1] : 0u;
      w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

__device__ __forceinline__ void store_out(const GemvParams& p, int m, int64_t n, float v) {
  const int64_t at = static_cast<int64_t>(m) * p.ldo + n;
  if (p.out_f32) {
    static_cast<float*>(p.out)[at] = v;
  } else {
    static_cast<__nv_bfloat16*>(p.out)[at] = from_float<__nv_bfloat16>(v);
  }
}

// The sum of v over the block, in every thread. scratch: 32 floats of shared memory.
__device__ __forceinline__ float gemv_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < static_cast<int>(blockDim.x / kWarpSize) ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  __syncthreads();  // scratch is free again
  return total;
}

// GemvNorm's prologue, by every thread of the block (launch_gemv_norm: k a multiple of 8 and
// at most 8 * kNormThreads * kNormChunks, 16-byte aligned rows): the m normalised rows of x
// into xs [m, k]. Threads past kNormThreads only take part in the barriers. Two passes over
// each row: the sums of squares, then residual + x again (from L1) for the scaled values.
__device__ void gemv_norm_prologue(const GemvParams& p, const GemvNorm& nrm, uint16_t* xs,
                                   float* scratch) {
  const int i0 = threadIdx.x;  // this thread's chunks: columns [8 i, 8 i + 8), i = i0 + 256 c
  const bool norm_thread = i0 < kNormThreads;
  // residual + x at chunk i of row m, in F32.
  auto load_sum = [&](int m, int i, float(&v)[8]) {
    const uint4 xv = load_input16(static_cast<const uint16_t*>(p.x) + m * p.ldx + 8 * i);
    const float4* r = reinterpret_cast<const float4*>(nrm.residual + m * nrm.ld_residual + 8 * i);
    const float4 r0 = r[0], r1 = r[1];
    const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
    const float rs[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint32_t bits = e % 2 == 0 ? xw[e / 2] << 16 : xw[e / 2] & 0xffff0000u;
      v[e] = __uint_as_float(bits) + rs[e];
    }
  };
  for (int m = 0; m < p.m; ++m) {
    float sum = 0.0f;
    if (norm_thread) {
#pragma unroll 1
      for (int c = 0; c < kNormChunks; ++c) {
        const int i = i0 + c * kNormThreads;
        if (8 * i >= p.k) break;
        float v[8];
        load_sum(m, i, v);
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) s += v[e] * v[e];
        sum += s;
      }
    }
    const float inv_rms = 1.0f / sqrtf(gemv_block_sum(sum, scratch) / p.k + nrm.eps);
    if (!norm_thread) continue;
#pragma unroll 1
    for (int c = 0; c < kNormChunks; ++c) {
      const int i = i0 + c * kNormThreads;
      if (8 * i >= p.k) break;
      float v[8];
      load_sum(m, i, v);
      const uint4 wv = load_weight16(nrm.weight + 8 * i);
      const uint32_t ww[4] = {wv.x, wv.y, wv.z, wv.w};
      uint32_t y[4];
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        float f0 = __uint_as_float(ww[e / 2] << 16), f1 = __uint_as_float(ww[e / 2] & 0xffff0000u);
        if (nrm.unit_offset) {
          f0 += 1.0f;
          f1 += 1.0f;
        }
        const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(v[e] * inv_rms * f0));
        const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(v[e + 1] * inv_rms * f1));
        y[e / 2] = lo | (hi << 16);
      }
      const uint4 yv = make_uint4(y[0], y[1], y[2], y[3]);
      *reinterpret_cast<uint4*>(xs + m * p.k + 8 * i) = yv;
      if (blockIdx.x == 0) {
        if (nrm.normed != nullptr) {
          *reinterpret_cast<uint4*>(nrm.normed + m * nrm.ld_normed + 8 * i) = yv;
        }
        float4* ro = reinterpret_cast<float4*>(nrm.residual_out + m * nrm.ld_residual_out + 8 * i);
        ro[0] = make_float4(v[0], v[1], v[2], v[3]);
        ro[1] = make_float4(v[4], v[5], v[6], v[7]);
      }
    }
  }
  __syncthreads();  // xs is whole
}

// Blocks of 8 warps resident per SM that the register budget must allow: 3 (<= 80 registers)
// where ptxas then needs no spills, else 2 (<= 128). Unbounded, ptxas picks anywhere from 40
// registers with spills to 110. Blocks of 16 warps serve outputs of at most one block per SM:
// one; blocks of 12 warps those of one to two: 2 (<= 80 registers, no spills at M <= 8).
// FP8 weights (one n8 tile) fit 80 registers with one row tile; two row tiles spill there
// (their 32 raw weight registers and the conversions), so their 8-warp blocks take 2 (~110
// registers) and their wider ones (never chosen: explicit launch shapes only) 1.
template <int kNTiles, int kRowTiles, bool kVec, int kWarps, bool kFp8 = false>
constexpr int kMinBlocks = kRowTiles > 1 && kFp8     ? (kWarps > kBlockWarps ? 1 : 2)
                           : kWarps > kMidBlockWarps ? 1
                           : kWarps > kBlockWarps    ? 2
                                                     : (!kVec || kNTiles * kRowTiles < 4 ? 3 : 2);

// k per step: 4 lanes x one 16-byte weight load each, 8 BF16 or 16 e4m3 weights.
template <bool kFp8>
constexpr int kStepKOf = kFp8 ? 2 * kStepK : kStepK;

// Word i (0-3) of a 16-byte chunk; i is a constant once unrolled.
__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// kNTiles: n8 tiles of x rows (M <= 8 * kNTiles); kRowTiles: 16-row weight tiles per block.
// kNorm: the GemvNorm prologue first (kVec only; every warp has steps: launch_gemv_norm).
// kFp8: e4m3 weights with block scales (kVec, one n8 tile: launch_gemv's FP8 conditions).
template <int kNTiles, int kRowTiles, bool kVec, int kWarps, bool kNorm = false, bool kFp8 = false>
__global__ void __launch_bounds__(kWarps* kWarpSize,
                                  (kMinBlocks<kNTiles, kRowTiles, kVec, kWarps, kFp8>))
    gemv_bf16_kernel(GemvParams p, GemvNorm nrm) {
  static_assert(!kFp8 || (kVec && kNTiles == 1), "FP8 weights: 16-byte loads, M <= 8");
  // Weights are read before pdl_wait (their first loads overlap the previous kernel), x after.
  // The element-wise path issues 16 loads per chunk anyway: one step per iteration.
  constexpr int kSteps = kVec ? kStepLoads / kRowTiles : 1;
  constexpr int kStepW = kStepKOf<kFp8>;
  constexpr int kLaneK = kStepW / 4;             // k of one lane's chunk: 8 or 16
  constexpr int kXLoads = kLaneK / 8;            // 16-byte loads of x per chunk: 1 or 2
  constexpr int kAcc = kRowTiles * kNTiles * 4;  // accumulators per lane
  using WeightBits = std::conditional_t<kFp8, uint8_t, uint16_t>;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const WeightBits* weight = static_cast<const WeightBits*>(p.weight);
  const uint16_t* xrow[kNTiles];
  bool has_x[kNTiles];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const int m = 8 * j + g;
    has_x[j] = m < p.m;
    xrow[j] = static_cast<const uint16_t*>(p.x) + (has_x[j] ? m : 0) * p.ldx;
  }

  // Shared memory: the warps' partial sums (the ending), then with kNorm the normalised x and
  // the norm's scratch.
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  float* partial = reinterpret_cast<float*>(gemv_smem);
  uint16_t* xs = reinterpret_cast<uint16_t*>(partial + warps * kAcc * kWarpSize);
  float* norm_scratch = reinterpret_cast<float*>(xs + p.m * p.k);  // kNorm: 32 floats

  const int steps = static_cast<int>(ceil_div(p.k, kStepW));
  bool waited = false;
  // The block's tiles of kTileRows * kRowTiles output features: one, but with kNorm the grid
  // may be smaller than the output (the wide launches normalise x once for several tiles).
  // (The grid is never larger than the tiles.)
  const int64_t tiles = ceil_div(p.n, kTileRows * kRowTiles);
  for (int64_t tile = blockIdx.x;;) {  // block-uniform
    const int64_t row0 = tile * kTileRows * kRowTiles;
    const WeightBits* wrow[kRowTiles][2];
    // kFp8: each row tile's scales (block_n a multiple of 16: one scale row for the tile; rows
    // past N read any, their outputs are dropped).
    [[maybe_unused]] const float* srow[kRowTiles];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int64_t row = row0 + kTileRows * r + 8 * h + g;
        if (row >= p.n) row = p.n - 1;
        wrow[r][h] = weight + row * p.k;
      }
      if constexpr (kFp8) {
        int64_t tile_row = row0 + kTileRows * r;
        if (tile_row >= p.n) tile_row = p.n - 1;
        srow[r] = p.scales + static_cast<int>(tile_row) / p.block_n * p.scale_cols;
      }
    }

    // With one row tile, two sums per fragment (the two k halves of each step): every chain of
    // dependent mma is then 4 long, so a warp soon reaches its next loads.
    constexpr int kSums = kRowTiles == 1 ? 2 : 1;
    float acc[kRowTiles][kNTiles][kSums][4];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int i = 0; i < 4 * kSums; ++i) acc[r][j][i / 4][i % 4] = 0.0f;
      }
    }

    for (int s0 = warp * kSteps; s0 < steps; s0 += warps * kSteps) {  // warp-uniform
      uint4 a[kSteps][kRowTiles][2];
      uint4 b[kSteps][kNTiles][kXLoads];
      [[maybe_unused]] float scale[kSteps][kRowTiles];  // kFp8: each chunk's block scale
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
        const uint32_t k0 = static_cast<uint32_t>(s0 + u) * kStepW + kLaneK * t;
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if constexpr (kFp8) {  // k a multiple of 16: the chunk is all in or all out
              a[u][r][h] = k0 < static_cast<uint32_t>(p.k) ? load_weight16(wrow[r][h] + k0)
                                                           : make_uint4(0, 0, 0, 0);
            } else {
              a[u][r][h] = load_chunk8<kVec, true>(wrow[r][h], k0, p.k);
            }
          }
          if constexpr (kFp8) {  // the step's block (a step lies in one: block_k >= 64)
            const uint32_t step_k0 = static_cast<uint32_t>(s0 + u) * kStepW;
            scale[u][r] = __ldg(srow[r] + (step_k0 >> p.block_k_log2));
          }
        }
      }
      if (!waited) {
        pdl_wait();
        pdl_launch_next();
        waited = true;
        if constexpr (kNorm) gemv_norm_prologue(p, nrm, xs, norm_scratch);
      }
      // Step u's chunks of x: BF16 weights load them all before the products, FP8 weights each
      // step's right before its own (the conversions leave too few registers for all).
      auto load_x = [&](int u) {
        const uint32_t k0 = static_cast<uint32_t>(s0 + u) * kStepW + kLaneK * t;
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int q = 0; q < kXLoads; ++q) {
            if constexpr (kNorm) {
              b[u][j][q] =
                  has_x[j] && k0 < static_cast<uint32_t>(p.k)
                      ? *reinterpret_cast<const uint4*>(xs + (8 * j + g) * p.k + k0 + 8 * q)
                      : make_uint4(0, 0, 0, 0);
            } else {
              b[u][j][q] = has_x[j] ? load_chunk8<kVec, false>(xrow[j], k0 + 8 * q, p.k)
                                    : make_uint4(0, 0, 0, 0);
            }
          }
        }
      };
      if constexpr (!kFp8) {
#pragma unroll
        for (int u = 0; u < kSteps; ++u) load_x(u);
      }
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
        if constexpr (kFp8) load_x(u);
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
          if constexpr (kFp8) {
            // The chunk's 16 k are four m16n8k16: product i takes its k [4i, 4i + 4), A from
            // word i of rows g and g + 8 (the codes' exact values as BF16 pairs), B from words
            // 2i and 2i + 1 of x's 16 BF16. The four sum apart from the running sums; the
            // step's block scale then multiplies that f32 sum once.
            float part[kNTiles][4];
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
              for (int e = 0; e < 4; ++e) part[j][e] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint2 lo = e4m3x4_to_bf16x4_exact(word_of(a[u][r][0], i));
              const uint2 hi = e4m3x4_to_bf16x4_exact(word_of(a[u][r][1], i));
              const uint32_t af[4] = {lo.x, hi.x, lo.y, hi.y};
#pragma unroll
              for (int j = 0; j < kNTiles; ++j) {
                const uint4& xv = b[u][j][i / 2];
                const uint32_t bf[2] = {word_of(xv, 2 * (i % 2)), word_of(xv, 2 * (i % 2) + 1)};
                mma_m16n8k16_bf16(part[j], af, bf);
              }
            }
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                acc[r][j][u % kSums][e] = fmaf(part[j][e], scale[u][r], acc[r][j][u % kSums][e]);
              }
            }
          } else {
            const uint4& lo = a[u][r][0];  // row g
            const uint4& hi = a[u][r][1];  // row g + 8
            const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y};
            const uint32_t a1[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) {
              const uint32_t b0[2] = {b[u][j][0].x, b[u][j][0].y};
              const uint32_t b1[2] = {b[u][j][0].z, b[u][j][0].w};
              mma_m16n8k16_bf16(acc[r][j][0], a0, b0);
              mma_m16n8k16_bf16(acc[r][j][kSums - 1], a1, b1);
            }
          }
        }
      }
    }

    if (!waited) {  // a warp with no steps (k shorter than the block's warps' share)
      pdl_wait();
      pdl_launch_next();
      waited = true;
    }

    // partial[warp][e], e = ((r * kNTiles + j) * 4 + i) * 32 + lane.
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float sum = acc[r][j][0][i];
          if constexpr (kSums == 2) sum += acc[r][j][1][i];
          partial[(warp * kAcc + (r * kNTiles + j) * 4 + i) * kWarpSize + lane] = sum;
        }
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kAcc * kWarpSize; e += blockDim.x) {
      const int l = e % kWarpSize, i = (e / kWarpSize) % 4, tile_index = e / (4 * kWarpSize);
      const int r = tile_index / kNTiles, j = tile_index % kNTiles;
      // C fragment (mma.cuh): c[i] is row g + 8 (i / 2), column 2t + i % 2 of the 16 x 8 tile.
      const int64_t n = row0 + kTileRows * r + l / 4 + 8 * (i / 2);
      const int m = 8 * j + 2 * (l % 4) + i % 2;
      if (n >= p.n || m >= p.m) continue;
      float sum = 0.0f;
      for (int v = 0; v < warps; ++v) sum += partial[v * kAcc * kWarpSize + e];
      store_out(p, m, n, sum + load_param(p.bias, n));
    }
    if constexpr (!kNorm) {
      break;
    } else {
      tile += gridDim.x;
      if (tile >= tiles) break;
      __syncthreads();  // partial is read above
    }
  }
}

// kN: elements per load, 4 (16 bytes) or 1.
template <int kN>
__global__ void __launch_bounds__(kF32Warps* kWarpSize) gemv_f32_kernel(GemvParams p, GemvNorm) {
  pdl_wait();
  pdl_launch_next();
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kF32Warps + threadIdx.x / kWarpSize) * kF32Rows;
  if (row0 >= p.n) return;  // whole warps leave; the kernel has no block barrier
  const float* weight = static_cast<const float*>(p.weight);
  const float* x = static_cast<const float*>(p.x);
  const float* wrow[kF32Rows];
#pragma unroll
  for (int r = 0; r < kF32Rows; ++r) {
    const int64_t row = row0 + r < p.n ? row0 + r : p.n - 1;
    wrow[r] = weight + row * p.k;
  }
  float acc[kF32Rows][kMaxRows];
#pragma unroll
  for (int r = 0; r < kF32Rows; ++r) {
#pragma unroll
    for (int j = 0; j < kMaxRows; ++j) acc[r][j] = 0.0f;
  }
  auto load = [](const float* at, bool weight_row, float(&v)[kN]) {
    if constexpr (kN == 4) {
      const uint4 w = weight_row ? load_weight16(at) : load_input16(at);
      memcpy(v, &w, sizeof w);
    } else {
      v[0] = *at;
    }
  };
  const int64_t chunks = p.k / kN;  // kN == 4 only when k % 4 == 0
  for (int64_t c0 = lane; c0 < chunks; c0 += kWarpSize * kF32Unroll) {
    float w[kF32Unroll][kF32Rows][kN];
#pragma unroll
    for (int u = 0; u < kF32Unroll; ++u) {
      const int64_t c = c0 + u * kWarpSize;
#pragma unroll
      for (int r = 0; r < kF32Rows; ++r) {
        if (c < chunks) {
          load(wrow[r] + c * kN, true, w[u][r]);
        } else {
#pragma unroll
          for (int q = 0; q < kN; ++q) w[u][r][q] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxRows; ++j) {
#pragma unroll
      for (int u = 0; u < kF32Unroll; ++u) {
        const int64_t c = c0 + u * kWarpSize;
        if (j >= p.m || c >= chunks) continue;
        float xv[kN];
        load(x + j * p.ldx + c * kN, false, xv);
#pragma unroll
        for (int r = 0; r < kF32Rows; ++r) {
#pragma unroll
          for (int q = 0; q < kN; ++q) acc[r][j] = fmaf(w[u][r][q], xv[q], acc[r][j]);
        }
      }
    }
  }
  float bias[kF32Rows];
#pragma unroll
  for (int r = 0; r < kF32Rows; ++r) bias[r] = load_param(p.bias, row0 + r < p.n ? row0 + r : 0);
    // Rows of x past m sum zeros: cheaper than branching around the shuffles.
#pragma unroll
  for (int j = 0; j < kMaxRows; ++j) {
#pragma unroll
    for (int r = 0; r < kF32Rows; ++r) acc[r][j] = warp_sum(acc[r][j]);
  }
  float* out = static_cast<float*>(p.out);  // F32 inputs give F32 outputs
#pragma unroll
  for (int j = 0; j < kMaxRows; ++j) {
#pragma unroll
    for (int r = 0; r < kF32Rows; ++r) {
      if (j < p.m && lane == (j * kF32Rows + r) % kWarpSize && row0 + r < p.n) {
        out[j * p.ldo + row0 + r] = acc[r][j] + bias[r];
      }
    }
  }
}

// ---- Launchers -----------------------------------------------------------------------------

template <typename Kernel>
Status run(Kernel kernel, const char* name, int64_t blocks, int threads, size_t smem_bytes,
           const GemvParams& p, cudaStream_t stream, const GemvNorm& nrm = GemvNorm{}) {
  const dim3 grid(static_cast<unsigned>(blocks));
#if defined(VLLM_CUDA_EMULATION)
  (void)name;
  (void)stream;
  emu::launch(grid, static_cast<unsigned>(threads), gemv_smem, smem_bytes, [&] { kernel(p, nrm); });
  return Status::ok();
#else
  launch_pdl(kernel, grid, threads, smem_bytes, stream, p, nrm);
  return check_launch(name);
#endif
}

template <int kNTiles, int kRowTiles, bool kVec, bool kFp8 = false>
Status launch_bf16(const GemvParams& p, int warps, cudaStream_t stream) {
  constexpr int kRows = kTileRows * kRowTiles;
  const size_t smem =
      static_cast<size_t>(warps) * kRowTiles * kNTiles * 4 * kWarpSize * sizeof(float);
  const auto kernel = warps > kMidBlockWarps
                          ? gemv_bf16_kernel<kNTiles, kRowTiles, kVec, kWideBlockWarps, false, kFp8>
                      : warps > kBlockWarps
                          ? gemv_bf16_kernel<kNTiles, kRowTiles, kVec, kMidBlockWarps, false, kFp8>
                          : gemv_bf16_kernel<kNTiles, kRowTiles, kVec, kBlockWarps, false, kFp8>;
  return run(kernel, kFp8 ? "gemv_bf16_kernel (FP8 weight)" : "gemv_bf16_kernel",
             ceil_div(p.n, kRows), warps * kWarpSize, smem, p, stream);
}

template <int kNTiles>
Status launch_bf16_rows(const GemvParams& p, bool vec, const GemvLaunch& launch,
                        cudaStream_t stream) {
  if (!vec) return launch_bf16<kNTiles, 1, false>(p, launch.warps, stream);
  if (launch.rows_per_block == 2 * kTileRows) {
    return launch_bf16<kNTiles, 2, true>(p, launch.warps, stream);
  }
  return launch_bf16<kNTiles, 1, true>(p, launch.warps, stream);
}

// An FP8 weight (gemv_fp8_fits): one n8 tile, 16-byte loads.
Status launch_fp8_rows(const GemvParams& p, const GemvLaunch& launch, cudaStream_t stream) {
  if (launch.rows_per_block == 2 * kTileRows) {
    return launch_bf16<1, 2, true, true>(p, launch.warps, stream);
  }
  return launch_bf16<1, 1, true, true>(p, launch.warps, stream);
}

int log2_of(int64_t v) {  // v a power of two
  int l = 0;
  while ((int64_t{1} << l) < v) ++l;
  return l;
}

// The kernels' parameters for a checked problem.
GemvParams gemv_params(const GemvProblem& pr) {
  GemvParams p{};
  p.x = pr.x;
  p.ldx = pr.ldx;
  p.weight = pr.weight;
  p.bias = ParamVec{pr.bias, pr.bias_dtype};
  p.out = pr.out;
  p.ldo = pr.ldo;
  p.out_f32 = pr.out_dtype == DType::kF32;
  p.m = static_cast<int>(pr.m);
  p.n = static_cast<int>(pr.n);
  p.k = static_cast<int>(pr.k);
  if (pr.scales != nullptr) {
    p.scales = pr.scales;
    p.scale_cols = pr.scale_cols;
    p.block_n = static_cast<int>(pr.block_n);
    p.block_k_log2 = log2_of(pr.block_k);
  }
  return p;
}

// Shared memory of the fused-norm launch: the partial sums of `warps` warps, x [m, k] and the
// norm's 32 floats of scratch.
size_t norm_smem_bytes(int64_t m, int64_t k, int warps) {
  return static_cast<size_t>(warps) * 4 * kWarpSize * sizeof(float) +
         static_cast<size_t>(m * k) * sizeof(uint16_t) + kWarpSize * sizeof(float);
}

}  // namespace

GemvLaunch gemv_norm_launch(int64_t n, int sm_count) {
  GemvLaunch launch;
  launch.rows_per_block = kTileRows;
  launch.warps = ceil_div(n, kTileRows) <= sm_count ? kWideBlockWarps : kBlockWarps;
  return launch;
}

bool gemv_norm_fits(int64_t m, int64_t n, int64_t k, int sm_count, bool fp8_weight) {
  const GemvLaunch launch = gemv_norm_launch(n, sm_count);
  // At most kNormChunks 8-column chunks of a row per norm thread (hidden sizes up to 8192, where
  // rms_norm_kernel's decode launch has the same 256 threads), and up to kNormWideMaxK(2) for
  // the wide launches; every warp at least one round of steps (the prologue's barriers are in the
  // first; an FP8 step is twice as wide), x in the 48 KB of shared memory a launch gets without
  // opting in. At most kGemvNormMaxRows rows: the prologue normalises one row after another, an
  // L2 round trip and two barriers each.
  const bool wide = launch.warps == kBlockWarps;
  const int64_t step_k = fp8_weight ? kStepKOf<true> : kStepK;
  return m >= 1 && m <= kGemvNormMaxRows && k % (fp8_weight ? kFp8Chunk : 8) == 0 &&
         k / 8 <= int64_t{kNormThreads} * kNormChunks &&
         (!wide || k <= (m == 1 ? kNormWideMaxK : kNormWideMaxK2)) &&
         k >= step_k * kStepLoads * launch.warps &&
         norm_smem_bytes(m, k, launch.warps) <= 48 * 1024 && n <= 0x7fffffff;
}

Status launch_gemv_norm(const GemvProblem& pr, const GemvNormProblem& norm, cudaStream_t stream) {
  const int sms = multiprocessor_count(pr.device);
  const bool fp8 = pr.scales != nullptr;
  if (pr.dtype != DType::kBF16 || !gemv_norm_fits(pr.m, pr.n, pr.k, sms, fp8) ||
      (fp8 && !gemv_fp8_fits(pr))) {
    return make_error(ErrorCode::kInvalidArgument,
                      "gemv: the fused RMSNorm takes BF16 [m, k] products that "
                      "gemv_norm_fits() accepts, FP8 weights as gemv_fp8_fits() takes them (got "
                      "{} [{}, {}] x {}[{}, {}]^T)",
                      dtype_name(pr.dtype), pr.m, pr.k, fp8 ? "fp8" : "", pr.n, pr.k);
  }
  const bool aligned =
      is_aligned(pr.x, 16) && is_aligned(pr.weight, 16) &&
      (static_cast<size_t>(pr.ldx) * 2) % 16 == 0 && is_aligned(norm.residual, 16) &&
      norm.ld_residual % 4 == 0 && is_aligned(norm.residual_out, 16) &&
      norm.ld_residual_out % 4 == 0 && is_aligned(norm.weight, 16) &&
      (norm.normed == nullptr || (is_aligned(norm.normed, 16) && norm.ld_normed % 8 == 0));
  if (!aligned) {
    return make_error(ErrorCode::kInvalidArgument,
                      "gemv: the fused RMSNorm needs 16-byte aligned rows of x, the residuals, "
                      "the norm weight and normed");
  }
  const GemvParams p = gemv_params(pr);
  GemvNorm nrm{};
  nrm.residual = norm.residual;
  nrm.ld_residual = norm.ld_residual;
  nrm.residual_out = norm.residual_out;
  nrm.ld_residual_out = norm.ld_residual_out;
  nrm.weight = static_cast<const __nv_bfloat16*>(norm.weight);
  nrm.normed = static_cast<__nv_bfloat16*>(norm.normed);
  nrm.ld_normed = norm.ld_normed;
  nrm.eps = norm.eps;
  nrm.unit_offset = norm.unit_offset;
  const GemvLaunch launch = gemv_norm_launch(pr.n, sms);
  const size_t smem = norm_smem_bytes(pr.m, pr.k, launch.warps);
  const int64_t tiles = ceil_div(p.n, kTileRows);
  if (launch.warps == kWideBlockWarps) {  // narrow: a block a tile, at most one per SM
    return fp8 ? run(gemv_bf16_kernel<1, 1, true, kWideBlockWarps, true, true>,
                     "gemv_bf16_norm_kernel (FP8 weight)", tiles, kWideBlockWarps * kWarpSize, smem,
                     p, stream, nrm)
               : run(gemv_bf16_kernel<1, 1, true, kWideBlockWarps, true>, "gemv_bf16_norm_kernel",
                     tiles, kWideBlockWarps * kWarpSize, smem, p, stream, nrm);
  }
  // Wide: as many blocks as fit at once, each normalising x once and walking its tiles.
  static_assert(kMinBlocks<1, 1, true, kBlockWarps> == kNormWideBlocksPerSm);
  static_assert(kMinBlocks<1, 1, true, kBlockWarps, true> == kNormWideBlocksPerSm);
  const int64_t blocks = std::min<int64_t>(tiles, int64_t{kNormWideBlocksPerSm} * sms);
  return fp8 ? run(gemv_bf16_kernel<1, 1, true, kBlockWarps, true, true>,
                   "gemv_bf16_norm_kernel (FP8 weight)", blocks, kBlockWarps * kWarpSize, smem, p,
                   stream, nrm)
             : run(gemv_bf16_kernel<1, 1, true, kBlockWarps, true>, "gemv_bf16_norm_kernel", blocks,
                   kBlockWarps * kWarpSize, smem, p, stream, nrm);
}

bool gemv_fp8_blocks_fit(int64_t block_n, int64_t block_k) {
  return block_n >= kTileRows && block_n % kTileRows == 0 && block_n <= 0x7fffffff &&
         block_k >= kStepKOf<true> && block_k <= (int64_t{1} << 30) &&
         (block_k & (block_k - 1)) == 0;
}

bool gemv_fp8_fits(const GemvProblem& pr) {
  return pr.scales != nullptr && pr.dtype == DType::kBF16 && pr.m >= 1 && pr.m <= kFp8GemvMaxRows &&
         pr.n >= 1 && pr.n <= 0x7fffffff && pr.k >= 1 && pr.k <= 0x7fffffff &&
         pr.k % kFp8Chunk == 0 && gemv_fp8_blocks_fit(pr.block_n, pr.block_k) &&
         pr.scale_cols >= ceil_div(pr.k, pr.block_k) && is_aligned(pr.x, 16) &&
         is_aligned(pr.weight, 16) && (static_cast<size_t>(pr.ldx) * 2) % 16 == 0;
}

GemvLaunch choose_gemv_launch(int64_t n, int sm_count) {
  // Every block reads all of x (from L2 or L1), so 32-row blocks halve that traffic (at M = 16
  // it equals the weights' own with 16-row blocks); take them when that still leaves two
  // blocks per SM. 8 warps x 4 KB in flight per block: with 2-3 blocks per SM that is
  // 64-96 KB per SM, several times what 4.3 TB/s at ~1 us of latency needs.
  GemvLaunch launch;
  launch.rows_per_block =
      ceil_div(n, 2 * kTileRows) >= 2 * int64_t{sm_count} ? 2 * kTileRows : kTileRows;
  // Narrow outputs (at most one 16-row block per SM: the 35B-A3B router, out_proj and o_proj)
  // would leave 32 KB in flight per SM with 8 warps; 16 warps split K twice as finely. Up to
  // two blocks per SM (the 4B's out_proj, o_proj and down at 2560 features) take 12 warps,
  // two blocks of which fit an SM: 96 KB in flight where 8 warps left 64 KB.
  const int64_t tiles = ceil_div(n, kTileRows);
  launch.warps = launch.rows_per_block != kTileRows ? kBlockWarps
                 : tiles <= sm_count                ? kWideBlockWarps
                 : tiles <= 2 * int64_t{sm_count}   ? kMidBlockWarps
                                                    : kBlockWarps;
  return launch;
}

Status launch_gemv(const GemvProblem& problem, cudaStream_t stream) {
  return launch_gemv(problem, choose_gemv_launch(problem.n, multiprocessor_count(problem.device)),
                     stream);
}

Status launch_gemv(const GemvProblem& pr, const GemvLaunch& launch, cudaStream_t stream) {
  if (pr.m < 1 || pr.m > kGemvMaxRows) {
    return make_error(ErrorCode::kInvalidArgument,
                      "gemv: {} rows of x; the batched GEMV holds 1 to {} (larger batches go "
                      "through cuBLASLt)",
                      pr.m, kGemvMaxRows);
  }
  if (pr.n < 1 || pr.k < 1 || pr.n > 0x7fffffff || pr.k > 0x7fffffff) {
    return make_error(ErrorCode::kInvalidArgument, "gemv: [{}, {}] x [{}, {}]^T is out of range",
                      pr.m, pr.k, pr.n, pr.k);
  }
  if ((launch.rows_per_block != kTileRows && launch.rows_per_block != 2 * kTileRows) ||
      launch.warps < 1 || launch.warps > kMaxWarps) {
    return make_error(ErrorCode::kInvalidArgument,
                      "gemv: launch shape of {} rows x {} warps per block (rows 16 or 32, warps "
                      "1 to {})",
                      launch.rows_per_block, launch.warps, kMaxWarps);
  }
  const GemvParams p = gemv_params(pr);
  if (pr.scales != nullptr) {
    if (!gemv_fp8_fits(pr)) {
      return make_error(
          ErrorCode::kInvalidArgument,
          "gemv: an FP8 weight takes BF16 x of 1 to {} rows, K a multiple of {}, "
          "blocks of a multiple of 16 rows by a power of two from {} columns and 16-byte "
          "aligned rows (got {} [{}, {}] x fp8[{}, {}]^T in {}x{} blocks; launch_fp8_gemv "
          "takes the others)",
          kFp8GemvMaxRows, kFp8Chunk, kFp8Chunk, dtype_name(pr.dtype), pr.m, pr.k, pr.n, pr.k,
          pr.block_n, pr.block_k);
    }
    return launch_fp8_rows(p, launch, stream);
  }

  const size_t es = dtype_size(pr.dtype);
  // Every row of x and of the weight starts on a 16-byte boundary.
  const bool aligned = is_aligned(pr.x, 16) && is_aligned(pr.weight, 16) &&
                       (static_cast<size_t>(pr.ldx) * es) % 16 == 0 &&
                       (static_cast<size_t>(pr.k) * es) % 16 == 0;
  if (pr.dtype == DType::kF32) {
    const int64_t blocks = ceil_div(pr.n, kF32Warps * kF32Rows);
    return aligned ? run(gemv_f32_kernel<4>, "gemv_f32_kernel", blocks, kF32Warps * kWarpSize, 0, p,
                         stream)
                   : run(gemv_f32_kernel<1>, "gemv_f32_kernel", blocks, kF32Warps * kWarpSize, 0, p,
                         stream);
  }
  return pr.m <= 8 ? launch_bf16_rows<1>(p, aligned, launch, stream)
                   : launch_bf16_rows<2>(p, aligned, launch, stream);
}

}  // namespace vllm::cuda::detail

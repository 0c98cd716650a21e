// The MoE grouped GEMM as W8A8 block FP8 on Hopper's warpgroup tensor cores (wgmma e4m3,
// sm_90a): block-scaled FP8 experts (128 x 128 blocks) times activations quantized per token
// group of 128 (fp8_quant.cuh), the form of vLLM's block-FP8 fused MoE. Same grouping
// (moe_plan.cuh) and outputs as the BF16 kernel (act = SiLU(gate) * up rounded to BF16, y =
// down act in BF16, padding rows zero).
//
// Tiles. A CTA computes 128 grouped rows (one expert's) x 128 weight rows. For gate/up these
// are 64 gate rows and the matching 64 up rows (64 columns of act); for down, 128 consecutive
// rows of down[e] (128 columns of y). Two warpgroups: warpgroup w takes grouped rows
// 64w..64w+63 against all 128 weight rows (wgmma m64n128k32).
//
// Scales. A K tile is 128 values -- one 128-byte swizzled row, one activation group and one
// weight block column -- so each tile's four k32 products go into a fresh set of accumulators
// (the first with scale-d 0), and once they are done the set is added into the running sums
// times (the row's activation scale) x (the weight block's scale), in f32: the promotion of
// DeepSeek's and vLLM's block-FP8 GEMMs. The 64 gate rows and the 64 up rows of a gate/up tile
// each sit inside one 128-row weight block (the tile starts on a multiple of 64, I is a
// multiple of 128), so a tile needs two weight scales (down: one) and each thread two
// activation scales (its two rows).
//
// Pipeline (all 256 threads copy, both warpgroups multiply). kStages stages of 128 x 128
// e4m3 activations and weights (16 KB each), K-major with the 128-byte swizzle, filled by
// 16-byte cp.async (zero-filled for padding rows and weight rows past the output). Iteration
// kt: wait for tile kt's copies, fence, barrier; queue the four products; copy tile
// kt + kStages - 1 into the stage of tile kt - 1 (every warpgroup finished it before this
// iteration's barrier); wait for the products, promote. So kStages - 1 tiles load while one
// multiplies.
//
// Few rows an expert (decode batches: moe_experts picks it while the pairs average at most
// kW8A8FewRowsPerExpert an expert). A 128-row tile then holds a couple of real rows and the
// kernel above spends a whole m64n128 product per warpgroup on padding; the weights must
// stream at memory speed instead. The second kernel swaps the operands: the CTA's 128 weight
// rows are wgmma's M (warpgroup w takes 64 of them: gate / up rows for gate/up, so the SiLU
// joins the halves through shared memory; rows 64w.. for down) and 16 grouped rows a pass are
// its N (m64n16k32). Each 64-row weight half sits in one 128 x 128 block, so a K tile takes
// one weight scale a warpgroup and one activation scale per column. A CTA runs passes of 16
// rows over the whole K and stops at the first pass that starts on padding (an expert's rows
// are contiguous from its tile's start), so the padding past it is never computed or written.
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_plan.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/wgmma.cuh"

namespace vllm::cuda::detail {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;  // two warpgroups
constexpr int kRows = 128;     // grouped rows per CTA
constexpr int kBN = 128;       // weight rows per CTA
constexpr int kBK = 128;       // e4m3 per stage row: one swizzled 128-byte row, one scale group
constexpr int kStages = 6;
constexpr int kChunk = 16;                              // e4m3 per 16-byte copy
constexpr int kChunksPerRow = kBK / kChunk;             // 8
constexpr int kRowsPerPass = kThreads / kChunksPerRow;  // 32
constexpr int kActCopies = kRows / kRowsPerPass;        // 4
constexpr int kWeightCopies = kBN / kRowsPerPass;       // 4
constexpr int kTileBytes = kRows * kBK;                 // 16 KB (both operands)
constexpr int kStageBytes = 2 * kTileBytes;
constexpr int kAcc = kBN / 2;  // f32 accumulators a thread (m64n128)
constexpr int kOutPitch = kBN + 8;
constexpr size_t kSmemBytes = kStages * kStageBytes + 1024;  // + alignment slack
static_assert(kSmemBytes <= 227 * 1024);
static_assert(kRows * kOutPitch * 2 <= kStages * kStageBytes);

// The expert e weight rows that thread row r0 copies into a 128-row weight tile of output
// columns col0..: tile rows r0, r0 + 32, ... (null past the outputs). Gate/up: tile rows
// 0..63 are gate rows col0.., 64..127 the matching up rows (so both halves of a SiLU product
// land in one thread's accumulators, or one CTA).
template <bool kGateUp>
__device__ __forceinline__ void weight_rows(const Fp8GroupedGemmParams& p, int e, int col0, int r0,
                                            const uint8_t* (&w_src)[kWeightCopies]) {
  const uint8_t* w = p.weight + static_cast<int64_t>(e) * p.expert_stride;
#pragma unroll
  for (int j = 0; j < kWeightCopies; ++j) {
    const int r = r0 + j * kRowsPerPass;
    int wr = -1;
    if constexpr (kGateUp) {
      const int c = col0 + r % (kBN / 2);
      if (c < p.n_out) wr = r < kBN / 2 ? c : p.n_out + c;
    } else {
      if (col0 + r < p.n_out) wr = col0 + r;
    }
    w_src[j] = wr >= 0 ? w + static_cast<int64_t>(wr) * p.k : nullptr;
  }
}

// The CTA's staged output rows (bf16 [kTileRows][kPitch], kCols columns from col0) into
// grouped rows row0.. of the output, in 16-byte stores; columns past the outputs are skipped.
template <int kCols, int kTileRows, int kPitch>
__device__ __forceinline__ void store_out_tile(const Fp8GroupedGemmParams& p, const bf16* out_tile,
                                               int64_t row0, int col0) {
  constexpr int kOutChunk = 8;  // bf16 per 16-byte store
  constexpr int kOutChunksPerRow = kCols / kOutChunk;
  for (int i = static_cast<int>(threadIdx.x); i < kTileRows * kOutChunksPerRow; i += kThreads) {
    const int r = i / kOutChunksPerRow, ch = i % kOutChunksPerRow;
    const int col = col0 + ch * kOutChunk;
    if (col >= p.n_out) continue;
    *reinterpret_cast<uint4*>(p.output + (row0 + r) * p.ld_output + col) =
        *reinterpret_cast<const uint4*>(out_tile + r * kPitch + ch * kOutChunk);
  }
}

template <bool kGateUp>
__global__ void __launch_bounds__(kThreads, 1)
    moe_grouped_gemm_wgmma_fp8_kernel(Fp8GroupedGemmParams p) {
  pdl_wait();
  pdl_launch_next();
  const int tile = blockIdx.y;
  const int e = p.tile_expert[tile];
  if (e < 0) return;  // the whole CTA: past the batch's last tile

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int lane = tid % 32, warp_in_wg = (tid / 32) % 4;
  const int64_t row0 = static_cast<int64_t>(tile) * kRows;
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;
  const int col0 = blockIdx.x * kOutCols;

  // Copies: thread (chunk, r0) takes chunk `chunk` of rows r0, r0 + 32, ... of both tiles.
  const int chunk = tid % kChunksPerRow;
  const int r0 = tid / kChunksPerRow;
  const uint8_t* act_src[kActCopies];
#pragma unroll
  for (int j = 0; j < kActCopies; ++j) {
    const int64_t row = row0 + r0 + j * kRowsPerPass;
    const uint8_t* src = nullptr;  // null: a zero row (padding, whose codes nobody wrote)
    const int pair = p.sorted_pairs[row];
    if (pair >= 0) {
      src = p.input + (kGateUp ? static_cast<int64_t>(pair / p.top_k) : row) * p.ld_input;
    }
    act_src[j] = src;
  }
  const uint8_t* w_src[kWeightCopies];
  weight_rows<kGateUp>(p, e, col0, r0, w_src);
  const uint32_t dst0 = swizzle_128b_offset(r0, chunk);

  auto load_stage = [&](int stage, int kt) {
    unsigned char* a = smem + stage * kStageBytes;
    unsigned char* b = a + kTileBytes;
    const int kc = kt * kBK + chunk * kChunk;
#pragma unroll
    for (int j = 0; j < kActCopies; ++j) {
      const bool valid = act_src[j] != nullptr;
      cp_async_16(a + dst0 + j * kRowsPerPass * 128, valid ? act_src[j] + kc : p.weight,
                  valid ? 16 : 0);
    }
#pragma unroll
    for (int j = 0; j < kWeightCopies; ++j) {
      const bool valid = w_src[j] != nullptr;
      cp_async_16(b + dst0 + j * kRowsPerPass * 128, valid ? w_src[j] + kc : p.weight,
                  valid ? 16 : 0);
    }
  };

  // This thread's accumulator rows (tile rows er and er + 8) and where their activation
  // scales live: scale of row r at group g = input_scales[g * scale_stride + index(r)], index
  // the token (gate/up) or the grouped row (down); -1 for padding rows (scale 0).
  const int er = wg * 64 + warp_in_wg * 16 + lane / 4;
  int64_t scale_index[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + er + 8 * h;
    const int pair = p.sorted_pairs[row];
    scale_index[h] = pair < 0 ? -1 : kGateUp ? pair / p.top_k : row;
  }
  // Weight block scales: gate/up rows (col0 / 128 and (I + col0) / 128), down rows col0 / 128.
  const float* w_scales = p.w_scales.at + static_cast<int64_t>(e) * p.w_scales.expert_stride;
  const float* w_scale_row0 = w_scales + static_cast<int64_t>(col0 / 128) * p.w_scales.cols_grid;
  const float* w_scale_row1 =
      kGateUp ? w_scales + static_cast<int64_t>((p.n_out + col0) / 128) * p.w_scales.cols_grid
              : w_scale_row0;

  float acc[kAcc], part[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  const int a_offset = wg * (kTileBytes / 2);
  const int k_tiles = p.k / kBK;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    // This tile's scales, loaded while the products run.
    float sx[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sx[h] = scale_index[h] >= 0 ? p.input_scales[kt * p.scale_stride + scale_index[h]] : 0.0f;
    }
    const float sw0 = w_scale_row0[kt], sw1 = w_scale_row1[kt];

    cp_async_wait_pending<kStages - 2>();  // tile kt has landed (this thread's copies)
    fence_proxy_async_shared();            // ... and is visible to the tensor cores
    __syncthreads();                       // ... for everyone's copies

    const unsigned char* stage = smem + (kt % kStages) * kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk) {
      const uint64_t da = wgmma_desc_sw128(stage + a_offset + kk * 32);
      const uint64_t db = wgmma_desc_sw128(stage + kTileBytes + kk * 32);
      wgmma_m64k32_e4m3_ss(part, da, db, kk > 0);
    }
    wgmma_commit();

    const int next = kt + kStages - 1;  // into the stage of tile kt - 1
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();  // possibly empty: keeps the group count in step with kt

    wgmma_wait<0>();
    wgmma_fence_registers(part);
    // Columns 8i + 2(lane % 4) (+ 1): i < 8 gate rows (sw0), i >= 8 up rows (sw1) for gate/up.
#pragma unroll
    for (int i = 0; i < kAcc / 4; ++i) {
      const float sw = (kGateUp && i >= kAcc / 8) ? sw1 : sw0;
      const float s0 = sx[0] * sw, s1 = sx[1] * sw;
      acc[4 * i + 0] += part[4 * i + 0] * s0;
      acc[4 * i + 1] += part[4 * i + 1] * s0;
      acc[4 * i + 2] += part[4 * i + 2] * s1;
      acc[4 * i + 3] += part[4 * i + 3] * s1;
    }
  }
  cp_async_wait_pending<0>();
  __syncthreads();  // every warpgroup is done with the stages: reuse them for the epilogue

  bf16* out_tile = reinterpret_cast<bf16*>(smem);
  const int ec = 2 * (lane % 4);
  constexpr int kBlocks = kBN / 8;  // 8-column accumulator blocks
  if constexpr (kGateUp) {
#pragma unroll
    for (int i = 0; i < kBlocks / 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float* g = acc + 4 * i + 2 * h;
        const float* u = acc + 4 * (i + kBlocks / 2) + 2 * h;
        __nv_bfloat162 v;
        v.x = __float2bfloat16_rn(silu(g[0]) * u[0]);
        v.y = __float2bfloat16_rn(silu(g[1]) * u[1]);
        *reinterpret_cast<__nv_bfloat162*>(out_tile + (er + 8 * h) * kOutPitch + 8 * i + ec) = v;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float* d = acc + 4 * i + 2 * h;
        __nv_bfloat162 v;
        v.x = __float2bfloat16_rn(d[0]);
        v.y = __float2bfloat16_rn(d[1]);
        *reinterpret_cast<__nv_bfloat162*>(out_tile + (er + 8 * h) * kOutPitch + 8 * i + ec) = v;
      }
    }
  }
  __syncthreads();

  store_out_tile<kOutCols, kRows, kOutPitch>(p, out_tile, row0, col0);
}

// ---- Few rows an expert: weights as M, 16 grouped rows a pass as N ------------------------
constexpr int kFewN = 16;  // grouped rows a pass (wgmma N)
constexpr int kFewStages = 4;
constexpr int kFewActBytes = kFewN * kBK;                  // 2 KB
constexpr int kFewStageBytes = kTileBytes + kFewActBytes;  // weights first (1,024-aligned)
constexpr int kFewUpPitch = kFewN + 1;                     // f32 up values [64][16], padded
constexpr int kFewOutPitch = kBN + 8;                      // bf16 [16][128 (+8)]
constexpr int kFewUpBytes = 64 * kFewUpPitch * 4;
constexpr int kFewOutBytes = kFewN * kFewOutPitch * 2;
constexpr size_t kFewSmemBytes =
    kFewStages * kFewStageBytes + kFewUpBytes + kFewOutBytes + 1024;  // + alignment slack
static_assert(kFewStageBytes % 1024 == 0);
static_assert(kFewSmemBytes <= 113 * 1024);  // two CTAs an SM

template <bool kGateUp>
__global__ void __launch_bounds__(kThreads, 2)
    moe_grouped_gemm_wgmma_fp8_few_kernel(Fp8GroupedGemmParams p) {
  pdl_wait();
  pdl_launch_next();
  const int tile = blockIdx.y;
  const int e = p.tile_expert[tile];
  if (e < 0) return;  // the whole CTA: past the batch's last tile

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  float* up_tile = reinterpret_cast<float*>(smem + kFewStages * kFewStageBytes);
  bf16* out_tile = reinterpret_cast<bf16*>(smem + kFewStages * kFewStageBytes + kFewUpBytes);

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int lane = tid % 32, warp_in_wg = (tid / 32) % 4;
  const int64_t row0 = static_cast<int64_t>(tile) * kRows;
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;
  const int col0 = blockIdx.x * kOutCols;

  // Weight copies as in the kernel above: thread (chunk, r0) takes rows r0, r0 + 32, ...
  const int chunk = tid % kChunksPerRow;
  const int r0 = tid / kChunksPerRow;
  const uint8_t* w_src[kWeightCopies];
  weight_rows<kGateUp>(p, e, col0, r0, w_src);
  const uint32_t w_dst = swizzle_128b_offset(r0, chunk);
  // Activation copies: threads 0..127, row tid / 8 of the pass, chunk tid % 8.
  const bool act_copier = tid < kFewN * kChunksPerRow;
  const int act_row = (tid / kChunksPerRow) % kFewN;
  const uint32_t act_dst = swizzle_128b_offset(act_row, chunk);

  // This warpgroup's weight block row (its 64 rows sit in one 128-row block).
  const float* w_scales = p.w_scales.at + static_cast<int64_t>(e) * p.w_scales.expert_stride;
  const int block_row =
      (kGateUp && wg == 1 ? p.n_out + col0 : col0 + (kGateUp ? 0 : 64 * wg)) / 128;
  const float* w_scale_row = w_scales + static_cast<int64_t>(block_row) * p.w_scales.cols_grid;

  // Accumulator coordinates (m64n16): weight row m (+ 8) of this warpgroup's 64, columns
  // (grouped rows of the pass) 8i + c0 + j for i, j in {0, 1}.
  const int m = warp_in_wg * 16 + lane / 4;
  const int c0 = 2 * (lane % 4);
  const int k_tiles = p.k / kBK;

  for (int pass = 0; pass < kRows / kFewN; ++pass) {
    const int64_t rowp = row0 + pass * kFewN;
    if (p.sorted_pairs[rowp] < 0) break;  // the expert's rows ended before this pass

    const uint8_t* act_src = nullptr;  // null: a zero row (padding)
    {
      const int pair = p.sorted_pairs[rowp + act_row];
      if (act_copier && pair >= 0) {
        act_src = p.input +
                  (kGateUp ? static_cast<int64_t>(pair / p.top_k) : rowp + act_row) * p.ld_input;
      }
    }
    int64_t scale_index[4];  // column 8i + c0 + j at [2i + j]; -1: padding (scale 0)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t row = rowp + 8 * (q / 2) + c0 + q % 2;
      const int pair = p.sorted_pairs[row];
      scale_index[q] = pair < 0 ? -1 : kGateUp ? pair / p.top_k : row;
    }

    auto load_stage = [&](int stage, int kt) {
      unsigned char* b = smem + stage * kFewStageBytes;
      const int kc = kt * kBK + chunk * kChunk;
#pragma unroll
      for (int j = 0; j < kWeightCopies; ++j) {
        const bool valid = w_src[j] != nullptr;
        cp_async_16(b + w_dst + j * kRowsPerPass * 128, valid ? w_src[j] + kc : p.weight,
                    valid ? 16 : 0);
      }
      if (act_copier) {
        const bool valid = act_src != nullptr;
        cp_async_16(b + kTileBytes + act_dst, valid ? act_src + kc : p.weight, valid ? 16 : 0);
      }
    };

    float acc[8], part[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < kFewStages - 1; ++s) {
      if (s < k_tiles) load_stage(s, s);
      cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      float sx[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        sx[q] = scale_index[q] >= 0 ? p.input_scales[kt * p.scale_stride + scale_index[q]] : 0.0f;
      }
      const float sw = w_scale_row[kt];

      cp_async_wait_pending<kFewStages - 2>();  // tile kt has landed (this thread's copies)
      fence_proxy_async_shared();               // ... and is visible to the tensor cores
      __syncthreads();                          // ... for everyone's copies

      const unsigned char* stage = smem + (kt % kFewStages) * kFewStageBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 32; ++kk) {
        const uint64_t da = wgmma_desc_sw128(stage + wg * (kTileBytes / 2) + kk * 32);
        const uint64_t db = wgmma_desc_sw128(stage + kTileBytes + kk * 32);
        wgmma_m64k32_e4m3_ss(part, da, db, kk > 0);
      }
      wgmma_commit();

      const int next = kt + kFewStages - 1;  // into the stage of tile kt - 1
      if (next < k_tiles) load_stage(next % kFewStages, next);
      cp_async_commit();  // possibly empty: keeps the group count in step with kt

      wgmma_wait<0>();
      wgmma_fence_registers(part);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          acc[4 * i + 2 * h + 0] += part[4 * i + 2 * h + 0] * (sx[2 * i + 0] * sw);
          acc[4 * i + 2 * h + 1] += part[4 * i + 2 * h + 1] * (sx[2 * i + 1] * sw);
        }
      }
    }
    cp_async_wait_pending<0>();

    // acc[4i + 2h + j] = D[m + 8h][8i + c0 + j]: weight row m + 8h, grouped row 8i + c0 + j.
    if constexpr (kGateUp) {
      if (wg == 1) {
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int n = 8 * (q / 4) + c0 + q % 2, mr = m + 8 * ((q / 2) % 2);
          up_tile[mr * kFewUpPitch + n] = acc[q];
        }
      }
      __syncthreads();  // the up halves are in place; every warpgroup is done with the stages
      if (wg == 0) {
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int n = 8 * (q / 4) + c0 + q % 2, mr = m + 8 * ((q / 2) % 2);
          out_tile[n * kFewOutPitch + mr] =
              __float2bfloat16_rn(silu(acc[q]) * up_tile[mr * kFewUpPitch + n]);
        }
      }
    } else {
      __syncthreads();  // every warpgroup is done with the stages
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int n = 8 * (q / 4) + c0 + q % 2, mr = 64 * wg + m + 8 * ((q / 2) % 2);
        out_tile[n * kFewOutPitch + mr] = __float2bfloat16_rn(acc[q]);
      }
    }
    __syncthreads();

    store_out_tile<kOutCols, kFewN, kFewOutPitch>(p, out_tile, rowp, col0);
    __syncthreads();  // out_tile and the stages are free for the next pass
  }
}

template <bool kGateUp>
Status launch(const Fp8GroupedGemmParams& p, int64_t tiles, cudaStream_t stream) {
  constexpr auto kernel = &moe_grouped_gemm_wgmma_fp8_kernel<kGateUp>;
  VLLM_RETURN_IF_ERROR(opt_in_shared_memory<kernel>(
      kSmemBytes,
      "cudaFuncSetAttribute(moe_grouped_gemm_wgmma_fp8_kernel, MaxDynamicSharedMemorySize)"));
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n_out, kOutCols)), static_cast<unsigned>(tiles));
  launch_pdl(kernel, grid, kThreads, kSmemBytes, stream, p);
  return check_launch(kGateUp ? "moe_grouped_gemm_wgmma_fp8_kernel (gate/up)"
                              : "moe_grouped_gemm_wgmma_fp8_kernel (down)");
}

template <bool kGateUp>
Status launch_few(const Fp8GroupedGemmParams& p, int64_t tiles, cudaStream_t stream) {
  constexpr auto kernel = &moe_grouped_gemm_wgmma_fp8_few_kernel<kGateUp>;
  VLLM_RETURN_IF_ERROR(opt_in_shared_memory<kernel>(
      kFewSmemBytes,
      "cudaFuncSetAttribute(moe_grouped_gemm_wgmma_fp8_few_kernel, MaxDynamicSharedMemorySize)"));
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n_out, kOutCols)), static_cast<unsigned>(tiles));
  launch_pdl(kernel, grid, kThreads, kFewSmemBytes, stream, p);
  return check_launch(kGateUp ? "moe_grouped_gemm_wgmma_fp8_few_kernel (gate/up)"
                              : "moe_grouped_gemm_wgmma_fp8_few_kernel (down)");
}

}  // namespace

Status launch_moe_grouped_gemm_wgmma_fp8(const Fp8GroupedGemmParams& p, bool gate_up, int64_t tiles,
                                         bool few_rows, cudaStream_t stream) {
  if (p.k % kBK != 0 || p.n_out % 128 != 0 || tiles > 65535) {
    return make_error(ErrorCode::kInternal,
                      "launch_moe_grouped_gemm_wgmma_fp8: K {} and outputs {} must be multiples "
                      "of 128 ({} tiles)",
                      p.k, p.n_out, tiles);
  }
  if (tiles == 0) return Status::ok();
  if (few_rows) {
    return gate_up ? launch_few<true>(p, tiles, stream) : launch_few<false>(p, tiles, stream);
  }
  return gate_up ? launch<true>(p, tiles, stream) : launch<false>(p, tiles, stream);
}

}  // namespace vllm::cuda::detail

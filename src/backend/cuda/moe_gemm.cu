// The grouped GEMM of the MoE expert path (moe_plan.cuh): for large batches, both expert
// projections as tensor-core GEMMs over row tiles, each tile belonging to one expert, with no
// host round trip (the grouping kernel wrote each tile's expert).
//
// Tiles. A CTA computes a kTileRows x kBN block of one projection: rows = kTileRows grouped
// rows (one expert's pairs, padded with zero rows), columns = kBN weight rows of that
// expert. For gate/up the kBN weight rows are kBN / 2 gate rows and the matching kBN / 2 up
// rows, so the epilogue holds both halves of each SiLU product and writes act directly; for
// down they are kBN consecutive rows of down[e], written to y. kTileRows is 128 (prefill:
// 2 x 4 warps of 64 x 32) or 32 (many experts with few rows each: 2 x 4 warps of 16 x 32),
// so the padding costs at most one partial tile per expert either way.
//
// Pipeline (all 8 warps load and compute; no specialised producer): kStages stages of
// kTileRows x kBK activations and kBN x kBK weights in shared memory, filled with 16-byte
// cp.async (zero-filled past K, past the expert's rows and for padding rows, whose source is
// null), kStages - 1 tiles ahead. Each iteration waits for the oldest stage (wait_group
// kStages - 2), a barrier publishes it and frees the stage computed last iteration, the next
// stage's copies are issued, then the warps run 16x16x16 BF16 WMMA with f32 accumulators on
// the ready stage. The epilogue stages the f32 block through shared memory (the pipeline's
// buffers, after a final wait and barrier) and writes 16-byte rows of BF16.
//
// Rows of a tile: gate/up reads x[sorted_pairs[row] / k] (a gather: no permuted copy of x);
// down reads act[row]. Row pitches of 40 elements (80 bytes) keep WMMA's loads off bank
// conflicts and every fragment on the 32-byte boundary WMMA requires.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/moe_plan.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda::detail {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;  // 8 warps: 2 along rows x 4 along columns
constexpr int kBN = 128;       // weight rows per CTA
constexpr int kBK = 32;        // reduction slice per stage
constexpr int kStages = 3;
constexpr int kLds = kBK + 8;  // shared row pitch (elements) of the operand tiles
constexpr int kCld = kBN + 4;  // shared row pitch (floats) of the epilogue block
constexpr int kChunk = 8;      // bf16 elements per 16-byte copy

// Dynamic shared memory: the pipeline's stages, reused by the epilogue's f32 block, then the
// source pointer of every operand row (activations, then weights).
template <int kTileRows>
struct Smem {
  static constexpr int kOperandRows = kTileRows + kBN;
  static constexpr int kStageElems = kOperandRows * kLds;
  static constexpr size_t kPipeBytes = size_t{kStages} * kStageElems * sizeof(bf16);
  static constexpr size_t kEpilogueBytes = size_t{kTileRows} * kCld * sizeof(float);
  static constexpr size_t kRowsOffset = kPipeBytes > kEpilogueBytes ? kPipeBytes : kEpilogueBytes;
  static constexpr size_t kBytes = kRowsOffset + kOperandRows * sizeof(const bf16*);
};

__device__ __forceinline__ void cp_async16(void* smem, const void* global, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

template <int kTileRows, bool kGateUp>
__global__ void __launch_bounds__(kThreads) moe_grouped_gemm_kernel(GroupedGemmParams p) {
  pdl_wait();
  pdl_launch_next();
  using S = Smem<kTileRows>;
  constexpr int kWarpRows = kTileRows / 2;  // rows per warp
  constexpr int kFragRows = kWarpRows / 16;
  constexpr int kFragCols = 2;  // 32 columns per warp
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;

  const int tile = blockIdx.y;
  const int e = p.tile_expert[tile];
  if (e < 0) return;  // the whole CTA: past the batch's last tile

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* stages = reinterpret_cast<bf16*>(smem_raw);
  const bf16** src_rows = reinterpret_cast<const bf16**>(smem_raw + S::kRowsOffset);

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int warp_m = warp / 4, warp_n = warp % 4;
  const int64_t row0 = static_cast<int64_t>(tile) * kTileRows;
  const int col0 = blockIdx.x * kOutCols;
  const bf16* w = p.weight + static_cast<int64_t>(e) * p.expert_stride;
  for (int r = tid; r < S::kOperandRows; r += kThreads) {
    const bf16* src = nullptr;  // null: a zero row
    if (r < kTileRows) {
      const int64_t row = row0 + r;
      if constexpr (kGateUp) {
        const int pair = p.sorted_pairs[row];
        if (pair >= 0) src = p.input + static_cast<int64_t>(pair / p.top_k) * p.ld_input;
      } else {
        src = p.input + row * p.ld_input;
      }
    } else {
      const int j = r - kTileRows;
      int wr = -1;
      if constexpr (kGateUp) {
        const int c = col0 + j % (kBN / 2);
        if (c < p.n_out) wr = j < kBN / 2 ? c : p.n_out + c;
      } else {
        if (col0 + j < p.n_out) wr = col0 + j;
      }
      if (wr >= 0) src = w + static_cast<int64_t>(wr) * p.k;
    }
    src_rows[r] = src;
  }
  __syncthreads();

  // Stage s holds operand row r (activations then weights) at stages + s * kStageElems + r * kLds.
  auto load_stage = [&](int stage, int kt) {
    bf16* dst = stages + stage * S::kStageElems;
    const int k0 = kt * kBK;
    for (int i = tid; i < S::kOperandRows * (kBK / kChunk); i += kThreads) {
      const int r = i / (kBK / kChunk), ch = i % (kBK / kChunk);
      const int kc = k0 + ch * kChunk;
      const bf16* src = src_rows[r];
      const bool valid = src != nullptr && kc < p.k;
      cp_async16(dst + r * kLds + ch * kChunk, valid ? src + kc : p.weight, valid);
    }
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragRows][kFragCols];
#pragma unroll
  for (int i = 0; i < kFragRows; ++i) {
#pragma unroll
    for (int j = 0; j < kFragCols; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }

  const int k_tiles = (p.k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // tile kt has landed (for this thread's copies)
    __syncthreads();               // ... for everyone's; stage (kt - 1) % kStages is free
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();  // possibly empty: keeps the group count in step with kt

    const bf16* a = stages + (kt % kStages) * S::kStageElems;
    const bf16* b = a + kTileRows * kLds;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[kFragRows];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[kFragCols];
#pragma unroll
      for (int i = 0; i < kFragRows; ++i) {
        wmma::load_matrix_sync(fa[i], a + (warp_m * kWarpRows + i * 16) * kLds + kk, kLds);
      }
#pragma unroll
      for (int j = 0; j < kFragCols; ++j) {
        // B[k][n] = weight row n, element k: column-major with leading dimension kLds.
        wmma::load_matrix_sync(fb[j], b + (warp_n * 32 + j * 16) * kLds + kk, kLds);
      }
#pragma unroll
      for (int i = 0; i < kFragRows; ++i) {
#pragma unroll
        for (int j = 0; j < kFragCols; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: reuse them for the epilogue

  float* c = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int i = 0; i < kFragRows; ++i) {
#pragma unroll
    for (int j = 0; j < kFragCols; ++j) {
      wmma::store_matrix_sync(c + (warp_m * kWarpRows + i * 16) * kCld + warp_n * 32 + j * 16,
                              acc[i][j], kCld, wmma::mem_row_major);
    }
  }
  __syncthreads();

  constexpr int kChunksPerRow = kOutCols / kChunk;
  for (int i = tid; i < kTileRows * kChunksPerRow; i += kThreads) {
    const int r = i / kChunksPerRow, ch = i % kChunksPerRow;
    const int col = col0 + ch * kChunk;
    if (col >= p.n_out) continue;  // n_out % 8 == 0: a chunk is all in or all out
    const float* src = c + r * kCld + ch * kChunk;
    Pack<bf16, kChunk> out;
#pragma unroll
    for (int q = 0; q < kChunk; ++q) {
      const float v = kGateUp ? silu(src[q]) * src[kBN / 2 + q] : src[q];
      out.v[q] = __float2bfloat16_rn(v);
    }
    *reinterpret_cast<Pack<bf16, kChunk>*>(p.output + (row0 + r) * p.ld_output + col) = out;
  }
}

// ---- FP8 experts (W8A16) -------------------------------------------------------------------
// The same GEMM over block-scaled e4m3 weight rows (MoeProblem::fp8). A stage holds the
// activations as above and the weights' kBN x kBK e4m3 bytes (16-byte cp.async, two a row);
// once a stage has landed, the block converts its weights into one BF16 tile (each weight its
// e4m3 value times its block's scale, rounded to BF16: fp8_weight), a barrier publishes it,
// and the warps multiply as above. The next stages' copies stay in flight meanwhile.
template <int kTileRows>
struct Fp8Smem {
  static constexpr int kOperandRows = kTileRows + kBN;
  static constexpr size_t kActBytes = size_t{kTileRows} * kLds * sizeof(bf16);
  static constexpr size_t kStageBytes = kActBytes + size_t{kBN} * kBK;  // + e4m3 weights
  static constexpr size_t kPipeBytes = kStages * kStageBytes;
  static constexpr size_t kTileOffset = kPipeBytes;  // the BF16 weight tile [kBN][kLds]
  static constexpr size_t kMainBytes = kTileOffset + size_t{kBN} * kLds * sizeof(bf16);
  static constexpr size_t kEpilogueBytes = size_t{kTileRows} * kCld * sizeof(float);
  static constexpr size_t kRowsOffset = kMainBytes > kEpilogueBytes ? kMainBytes : kEpilogueBytes;
  // Source of every operand row (activations, then weights), then each weight row's scales.
  static constexpr size_t kBytes =
      kRowsOffset + kOperandRows * sizeof(const void*) + kBN * sizeof(const float*);
};

template <int kTileRows, bool kGateUp>
__global__ void __launch_bounds__(kThreads) moe_grouped_gemm_fp8_kernel(GroupedGemmParams p) {
  pdl_wait();
  pdl_launch_next();
  using S = Fp8Smem<kTileRows>;
  constexpr int kWarpRows = kTileRows / 2;  // rows per warp
  constexpr int kFragRows = kWarpRows / 16;
  constexpr int kFragCols = 2;  // 32 columns per warp
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;
  constexpr int kWeightChunks = kBK / kFp8Chunk;  // 16-byte e4m3 copies per weight row

  const int tile = blockIdx.y;
  const int e = p.tile_expert[tile];
  if (e < 0) return;  // the whole CTA: past the batch's last tile

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* w_tile = reinterpret_cast<bf16*>(smem_raw + S::kTileOffset);
  const void** src_rows = reinterpret_cast<const void**>(smem_raw + S::kRowsOffset);
  const float** scale_rows = reinterpret_cast<const float**>(src_rows + S::kOperandRows);

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int warp_m = warp / 4, warp_n = warp % 4;
  const int64_t row0 = static_cast<int64_t>(tile) * kTileRows;
  const int col0 = blockIdx.x * kOutCols;
  const uint8_t* w = p.weight8 + static_cast<int64_t>(e) * p.expert_stride;
  for (int r = tid; r < S::kOperandRows; r += kThreads) {
    const void* src = nullptr;  // null: a zero row
    if (r < kTileRows) {
      const int64_t row = row0 + r;
      if constexpr (kGateUp) {
        const int pair = p.sorted_pairs[row];
        if (pair >= 0) src = p.input + static_cast<int64_t>(pair / p.top_k) * p.ld_input;
      } else {
        src = p.input + row * p.ld_input;
      }
    } else {
      const int j = r - kTileRows;
      int wr = -1;
      if constexpr (kGateUp) {
        const int c = col0 + j % (kBN / 2);
        if (c < p.n_out) wr = j < kBN / 2 ? c : p.n_out + c;
      } else {
        if (col0 + j < p.n_out) wr = col0 + j;
      }
      const float* sr = nullptr;
      if (wr >= 0) {
        src = w + static_cast<int64_t>(wr) * p.k;
        sr = p.scales.at + e * p.scales.expert_stride +
             static_cast<int64_t>(wr / p.scales.block_n) * p.scales.cols_grid;
      }
      scale_rows[j] = sr;
    }
    src_rows[r] = src;
  }
  __syncthreads();

  auto act_stage = [&](int stage) {
    return reinterpret_cast<bf16*>(smem_raw + stage * S::kStageBytes);
  };
  auto w8_stage = [&](int stage) { return smem_raw + stage * S::kStageBytes + S::kActBytes; };
  auto load_stage = [&](int stage, int kt) {
    bf16* a_dst = act_stage(stage);
    uint8_t* w_dst = w8_stage(stage);
    const int k0 = kt * kBK;
    constexpr int kActCopies = kTileRows * (kBK / kChunk);
    for (int i = tid; i < kActCopies + kBN * kWeightChunks; i += kThreads) {
      if (i < kActCopies) {
        const int r = i / (kBK / kChunk), ch = i % (kBK / kChunk);
        const int kc = k0 + ch * kChunk;
        const bf16* src = static_cast<const bf16*>(src_rows[r]);
        const bool valid = src != nullptr && kc < p.k;
        cp_async16(a_dst + r * kLds + ch * kChunk, valid ? src + kc : p.input, valid);
      } else {
        const int wi = i - kActCopies;
        const int r = wi / kWeightChunks, ch = wi % kWeightChunks;
        const int kc = k0 + ch * kFp8Chunk;
        const uint8_t* src = static_cast<const uint8_t*>(src_rows[kTileRows + r]);
        const bool valid = src != nullptr && kc < p.k;
        cp_async16(w_dst + r * kBK + ch * kFp8Chunk, valid ? src + kc : p.weight8, valid);
      }
    }
  };
  // The landed stage's e4m3 weights -> the BF16 tile: a thread a 16-weight chunk.
  auto convert_stage = [&](int stage, int kt) {
    const uint8_t* src = w8_stage(stage);
    const int k0 = kt * kBK;
    for (int i = tid; i < kBN * kWeightChunks; i += kThreads) {
      const int r = i / kWeightChunks, ch = i % kWeightChunks;
      const int kc = k0 + ch * kFp8Chunk;
      const float* sr = scale_rows[r];
      const float scale = sr != nullptr && kc < p.k ? __ldg(sr + kc / p.scales.block_k) : 0.0f;
      float q[kFp8Chunk];
      fp8_chunk_to_float(*reinterpret_cast<const uint4*>(src + r * kBK + ch * kFp8Chunk), q);
      Pack<bf16, kChunk> lo, hi;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        lo.v[j] = __float2bfloat16_rn(fp8_weight<bf16>(q[j], scale));
        hi.v[j] = __float2bfloat16_rn(fp8_weight<bf16>(q[kChunk + j], scale));
      }
      bf16* dst = w_tile + r * kLds + ch * kFp8Chunk;
      *reinterpret_cast<Pack<bf16, kChunk>*>(dst) = lo;
      *reinterpret_cast<Pack<bf16, kChunk>*>(dst + kChunk) = hi;
    }
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragRows][kFragCols];
#pragma unroll
  for (int i = 0; i < kFragRows; ++i) {
#pragma unroll
    for (int j = 0; j < kFragCols; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }

  const int k_tiles = (p.k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // tile kt has landed (for this thread's copies)
    __syncthreads();  // ... for everyone's; stage (kt - 1) % kStages and the tile are free
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();  // possibly empty: keeps the group count in step with kt
    convert_stage(kt % kStages, kt);
    __syncthreads();  // the BF16 weight tile is whole

    const bf16* a = act_stage(kt % kStages);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[kFragRows];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[kFragCols];
#pragma unroll
      for (int i = 0; i < kFragRows; ++i) {
        wmma::load_matrix_sync(fa[i], a + (warp_m * kWarpRows + i * 16) * kLds + kk, kLds);
      }
#pragma unroll
      for (int j = 0; j < kFragCols; ++j) {
        wmma::load_matrix_sync(fb[j], w_tile + (warp_n * 32 + j * 16) * kLds + kk, kLds);
      }
#pragma unroll
      for (int i = 0; i < kFragRows; ++i) {
#pragma unroll
        for (int j = 0; j < kFragCols; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: reuse them for the epilogue

  float* c = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int i = 0; i < kFragRows; ++i) {
#pragma unroll
    for (int j = 0; j < kFragCols; ++j) {
      wmma::store_matrix_sync(c + (warp_m * kWarpRows + i * 16) * kCld + warp_n * 32 + j * 16,
                              acc[i][j], kCld, wmma::mem_row_major);
    }
  }
  __syncthreads();

  constexpr int kChunksPerRow = kOutCols / kChunk;
  for (int i = tid; i < kTileRows * kChunksPerRow; i += kThreads) {
    const int r = i / kChunksPerRow, ch = i % kChunksPerRow;
    const int col = col0 + ch * kChunk;
    if (col >= p.n_out) continue;  // n_out % 8 == 0: a chunk is all in or all out
    const float* src = c + r * kCld + ch * kChunk;
    Pack<bf16, kChunk> out;
#pragma unroll
    for (int q = 0; q < kChunk; ++q) {
      const float v = kGateUp ? silu(src[q]) * src[kBN / 2 + q] : src[q];
      out.v[q] = __float2bfloat16_rn(v);
    }
    *reinterpret_cast<Pack<bf16, kChunk>*>(p.output + (row0 + r) * p.ld_output + col) = out;
  }
}

template <int kTileRows, bool kGateUp, bool kFp8>
Status launch(const GroupedGemmParams& p, int64_t tiles, cudaStream_t stream) {
  constexpr auto kernel = kFp8 ? &moe_grouped_gemm_fp8_kernel<kTileRows, kGateUp>
                               : &moe_grouped_gemm_kernel<kTileRows, kGateUp>;
  constexpr size_t kSmem = kFp8 ? Fp8Smem<kTileRows>::kBytes : Smem<kTileRows>::kBytes;
  VLLM_RETURN_IF_ERROR(opt_in_shared_memory<kernel>(
      kSmem, "cudaFuncSetAttribute(moe_grouped_gemm_kernel, MaxDynamicSharedMemorySize)"));
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n_out, kOutCols)), static_cast<unsigned>(tiles));
  launch_pdl(kernel, grid, kThreads, kSmem, stream, p);
  return check_launch(kGateUp ? "moe_grouped_gemm_kernel (gate/up)"
                              : "moe_grouped_gemm_kernel (down)");
}

template <int kTileRows, bool kFp8>
Status launch_both(const MoeProblem& pr, const MoePlan& plan, cudaStream_t stream) {
  VLLM_RETURN_IF_ERROR(
      (launch<kTileRows, true, kFp8>(grouped_gemm_params(pr, plan, true), plan.max_tiles, stream)));
  return launch<kTileRows, false, kFp8>(grouped_gemm_params(pr, plan, false), plan.max_tiles,
                                        stream);
}

}  // namespace

bool grouped_gemm_shapes_ok(DType dtype, int64_t hidden, int64_t inter, bool fp8,
                            int64_t gate_up_block_k, int64_t down_block_k) {
  const int64_t chunk = fp8 ? kFp8Chunk : kChunk;
  if (fp8 && (gate_up_block_k % kFp8Chunk != 0 || down_block_k % kFp8Chunk != 0)) return false;
  return dtype == DType::kBF16 && hidden % chunk == 0 && inter % chunk == 0 && hidden > 0 &&
         inter > 0;
}

bool grouped_gemm_supported(const MoeProblem& pr) {
  return grouped_gemm_shapes_ok(pr.dtype, pr.hidden, pr.inter, pr.fp8, pr.gate_up_scales.block_k,
                                pr.down_scales.block_k) &&
         is_aligned(pr.x, 16) && is_aligned(pr.gate_up, 16) && is_aligned(pr.down, 16) &&
         is_aligned(pr.act, 16) && is_aligned(pr.y, 16) && (pr.tokens == 1 || pr.ldx % kChunk == 0);
}

bool wgmma_grouped_gemm_available() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return runs_sm90a(device);
}

Status launch_moe_grouped_gemm(const MoeProblem& problem, const MoePlan& plan, int tile_rows,
                               cudaStream_t stream) {
  if (plan.row_align != tile_rows || !grouped_gemm_supported(problem) || plan.max_tiles > INT_MAX ||
      plan.max_tiles > 65535) {
    return make_error(ErrorCode::kInternal,
                      "launch_moe_grouped_gemm: grouping for {}-row tiles ({} tiles) does not fit "
                      "{}-row tiles or the operands",
                      plan.row_align, plan.max_tiles, tile_rows);
  }
  if (plan.max_tiles == 0) return Status::ok();
  if (tile_rows == 32) {
    return problem.fp8 ? launch_both<32, true>(problem, plan, stream)
                       : launch_both<32, false>(problem, plan, stream);
  }
  if (tile_rows == 64 || (tile_rows == 128 && !problem.fp8 && wgmma_grouped_gemm_available())) {
    return launch_moe_grouped_gemm_wgmma(problem, plan, stream);
  }
  if (tile_rows == 128) {
    return problem.fp8 ? launch_both<128, true>(problem, plan, stream)
                       : launch_both<128, false>(problem, plan, stream);
  }
  return make_error(ErrorCode::kInternal, "launch_moe_grouped_gemm: no {}-row tile", tile_rows);
}

}  // namespace vllm::cuda::detail

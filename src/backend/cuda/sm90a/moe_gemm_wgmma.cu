// The MoE grouped GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a): the BF16 expert
// products of moe_gemm.cu for 128-row tiles, where most of a large prefill's MoE time goes.
// Same grouping (moe_plan.cuh), same outputs (act = SiLU(gate) * up, y = down act, padding
// rows zero), same arithmetic (f32 accumulation; the SiLU product from the f32 sums, rounded
// once to BF16).
//
// Tiles. A CTA computes 128 grouped rows (one expert's) x 256 weight rows. For gate/up these
// are 128 gate rows and the matching 128 up rows, so the CTA writes 128 columns of act and
// holds both halves of each SiLU product; for down, 256 consecutive rows of down[e], 256
// columns of y. Two warpgroups: warpgroup w takes grouped rows 64w..64w+63 against all 256
// weight rows (wgmma m64n256k16, 128 f32 accumulators a thread).
//
// Pipeline (no specialised producer: all 256 threads copy, both warpgroups multiply).
// kStages stages of 128 x 64 activations and 256 x 64 weights, each operand a K-major tile
// with the 128-byte swizzle (wgmma.cuh), filled by 16-byte cp.async (zero-filled past K and
// for padding rows). Iteration kt: wait for this thread's copies of tile kt, fence them for
// the tensor cores, barrier; the warpgroup queues its four k16 products on tile kt and waits
// until only those are in flight (so its products on tile kt - 1 are done); then the copies
// of tile kt + kStages - 2 go into the stage of tile kt - 2, which every warpgroup finished
// before reaching this iteration's barrier. So two tiles load while one multiplies.
//
// Epilogue: the accumulators (rounded to BF16, SiLU product first for gate/up) go to shared
// memory, then out in 16-byte rows.
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
constexpr int kBN = 256;       // weight rows per CTA
constexpr int kBK = 64;        // reduction slice per stage: one 128-byte swizzled row
constexpr int kStages = 4;
constexpr int kChunk = 8;                        // bf16 per 16-byte copy
constexpr int kRowsPerPass = kThreads / kChunk;  // 32 operand rows per pass of the threads
constexpr int kOutPitch = kBN + 8;  // bf16 per epilogue row (16-byte pad: no bank conflicts)

// The shapes of a CTA of kRows grouped rows (128 or 64; the plan's row alignment).
template <int kRows>
struct Tile {
  static_assert(kRows == 128 || kRows == 64);
  // 128 rows: warpgroup w takes rows 64w.. against all 256 weight rows (m64n256k16). 64 rows:
  // both take all rows, warpgroup w the weight rows 128w.. (m64n128k16).
  static constexpr int kWgCols = kRows == 128 ? kBN : kBN / 2;  // weight rows per warpgroup
  static constexpr int kAcc = kWgCols / 2;                      // f32 accumulators a thread
  static constexpr int kActCopies = kRows / kRowsPerPass;       // copies a thread a stage
  static constexpr int kWeightCopies = kBN / kRowsPerPass;
  static constexpr int kActTileBytes = kRows * kBK * 2;
  static constexpr int kWeightTileBytes = kBN * kBK * 2;  // 32 KB
  static constexpr int kStageBytes = kActTileBytes + kWeightTileBytes;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kEpilogueBytes = kRows * kOutPitch * 2;
  static constexpr size_t kSmemBytes =
      (kPipeBytes > kEpilogueBytes ? kPipeBytes : kEpilogueBytes) + 1024;  // + alignment slack
  static_assert(kSmemBytes <= 227 * 1024);
};

template <int kRows, bool kGateUp>
__global__ void __launch_bounds__(kThreads, 1) moe_grouped_gemm_wgmma_kernel(GroupedGemmParams p) {
  using L = Tile<kRows>;
  pdl_wait();
  pdl_launch_next();
  const int tile = blockIdx.y;
  const int e = p.tile_expert[tile];
  if (e < 0) return;  // the whole CTA: past the batch's last tile

  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must start on 1,024-byte boundaries.
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int64_t row0 = static_cast<int64_t>(tile) * kRows;
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;
  const int col0 = blockIdx.x * kOutCols;

  // Each thread copies one 16-byte chunk column of rows r0, r0 + 32, ...: the same rows (and
  // the same swizzled offsets, since r % 8 is fixed) in every stage.
  const int chunk = tid % kChunk;
  const int r0 = tid / kChunk;
  const bf16* act_src[L::kActCopies];
  const bf16* w_src[L::kWeightCopies];
#pragma unroll
  for (int j = 0; j < L::kActCopies; ++j) {
    const int64_t row = row0 + r0 + j * kRowsPerPass;
    const bf16* src = nullptr;  // null: a zero row
    if constexpr (kGateUp) {
      const int pair = p.sorted_pairs[row];
      if (pair >= 0) src = p.input + static_cast<int64_t>(pair / p.top_k) * p.ld_input;
    } else {
      src = p.input + row * p.ld_input;
    }
    act_src[j] = src;
  }
  // Weight row r of the tile. Gate/up: each warpgroup's kWgCols rows are its kWgCols / 2 gate
  // rows, then the matching up rows (so both halves of a SiLU product land in one thread).
  const bf16* w = p.weight + static_cast<int64_t>(e) * p.expert_stride;
#pragma unroll
  for (int j = 0; j < L::kWeightCopies; ++j) {
    const int r = r0 + j * kRowsPerPass;
    int wr = -1;
    if constexpr (kGateUp) {
      constexpr int kHalf = L::kWgCols / 2;
      const int c = col0 + (r / L::kWgCols) * kHalf + r % kHalf;
      if (c < p.n_out) wr = r % L::kWgCols < kHalf ? c : p.n_out + c;
    } else {
      if (col0 + r < p.n_out) wr = col0 + r;
    }
    w_src[j] = wr >= 0 ? w + static_cast<int64_t>(wr) * p.k : nullptr;
  }
  const uint32_t dst0 = swizzle_128b_offset(r0, chunk);  // + j * 32 rows * 128 bytes

  auto load_stage = [&](int stage, int kt) {
    unsigned char* a = smem + stage * L::kStageBytes;
    unsigned char* b = a + L::kActTileBytes;
    const int kc = kt * kBK + chunk * kChunk;
    const bool in_k = kc < p.k;
#pragma unroll
    for (int j = 0; j < L::kActCopies; ++j) {
      const bool valid = in_k && act_src[j] != nullptr;
      cp_async_16(a + dst0 + j * kRowsPerPass * 128, valid ? act_src[j] + kc : p.weight,
                  valid ? 16 : 0);
    }
#pragma unroll
    for (int j = 0; j < L::kWeightCopies; ++j) {
      const bool valid = in_k && w_src[j] != nullptr;
      cp_async_16(b + dst0 + j * kRowsPerPass * 128, valid ? w_src[j] + kc : p.weight,
                  valid ? 16 : 0);
    }
  };

  float acc[L::kAcc];
#pragma unroll
  for (int i = 0; i < L::kAcc; ++i) acc[i] = 0.0f;
  // This warpgroup's operands within a stage.
  const int a_offset = kRows == 128 ? wg * (L::kActTileBytes / 2) : 0;
  const int b_offset = L::kActTileBytes + (kRows == 128 ? 0 : wg * (L::kWeightTileBytes / 2));

  const int k_tiles = (p.k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait_pending<kStages - 3>();  // tile kt has landed (this thread's copies)
    fence_proxy_async_shared();            // ... and is visible to the tensor cores
    __syncthreads();                       // ... for everyone's copies

    const unsigned char* stage = smem + (kt % kStages) * L::kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const uint64_t da = wgmma_desc_sw128(stage + a_offset + kk * 32);
      const uint64_t db = wgmma_desc_sw128(stage + b_offset + kk * 32);
      wgmma_m64k16_bf16_ss(acc, da, db, 1);  // N = kWgCols: 256 or 128
    }
    wgmma_commit();
    wgmma_wait<1>();  // this warpgroup's products on tile kt - 1 are done

    const int next = kt + kStages - 2;  // into the stage of tile kt - 2
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();  // possibly empty: keeps the group count in step with kt
  }
  wgmma_wait<0>();
  wgmma_fence_registers(acc);
  cp_async_wait_pending<0>();
  __syncthreads();  // every warpgroup is done with the stages: reuse them for the epilogue

  // Accumulator (row, column) of this thread within its warpgroup's block: rows 16 warp +
  // lane / 4 (+ 8), columns 8 i + 2 (lane % 4) (+ 1), i < kWgCols / 8. The block sits at tile
  // rows 64 wg (128 rows) or 0 (64 rows), and at output columns 0 (128 rows) or
  // wg * kWgCols / 2 (gate/up) / wg * kWgCols (down) for 64 rows.
  bf16* out_tile = reinterpret_cast<bf16*>(smem);
  const int lane = tid % 32, warp_in_wg = (tid / 32) % 4;
  const int er = (kRows == 128 ? wg * 64 : 0) + warp_in_wg * 16 + lane / 4;
  const int ec = 2 * (lane % 4);
  constexpr int kBlocks = L::kWgCols / 8;  // 8-column accumulator blocks
  if constexpr (kGateUp) {
    // Block i < kBlocks / 2 is gate rows, block i + kBlocks / 2 the matching up rows.
    const int oc = kRows == 128 ? 0 : wg * (L::kWgCols / 2);
#pragma unroll
    for (int i = 0; i < kBlocks / 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float* g = acc + 4 * i + 2 * h;
        const float* u = acc + 4 * (i + kBlocks / 2) + 2 * h;
        __nv_bfloat162 v;
        v.x = __float2bfloat16_rn(silu(g[0]) * u[0]);
        v.y = __float2bfloat16_rn(silu(g[1]) * u[1]);
        *reinterpret_cast<__nv_bfloat162*>(out_tile + (er + 8 * h) * kOutPitch + oc + 8 * i + ec) =
            v;
      }
    }
  } else {
    const int oc = kRows == 128 ? 0 : wg * L::kWgCols;
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float* d = acc + 4 * i + 2 * h;
        __nv_bfloat162 v;
        v.x = __float2bfloat16_rn(d[0]);
        v.y = __float2bfloat16_rn(d[1]);
        *reinterpret_cast<__nv_bfloat162*>(out_tile + (er + 8 * h) * kOutPitch + oc + 8 * i + ec) =
            v;
      }
    }
  }
  __syncthreads();

  constexpr int kChunksPerRow = kOutCols / kChunk;
  for (int i = tid; i < kRows * kChunksPerRow; i += kThreads) {
    const int r = i / kChunksPerRow, ch = i % kChunksPerRow;
    const int col = col0 + ch * kChunk;
    if (col >= p.n_out) continue;  // n_out % 8 == 0: a chunk is all in or all out
    *reinterpret_cast<uint4*>(p.output + (row0 + r) * p.ld_output + col) =
        *reinterpret_cast<const uint4*>(out_tile + r * kOutPitch + ch * kChunk);
  }
}

template <int kRows, bool kGateUp>
Status launch(const GroupedGemmParams& p, int64_t tiles, cudaStream_t stream) {
  constexpr auto kernel = &moe_grouped_gemm_wgmma_kernel<kRows, kGateUp>;
  constexpr size_t kSmemBytes = Tile<kRows>::kSmemBytes;
  VLLM_RETURN_IF_ERROR(opt_in_shared_memory<kernel>(
      kSmemBytes,
      "cudaFuncSetAttribute(moe_grouped_gemm_wgmma_kernel, MaxDynamicSharedMemorySize)"));
  constexpr int kOutCols = kGateUp ? kBN / 2 : kBN;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n_out, kOutCols)), static_cast<unsigned>(tiles));
  launch_pdl(kernel, grid, kThreads, kSmemBytes, stream, p);
  return check_launch(kGateUp ? "moe_grouped_gemm_wgmma_kernel (gate/up)"
                              : "moe_grouped_gemm_wgmma_kernel (down)");
}

template <int kRows>
Status launch_both(const MoeProblem& pr, const MoePlan& plan, cudaStream_t stream) {
  VLLM_RETURN_IF_ERROR(
      (launch<kRows, true>(grouped_gemm_params(pr, plan, true), plan.max_tiles, stream)));
  return launch<kRows, false>(grouped_gemm_params(pr, plan, false), plan.max_tiles, stream);
}

}  // namespace

Status launch_moe_grouped_gemm_wgmma(const MoeProblem& pr, const MoePlan& plan,
                                     cudaStream_t stream) {
  if ((plan.row_align != 128 && plan.row_align != 64) || pr.fp8 || pr.dtype != DType::kBF16 ||
      !grouped_gemm_supported(pr) || plan.max_tiles > 65535) {
    return make_error(ErrorCode::kInternal,
                      "launch_moe_grouped_gemm_wgmma: needs BF16 experts grouped in 64- or "
                      "128-row tiles (got {}-row tiles, {} tiles)",
                      plan.row_align, plan.max_tiles);
  }
  if (plan.max_tiles == 0) return Status::ok();
  return plan.row_align == 128 ? launch_both<128>(pr, plan, stream)
                               : launch_both<64>(pr, plan, stream);
}

}  // namespace vllm::cuda::detail

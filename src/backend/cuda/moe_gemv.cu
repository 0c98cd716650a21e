// The gather GEMV of the MoE expert path (moe_plan.cuh): for small batches, one launch per
// projection over the experts the batch selected, each weight row read once for every token
// that picked its expert.
//
// Grid: y = the index into the active-expert list (launched for the bound min(E, pairs); a
// block past the device's count returns at once), x = groups of output rows. Block: 8 warps,
// each owning output rows of one expert:
//   gate/up: act column c, i.e. gate row c and up row I + c; it writes silu(gate) * up, so
//            SiLU-and-mul costs no pass of its own;
//   down:    4 consecutive rows of down[e].
// A warp walks its expert's grouped rows 8 tokens at a time. For each pass it streams its
// weight rows in 16-byte chunks (lane l takes chunks l, l + 32, ...), 2 chunks per row loaded
// before any is used, so a lane keeps 4 (gate/up) or 8 (down) 16-byte loads in flight (4 per
// lane for gate/up: more made ptxas spill at 128 registers); each chunk is multiplied with the same
// chunk of the (L1/L2-resident) inputs of up to 8 tokens, f32 accumulators per (row, token), and a
// warp sum per pair at the end. An expert picked by more than 8 tokens of the batch streams its
// rows once per 8 tokens (the later passes mostly from L2); above kMoeGemvMaxTokens the grouped
// GEMM takes over. Rows whose width or alignment rules out 16-byte chunks run the same kernel one
// element at a time.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/moe_plan.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda::detail {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * kWarpSize;
constexpr int kGemvTokens = 8;  // tokens per pass over a weight row (accumulators per row)

template <typename T>
struct GemvParams {
  const T* weight;  // [E, weight rows, k]
  int64_t expert_stride;
  const T* input;  // gate/up: x (row = token); down: act (row = grouped row)
  int64_t ld_input;
  T* output;  // gate/up: act; down: y (row = grouped row)
  int64_t ld_output;
  const int32_t* offsets;
  const int32_t* sorted_pairs;
  const int32_t* active;
  const int32_t* num_active;
  int n_out;  // gate/up: I (two weight rows per output column); down: H
  int k;      // reduction length
  int top_k;
  // FP8 experts: e4m3 weight rows (`weight` unused) and their scales.
  const uint8_t* weight8;
  MoeFp8Scales scales;
};

// kN: elements per chunk (16 bytes, or 1); kRows weight rows per warp; kUnroll chunks of each
// row loaded ahead; kGateUp: the gate/up product with the SiLU product as output.
template <typename T, int kN, int kRows, int kUnroll, bool kGateUp>
__global__ void __launch_bounds__(kGemvThreads) moe_gemv_kernel(GemvParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  static_assert(!kGateUp || kRows == 2, "gate/up warps own one gate and one up row");
  if (static_cast<int>(blockIdx.y) >= *p.num_active) return;
  const int e = p.active[blockIdx.y];
  const int lane = threadIdx.x % kWarpSize;
  const int unit = blockIdx.x * kGemvWarps + threadIdx.x / kWarpSize;
  const T* base = p.weight + static_cast<int64_t>(e) * p.expert_stride;
  const T* wrow[kRows];
  const int col0 = kGateUp ? unit : unit * kRows;
  if (col0 >= p.n_out) return;  // whole warps leave; the kernel has no block barrier
  if constexpr (kGateUp) {
    wrow[0] = base + static_cast<int64_t>(col0) * p.k;
    wrow[1] = base + static_cast<int64_t>(p.n_out + col0) * p.k;
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      // A row past the end re-reads the last one; its sums are dropped.
      wrow[r] = base + static_cast<int64_t>(min(col0 + r, p.n_out - 1)) * p.k;
    }
  }
  const int begin = p.offsets[e], end = p.offsets[e + 1];
  const int chunks = p.k / kN;
  for (int r0 = begin; r0 < end; r0 += kGemvTokens) {
    const int nt = min(kGemvTokens, end - r0);
    const T* in[kGemvTokens];
#pragma unroll
    for (int j = 0; j < kGemvTokens; ++j) {
      int64_t row = 0;
      if (j < nt) row = kGateUp ? p.sorted_pairs[r0 + j] / p.top_k : r0 + j;
      in[j] = p.input + row * p.ld_input;
    }
    float acc[kRows][kGemvTokens];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int j = 0; j < kGemvTokens; ++j) acc[r][j] = 0.0f;
    }
    for (int c = lane; c < chunks; c += kWarpSize * kUnroll) {
      Pack<T, kN> w[kRows][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int cu = c + u * kWarpSize;
        if (cu < chunks) {
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            w[r][u] = load_weight_pack<T, kN>(wrow[r] + int64_t{cu} * kN);
        }
      }
#pragma unroll
      for (int j = 0; j < kGemvTokens; ++j) {
        if (j >= nt) continue;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int cu = c + u * kWarpSize;
          if (cu >= chunks) continue;
          const Pack<T, kN> xv = load_pack<T, kN>(in[j] + int64_t{cu} * kN);
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r][j] = dot_pack<T, kN>(w[r][u], xv, acc[r][j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kGemvTokens; ++j) {
      if (j >= nt) continue;  // nt is the same for the whole warp
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r][j] = warp_sum(acc[r][j]);
      if (lane != j) continue;
      T* out = p.output + static_cast<int64_t>(r0 + j) * p.ld_output;
      if constexpr (kGateUp) {
        out[col0] = from_float<T>(silu(acc[0][j]) * acc[1][j]);
      } else {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (col0 + r < p.n_out) out[col0 + r] = from_float<T>(acc[r][j]);
        }
      }
    }
  }
}

template <typename T, int kN, bool kGateUp>
Status launch(const GemvParams<T>& p, int max_active, cudaStream_t stream) {
  constexpr int kRows = kGateUp ? 2 : 4;
  constexpr int kUnroll = 2;
  const int64_t units = kGateUp ? p.n_out : ceil_div(p.n_out, kRows);
  const dim3 grid(static_cast<unsigned>(ceil_div(units, kGemvWarps)),
                  static_cast<unsigned>(max_active));
  auto kernel = moe_gemv_kernel<T, kN, kRows, kUnroll, kGateUp>;
#if defined(VLLM_CUDA_EMULATION)  // tests/cuda_emulation: run in the CPU emulator, at once
  (void)stream;
  emu::launch(grid, kGemvThreads, nullptr, 0, [&] { kernel(p); });
  return Status::ok();
#else
  launch_pdl(kernel, grid, kGemvThreads, 0, stream, p);
  return check_launch(kGateUp ? "moe_gemv_kernel (gate/up)" : "moe_gemv_kernel (down)");
#endif
}

template <typename T>
Status launch_both(const MoeProblem& pr, const MoePlan& plan, cudaStream_t stream) {
  constexpr int kN = 16 / sizeof(T);
  GemvParams<T> gu{};
  gu.weight = static_cast<const T*>(pr.gate_up);
  gu.expert_stride = 2 * pr.inter * pr.hidden;
  gu.input = static_cast<const T*>(pr.x);
  gu.ld_input = pr.ldx;
  gu.output = static_cast<T*>(pr.act);
  gu.ld_output = pr.inter;
  gu.offsets = plan.offsets;
  gu.sorted_pairs = plan.sorted_pairs;
  gu.active = plan.active;
  gu.num_active = plan.num_active;
  gu.n_out = static_cast<int>(pr.inter);
  gu.k = static_cast<int>(pr.hidden);
  gu.top_k = plan.top_k;
  const bool vec_gu = pr.hidden % kN == 0 && is_aligned(pr.x, 16) && is_aligned(pr.gate_up, 16) &&
                      (pr.tokens == 1 || (pr.ldx * sizeof(T)) % 16 == 0);
  VLLM_RETURN_IF_ERROR((vec_gu ? launch<T, kN, true>(gu, plan.max_active, stream)
                               : launch<T, 1, true>(gu, plan.max_active, stream)));

  GemvParams<T> dn = gu;
  dn.weight = static_cast<const T*>(pr.down);
  dn.expert_stride = pr.hidden * pr.inter;
  dn.input = static_cast<const T*>(pr.act);
  dn.ld_input = pr.inter;
  dn.output = static_cast<T*>(pr.y);
  dn.ld_output = pr.hidden;
  dn.n_out = static_cast<int>(pr.hidden);
  dn.k = static_cast<int>(pr.inter);
  // act rows start on the scratch's 256-byte boundaries plus multiples of I elements.
  const bool vec_dn = pr.inter % kN == 0 && is_aligned(pr.down, 16) && is_aligned(pr.act, 16);
  return vec_dn ? launch<T, kN, false>(dn, plan.max_active, stream)
                : launch<T, 1, false>(dn, plan.max_active, stream);
}

// The same kernel over block-scaled e4m3 rows (MoeProblem::fp8): kVec chunks are 16 weights (one
// 16-byte load) under one scale, each weight its e4m3 value times that scale, rounded to BF16
// under BF16 activations (fp8_weight); without kVec a lane takes one element at a time.
template <typename T, bool kVec, int kRows, int kUnroll, bool kGateUp>
__global__ void __launch_bounds__(kGemvThreads) moe_gemv_fp8_kernel(GemvParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  static_assert(!kGateUp || kRows == 2, "gate/up warps own one gate and one up row");
  if (static_cast<int>(blockIdx.y) >= *p.num_active) return;
  const int e = p.active[blockIdx.y];
  const int lane = threadIdx.x % kWarpSize;
  const int unit = blockIdx.x * kGemvWarps + threadIdx.x / kWarpSize;
  const uint8_t* base = p.weight8 + static_cast<int64_t>(e) * p.expert_stride;
  const uint8_t* wrow[kRows];
  const float* srow[kRows];
  const int col0 = kGateUp ? unit : unit * kRows;
  if (col0 >= p.n_out) return;  // whole warps leave; the kernel has no block barrier
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    // A row past the end re-reads the last one; its sums are dropped.
    const int wr = kGateUp ? (r == 0 ? col0 : p.n_out + col0) : min(col0 + r, p.n_out - 1);
    wrow[r] = base + static_cast<int64_t>(wr) * p.k;
    srow[r] = p.scales.at + e * p.scales.expert_stride +
              static_cast<int64_t>(wr / p.scales.block_n) * p.scales.cols_grid;
  }
  const int block_k = p.scales.block_k;
  const int begin = p.offsets[e], end = p.offsets[e + 1];
  for (int r0 = begin; r0 < end; r0 += kGemvTokens) {
    const int nt = min(kGemvTokens, end - r0);
    const T* in[kGemvTokens];
#pragma unroll
    for (int j = 0; j < kGemvTokens; ++j) {
      int64_t row = 0;
      if (j < nt) row = kGateUp ? p.sorted_pairs[r0 + j] / p.top_k : r0 + j;
      in[j] = p.input + row * p.ld_input;
    }
    float acc[kRows][kGemvTokens];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int j = 0; j < kGemvTokens; ++j) acc[r][j] = 0.0f;
    }
    if constexpr (kVec) {
      const int chunks = p.k / kFp8Chunk;
      for (int c = lane; c < chunks; c += kWarpSize * kUnroll) {
        uint4 w[kRows][kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int cu = c + u * kWarpSize;
          if (cu < chunks) {
#pragma unroll
            for (int r = 0; r < kRows; ++r)
              w[r][u] = load_weight16(wrow[r] + int64_t{cu} * kFp8Chunk);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int cu = c + u * kWarpSize;
          if (cu >= chunks) continue;
          const int kb = cu * kFp8Chunk / block_k;
          float wf[kRows][kFp8Chunk];
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            fp8_chunk_to_float(w[r][u], wf[r]);
            const float s = __ldg(srow[r] + kb);
#pragma unroll
            for (int q = 0; q < kFp8Chunk; ++q) wf[r][q] = fp8_weight<T>(wf[r][q], s);
          }
#pragma unroll
          for (int j = 0; j < kGemvTokens; ++j) {
            if (j >= nt) continue;
            float xf[kFp8Chunk];
            load_x16(in[j] + int64_t{cu} * kFp8Chunk, xf);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
#pragma unroll
              for (int q = 0; q < kFp8Chunk; ++q) acc[r][j] = fmaf(xf[q], wf[r][q], acc[r][j]);
            }
          }
        }
      }
    } else {
      for (int kk = lane; kk < p.k; kk += kWarpSize) {
        float wv[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          wv[r] = fp8_weight<T>(e4m3_to_float(__ldg(wrow[r] + kk)), __ldg(srow[r] + kk / block_k));
        }
#pragma unroll
        for (int j = 0; j < kGemvTokens; ++j) {
          if (j >= nt) continue;
          const float xv = to_float(in[j][kk]);
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r][j] = fmaf(xv, wv[r], acc[r][j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kGemvTokens; ++j) {
      if (j >= nt) continue;  // nt is the same for the whole warp
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r][j] = warp_sum(acc[r][j]);
      if (lane != j) continue;
      T* out = p.output + static_cast<int64_t>(r0 + j) * p.ld_output;
      if constexpr (kGateUp) {
        out[col0] = from_float<T>(silu(acc[0][j]) * acc[1][j]);
      } else {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (col0 + r < p.n_out) out[col0 + r] = from_float<T>(acc[r][j]);
        }
      }
    }
  }
}

template <typename T, bool kVec, bool kGateUp>
Status launch_fp8(const GemvParams<T>& p, int max_active, cudaStream_t stream) {
  constexpr int kRows = kGateUp ? 2 : 4;
  constexpr int kUnroll = 1;
  const int64_t units = kGateUp ? p.n_out : ceil_div(p.n_out, kRows);
  const dim3 grid(static_cast<unsigned>(ceil_div(units, kGemvWarps)),
                  static_cast<unsigned>(max_active));
  auto kernel = moe_gemv_fp8_kernel<T, kVec, kRows, kUnroll, kGateUp>;
#if defined(VLLM_CUDA_EMULATION)  // tests/cuda_emulation: run in the CPU emulator, at once
  (void)stream;
  emu::launch(grid, kGemvThreads, nullptr, 0, [&] { kernel(p); });
  return Status::ok();
#else
  launch_pdl(kernel, grid, kGemvThreads, 0, stream, p);
  return check_launch(kGateUp ? "moe_gemv_fp8_kernel (gate/up)" : "moe_gemv_fp8_kernel (down)");
#endif
}

template <typename T>
Status launch_both_fp8(const MoeProblem& pr, const MoePlan& plan, cudaStream_t stream) {
  GemvParams<T> gu{};
  gu.weight8 = static_cast<const uint8_t*>(pr.gate_up);
  gu.scales = pr.gate_up_scales;
  gu.expert_stride = 2 * pr.inter * pr.hidden;
  gu.input = static_cast<const T*>(pr.x);
  gu.ld_input = pr.ldx;
  gu.output = static_cast<T*>(pr.act);
  gu.ld_output = pr.inter;
  gu.offsets = plan.offsets;
  gu.sorted_pairs = plan.sorted_pairs;
  gu.active = plan.active;
  gu.num_active = plan.num_active;
  gu.n_out = static_cast<int>(pr.inter);
  gu.k = static_cast<int>(pr.hidden);
  gu.top_k = plan.top_k;
  const bool vec_gu = pr.hidden % kFp8Chunk == 0 && gu.scales.block_k % kFp8Chunk == 0 &&
                      is_aligned(pr.x, 16) && is_aligned(pr.gate_up, 16) &&
                      (pr.tokens == 1 || (pr.ldx * sizeof(T)) % 16 == 0);
  VLLM_RETURN_IF_ERROR((vec_gu ? launch_fp8<T, true, true>(gu, plan.max_active, stream)
                               : launch_fp8<T, false, true>(gu, plan.max_active, stream)));

  GemvParams<T> dn = gu;
  dn.weight8 = static_cast<const uint8_t*>(pr.down);
  dn.scales = pr.down_scales;
  dn.expert_stride = pr.hidden * pr.inter;
  dn.input = static_cast<const T*>(pr.act);
  dn.ld_input = pr.inter;
  dn.output = static_cast<T*>(pr.y);
  dn.ld_output = pr.hidden;
  dn.n_out = static_cast<int>(pr.hidden);
  dn.k = static_cast<int>(pr.inter);
  // act rows start on the scratch's 256-byte boundaries plus multiples of I elements.
  const bool vec_dn = pr.inter % kFp8Chunk == 0 && dn.scales.block_k % kFp8Chunk == 0 &&
                      is_aligned(pr.down, 16) && is_aligned(pr.act, 16);
  return vec_dn ? launch_fp8<T, true, false>(dn, plan.max_active, stream)
                : launch_fp8<T, false, false>(dn, plan.max_active, stream);
}

}  // namespace

Status launch_moe_gemv(const MoeProblem& problem, const MoePlan& plan, cudaStream_t stream) {
  if (plan.row_align != 1) {
    return make_error(ErrorCode::kInternal, "launch_moe_gemv: the grouping is padded ({} rows)",
                      plan.row_align);
  }
  if (problem.fp8) {
    if (problem.dtype == DType::kF32) return launch_both_fp8<float>(problem, plan, stream);
    return launch_both_fp8<__nv_bfloat16>(problem, plan, stream);
  }
  if (problem.dtype == DType::kF32) return launch_both<float>(problem, plan, stream);
  return launch_both<__nv_bfloat16>(problem, plan, stream);
}

}  // namespace vllm::cuda::detail

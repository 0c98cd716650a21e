// Internal to the MoE files of the CUDA backend (moe.cu, moe_gemv.cu, moe_gemm.cu): where one
// moe_experts call's routed pairs sit once grouped by expert, and the operands the two expert
// paths share.
//
// A pair is (token t, slot i), numbered p = t * k + i. The grouping kernel (moe.cu) gives
// every expert a segment of "grouped rows" [offsets[e], offsets[e + 1]), its pairs first (in
// no particular order) and then padding up to a multiple of row_align (1 for the gather GEMV,
// the GEMM's row tile for the grouped GEMM). Both paths write the SiLU product of a pair to
// act[row] and its expert output to y[row]; padding rows hold zeros (grouped GEMM) or are
// never touched (GEMV). All of it lives in the call's scratch buffer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda::detail {

struct MoePlan {
  int32_t* offsets = nullptr;       // [E + 1] first grouped row of each expert
  int32_t* sorted_pairs = nullptr;  // [capacity] pair at each grouped row; -1 for padding
  int32_t* pair_row = nullptr;      // [T * k] grouped row of each pair; -1: id outside [0, E)
  int32_t* active = nullptr;        // [max_active] experts with a pair, in increasing id
  int32_t* num_active = nullptr;    // [1]
  int32_t* tile_expert = nullptr;   // [max_tiles] expert of each row tile; -1 past the last
  int32_t* block_counts = nullptr;  // [plan_blocks, E] the multi-block grouping's counts / bases
  int plan_blocks = 0;              // blocks of the multi-block grouping; 0: one block
  int64_t pairs = 0;                // T * k
  int64_t capacity = 0;             // grouped rows reserved (a bound on the padded total)
  int64_t max_tiles = 0;            // capacity / row_align when row_align > 1, else 0
  int max_active = 0;               // min(E, pairs)
  int row_align = 1;
  int num_experts = 0;
  int top_k = 0;
};

// Block-scaled FP8 scales of one stacked expert weight [E, rows, cols]: F32 [E, rows_grid,
// cols_grid], row r, column c of expert e scaled by at[e * expert_stride + (r / block_n) *
// cols_grid + c / block_k].
struct MoeFp8Scales {
  const float* at = nullptr;
  int64_t expert_stride = 0;
  int64_t cols_grid = 0;
  int block_n = 1, block_k = 1;
};

// The expert MLP operands of one call, checked by the op entry. act/y are in `dtype` (F32 or
// BF16), and so are the weights unless `fp8`: then they are e4m3 bytes with their scales.
struct MoeProblem {
  DType dtype = DType::kBF16;
  bool fp8 = false;
  MoeFp8Scales gate_up_scales, down_scales;
  const void* x = nullptr;  // [T, H], row stride ldx
  int64_t ldx = 0;
  const void* gate_up = nullptr;  // [E, 2I, H]
  const void* down = nullptr;     // [E, H, I]
  void* act = nullptr;            // [capacity, I]
  void* y = nullptr;              // [capacity, H]
  int64_t tokens = 0, hidden = 0, inter = 0;
};

// One projection of the grouped GEMM (moe_gemm.cu, sm90a/moe_gemm_wgmma.cu), as its kernels
// take it: gate/up reads x through sorted_pairs and writes act, down reads and writes grouped
// rows.
struct GroupedGemmParams {
  const __nv_bfloat16* weight;  // [E, weight rows, k]
  int64_t expert_stride;
  const __nv_bfloat16* input;  // gate/up: x (row = token); down: act (row = grouped row)
  int64_t ld_input;
  __nv_bfloat16* output;  // gate/up: act; down: y (row = grouped row)
  int64_t ld_output;
  const int32_t* sorted_pairs;
  const int32_t* tile_expert;
  int n_out;  // gate/up: I (output columns; 2I weight rows); down: H
  int k;
  int top_k;
  // FP8 experts: e4m3 weight rows (`weight` unused) and their scales.
  const uint8_t* weight8;
  MoeFp8Scales scales;
};

// The gate/up (`gate_up`) or down projection's parameters for one call.
inline GroupedGemmParams grouped_gemm_params(const MoeProblem& pr, const MoePlan& plan,
                                             bool gate_up) {
  GroupedGemmParams p{};
  p.sorted_pairs = plan.sorted_pairs;
  p.tile_expert = plan.tile_expert;
  p.top_k = plan.top_k;
  if (gate_up) {
    p.weight = static_cast<const __nv_bfloat16*>(pr.gate_up);
    p.weight8 = static_cast<const uint8_t*>(pr.gate_up);
    p.scales = pr.gate_up_scales;
    p.expert_stride = 2 * pr.inter * pr.hidden;
    p.input = static_cast<const __nv_bfloat16*>(pr.x);
    p.ld_input = pr.ldx;
    p.output = static_cast<__nv_bfloat16*>(pr.act);
    p.ld_output = pr.inter;
    p.n_out = static_cast<int>(pr.inter);
    p.k = static_cast<int>(pr.hidden);
  } else {
    p.weight = static_cast<const __nv_bfloat16*>(pr.down);
    p.weight8 = static_cast<const uint8_t*>(pr.down);
    p.scales = pr.down_scales;
    p.expert_stride = pr.hidden * pr.inter;
    p.input = static_cast<const __nv_bfloat16*>(pr.act);
    p.ld_input = pr.inter;
    p.output = static_cast<__nv_bfloat16*>(pr.y);
    p.ld_output = pr.hidden;
    p.n_out = static_cast<int>(pr.hidden);
    p.k = static_cast<int>(pr.inter);
  }
  return p;
}

// The gather GEMV (moe_gemv.cu): act = silu(gate x) * (up x), then y = down act, for the
// pairs of plan (row_align 1).
Status launch_moe_gemv(const MoeProblem& problem, const MoePlan& plan, cudaStream_t stream);

// The grouped GEMM (moe_gemm.cu), the same two products over row tiles of `tile_rows` (32,
// 64 on sm_90 only, or 128; plan.row_align == tile_rows). Needs grouped_gemm_supported().
Status launch_moe_grouped_gemm(const MoeProblem& problem, const MoePlan& plan, int tile_rows,
                               cudaStream_t stream);

// The same two products on Hopper's wgmma (sm90a/moe_gemm_wgmma.cu, machine code for sm_90a
// only): BF16 experts, 64- or 128-row tiles. launch_moe_grouped_gemm takes it by itself for
// 128-row tiles where wgmma_grouped_gemm_available(), and 64-row tiles exist only there.
Status launch_moe_grouped_gemm_wgmma(const MoeProblem& problem, const MoePlan& plan,
                                     cudaStream_t stream);
// Whether the current device runs sm_90a code (runs_sm90a, runtime.h).
bool wgmma_grouped_gemm_available();

// One projection of the W8A8 grouped GEMM (sm90a/moe_gemm_wgmma_fp8.cu): e4m3 activations
// quantized per group of 128 (fp8_quant.cuh) times e4m3 expert weights in 128 x 128 blocks.
// Gate/up reads x_q through sorted_pairs (row = token) and writes act; down reads act_q
// (row = grouped row) and writes y; both outputs BF16, 128-row tiles.
struct Fp8GroupedGemmParams {
  const uint8_t* weight;  // [E, weight rows, k] e4m3
  int64_t expert_stride;
  MoeFp8Scales w_scales;  // 128 x 128 blocks
  const uint8_t* input;   // e4m3 rows, ld_input apart
  int64_t ld_input;
  const float* input_scales;  // group g of input row r at g * scale_stride + r
  int64_t scale_stride;
  __nv_bfloat16* output;  // gate/up: act; down: y (row = grouped row)
  int64_t ld_output;
  const int32_t* sorted_pairs;
  const int32_t* tile_expert;
  int n_out;  // gate/up: I (2I weight rows); down: H; a multiple of 128
  int k;      // a multiple of 128
  int top_k;
};
// few_rows: the swap-AB kernel for batches whose experts have a few rows each (16 grouped rows
// a pass as wgmma's N); it writes only the passes up to an expert's last row.
Status launch_moe_grouped_gemm_wgmma_fp8(const Fp8GroupedGemmParams& p, bool gate_up, int64_t tiles,
                                         bool few_rows, cudaStream_t stream);

// The per-pair path (moe_pair.cu): no grouping; gate/up per (token, slot) pair, then the
// down product fused with the weighted combine (and the shared expert's gated add) into out.
struct MoePairArgs {
  const int64_t* ids = nullptr;    // [T, k]
  const float* weights = nullptr;  // [T, k]
  const void* shared = nullptr;    // [T, H] at shared_stride, or null
  int64_t shared_stride = 0;
  const void* gate = nullptr;  // [T] at gate_stride: F32 (gate_f32) or the storage type
  int64_t gate_stride = 0;
  bool gate_f32 = false;
  void* out = nullptr;  // [T, H] at out_stride
  int64_t out_stride = 0;
  int experts = 0;
  int top_k = 0;
  // Every token's last slot is expert experts - 1 (MoeExpertsArgs::shared_last_slot): the
  // BF16 kernels start on it before pdl_wait.
  bool last_slot_ahead = false;
};
// Shared memory of the gate/up kernel: one token's row of x.
size_t moe_pair_smem_bytes(DType dtype, int64_t hidden);
constexpr size_t kMoePairMaxSmemBytes = 48 * 1024;  // without the opt-in attribute
constexpr int kMoePairMaxSlots = 33;                // slots per token: kMoeMaxTopK + shared
Status launch_moe_pair_gemv(const MoeProblem& problem, const MoePairArgs& args,
                            cudaStream_t stream);

// Shapes and dtype the grouped GEMM handles (16-byte row chunks everywhere; with FP8 experts
// hidden and intermediate sizes and both block widths multiples of 16, so that a 16-column
// chunk never straddles two scale blocks).
bool grouped_gemm_shapes_ok(DType dtype, int64_t hidden, int64_t inter, bool fp8 = false,
                            int64_t gate_up_block_k = 16, int64_t down_block_k = 16);
// ... and pointer alignment of this call's operands.
bool grouped_gemm_supported(const MoeProblem& problem);

}  // namespace vllm::cuda::detail

// The sparse mixture-of-experts MLP on the GPU: the counterparts of cpu::moe_route and
// cpu::moe_experts (src/backend/cpu/moe.h; same semantics, see there) over experts stacked
// per layer, plus the shared expert's gated add fused into the final combine.
//
// moe_experts never copies the host a value. A batch of a few tokens takes the per-pair GEMV:
// each (token, slot) pair reads its expert's rows directly, and the down product writes the
// weighted sum itself. Larger batches have their pairs grouped by expert on the device
// (counts, offsets, a permutation), and two paths read only the experts the batch selected:
//   - gather GEMV (small batches): one launch per projection over the selected experts, each
//     expert's rows read once for all the tokens that picked it (16-byte loads, many in
//     flight per warp);
//   - grouped GEMM (large batches): each expert's tokens padded to whole row tiles, one
//     tensor-core kernel per projection whose tiles look up their expert on the device.
// Both write each pair's expert output in the grouped order; a combine kernel sums the k
// outputs of every token, weighted, in token order, and adds sigmoid(gate) * shared output.
// Implementations: moe.cu (router, grouping, combine, op entries), moe_pair.cu, moe_gemv.cu,
// moe_gemm.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// Limits of the router and grouping kernels (one warp holds a token's logits; one block
// groups the pairs): larger configs are refused, never clamped.
constexpr int64_t kMoeMaxExperts = 1024;
constexpr int64_t kMoeMaxTopK = 32;

// Batches of at most this many tokens take the per-pair GEMV (no grouping by expert: each
// (token, slot) pair reads its expert's rows, the down product fused with the weighted sum),
// when the shapes allow it: fewer launches and one memory round trip before the weights
// stream, worth more than reading an expert twice when two tokens share it. Batches up to
// kMoeGemvMaxTokens take the gather GEMV, larger ones the grouped GEMM (when the shapes
// allow it, see MoePath). Measured on the H200 with the timing mode
// (tests/cuda/bench_moe_cuda.cpp, 35B-A3B shapes, moe_experts alone): at 1 and 8 tokens the
// per-pair GEMV beats the gather GEMV (27 vs 42 us, 142 vs 165 us); at 64 tokens the grouped
// GEMM beats it (640 vs 720 us). 32 is between the measured points.
constexpr int64_t kMoePairMaxTokens = 8;
constexpr int64_t kMoeGemvMaxTokens = 32;
// Batches of at most this many tokens start the shared expert's slot ahead of the routing
// (MoeExpertsArgs::shared_last_slot). Measured on the H200 (35B-A3B decode step): 0.07-0.08
// ms shorter at 1 and 2 tokens, 0.02 at 4, 0.06 longer at 8.
constexpr int64_t kMoeSharedAheadMaxTokens = 4;
// The grouped GEMM's row tile: 32 rows when the batch gives the experts at most this many
// pairs each on average (decode at high concurrency: the weights dominate), else 128
// (prefill: the arithmetic dominates).
constexpr int64_t kMoeSmallTileMaxPairsPerExpert = 32;
// On sm_90 (the wgmma kernel), 64-row tiles up to this many pairs per expert on average, so a
// 2,048-token prompt's ~64 pairs an expert do not pad to 128.
constexpr int64_t kMoeMidTileMaxPairsPerExpert = 128;
// The W8A8 grouped GEMM (FP8 experts on sm_90) swaps its operands -- expert weights as the
// tensor cores' M, 16 grouped rows a pass as N -- while the pairs average at most this many an
// expert: a decode batch leaves most of a 128-row tile padding, so the 64 x 128 products spent
// on it would bind the step instead of the weights' bytes.
constexpr int64_t kW8A8FewRowsPerExpert = 8;

// router_logits F32 [T, E] (row stride allowed) -> topk_weights F32 [T, k], topk_ids I64
// [T, k] (both contiguous): softmax over E, the k most probable experts in descending
// probability (ties to the lower id), renormalised to sum 1 when `renormalize`. A row with a
// NaN or +inf logit, or only -inf ones, has all-NaN probabilities, as on the CPU: ids 0..k-1,
// weights NaN. E <= kMoeMaxExperts, 1 <= k <= min(E, kMoeMaxTopK).
// shared_slot: router_logits is [T, E + 1] with the shared expert's gate logit in column E;
// the outputs are [T, k + 1] and slot k is the shared expert, run as expert E (stacked after
// the routed ones) with weight sigmoid(gate logit) -- its output then joins the weighted sum
// in moe_experts like any routed expert's, saving the shared expert's own launches.
Status moe_route(const Tensor& router_logits, int64_t top_k, bool renormalize, Tensor& topk_weights,
                 Tensor& topk_ids, cudaStream_t stream, bool shared_slot = false);

enum class MoePath {
  kAuto,             // by token count (kMoePairMaxTokens, kMoeGemvMaxTokens) and the shapes
  kPairGemv,         // hidden * element size <= 48 KiB, T * k <= 65535
  kGatherGemv,       // any dtype and shape
  kGroupedGemm,      // BF16 activations, hidden and intermediate sizes multiples of 8 (16 with
                     // FP8 experts, whose blocks' columns are then multiples of 16 too), 16-byte
                     // aligned rows
  kGroupedGemmW8A8,  // FP8 experts in 128 x 128 blocks as W8A8 (moe_w8a8_fits): x and the SiLU
                     // product quantized per token group of 128 (tensor/block_fp8.h), e4m3
                     // tensor-core GEMMs with the block scales; compute capability 9.0
};

struct MoeExpertsArgs {
  Tensor gate_up;  // [E, 2I, H]: expert e's gate rows [0, I), then its up rows [I, 2I)
  Tensor down;     // [E, H, I]
  // Block-scaled FP8 experts (W8A16): gate_up and down F8_E4M3, with F32 scales [E,
  // ceil(2I / n), ceil(H / k)] and [E, ceil(H / n), ceil(I / k)] for blocks of n x k
  // (tensor/linear_weight.h). Undefined scales: the weights are in x's dtype.
  Tensor gate_up_scale_inv, down_scale_inv;
  WeightBlock gate_up_block, down_block;
  Tensor shared_out;   // [T, H] in x's dtype (row stride allowed), or undefined: no shared expert
  Tensor shared_gate;  // [T, 1] F32 or x's dtype (row stride allowed): sigmoid(gate) scales it
  MoePath path = MoePath::kAuto;
  // Every token's last slot is expert E - 1 (topk_ids says so too: moe_route's shared_slot),
  // and x was written before the kernel that precedes this call on the stream was launched
  // (the model's router runs between). The per-pair path then starts that slot's expert
  // before the preceding kernel (the routing) has finished, for batches of up to
  // kMoeSharedAheadMaxTokens tokens.
  bool shared_last_slot = false;
};

// Bytes of the scratch buffer moe_experts needs for these operands (checked as moe_experts
// checks them). The op layer takes it from the step's workspace.
Expected<size_t> moe_experts_scratch_bytes(const Tensor& x, const Tensor& topk_ids,
                                           const MoeExpertsArgs& args);

// out[t] = sum_i topk_weights[t, i] * expert_{topk_ids[t, i]}(x[t])
//          (+ sigmoid(shared_gate[t]) * shared_out[t]),
// expert_e(v) = down[e] @ (silu(gate[e] @ v) * (up[e] @ v)), f32 accumulation, the SiLU
// product rounded once to x's dtype, each expert output rounded once, the weighted sum in f32.
// FP8 experts: each weight is its e4m3 value times its block's scale -- exact in f32 on the
// per-pair path (each 16-weight chunk's sum scaled once) and under F32 activations, rounded
// once to BF16 on the other paths under BF16 activations (the values cuda::linear's
// dequantized FP8 path multiplies); W8A8 quantizes the activations too (MoePath).
// x [T, H] F32/BF16 (row stride allowed); weights in x's dtype or FP8, contiguous;
// topk_weights F32 [T, k] and topk_ids I64 [T, k] contiguous; out [T, H] in x's dtype (row
// stride allowed, not aliasing x). An id outside [0, E), which the device cannot report,
// contributes nothing. scratch: U8 of at least moe_experts_scratch_bytes() on the device,
// clobbered. Asynchronous.
Status moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                   const MoeExpertsArgs& args, Tensor& scratch, Tensor& out, cudaStream_t stream);

}  // namespace vllm::cuda

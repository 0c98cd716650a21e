// The MoE routing of one token by one warp (moe_route, moe.cu), shared by the router kernel
// and the batched GEMV that can run it after the router's product (gemv.cu: the last block
// to finish routes every row).
//
// Lane l holds the logits of experts l, l + 32, ... (kPerLane each, the fewest that cover E)
// and computes the softmax as the CPU op does (max, exp(x - max), sum, one reciprocal), then
// the warp picks the k largest probabilities one at a time with an argmax whose ties go to the
// lower expert id; lane i keeps the i-th pick. The renormalising sum adds the picks in pick
// order, as the CPU op does. The logits are read through L2 (ld.global.cg): in the GEMV other
// blocks wrote them moments before.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cuda/common.cuh"

namespace vllm::cuda::detail {

struct RouteRowArgs {
  int experts;  // E: the routed columns of a logits row
  int top_k;
  int out_k;  // top_k, or top_k + 1 with the shared expert's slot (column E, expert E)
  bool renormalize;
};

// kPerLane: logits per lane, E <= 32 * kPerLane (the top-k scans touch only these). row: the
// token's logits; weights / ids: its out_k outputs. Every lane of the warp calls it.
template <int kPerLane>
__device__ __forceinline__ void route_row(const float* row, float* weights, int64_t* ids,
                                          const RouteRowArgs& p, int lane) {
  float prob[kPerLane];
  float max_value = -INFINITY;
  // A NaN or +inf logit, or a row of -inf only, makes every probability NaN on the CPU
  // (x - max is NaN somewhere and the NaN reaches the sum); a -inf among finite logits is
  // just a zero probability.
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + j * kWarpSize;
    prob[j] = e < p.experts ? __ldcg(row + e) : -INFINITY;
    if (e < p.experts) {
      bad |= isnan(prob[j]) || prob[j] == INFINITY;
      max_value = fmaxf(max_value, prob[j]);
    }
  }
  max_value = warp_max(max_value);
  bad = __any_sync(0xffffffffu, bad) || max_value == -INFINITY;
  if (p.out_k > p.top_k && lane == 0) {
    // The shared expert as expert E, weighted by the sigmoid of its gate's logit (column E).
    weights[p.top_k] = 1.0f / (1.0f + expf(-__ldcg(row + p.experts)));
    ids[p.top_k] = p.experts;
  }
  if (bad) {
    // All probabilities NaN: torch.topk (and the CPU op) rank NaN first, ties by index.
    if (lane < p.top_k) {
      weights[lane] = NAN;
      ids[lane] = lane;
    }
    return;
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (lane + j * kWarpSize < p.experts) {
      prob[j] = expf(prob[j] - max_value);
      sum += prob[j];
    }
  }
  const float inv_sum = 1.0f / warp_sum(sum);
  // Probabilities are >= 0; -1 marks experts past E and those already picked.
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    prob[j] = lane + j * kWarpSize < p.experts ? prob[j] * inv_sum : -1.0f;
  }
  // Each round picks the largest probability left, the lower id on a tie (torch.topk and the
  // CPU op): as unsigned keys (the bits of a probability >= 0, plus one; 0 for experts past E
  // and those already picked) the largest key is the largest probability, and one warp
  // reduction finds it, a second the lowest id holding it.
  uint32_t key[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    key[j] = prob[j] >= 0.0f ? __float_as_uint(fabsf(prob[j])) + 1u : 0u;  // -0 as +0
  }
  float picked_sum = 0.0f, my_weight = 0.0f;
  int my_id = 0;
  for (int i = 0; i < p.top_k; ++i) {
    uint32_t mine = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) mine = max(mine, key[j]);
    const uint32_t top = __reduce_max_sync(0xffffffffu, mine);
    uint32_t first = UINT_MAX;
#pragma unroll
    for (int j = kPerLane - 1; j >= 0; --j) {
      if (key[j] == top) first = static_cast<uint32_t>(lane + j * kWarpSize);
    }
    const int best_e = static_cast<int>(__reduce_min_sync(0xffffffffu, first));
    const float best = __uint_as_float(top - 1u);
    if (best_e % kWarpSize == lane) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        if (j == best_e / kWarpSize) key[j] = 0u;
      }
    }
    if (lane == i) {
      my_weight = best;
      my_id = best_e;
    }
    picked_sum += best;
  }
  if (lane < p.top_k) {
    weights[lane] = p.renormalize ? my_weight / picked_sum : my_weight;
    ids[lane] = my_id;
  }
}

// route_row with the fewest logits per lane that cover p.experts (<= 32 * kMaxPerLane).
template <int kMaxPerLane>
__device__ __forceinline__ void route_row_any(const float* row, float* weights, int64_t* ids,
                                              const RouteRowArgs& p, int lane) {
  if (p.experts <= 4 * kWarpSize) {
    route_row<4>(row, weights, ids, p, lane);
  } else if (p.experts <= 8 * kWarpSize) {
    route_row<8>(row, weights, ids, p, lane);
  } else if (p.experts <= 16 * kWarpSize) {
    route_row<16>(row, weights, ids, p, lane);
  } else {
    route_row<kMaxPerLane>(row, weights, ids, p, lane);
  }
}

}  // namespace vllm::cuda::detail

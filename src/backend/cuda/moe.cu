// The MoE router, the grouping of routed pairs by expert, the weighted combine and the op
// entries of moe.cuh. The expert products themselves are in moe_gemv.cu and moe_gemm.cu.
//
// moe_route: one warp per token. Lane l holds the logits of experts l, l + 32, ... (4, 8, 16
// or 32 each, the fewest that cover E <= 1024) and computes the softmax as the CPU op does
// (max, exp(x - max), sum, one reciprocal), then the warp picks the k largest probabilities
// one at a time with an argmax whose ties go to the lower expert id; lane i keeps the i-th
// pick. The renormalising sum adds the picks in pick order, as the CPU op does.
//
// moe_plan_kernel: one block of 1024 threads (one per possible expert) counts the pairs per
// expert in shared memory, scans the padded counts into offsets and the non-empty experts into
// the active list, writes each row tile's expert, then scatters every pair to its expert's next
// free row with a shared-memory cursor. The order of pairs inside an expert's segment depends
// on the atomics, but no result does: each pair's row is computed on its own.
//
// moe_combine_kernel: one thread per 16-byte vector of a token's output row; it sums the
// token's k expert rows weighted, in slot order, in f32, adds sigmoid(gate) * shared row, and
// rounds once.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8_quant.cuh"
#include "backend/cuda/moe.cuh"
#include "backend/cuda/moe_plan.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
namespace {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

using detail::ceil_div;
using detail::from_float;
using detail::kMaxGridY;
using detail::kWarpSize;
using detail::MoePlan;
using detail::MoeProblem;
using detail::Pack;
using detail::Rows;
using detail::to_float;

constexpr int kRouteWarps = 8;
constexpr int kRouteMaxPerLane = static_cast<int>(kMoeMaxExperts) / kWarpSize;
constexpr int kPlanThreads = static_cast<int>(kMoeMaxExperts);
// Pairs per block of the multi-block grouping, which batches above 2 blocks' worth take.
constexpr int64_t kPlanPairsPerBlock = 4096;
constexpr int kCombineThreads = 256;
constexpr size_t kScratchAlign = 256;

// ---- Router ------------------------------------------------------------------------------

struct RouteParams {
  const float* logits;
  int64_t logits_stride;
  float* weights;  // [T, out_k]
  int64_t* ids;    // [T, out_k]
  int64_t tokens;
  int experts;
  int top_k;
  int out_k;  // top_k, or top_k + 1 with the shared expert's slot
  bool renormalize;
};

// kPerLane: logits per lane, E <= 32 * kPerLane (the top-k scans touch only these).
template <int kPerLane>
__global__ void __launch_bounds__(kRouteWarps* kWarpSize) moe_route_kernel(RouteParams p) {
  pdl_wait();
  pdl_launch_next();
  constexpr int kRoutePerLane = kPerLane;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + threadIdx.x / kWarpSize;
  if (t >= p.tokens) return;  // whole warps leave; no block barrier below
  const float* row = p.logits + t * p.logits_stride;
  float prob[kRoutePerLane];
  float max_value = -INFINITY;
  // A NaN or +inf logit, or a row of -inf only, makes every probability NaN on the CPU
  // (x - max is NaN somewhere and the NaN reaches the sum); a -inf among finite logits is
  // just a zero probability.
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kRoutePerLane; ++j) {
    const int e = lane + j * kWarpSize;
    prob[j] = e < p.experts ? row[e] : -INFINITY;
    if (e < p.experts) {
      bad |= isnan(prob[j]) || prob[j] == INFINITY;
      max_value = fmaxf(max_value, prob[j]);
    }
  }
  max_value = detail::warp_max(max_value);
  bad = __any_sync(0xffffffffu, bad) || max_value == -INFINITY;
  float* weights = p.weights + t * p.out_k;
  int64_t* ids = p.ids + t * p.out_k;
  if (p.out_k > p.top_k && lane == 0) {
    // The shared expert as expert E, weighted by the sigmoid of its gate's logit (column E).
    weights[p.top_k] = 1.0f / (1.0f + expf(-row[p.experts]));
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
  for (int j = 0; j < kRoutePerLane; ++j) {
    if (lane + j * kWarpSize < p.experts) {
      prob[j] = expf(prob[j] - max_value);
      sum += prob[j];
    }
  }
  const float inv_sum = 1.0f / detail::warp_sum(sum);
  // Probabilities are >= 0; -1 marks experts past E and those already picked.
#pragma unroll
  for (int j = 0; j < kRoutePerLane; ++j) {
    prob[j] = lane + j * kWarpSize < p.experts ? prob[j] * inv_sum : -1.0f;
  }
  // Each round picks the largest probability left, the lower id on a tie (torch.topk and the
  // CPU op): as unsigned keys (the bits of a probability >= 0, plus one; 0 for experts past E
  // and those already picked) the largest key is the largest probability, and one warp
  // reduction finds it, a second the lowest id holding it.
  uint32_t key[kRoutePerLane];
#pragma unroll
  for (int j = 0; j < kRoutePerLane; ++j) {
    key[j] = prob[j] >= 0.0f ? __float_as_uint(fabsf(prob[j])) + 1u : 0u;  // -0 as +0
  }
  float picked_sum = 0.0f, my_weight = 0.0f;
  int my_id = 0;
  for (int i = 0; i < p.top_k; ++i) {
    uint32_t mine = 0;
#pragma unroll
    for (int j = 0; j < kRoutePerLane; ++j) mine = max(mine, key[j]);
    const uint32_t top = __reduce_max_sync(0xffffffffu, mine);
    uint32_t first = UINT_MAX;
#pragma unroll
    for (int j = kRoutePerLane - 1; j >= 0; --j) {
      if (key[j] == top) first = static_cast<uint32_t>(lane + j * kWarpSize);
    }
    const int best_e = static_cast<int>(__reduce_min_sync(0xffffffffu, first));
    const float best = __uint_as_float(top - 1u);
    if (best_e % kWarpSize == lane) {
#pragma unroll
      for (int j = 0; j < kRoutePerLane; ++j) {
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

// ---- Grouping ----------------------------------------------------------------------------

// Exclusive prefix sum over the block of one value per thread (blockDim.x == kPlanThreads);
// `total` gets the sum. Starts and ends with a barrier, so `scratch` (32 ints) is reusable.
__device__ int block_exclusive_scan(int value, int* scratch, int& total) {
  __syncthreads();
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  int x = value;
#pragma unroll
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, offset);
    if (lane >= offset) x += y;
  }
  if (lane == kWarpSize - 1) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = scratch[lane];  // kPlanThreads / 32 == 32 warp totals
#pragma unroll
    for (int offset = 1; offset < kWarpSize; offset <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += y;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  const int before = warp > 0 ? scratch[warp - 1] : 0;
  total = scratch[kWarpSize - 1];
  __syncthreads();
  return before + x - value;
}

__global__ void __launch_bounds__(kPlanThreads) moe_plan_kernel(const int64_t* ids, MoePlan plan) {
  pdl_wait();
  pdl_launch_next();
  __shared__ int counts[kPlanThreads];
  __shared__ int cursor[kPlanThreads];
  __shared__ int scan_scratch[kWarpSize];
  const int tid = threadIdx.x;
  const int experts = plan.num_experts, align = plan.row_align;
  counts[tid] = 0;
  __syncthreads();
  for (int64_t p = tid; p < plan.pairs; p += kPlanThreads) {
    const int64_t e = ids[p];
    if (e >= 0 && e < experts) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  const int n = tid < experts ? counts[tid] : 0;
  const int padded = (n + align - 1) / align * align;
  int total_rows = 0, total_active = 0;
  const int start = block_exclusive_scan(padded, scan_scratch, total_rows);
  const int active_index = block_exclusive_scan(n > 0 ? 1 : 0, scan_scratch, total_active);
  if (tid < experts) {
    plan.offsets[tid] = start;
    cursor[tid] = start;
    if (n > 0) plan.active[active_index] = tid;
    if (plan.max_tiles > 0) {
      for (int tile = start / align; tile < (start + padded) / align; ++tile) {
        plan.tile_expert[tile] = tid;
      }
    }
  }
  if (tid == 0) {
    plan.offsets[experts] = total_rows;
    *plan.num_active = total_active;
  }
  for (int64_t tile = total_rows / align + tid; tile < plan.max_tiles; tile += kPlanThreads) {
    plan.tile_expert[tile] = -1;
  }
  // Every row starts as padding; the scatter below overwrites the rows that get a pair.
  for (int row = tid; row < total_rows; row += kPlanThreads) plan.sorted_pairs[row] = -1;
  __syncthreads();  // cursors set, rows marked
  for (int64_t p = tid; p < plan.pairs; p += kPlanThreads) {
    const int64_t e = ids[p];
    int row = -1;
    if (e >= 0 && e < experts) {
      row = atomicAdd(&cursor[e], 1);
      plan.sorted_pairs[row] = static_cast<int>(p);
    }
    plan.pair_row[p] = row;
  }
}

// Large batches: the same plan from three kernels over many blocks, since one block walking
// 65,536 pairs twice took ~98 us a layer with the rest of the GPU idle (35B-A3B prefill).
// Block b of count and scatter takes pairs [b * kPlanPairsPerBlock, ...). Count: each block's
// histogram into block_counts[b][e]. Offsets (one block, a thread per expert): the experts'
// totals, their padded segments as above, and block_counts[b][e] turned in place into block
// b's first row in expert e's segment. Scatter: each block hands out its rows from those
// bases with shared-memory cursors. Rows within an expert's segment come in no particular
// order either way (each row's products do not depend on it).
__global__ void __launch_bounds__(kPlanThreads)
    moe_plan_count_kernel(const int64_t* ids, MoePlan plan) {
  pdl_wait();
  pdl_launch_next();
  __shared__ int counts[kPlanThreads];
  const int tid = threadIdx.x;
  const int experts = plan.num_experts;
  counts[tid] = 0;
  __syncthreads();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kPlanPairsPerBlock;
  const int64_t last = min(plan.pairs, first + kPlanPairsPerBlock);
  for (int64_t p = first + tid; p < last; p += kPlanThreads) {
    const int64_t e = ids[p];
    if (e >= 0 && e < experts) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (tid < experts) {
    plan.block_counts[static_cast<int64_t>(blockIdx.x) * experts + tid] = counts[tid];
  }
}

__global__ void __launch_bounds__(kPlanThreads) moe_plan_offsets_kernel(MoePlan plan) {
  pdl_wait();
  pdl_launch_next();
  __shared__ int scan_scratch[kWarpSize];
  const int tid = threadIdx.x;
  const int experts = plan.num_experts, align = plan.row_align;
  int n = 0;
  if (tid < experts) {
    for (int b = 0; b < plan.plan_blocks; ++b) n += plan.block_counts[b * experts + tid];
  }
  const int padded = (n + align - 1) / align * align;
  int total_rows = 0, total_active = 0;
  const int start = block_exclusive_scan(padded, scan_scratch, total_rows);
  const int active_index = block_exclusive_scan(n > 0 ? 1 : 0, scan_scratch, total_active);
  if (tid < experts) {
    plan.offsets[tid] = start;
    if (n > 0) plan.active[active_index] = tid;
    if (plan.max_tiles > 0) {
      for (int tile = start / align; tile < (start + padded) / align; ++tile) {
        plan.tile_expert[tile] = tid;
      }
    }
    int base = start;
    for (int b = 0; b < plan.plan_blocks; ++b) {
      int* c = plan.block_counts + b * experts + tid;
      const int count = *c;
      *c = base;
      base += count;
    }
  }
  if (tid == 0) {
    plan.offsets[experts] = total_rows;
    *plan.num_active = total_active;
  }
  for (int64_t tile = total_rows / align + tid; tile < plan.max_tiles; tile += kPlanThreads) {
    plan.tile_expert[tile] = -1;
  }
  // Every row starts as padding; the scatter kernel overwrites the rows that get a pair.
  for (int row = tid; row < total_rows; row += kPlanThreads) plan.sorted_pairs[row] = -1;
}

__global__ void __launch_bounds__(kPlanThreads)
    moe_plan_scatter_kernel(const int64_t* ids, MoePlan plan) {
  pdl_wait();
  pdl_launch_next();
  __shared__ int cursor[kPlanThreads];
  const int tid = threadIdx.x;
  const int experts = plan.num_experts;
  if (tid < experts) {
    cursor[tid] = plan.block_counts[static_cast<int64_t>(blockIdx.x) * experts + tid];
  }
  __syncthreads();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kPlanPairsPerBlock;
  const int64_t last = min(plan.pairs, first + kPlanPairsPerBlock);
  for (int64_t p = first + tid; p < last; p += kPlanThreads) {
    const int64_t e = ids[p];
    int row = -1;
    if (e >= 0 && e < experts) {
      row = atomicAdd(&cursor[e], 1);
      plan.sorted_pairs[row] = static_cast<int>(p);
    }
    plan.pair_row[p] = row;
  }
}

// ---- Combine -----------------------------------------------------------------------------

template <typename T, int kVec>
__device__ __forceinline__ void load_vec(const T* row, int64_t v, float (&f)[kVec]) {
  const Pack<T, kVec> pk = reinterpret_cast<const Pack<T, kVec>*>(row)[v];
#pragma unroll
  for (int q = 0; q < kVec; ++q) f[q] = to_float(pk.v[q]);
}

template <typename T>
struct CombineParams {
  const T* y;  // [capacity, H]
  const int32_t* pair_row;
  const float* weights;  // [T, k]
  const T* shared;       // [T, H] or null
  int64_t shared_stride;
  const void* gate;  // [T] at gate_stride: F32 or T
  int64_t gate_stride;
  bool gate_f32;
  T* out;
  int64_t out_stride;
  int64_t tokens, hidden, vecs;
  int top_k;
};

template <typename T, int kVec>
__global__ void moe_combine_kernel(CombineParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= p.vecs) return;
  for (int64_t t = blockIdx.y; t < p.tokens; t += gridDim.y) {
    float acc[kVec];
#pragma unroll
    for (int q = 0; q < kVec; ++q) acc[q] = 0.0f;
    for (int i = 0; i < p.top_k; ++i) {
      const int64_t pair = t * p.top_k + i;
      const int row = p.pair_row[pair];
      if (row < 0) continue;
      const float w = p.weights[pair];
      float y[kVec];
      load_vec<T, kVec>(p.y + static_cast<int64_t>(row) * p.hidden, v, y);
#pragma unroll
      for (int q = 0; q < kVec; ++q) acc[q] += w * y[q];
    }
    if (p.shared != nullptr) {
      const float g = p.gate_f32 ? static_cast<const float*>(p.gate)[t * p.gate_stride]
                                 : to_float(static_cast<const T*>(p.gate)[t * p.gate_stride]);
      const float s = 1.0f / (1.0f + expf(-g));
      float sh[kVec];
      load_vec<T, kVec>(p.shared + t * p.shared_stride, v, sh);
#pragma unroll
      for (int q = 0; q < kVec; ++q) acc[q] += s * sh[q];
    }
    Pack<T, kVec> pk;
#pragma unroll
    for (int q = 0; q < kVec; ++q) pk.v[q] = from_float<T>(acc[q]);
    reinterpret_cast<Pack<T, kVec>*>(p.out + t * p.out_stride)[v] = pk;
  }
}

template <typename T>
Status launch_combine(const CombineParams<T>& base, bool vec, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  CombineParams<T> p = base;
  p.vecs = vec ? p.hidden / kVec : p.hidden;
  const int64_t threads =
      std::min<int64_t>(kCombineThreads, ceil_div(p.vecs, kWarpSize) * kWarpSize);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.vecs, threads)),
                  static_cast<unsigned>(std::min<int64_t>(p.tokens, kMaxGridY)));
  if (vec) {
    launch_pdl(moe_combine_kernel<T, kVec>, grid, static_cast<unsigned>(threads), 0, stream, p);
  } else {
    launch_pdl(moe_combine_kernel<T, 1>, grid, static_cast<unsigned>(threads), 0, stream, p);
  }
  return check_launch("moe_combine_kernel");
}

// ---- Host side ---------------------------------------------------------------------------

size_t round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

// Where each part of the scratch buffer starts (bytes), for one call's sizes.
struct ScratchLayout {
  size_t offsets = 0, sorted_pairs = 0, pair_row = 0, active = 0, num_active = 0;
  size_t tile_expert = 0, block_counts = 0, act = 0, y = 0, bytes = 0;
  // W8A8: x and act quantized, with their per-group scales.
  size_t x_q = 0, x_scales = 0, act_q = 0, act_scales = 0;
  int plan_blocks = 0;  // blocks of the multi-block grouping; 0: one block
  int64_t capacity = 0, max_tiles = 0;
  int max_active = 0;
  int row_align = 1;
};

ScratchLayout scratch_layout(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                             int64_t inter, DType dtype, int row_align, bool w8a8) {
  ScratchLayout l;
  l.row_align = row_align;
  const int64_t pairs = tokens * top_k;
  l.max_active = static_cast<int>(std::min(experts, pairs));
  int64_t capacity = pairs + (row_align > 1 ? int64_t{l.max_active} * (row_align - 1) : 0);
  capacity = ceil_div(capacity, row_align) * row_align;
  l.capacity = capacity;
  l.max_tiles = row_align > 1 ? capacity / row_align : 0;
  size_t at = 0;
  auto take = [&at](int64_t bytes) {
    const size_t start = at;
    at = round_up(at + static_cast<size_t>(std::max<int64_t>(bytes, 1)), kScratchAlign);
    return start;
  };
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  l.offsets = take((experts + 1) * 4);
  l.sorted_pairs = take(capacity * 4);
  l.pair_row = take(pairs * 4);
  l.active = take(int64_t{l.max_active} * 4);
  l.num_active = take(4);
  l.tile_expert = take(l.max_tiles * 4);
  if (pairs > 2 * kPlanPairsPerBlock) {
    l.plan_blocks = static_cast<int>(ceil_div(pairs, kPlanPairsPerBlock));
    l.block_counts = take(int64_t{l.plan_blocks} * experts * 4);
  }
  l.act = take(capacity * inter * esize);
  l.y = take(capacity * hidden * esize);
  if (w8a8) {
    l.x_q = take(tokens * hidden);
    l.x_scales = take(hidden / 128 * tokens * 4);
    l.act_q = take(capacity * inter);
    l.act_scales = take(inter / 128 * capacity * 4);
  }
  l.bytes = at;
  return l;
}

// The operands' sizes, checked.
struct Dims {
  int64_t tokens = 0, hidden = 0, experts = 0, inter = 0, top_k = 0;
  bool fp8 = false;  // F8_E4M3 experts with block scales
  int64_t gate_up_block_k = 0, down_block_k = 0;
  bool w8a8_ok = false;  // the W8A8 grouped GEMM takes these experts (kGroupedGemmW8A8)
};

// An FP8 expert stack's scales: F32 [E, ceil(rows / n), ceil(cols / k)], contiguous, on x's
// device, for a block of positive n x k that fits int32 indexing.
Status check_fp8_scales(std::string_view op, std::string_view name, const Tensor& w,
                        const Tensor& scales, const WeightBlock& block, const Tensor& x) {
  if (!scales.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is F8_E4M3 but has no scales", op, name);
  }
  if (block.n < 1 || block.k < 1 || block.n > INT_MAX || block.k > INT_MAX) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} has FP8 blocks of {} x {}", op, name,
                      block.n, block.k);
  }
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, "scales", scales, x));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(op, "scales", scales, {DType::kF32}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(op, "scales", scales));
  const Shape want{w.size(0), ceil_div(w.size(1), block.n), ceil_div(w.size(2), block.k)};
  if (scales.shape() != want) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: the scales of {} {} in {} x {} blocks are {}, expected {}", op, name,
                      w.to_string(), block.n, block.k, scales.to_string(), shape_to_string(want));
  }
  return Status::ok();
}

detail::MoeFp8Scales fp8_scales_of(const Tensor& scales, const WeightBlock& block) {
  detail::MoeFp8Scales s;
  s.at = static_cast<const float*>(scales.data_ptr());
  s.expert_stride = scales.size(1) * scales.size(2);
  s.cols_grid = scales.size(2);
  s.block_n = static_cast<int>(block.n);
  s.block_k = static_cast<int>(block.k);
  return s;
}

Expected<Dims> check_dims(std::string_view op, const Tensor& x, const Tensor& topk_ids,
                          const MoeExpertsArgs& args) {
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(op, "x", x, {DType::kF32, DType::kBF16}));
  if (x.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: x is {}, expected [tokens, hidden]", op,
                      x.to_string());
  }
  Dims d;
  d.tokens = x.size(0);
  d.hidden = x.size(1);
  d.fp8 = args.gate_up.defined() && args.gate_up.dtype() == DType::kF8E4M3;
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, "gate_up", args.gate_up, x));
  if (!d.fp8) VLLM_RETURN_IF_ERROR(detail::check_same_dtype(op, "gate_up", args.gate_up, x));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(op, "gate_up", args.gate_up));
  if (args.gate_up.ndim() != 3 || args.gate_up.size(2) != d.hidden ||
      args.gate_up.size(1) % 2 != 0 || args.gate_up.size(1) == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: gate_up is {}, expected [experts, 2 * intermediate, hidden = {}]", op,
                      args.gate_up.to_string(), d.hidden);
  }
  d.experts = args.gate_up.size(0);
  d.inter = args.gate_up.size(1) / 2;
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, "down", args.down, x));
  if (d.fp8) {
    if (args.down.dtype() != DType::kF8E4M3) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}: gate_up is F8_E4M3 but down is {}; FP8 experts need both in FP8", op,
                        dtype_name(args.down.dtype()));
    }
  } else {
    VLLM_RETURN_IF_ERROR(detail::check_same_dtype(op, "down", args.down, x));
  }
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(op, "down", args.down));
  if (args.down.shape() != Shape{d.experts, d.hidden, d.inter}) {
    return make_error(ErrorCode::kInvalidArgument, "{}: down is {}, expected [{}, {}, {}]", op,
                      args.down.to_string(), d.experts, d.hidden, d.inter);
  }
  if (d.fp8) {
    VLLM_RETURN_IF_ERROR(check_fp8_scales(op, "gate_up", args.gate_up, args.gate_up_scale_inv,
                                          args.gate_up_block, x));
    VLLM_RETURN_IF_ERROR(
        check_fp8_scales(op, "down", args.down, args.down_scale_inv, args.down_block, x));
    d.gate_up_block_k = args.gate_up_block.k;
    d.down_block_k = args.down_block.k;
    const WeightBlock k128{128, 128};
    d.w8a8_ok = x.dtype() == DType::kBF16 && args.gate_up_block == k128 &&
                args.down_block == k128 && d.hidden % 128 == 0 && d.inter % 128 == 0 &&
                detail::wgmma_grouped_gemm_available();
  } else if (args.gate_up_scale_inv.defined() || args.down_scale_inv.defined()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: FP8 scales were given for {} experts; only F8_E4M3 weights take them",
                      op, dtype_name(args.gate_up.dtype()));
  }
  if (d.experts < 1 || d.experts > kMoeMaxExperts) {
    return make_error(ErrorCode::kUnsupported, "{}: {} experts; this op supports 1 to {}", op,
                      d.experts, kMoeMaxExperts);
  }
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, "topk_ids", topk_ids, x));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(op, "topk_ids", topk_ids, {DType::kI64}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(op, "topk_ids", topk_ids));
  if (topk_ids.ndim() != 2 || topk_ids.size(0) != d.tokens || topk_ids.size(1) < 1) {
    return make_error(ErrorCode::kInvalidArgument, "{}: topk_ids is {}, expected [{}, top_k]", op,
                      topk_ids.to_string(), d.tokens);
  }
  d.top_k = topk_ids.size(1);
  // Grouped rows, pair numbers and per-row offsets are int32 on the device.
  const int64_t rows_bound = d.tokens * d.top_k + d.experts * 128;
  if (d.top_k > kMoeMaxTopK || rows_bound > INT_MAX / 2 || d.hidden > INT_MAX / 2 ||
      d.inter > INT_MAX / 2) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: {} tokens x top-k {} (hidden {}, intermediate {}) exceed this op's "
                      "limits (top-k <= {}, int32 row indices)",
                      op, d.tokens, d.top_k, d.hidden, d.inter, kMoeMaxTopK);
  }
  return d;
}

struct PathChoice {
  MoePath path = MoePath::kGatherGemv;
  int tile_rows = 1;  // row alignment of the grouping
};

bool pair_shapes_ok(const Dims& d, DType dtype) {
  return detail::moe_pair_smem_bytes(dtype, d.hidden) <= detail::kMoePairMaxSmemBytes &&
         d.top_k <= detail::kMoePairMaxSlots && d.tokens * d.top_k <= kMaxGridY;
}

Expected<PathChoice> choose_path(std::string_view op, const Dims& d, DType dtype,
                                 MoePath requested) {
  const bool grouped_ok = detail::grouped_gemm_shapes_ok(dtype, d.hidden, d.inter, d.fp8,
                                                         d.gate_up_block_k, d.down_block_k);
  PathChoice c;
  c.path = requested;
  if (c.path == MoePath::kAuto) {
    if (d.tokens <= kMoePairMaxTokens && pair_shapes_ok(d, dtype)) {
      c.path = MoePath::kPairGemv;
    } else {
      // FP8 experts: the W8A8 grouped GEMM where it takes them (128 x 128 blocks, sm_90),
      // else the gather GEMV; their W8A16 grouped GEMM runs only when asked for.
      if (d.tokens > kMoeGemvMaxTokens && d.w8a8_ok) {
        c.path = MoePath::kGroupedGemmW8A8;
      } else {
        c.path = d.tokens > kMoeGemvMaxTokens && grouped_ok && !d.fp8 ? MoePath::kGroupedGemm
                                                                      : MoePath::kGatherGemv;
      }
    }
  }
  if (c.path == MoePath::kGroupedGemmW8A8) {
    if (!d.w8a8_ok) {
      return make_error(ErrorCode::kUnsupported,
                        "{}: the W8A8 grouped GEMM needs BF16 activations, FP8 experts in 128 x "
                        "128 blocks, hidden and intermediate sizes multiples of 128 (got {}, {}, "
                        "{}) and compute capability 9.0",
                        op, dtype_name(dtype), d.hidden, d.inter);
    }
    c.tile_rows = 128;
    return c;
  }
  if (c.path == MoePath::kPairGemv && !pair_shapes_ok(d, dtype)) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: the per-pair GEMV needs hidden x {} bytes <= {}, top_k <= {} and "
                      "tokens x top_k <= {} (got hidden {}, top_k {}, {} tokens)",
                      op, dtype_size(dtype), detail::kMoePairMaxSmemBytes, detail::kMoePairMaxSlots,
                      kMaxGridY, d.hidden, d.top_k, d.tokens);
  }
  if (c.path == MoePath::kGroupedGemm) {
    if (!grouped_ok) {
      return make_error(ErrorCode::kUnsupported,
                        "{}: the grouped GEMM needs BF16 and hidden / intermediate sizes that are "
                        "multiples of {} (got {}, {}, {}{})",
                        op, d.fp8 ? 16 : 8, dtype_name(dtype), d.hidden, d.inter,
                        d.fp8 ? ", and FP8 blocks a multiple of 16 wide" : "");
    }
    const int64_t pairs = d.tokens * d.top_k;
    c.tile_rows = pairs <= kMoeSmallTileMaxPairsPerExpert * d.experts ? 32 : 128;
    if (c.tile_rows == 128 && !d.fp8 && pairs <= kMoeMidTileMaxPairsPerExpert * d.experts &&
        detail::wgmma_grouped_gemm_available()) {
      c.tile_rows = 64;
    }
  }
  return c;
}

// ParamVec-style gate row view: [T, 1] or [T] (row stride allowed), F32 or `dtype`.
Expected<Rows> check_gate(std::string_view op, const Tensor& gate, const Tensor& x,
                          int64_t tokens) {
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, "shared_gate", gate, x));
  if (gate.dtype() != DType::kF32 && gate.dtype() != x.dtype()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: shared_gate has dtype {}, expected F32 or {}", op,
                      dtype_name(gate.dtype()), dtype_name(x.dtype()));
  }
  const bool shape_ok = (gate.ndim() == 1 && gate.size(0) == tokens) ||
                        (gate.ndim() == 2 && gate.size(0) == tokens && gate.size(1) == 1);
  if (!shape_ok) {
    return make_error(ErrorCode::kInvalidArgument, "{}: shared_gate is {}, expected [{}, 1]", op,
                      gate.to_string(), tokens);
  }
  Rows r;
  r.data = gate.data_ptr();
  r.rows = tokens;
  r.cols = 1;
  r.row_stride = gate.stride(0);
  return r;
}

Expected<Rows> check_rows_like_x(std::string_view op, std::string_view arg, const Tensor& t,
                                 const Tensor& x, const Dims& d) {
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, arg, t, x));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(op, arg, t, x));
  if (t.ndim() != 2 || t.size(0) != d.tokens || t.size(1) != d.hidden) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected [{}, {}]", op, arg,
                      t.to_string(), d.tokens, d.hidden);
  }
  return detail::as_rows(op, arg, t);
}

// The W8A8 grouped GEMM: x quantized per token group, gate/up into act (BF16), act quantized,
// down into y. Each projection's weights, scales and output are grouped_gemm_params()'s; its
// input is the quantized rows and their scales.
Status launch_w8a8(const MoeProblem& pr, const MoePlan& plan, char* base, const ScratchLayout& l,
                   cudaStream_t stream) {
  auto projection = [&](bool gate_up, const uint8_t* input, const float* input_scales,
                        int64_t rows) {
    const detail::GroupedGemmParams g = detail::grouped_gemm_params(pr, plan, gate_up);
    detail::Fp8GroupedGemmParams p{};
    p.weight = g.weight8;
    p.expert_stride = g.expert_stride;
    p.w_scales = g.scales;
    p.input = input;
    p.ld_input = g.k;  // the quantized rows are contiguous
    p.input_scales = input_scales;
    p.scale_stride = rows;
    p.output = g.output;
    p.ld_output = g.ld_output;
    p.sorted_pairs = g.sorted_pairs;
    p.tile_expert = g.tile_expert;
    p.n_out = g.n_out;
    p.k = g.k;
    p.top_k = g.top_k;
    const bool few_rows = plan.pairs <= kW8A8FewRowsPerExpert * plan.num_experts;
    return detail::launch_moe_grouped_gemm_wgmma_fp8(p, gate_up, plan.max_tiles, few_rows, stream);
  };
  // `rows` rows of `src` (row stride ld, k columns) into e4m3 `q` and its group scales.
  auto quantize = [&](const void* src, int64_t ld, int64_t rows, int64_t k, uint8_t* q,
                      float* scales, bool grouped_rows) {
    detail::Fp8QuantizeProblem qp;
    if (grouped_rows) {  // only the rows that hold a pair
      qp.row_pairs = plan.sorted_pairs;
      qp.rows_used = plan.offsets + plan.num_experts;
    }
    qp.x_dtype = DType::kBF16;
    qp.x = src;
    qp.ldx = ld;
    qp.q = q;
    qp.scales = scales;
    qp.m = rows;
    qp.k = k;
    return detail::launch_fp8_quantize_token_groups(qp, stream);
  };
  auto* x_q = reinterpret_cast<uint8_t*>(base + l.x_q);
  auto* x_scales = reinterpret_cast<float*>(base + l.x_scales);
  auto* act_q = reinterpret_cast<uint8_t*>(base + l.act_q);
  auto* act_scales = reinterpret_cast<float*>(base + l.act_scales);
  VLLM_RETURN_IF_ERROR(quantize(pr.x, pr.ldx, pr.tokens, pr.hidden, x_q, x_scales, false));
  VLLM_RETURN_IF_ERROR(projection(/*gate_up=*/true, x_q, x_scales, pr.tokens));
  VLLM_RETURN_IF_ERROR(
      quantize(pr.act, pr.inter, plan.capacity, pr.inter, act_q, act_scales, true));
  return projection(/*gate_up=*/false, act_q, act_scales, plan.capacity);
}

}  // namespace

Status moe_route(const Tensor& router_logits, int64_t top_k, bool renormalize, Tensor& topk_weights,
                 Tensor& topk_ids, cudaStream_t stream, bool shared_slot) {
  constexpr std::string_view kOp = "cuda::moe_route";
  VLLM_RETURN_IF_ERROR(
      detail::check_cuda_tensor(kOp, "router_logits", router_logits, {DType::kF32}));
  if (router_logits.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: router_logits is {}, expected [tokens, "
                      "experts]",
                      kOp, router_logits.to_string());
  }
  VLLM_ASSIGN_OR_RETURN(Rows logits, detail::as_rows(kOp, "router_logits", router_logits));
  const int64_t tokens = router_logits.size(0);
  const int64_t experts = router_logits.size(1) - (shared_slot ? 1 : 0);
  const int64_t out_k = top_k + (shared_slot ? 1 : 0);
  if (experts < 1 || experts > kMoeMaxExperts) {
    return make_error(ErrorCode::kUnsupported, "{}: {} experts; this op supports 1 to {}", kOp,
                      experts, kMoeMaxExperts);
  }
  if (top_k < 1 || top_k > std::min(experts, kMoeMaxTopK)) {
    return make_error(ErrorCode::kInvalidArgument, "{}: top_k is {}, expected 1 <= top_k <= {}",
                      kOp, top_k, std::min(experts, kMoeMaxTopK));
  }
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "topk_weights", topk_weights, router_logits));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "topk_weights", topk_weights, {DType::kF32}));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "topk_ids", topk_ids, router_logits));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "topk_ids", topk_ids, {DType::kI64}));
  for (auto [name, t] : {std::pair<std::string_view, const Tensor*>{"topk_weights", &topk_weights},
                         {"topk_ids", &topk_ids}}) {
    VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, name, *t));
    if (t->shape() != Shape{tokens, out_k}) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected [{}, {}]", kOp, name,
                        t->to_string(), tokens, out_k);
    }
  }
  if (tokens == 0) return Status::ok();
  DeviceGuard guard(router_logits.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  RouteParams p;
  p.logits = static_cast<const float*>(logits.data);
  p.logits_stride = logits.row_stride;
  p.weights = static_cast<float*>(topk_weights.data_ptr());
  p.ids = static_cast<int64_t*>(topk_ids.data_ptr());
  p.tokens = tokens;
  p.experts = static_cast<int>(experts);
  p.top_k = static_cast<int>(top_k);
  p.out_k = static_cast<int>(out_k);
  p.renormalize = renormalize;
  const int64_t blocks = ceil_div(tokens, kRouteWarps);
  if (blocks > INT_MAX) {
    return make_error(ErrorCode::kUnsupported, "{}: {} tokens are too many", kOp, tokens);
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  const unsigned threads = kRouteWarps * kWarpSize;
  if (experts <= 4 * kWarpSize) {
    launch_pdl(moe_route_kernel<4>, grid, threads, 0, stream, p);
  } else if (experts <= 8 * kWarpSize) {
    launch_pdl(moe_route_kernel<8>, grid, threads, 0, stream, p);
  } else if (experts <= 16 * kWarpSize) {
    launch_pdl(moe_route_kernel<16>, grid, threads, 0, stream, p);
  } else {
    launch_pdl(moe_route_kernel<kRouteMaxPerLane>, grid, threads, 0, stream, p);
  }
  return check_launch("moe_route_kernel");
}

Expected<size_t> moe_experts_scratch_bytes(const Tensor& x, const Tensor& topk_ids,
                                           const MoeExpertsArgs& args) {
  constexpr std::string_view kOp = "cuda::moe_experts";
  VLLM_ASSIGN_OR_RETURN(Dims d, check_dims(kOp, x, topk_ids, args));
  VLLM_ASSIGN_OR_RETURN(PathChoice c, choose_path(kOp, d, x.dtype(), args.path));
  return scratch_layout(d.tokens, d.top_k, d.experts, d.hidden, d.inter, x.dtype(), c.tile_rows,
                        c.path == MoePath::kGroupedGemmW8A8)
      .bytes;
}

Status moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                   const MoeExpertsArgs& args, Tensor& scratch, Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::moe_experts";
  VLLM_ASSIGN_OR_RETURN(Dims d, check_dims(kOp, x, topk_ids, args));
  VLLM_ASSIGN_OR_RETURN(Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "topk_weights", topk_weights, x));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "topk_weights", topk_weights, {DType::kF32}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "topk_weights", topk_weights));
  if (topk_weights.shape() != topk_ids.shape()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: topk_weights is {}, expected the shape "
                      "of topk_ids {}",
                      kOp, topk_weights.to_string(), shape_to_string(topk_ids.shape()));
  }
  VLLM_ASSIGN_OR_RETURN(Rows out_rows, check_rows_like_x(kOp, "out", out, x, d));
  if (out.data_ptr() == x.data_ptr() && d.tokens > 0) {
    return make_error(ErrorCode::kInvalidArgument, "{}: out must not alias x", kOp);
  }
  Rows shared_rows, gate_rows;
  const bool shared = args.shared_out.defined();
  if (shared) {
    VLLM_ASSIGN_OR_RETURN(shared_rows, check_rows_like_x(kOp, "shared_out", args.shared_out, x, d));
    VLLM_ASSIGN_OR_RETURN(gate_rows, check_gate(kOp, args.shared_gate, x, d.tokens));
  }
  VLLM_ASSIGN_OR_RETURN(PathChoice choice, choose_path(kOp, d, x.dtype(), args.path));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "scratch", scratch, x));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "scratch", scratch));
  if (d.tokens == 0) return Status::ok();

  MoeProblem problem;
  problem.dtype = x.dtype();
  problem.x = x_rows.data;
  problem.ldx = x_rows.row_stride;
  problem.gate_up = args.gate_up.data_ptr();
  problem.down = args.down.data_ptr();
  if (d.fp8) {
    problem.fp8 = true;
    problem.gate_up_scales = fp8_scales_of(args.gate_up_scale_inv, args.gate_up_block);
    problem.down_scales = fp8_scales_of(args.down_scale_inv, args.down_block);
  }
  problem.tokens = d.tokens;
  problem.hidden = d.hidden;
  problem.inter = d.inter;
  if (choice.path == MoePath::kGroupedGemm && !detail::grouped_gemm_supported(problem)) {
    if (args.path == MoePath::kGroupedGemm) {
      return make_error(ErrorCode::kUnsupported,
                        "{}: the grouped GEMM needs x and the weights on 16-byte aligned rows",
                        kOp);
    }
    choice = PathChoice{};  // the GEMV takes anything, with less scratch
  }
  const bool w8a8 = choice.path == MoePath::kGroupedGemmW8A8;
  const ScratchLayout layout = scratch_layout(d.tokens, d.top_k, d.experts, d.hidden, d.inter,
                                              x.dtype(), choice.tile_rows, w8a8);
  if (scratch.nbytes() < layout.bytes || !detail::is_aligned(scratch.data_ptr(), kScratchAlign)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: scratch {} is smaller than the {} bytes this call needs, or not "
                      "{}-byte aligned",
                      kOp, scratch.to_string(), layout.bytes, kScratchAlign);
  }
  auto* base = static_cast<char*>(scratch.data_ptr());
  MoePlan plan;
  plan.offsets = reinterpret_cast<int32_t*>(base + layout.offsets);
  plan.sorted_pairs = reinterpret_cast<int32_t*>(base + layout.sorted_pairs);
  plan.pair_row = reinterpret_cast<int32_t*>(base + layout.pair_row);
  plan.active = reinterpret_cast<int32_t*>(base + layout.active);
  plan.num_active = reinterpret_cast<int32_t*>(base + layout.num_active);
  plan.tile_expert = reinterpret_cast<int32_t*>(base + layout.tile_expert);
  plan.block_counts = reinterpret_cast<int32_t*>(base + layout.block_counts);
  plan.plan_blocks = layout.plan_blocks;
  plan.pairs = d.tokens * d.top_k;
  plan.capacity = layout.capacity;
  plan.max_tiles = layout.max_tiles;
  plan.max_active = layout.max_active;
  plan.row_align = layout.row_align;
  plan.num_experts = static_cast<int>(d.experts);
  plan.top_k = static_cast<int>(d.top_k);
  problem.act = base + layout.act;
  problem.y = base + layout.y;

  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  if (choice.path == MoePath::kPairGemv) {
    detail::MoePairArgs pa;
    pa.ids = static_cast<const int64_t*>(topk_ids.data_ptr());
    pa.weights = static_cast<const float*>(topk_weights.data_ptr());
    if (shared) {
      pa.shared = shared_rows.data;
      pa.shared_stride = shared_rows.row_stride;
      pa.gate = gate_rows.data;
      pa.gate_stride = gate_rows.row_stride;
      pa.gate_f32 = args.shared_gate.dtype() == DType::kF32;
    }
    pa.out = out_rows.data;
    pa.out_stride = out_rows.row_stride;
    pa.experts = static_cast<int>(d.experts);
    pa.top_k = static_cast<int>(d.top_k);
    pa.last_slot_ahead = args.shared_last_slot && d.tokens <= kMoeSharedAheadMaxTokens;
    return detail::launch_moe_pair_gemv(problem, pa, stream);
  }
  const auto* ids = static_cast<const int64_t*>(topk_ids.data_ptr());
  if (plan.plan_blocks == 0) {
    launch_pdl(moe_plan_kernel, 1, kPlanThreads, 0, stream, ids, plan);
    VLLM_RETURN_IF_ERROR(check_launch("moe_plan_kernel"));
  } else {
    const auto blocks = static_cast<unsigned>(plan.plan_blocks);
    launch_pdl(moe_plan_count_kernel, blocks, kPlanThreads, 0, stream, ids, plan);
    VLLM_RETURN_IF_ERROR(check_launch("moe_plan_count_kernel"));
    launch_pdl(moe_plan_offsets_kernel, 1, kPlanThreads, 0, stream, plan);
    VLLM_RETURN_IF_ERROR(check_launch("moe_plan_offsets_kernel"));
    launch_pdl(moe_plan_scatter_kernel, blocks, kPlanThreads, 0, stream, ids, plan);
    VLLM_RETURN_IF_ERROR(check_launch("moe_plan_scatter_kernel"));
  }
  if (w8a8) {
    VLLM_RETURN_IF_ERROR(launch_w8a8(problem, plan, base, layout, stream));
  } else if (choice.path == MoePath::kGroupedGemm) {
    VLLM_RETURN_IF_ERROR(detail::launch_moe_grouped_gemm(problem, plan, choice.tile_rows, stream));
  } else {
    VLLM_RETURN_IF_ERROR(detail::launch_moe_gemv(problem, plan, stream));
  }

  auto combine = [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    CombineParams<T> p{};
    p.y = static_cast<const T*>(problem.y);
    p.pair_row = plan.pair_row;
    p.weights = static_cast<const float*>(topk_weights.data_ptr());
    p.shared = shared ? static_cast<const T*>(shared_rows.data) : nullptr;
    p.shared_stride = shared_rows.row_stride;
    p.gate = shared ? gate_rows.data : nullptr;
    p.gate_stride = gate_rows.row_stride;
    p.gate_f32 = shared && args.shared_gate.dtype() == DType::kF32;
    p.out = static_cast<T*>(out_rows.data);
    p.out_stride = out_rows.row_stride;
    p.tokens = d.tokens;
    p.hidden = d.hidden;
    p.top_k = static_cast<int>(d.top_k);
    const bool vec = d.hidden % kVec == 0 && detail::rows_aligned(out_rows, sizeof(T), 16) &&
                     (!shared || detail::rows_aligned(shared_rows, sizeof(T), 16));
    return launch_combine<T>(p, vec, stream);
  };
  if (x.dtype() == DType::kF32) return combine(float{});
  return combine(__nv_bfloat16{});
}

}  // namespace vllm::cuda

// The merge step of flash-decoding: the chunks of a split small block (attention_tiled.cuh
// wrote their unnormalised outputs, row maxima and row sums into the workspace, laid out as
// attention_plan.h says) combined into the final rows. One block per (kv head, request).
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_tiled.cuh"

namespace vllm::cuda::detail {

// Dynamic shared memory of the combine kernel: the merge weights of every row and chunk.
constexpr int kCombineSmemBytes = kSmallRows * kMaxSplits * 4;
// Threads of a combine block: a decode GQA group of 8 rows at D = 256 is 512 output quads,
// two per thread.
constexpr int kCombineThreads = 256;
// Chunks whose partial outputs a thread loads before it adds any (loads in flight).
constexpr int kCombineBatch = 8;

// Merges the chunks of every split small block: out = sum_s 2^(m_s - M) o_s /
// sum_s 2^(m_s - M) l_s with M the largest m_s. One block per (kv head, request); requests
// that used a single chunk were finished by the small kernel.
template <typename T, int D>
__global__ void __launch_bounds__(kCombineThreads) combine_splits_kernel(const AttentionArgs a) {
  pdl_wait();
  pdl_launch_next();
  extern __shared__ __align__(16) unsigned char smem[];
  auto* weight_s = reinterpret_cast<float(*)[kMaxSplits]>(smem);  // [kSmallRows][kMaxSplits]
  const int kh = blockIdx.x;
  const int r = blockIdx.y;
  const RequestView req = load_request(a, r);
  if (!req.valid) return;
  const int rows = req.q_len * a.group;
  if (rows == 0 || rows > kSmallRows) return;
  // The small kernel's chunks (its key tile at this head dim: attention_tiled.cuh).
  const int chunks = chunks_of<AttnTile<T, D, true>::kKeys>(req.seq_len, a.num_splits);
  if (chunks <= 1) return;
  const int64_t first_slot = (static_cast<int64_t>(r) * gridDim.x + kh) * a.num_splits * kSmallRows;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  constexpr int kWarps = kCombineThreads / kWarpSize;
  for (int row = warp; row < rows; row += kWarps) {
    float m_max = -INFINITY;
    for (int s = lane; s < chunks; s += kWarpSize) {
      m_max = fmaxf(m_max, a.partial_ml[(first_slot + s * kSmallRows + row) * 2]);
    }
    m_max = warp_max(m_max);
    const float m_use = m_max == -INFINITY ? 0.0f : m_max;
    float l_sum = 0.0f;
    for (int s = lane; s < chunks; s += kWarpSize) {
      const float* ml = a.partial_ml + (first_slot + s * kSmallRows + row) * 2;
      l_sum += exp2f(ml[0] - m_use) * ml[1];
    }
    l_sum = warp_sum(l_sum);
    const float inv_l = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
    for (int s = lane; s < chunks; s += kWarpSize) {
      const float m = a.partial_ml[(first_slot + s * kSmallRows + row) * 2];
      weight_s[row][s] = exp2f(m - m_use) * inv_l;
    }
  }
  __syncthreads();
  constexpr int kQuads = D / 4;
  for (int i = threadIdx.x; i < rows * kQuads; i += kCombineThreads) {
    const int row = i / kQuads;
    const int c = i % kQuads;
    const float* src = a.partial_o + (first_slot + row) * D + c * 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = 0; s0 < chunks; s0 += kCombineBatch) {
      float4 v[kCombineBatch];
#pragma unroll
      for (int b = 0; b < kCombineBatch; ++b) {
        v[b] = s0 + b < chunks ? *reinterpret_cast<const float4*>(
                                     src + static_cast<int64_t>(s0 + b) * kSmallRows * D)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int b = 0; b < kCombineBatch; ++b) {
        if (s0 + b >= chunks) break;
        const float w = weight_s[row][s0 + b];
        acc[0] = fmaf(w, v[b].x, acc[0]);
        acc[1] = fmaf(w, v[b].y, acc[1]);
        acc[2] = fmaf(w, v[b].z, acc[2]);
        acc[3] = fmaf(w, v[b].w, acc[3]);
      }
    }
    const int64_t t = req.q_begin + row / a.group;
    const int h = kh * a.group + row % a.group;
    T* dst = static_cast<T*>(a.out) + row_offset<D>(a.out_stride, t, h) + c * 4;
    store_vec<T, 4>(dst, acc);
  }
}

// Host side: the launcher and the CPU emulation test share it.
inline dim3 combine_grid(const AttentionArgs& a, int num_requests) {
  return dim3(static_cast<unsigned>(a.num_kv_heads), static_cast<unsigned>(num_requests));
}

}  // namespace vllm::cuda::detail

// The merge step of flash-decoding: the chunks of a split small block (attention_tiled.cuh or,
// for BF16, attention_decode_mma.cuh wrote their unnormalised outputs, row maxima and row sums
// into the workspace, laid out as attention_plan.h says) combined into the final rows. One
// block per (kv head, request, row).
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_tiled.cuh"

namespace vllm::cuda::detail {

// Threads of a combine block. A block merges one row (a query head of one token): its D / 4
// output quads times kCombineThreads / (D / 4) chunk groups, each thread loading every chunk
// of its group at once, so the row's merge is one round trip to memory and one reduction
// across the groups in shared memory.
constexpr int kCombineThreads = 256;
// Dynamic shared memory of the combine kernel: every thread's four partial sums.
constexpr int kCombineSmemBytes = kCombineThreads * 16;

// Merges the chunks of every split small block: out = sum_s 2^(m_s - M) o_s /
// sum_s 2^(m_s - M) l_s with M the largest m_s. One block per (kv head, request, row of the
// small block); requests that used a single chunk were finished by the small kernel, rows past
// the request's exit at once.
template <typename T, int D>
__global__ void __launch_bounds__(kCombineThreads) combine_splits_kernel(const AttentionArgs a) {
  constexpr int kQuads = D / 4;
  static_assert(kCombineThreads % kQuads == 0, "a block's threads cover whole quads");
  constexpr int kGroups = kCombineThreads / kQuads;  // chunk groups: s = g, g + kGroups, ...
  constexpr int kPerThread = (kMaxSplits + kGroups - 1) / kGroups;
  static_assert(kMaxSplits <= 2 * kWarpSize, "a lane holds two chunks' (m, l)");
  pdl_wait();
  pdl_launch_next();
  extern __shared__ __align__(16) unsigned char smem[];
  auto* sum_s = reinterpret_cast<float4*>(smem);  // [kGroups][kQuads]
  const int kh = blockIdx.x;
  const int r = blockIdx.y;
  const int row = blockIdx.z;
  const RequestView req = load_request(a, r);
  if (!req.valid) return;
  const int rows = req.q_len * a.group;
  if (rows == 0 || rows > kSmallRows || row >= rows) return;
  // The small kernel's chunks (the CUDA-core one's key tile at this head dim, which the
  // tensor-core one keeps: attention_tiled.cuh, attention_decode_mma.cuh).
  const int chunks = chunks_of<AttnTile<T, D, true>::kKeys>(req.seq_len, a.num_splits);
  if (chunks <= 1) return;
  const int64_t first_slot =
      (static_cast<int64_t>(r) * gridDim.x + kh) * a.num_splits * kSmallRows + row;
  const int quad = threadIdx.x % kQuads;
  const int group = threadIdx.x / kQuads;
  const int lane = threadIdx.x % kWarpSize;
  // This thread's chunks' partial outputs, all in flight beside the row's (m, l) pairs.
  const float* src = a.partial_o + first_slot * D + quad * 4;
  float4 v[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int s = group + i * kGroups;
    v[i] = s < chunks
               ? *reinterpret_cast<const float4*>(src + static_cast<int64_t>(s) * kSmallRows * D)
               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  // Every warp finds the row's M and sum_s 2^(m_s - M) l_s itself (no barrier): lane l holds
  // chunks l and l + 32.
  float m[2], l[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int s = lane + j * kWarpSize;
    m[j] = -INFINITY;
    l[j] = 0.0f;
    if (s < chunks) {
      const float* ml = a.partial_ml + (first_slot + static_cast<int64_t>(s) * kSmallRows) * 2;
      m[j] = ml[0];
      l[j] = ml[1];
    }
  }
  const float m_max = warp_max(fmaxf(m[0], m[1]));
  const float m_use = m_max == -INFINITY ? 0.0f : m_max;
  float l_sum = 0.0f;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (lane + j * kWarpSize < chunks) l_sum += exp2f(m[j] - m_use) * l[j];
  }
  l_sum = warp_sum(l_sum);
  const float inv_l = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int s = group + i * kGroups;
    if (s >= chunks) break;
    const float w =
        exp2f(a.partial_ml[(first_slot + static_cast<int64_t>(s) * kSmallRows) * 2] - m_use) *
        inv_l;
    acc[0] = fmaf(w, v[i].x, acc[0]);
    acc[1] = fmaf(w, v[i].y, acc[1]);
    acc[2] = fmaf(w, v[i].z, acc[2]);
    acc[3] = fmaf(w, v[i].w, acc[3]);
  }
  sum_s[group * kQuads + quad] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  if (group != 0) return;
  for (int g = 1; g < kGroups; ++g) {
    const float4 o = sum_s[g * kQuads + quad];
    acc[0] += o.x;
    acc[1] += o.y;
    acc[2] += o.z;
    acc[3] += o.w;
  }
  const int64_t t = req.q_begin + row / a.group;
  const int h = kh * a.group + row % a.group;
  T* dst = static_cast<T*>(a.out) + row_offset<D>(a.out_stride, t, h) + quad * 4;
  store_vec<T, 4>(dst, acc);
}

// Host side: the launcher and the CPU emulation test share it.
inline dim3 combine_grid(const AttentionArgs& a, int num_requests) {
  return dim3(static_cast<unsigned>(a.num_kv_heads), static_cast<unsigned>(num_requests),
              static_cast<unsigned>(kSmallRows));
}

}  // namespace vllm::cuda::detail

// Device pieces every paged-attention kernel shares (attention_tiled.cuh,
// attention_mma.cuh, attention_combine.cuh): the block shape constants, a request's bounds as
// the kernels trust them, row addressing, small-group reductions, and the cp.async loader of
// one K/V tile through the block table.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/common.cuh"

namespace vllm::cuda::detail {

constexpr int kAttnThreads = 128;  // 4 warps: enough to share a tile's loads, few barriers' cost
constexpr int kAttnStages = 2;     // double buffering hides one tile's load behind the last

template <int A, int B>
constexpr int const_min() {
  return A < B ? A : B;
}

// One request's bounds as the kernels see them. `valid`: within the host-given bounds (the
// grid covers it and its block table holds its context); `in_range`: its query rows lie in
// [0, T), so they may be written (NaN) even when it is not valid.
struct RequestView {
  int32_t q_begin = 0;
  int32_t q_len = 0;
  int32_t seq_len = 0;
  bool valid = false;
  bool in_range = false;
};

__device__ __forceinline__ RequestView load_request(const AttentionArgs& a, int r) {
  RequestView v;
  const int64_t begin = a.query_start_loc[r];
  const int64_t end = a.query_start_loc[r + 1];
  const int64_t seq_len = a.seq_lens[r];
  v.in_range = begin >= 0 && end >= begin && end <= a.num_tokens;
  v.valid = v.in_range && end - begin <= a.max_query_len && seq_len >= end - begin &&
            seq_len <= a.max_seq_len;
  if (v.in_range) {
    v.q_begin = static_cast<int32_t>(begin);
    v.q_len = static_cast<int32_t>(end - begin);
    v.seq_len = static_cast<int32_t>(seq_len > 0 ? seq_len : 0);
  }
  return v;
}

// The work of a prefill CTA of the tensor-core kernels (attention_mma.cuh,
// sm90a/attention_wgmma.cu): request blockIdx.z, query rows [row0, row0 + rows_valid) of
// `rows` a CTA, counted from the request's last tile (blockIdx.x 0 takes the one that sees the
// most keys, so the longest CTAs start in the first wave), and keys [0, k_end), those its last
// row sees. False when the CTA has nothing to do: an invalid request (the small kernel writes
// its NaN rows), the small kernel's request, or rows past the request's end.
struct PrefillCta {
  RequestView req;
  int row0 = 0, rows_valid = 0;
  int pos0 = 0;  // position of the request's first query
  int k_end = 0;
  const int32_t* table = nullptr;  // the request's block table
};

__device__ __forceinline__ bool prefill_cta(const AttentionArgs& a, int rows, PrefillCta& c) {
  const int r = blockIdx.z;
  c.req = load_request(a, r);
  if (!c.req.valid) return false;
  const int rows_total = c.req.q_len * a.group;
  if (rows_total <= kSmallRows) return false;  // the small kernel's request (or no rows)
  c.row0 = static_cast<int>(gridDim.x - 1 - blockIdx.x) * rows;
  if (c.row0 >= rows_total) return false;
  c.rows_valid = min(rows, rows_total - c.row0);
  c.pos0 = c.req.seq_len - c.req.q_len;
  c.k_end = c.pos0 + (c.row0 + c.rows_valid - 1) / a.group + 1;
  c.table = a.block_tables + static_cast<int64_t>(r) * a.max_blocks_per_seq;
  return true;
}

// Keys per chunk of a small request with seq_len keys when the grid gives every request
// num_splits chunks: the request's keys spread over all of them, each chunk a multiple of
// kAlign keys (the small kernel's key tile for this head dim, so a chunk is whole tiles) and
// at least kMinKeysPerSplit. Decided per request on the device, so the grid (sized by an
// upper bound of the sequence lengths) stays fixed while lengths change, as a CUDA graph
// replay needs; a short request in a batch with long ones takes only the chunks its own
// length fills. The small kernel and the combine of one head dim use the same kAlign.
template <int kAlign>
__device__ __forceinline__ int32_t request_chunk(int32_t seq_len, int32_t num_splits) {
  static_assert(kSplitChunkAlign % kAlign == 0, "the host plan's chunks must stay whole tiles");
  const int32_t seq = seq_len > 0 ? seq_len : 1;
  if (num_splits <= 1 || seq < 2 * kMinKeysPerSplit) return seq;
  int32_t chunk = (seq + num_splits - 1) / num_splits;
  chunk = (chunk + kAlign - 1) / kAlign * kAlign;
  if (chunk < kMinKeysPerSplit) chunk = kMinKeysPerSplit;
  return chunk < seq ? chunk : seq;
}

// Chunks a (small) request of seq_len keys uses (request_chunk<kAlign> keys each).
template <int kAlign>
__device__ __forceinline__ int chunks_of(int32_t seq_len, int32_t num_splits) {
  const int32_t chunk = request_chunk<kAlign>(seq_len, num_splits);
  return static_cast<int>((static_cast<int64_t>(seq_len) + chunk - 1) / chunk);
}

// Offset of (token row t, query head h) in a [T, Hq * D] tensor with the given row stride.
template <int D>
__device__ __forceinline__ int64_t row_offset(int64_t stride, int64_t t, int h) {
  return t * stride + static_cast<int64_t>(h) * D;
}

// Max / sum over the kGroup consecutive lanes that share a value's row (kGroup a power of
// two dividing 32). Every lane of the warp must call it.
template <int kGroup>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}
template <int kGroup>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

template <typename T, int kVec>
__device__ __forceinline__ void store_vec(T* dst, const float* v) {
  Pack<T, kVec> p;
#pragma unroll
  for (int e = 0; e < kVec; ++e) p.v[e] = from_float<T>(v[e]);
  *reinterpret_cast<Pack<T, kVec>*>(dst) = p;
}

// Writes NaN into every output row of a request that breaks the host-given bounds (kv head
// kh's query heads), so the caller's mistake shows instead of reading out of bounds.
template <typename T, int D>
__device__ void fill_nan_rows(const AttentionArgs& a, const RequestView& req, int kh) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  float nan_vec[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) nan_vec[e] = __int_as_float(0x7fc00000);
  T* out = static_cast<T*>(a.out);
  const int64_t vecs = static_cast<int64_t>(req.q_len) * a.group * (D / kVec);
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    const int64_t row = i / (D / kVec);
    const int c = static_cast<int>(i % (D / kVec));
    const int64_t t = req.q_begin + row / a.group;
    const int h = kh * a.group + static_cast<int>(row % a.group);
    store_vec<T, kVec>(out + row_offset<D>(a.out_stride, t, h) + c * kVec, nan_vec);
  }
}

// Issues the cp.async copies of keys [k0, k0 + kKeys) of kv head kh into one stage (K tile,
// then V tile). Keys at or past k_end are zero-filled without reading. A block id outside
// [0, num_blocks) is not read either; it sets `bad`, which turns the block's output to NaN.
// Tile: kKeys keys per tile, rows of kKvStride elements, the V tile kKvTileElems after K.
template <typename T, int D, typename Tile>
__device__ __forceinline__ void load_kv_tile(const AttentionArgs& a, const int32_t* table, int kh,
                                             int k0, int k_end, T* k_dst, bool& bad) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunks = D / kVec;  // 16-byte chunks per key row
  const T* cache = static_cast<const T*>(a.kv_cache);
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * D;
  const int block_size = 1 << a.block_size_log2;
  T* v_dst = k_dst + Tile::kKvTileElems;
  static_assert(Tile::kKeys * kChunks % kAttnThreads == 0);
#pragma unroll
  for (int iter = 0; iter < Tile::kKeys * kChunks / kAttnThreads; ++iter) {
    const int c = static_cast<int>(threadIdx.x) + iter * kAttnThreads;
    const int key = c / kChunks;
    const int col = c % kChunks;
    const int j = k0 + key;
    const T* k_src = cache;
    int bytes = 0;
    if (j < k_end) {
      const int32_t block = table[j >> a.block_size_log2];
      if (block >= 0 && block < a.num_blocks) {
        const int64_t slot = static_cast<int64_t>(block) * 2 * block_size + (j & (block_size - 1));
        k_src = cache + slot * row_elems + static_cast<int64_t>(kh) * D + col * kVec;
        bytes = 16;
      } else {
        bad = true;
      }
    }
    const T* v_src = bytes != 0 ? k_src + block_size * row_elems : cache;
    const int dst = key * Tile::kKvStride + col * kVec;
    cp_async_16(k_dst + dst, k_src, bytes);
    cp_async_16(v_dst + dst, v_src, bytes);
  }
}

}  // namespace vllm::cuda::detail

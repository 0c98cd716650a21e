// Paged attention kernels on CUDA cores (f32 arithmetic), for F32 and BF16 storage and a
// cache of the same dtype or FP8 (C = KvFp8: its e4m3 bytes are copied into the shared tiles
// as they are and read as floats there; kv_fp8.cuh says where the scales go):
// flash-attention tiling with an online softmax over the paged KV cache (BF16 runs on tensor
// cores by default, with the same split and masking: decode in attention_decode_mma.cuh,
// prefill in attention_mma.cuh). Included only by
// attention_tiled_launch.cuh (for the per-dtype instantiation files) and by the CPU
// emulation test (tests/cuda_emulation), which runs this source on the host.
//
// Work split. A block owns one request, one kv head and a tile of that request's query
// rows, where a row is a (token, query head of the kv head's GQA group) pair: all query
// heads sharing the kv head read every K/V tile the block loads, so each key is fetched
// once per block whatever the group size (1..16+). Rows are numbered token-major
// (row = token * G + g), so a tile may hold several tokens; each row has its own causal
// limit (its token's position).
//   * small blocks (kSmall, 16 rows): requests with q_len * G <= 16, i.e. decode. Their
//     keys may be split into chunks, one block each (flash-decoding, see attention_plan.h),
//     so batch 1 at 16k context still fills the GPU.
//   * large blocks (64 rows, 32 for D = 256): every other request (prefill, chunked
//     prefill). Tiles are scheduled last-first so the causally longest finish early.
//
// Pipeline of one block (128 threads = 4 warps, all doing the same work):
//   Q tile -> shared memory as f32, pre-scaled by scale * log2(e) (scores in log2 units).
//   K/V tiles of kKeys keys stream through two shared-memory stages by cp.async: the copy of
//   tile t + 1 is issued right after the barrier that opens tile t, so it overlaps tile t's
//   arithmetic. Per tile:
//     barrier A  tile t landed; every thread left tile t - 1 (its stage, p_s, alpha_s free)
//     S = Q K^T     each thread a kRowsPerThread x kKeysPerThread block of scores, reading
//                   K rows straight from shared memory (16-byte loads, rows padded so the
//                   lanes' rows fall in different banks)
//     softmax       causal mask, running row max / row sum in registers, reduced across the
//                   kKeyGroups lanes sharing a row by shuffles; p and the rescale factor
//                   alpha go to shared memory
//     barrier B  p_s, alpha_s visible
//     O = alpha O + P V   each thread kPvRowsPerThread rows x 8 head-dim columns
//   Keys past the block's range (or past the chunk) are zero-filled by cp.async, never read:
//   a masked probability is 0, and 0 * a zero-filled V stays 0.
// Fully masked key tiles are never visited: a block's key range ends at its last row's
// position. Rows with no visible key (impossible causally) produce 0, not NaN.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kv_fp8.cuh"

namespace vllm::cuda::detail {

// Tile shapes. sizeof(T) bytes per query / output element, sizeof(C) per cache element; the
// f32 arithmetic is the same for all. The key tile (kKeys) depends on T only, so an FP8 cache
// splits and combines its keys as the T cache does and only its shared tiles are smaller.
template <typename T, int D, bool kSmall, typename C = T>
struct AttnTile {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte access
  // Query rows per block. Small: one token's whole GQA group (G <= 16). Large: 64 rows give
  // each key 64 uses per load; D = 256 halves it to keep the f32 Q tile and the O registers
  // (64 per thread) the same size as for D = 128.
  static constexpr int kRows = kSmall ? kSmallRows : (D == 256 ? 32 : 64);
  // Keys per tile: one K + V stage is at most 16 KB per K (so two stages of K and V stay
  // within 64 KB and two blocks fit an SM); small blocks take up to 64 keys (fewer barriers
  // per byte streamed, decode is bandwidth-bound), large ones 32 (their Q tile is larger).
  static constexpr int kKeys = const_min < kSmall ? 64 : 32,
                       16384 / (D * static_cast<int>(sizeof(T))) > ();
  // S phase: thread t holds rows ty + kRowGroups * i and keys tx + kKeyGroups * j, where
  // tx = t % kKeyGroups (lanes sharing a row are consecutive: shuffles reduce over them).
  static constexpr int kKeyGroups = const_min < kSmall ? 32 : 16, kKeys > ();
  static constexpr int kRowGroups = kAttnThreads / kKeyGroups;
  static constexpr int kRowsPerThread = kRows / kRowGroups;
  static constexpr int kKeysPerThread = kKeys / kKeyGroups;
  // PV phase: thread t holds rows py + kPvRowGroups * i and 8 head-dim columns, as
  // kPvVec / kVec 16-byte chunks c at columns (px + kDimGroups * c) * kVec (consecutive
  // lanes read consecutive 16 bytes of a V row).
  static constexpr int kPvVec = 8;
  static constexpr int kPvChunks = kPvVec / kVec;
  static constexpr int kDimGroups = D / kPvVec;
  static constexpr int kPvRowGroups = kAttnThreads / kDimGroups;
  static constexpr int kPvRowsPerThread = kRows / kPvRowGroups;

  // Shared memory. Row paddings of 16 bytes put consecutive rows in different banks for
  // the S phase's per-lane rows.
  static constexpr int kQStride = D + 4;                                  // floats
  static constexpr int kKvStride = D + 16 / static_cast<int>(sizeof(C));  // elements of C
  static constexpr int kPStride = kRows + 1;  // floats; p_s is [key][row]
  static constexpr int kQBytes = kRows * kQStride * 4;
  static constexpr int kKvTileElems = kKeys * kKvStride;  // one K (or V) tile
  static constexpr int kKvBytes = kAttnStages * 2 * kKvTileElems * static_cast<int>(sizeof(C));
  static constexpr int kPBytes = kKeys * kPStride * 4;
  static constexpr int kSmemBytes = kQBytes + kKvBytes + kPBytes + 3 * kRows * 4;

  static_assert(kRowGroups * kKeyGroups == kAttnThreads && kRows % kRowGroups == 0);
  static_assert(kKeys % kKeyGroups == 0 && kKeyGroups <= 32 && 32 % kKeyGroups == 0);
  static_assert(kDimGroups * kPvRowGroups == kAttnThreads && kRows % kPvRowGroups == 0);
  static_assert(kPvVec % kVec == 0 && kSplitChunkAlign % kKeys == 0);
  static_assert(kQBytes % 16 == 0 && kKvBytes % 16 == 0 && kSmemBytes <= 227 * 1024);
};

template <typename T, int D, bool kSmall, typename C = T>
__global__ void __launch_bounds__(kAttnThreads) tiled_attention_kernel(const AttentionArgs a) {
  pdl_wait();
  pdl_launch_next();
  using Tile = AttnTile<T, D, kSmall, C>;
  constexpr int kVec = Tile::kVec;
  constexpr int kRows = Tile::kRows;
  constexpr int kKeys = Tile::kKeys;
  constexpr int TM = Tile::kRowsPerThread;
  constexpr int TN = Tile::kKeysPerThread;
  constexpr int RG = Tile::kRowGroups;
  constexpr int KG = Tile::kKeyGroups;
  constexpr int PM = Tile::kPvRowsPerThread;
  constexpr int PRG = Tile::kPvRowGroups;
  constexpr int DG = Tile::kDimGroups;

  extern __shared__ __align__(16) unsigned char smem[];
  float* q_s = reinterpret_cast<float*>(smem);           // [kRows][kQStride]
  C* kv_s = reinterpret_cast<C*>(smem + Tile::kQBytes);  // [stage][K|V][key][kKvStride]
  float* p_s = reinterpret_cast<float*>(smem + Tile::kQBytes + Tile::kKvBytes);  // [key][kPStride]
  float* alpha_s = p_s + kKeys * Tile::kPStride;                                 // [kRows]
  float* m_s = alpha_s + kRows;                                                  // [kRows]
  float* l_s = m_s + kRows;                                                      // [kRows]

  const int tid = threadIdx.x;
  const int r = blockIdx.z;
  const int kh = blockIdx.y;
  const RequestView req = load_request(a, r);
  if (!req.valid) {
    if (kSmall && blockIdx.x == 0 && req.in_range) fill_nan_rows<T, D>(a, req, kh);
    return;
  }
  const int G = a.group;
  const int rows_total = req.q_len * G;
  if (rows_total == 0 || (rows_total <= kSmallRows) != kSmall) return;
  const int tile = kSmall ? 0 : static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int row0 = tile * kRows;
  if (row0 >= rows_total) return;
  const int rows_valid = min(kRows, rows_total - row0);
  const int pos0 = req.seq_len - req.q_len;  // position of the request's first query
  const int kv_end = pos0 + (row0 + rows_valid - 1) / G + 1;  // keys the last row sees
  int k_begin = 0;
  int k_end = kv_end;
  bool partial = false;  // write unnormalised partial results for the combine kernel
  int split = 0;
  if (kSmall) {
    split = blockIdx.x;
    const int32_t chunk = request_chunk<kKeys>(req.seq_len, a.num_splits);
    k_begin = split * chunk;
    if (k_begin >= kv_end) return;  // this request needs fewer chunks
    if (kv_end - k_begin > chunk) k_end = k_begin + chunk;
    partial = chunks_of<kKeys>(req.seq_len, a.num_splits) > 1;
  }
  const int num_tiles = (k_end - k_begin + kKeys - 1) / kKeys;
  const int32_t* table = a.block_tables + static_cast<int64_t>(r) * a.max_blocks_per_seq;

  // Start the first K/V tile's copy, then fill the Q tile while it is in flight.
  bool bad = false;
  load_kv_tile<C, D, Tile>(a, table, kh, k_begin, k_end, kv_s, bad);
  cp_async_commit();
  {
    const T* query = static_cast<const T*>(a.query);
    constexpr int kQVecs = kRows * D / kVec;
    static_assert(kQVecs % kAttnThreads == 0);
#pragma unroll
    for (int iter = 0; iter < kQVecs / kAttnThreads; ++iter) {
      const int i = tid + iter * kAttnThreads;
      const int row = i / (D / kVec);
      const int c = i % (D / kVec);
      float v[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[e] = 0.0f;
      if (row < rows_valid) {
        const int flat = row0 + row;
        const int64_t t = req.q_begin + flat / G;
        const int h = kh * G + flat % G;
        load16_as_float(query + row_offset<D>(a.query_stride, t, h) + c * kVec, v);
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[e] *= a.scale_log2;
      }
      float* dst = q_s + row * Tile::kQStride + c * kVec;
#pragma unroll
      for (int e = 0; e < kVec; e += 4) {
        *reinterpret_cast<float4*>(dst + e) = make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]);
      }
    }
  }

  // S-phase coordinates and per-row softmax state (held redundantly by the KG lanes of a row).
  const int ty = tid / KG;
  const int tx = tid % KG;
  int row_pos[TM];  // causal limit of each row: last visible key; -1 for rows past the tile
  float m_run[TM];  // running max, log2 units
  float l_run[TM];  // running sum of 2^(s - m_run)
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = ty + RG * i;
    row_pos[i] = row < rows_valid ? pos0 + (row0 + row) / G : -1;
    m_run[i] = -INFINITY;
    l_run[i] = 0.0f;
  }
  // PV-phase coordinates and the output accumulator.
  const int py = tid / DG;
  const int px = tid % DG;
  float o[PM][Tile::kPvVec];
#pragma unroll
  for (int i = 0; i < PM; ++i) {
#pragma unroll
    for (int e = 0; e < Tile::kPvVec; ++e) o[i][e] = 0.0f;
  }

  for (int it = 0; it < num_tiles; ++it) {
    const int k0 = k_begin + it * kKeys;
    const C* k_tile = kv_s + (it % kAttnStages) * 2 * Tile::kKvTileElems;
    const C* v_tile = k_tile + Tile::kKvTileElems;
    cp_async_wait_all();
    __syncthreads();  // A: tile it (and at it == 0 the Q tile) visible; tile it - 1 done
    if (it + 1 < num_tiles) {
      load_kv_tile<C, D, Tile>(a, table, kh, k0 + kKeys, k_end,
                               kv_s + ((it + 1) % kAttnStages) * 2 * Tile::kKvTileElems, bad);
      cp_async_commit();
    }

    // S = (Q * scale * log2 e) K^T for this thread's rows and keys.
    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = 0.0f;
    }
#pragma unroll 2
    for (int d = 0; d < D; d += kVec) {
      float kf[TN][kVec];
#pragma unroll
      for (int j = 0; j < TN; ++j)
        load_kv_as_float<kVec>(k_tile + (tx + KG * j) * Tile::kKvStride + d, kf[j]);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        if (ty + RG * i < rows_valid) {
          const float* q_row = q_s + (ty + RG * i) * Tile::kQStride + d;
          float qf[kVec];
#pragma unroll
          for (int e = 0; e < kVec; e += 4) {
            const float4 q4 = *reinterpret_cast<const float4*>(q_row + e);
            qf[e] = q4.x;
            qf[e + 1] = q4.y;
            qf[e + 2] = q4.z;
            qf[e + 3] = q4.w;
          }
#pragma unroll
          for (int j = 0; j < TN; ++j) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) s[i][j] = fmaf(qf[e], kf[j][e], s[i][j]);
          }
        }
      }
    }

    // Online softmax. Every lane runs it for all its rows (the shuffles need the whole warp).
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int row = ty + RG * i;
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int key = k0 + tx + KG * j;
        s[i][j] = key <= row_pos[i] && key < k_end ? s[i][j] : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      tile_max = group_max<KG>(tile_max);
      const float m_new = fmaxf(m_run[i], tile_max);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no visible key yet: p = 0
      const float alpha = exp2f(m_run[i] - m_use);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const float p = exp2f(s[i][j] - m_use);
        p_s[(tx + KG * j) * Tile::kPStride + row] = p;
        sum += p;
      }
      sum = group_sum<KG>(sum);
      l_run[i] = l_run[i] * alpha + sum;
      m_run[i] = m_new;
      if (tx == 0) alpha_s[row] = alpha;
    }
    __syncthreads();  // B: p_s and alpha_s complete

    // O = alpha * O + P V for this thread's rows and columns.
#pragma unroll
    for (int i = 0; i < PM; ++i) {
      const float alpha = alpha_s[py + PRG * i];
#pragma unroll
      for (int e = 0; e < Tile::kPvVec; ++e) o[i][e] *= alpha;
    }
#pragma unroll 4
    for (int n = 0; n < kKeys; ++n) {
      float vf[Tile::kPvVec];
#pragma unroll
      for (int c = 0; c < Tile::kPvChunks; ++c) {
        load_kv_as_float<kVec>(v_tile + n * Tile::kKvStride + (px + DG * c) * kVec, vf + c * kVec);
      }
#pragma unroll
      for (int i = 0; i < PM; ++i) {
        if (py + PRG * i < rows_valid) {
          const float p = p_s[n * Tile::kPStride + py + PRG * i];
#pragma unroll
          for (int e = 0; e < Tile::kPvVec; ++e) o[i][e] = fmaf(p, vf[e], o[i][e]);
        }
      }
    }
  }

  // Row statistics to the PV layout; the barrier also agrees on whether a block id was bad.
  if (tx == 0) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      m_s[ty + RG * i] = m_run[i];
      l_s[ty + RG * i] = l_run[i];
    }
  }
  const bool any_bad = __syncthreads_or(bad) != 0;

#pragma unroll
  for (int i = 0; i < PM; ++i) {
    const int row = py + PRG * i;
    if (row >= rows_valid) continue;
    const float l = l_s[row];
    float scale = partial ? a.v_scale : (l > 0.0f ? a.v_scale / l : 0.0f);
    if (any_bad) scale = __int_as_float(0x7fc00000);
#pragma unroll
    for (int e = 0; e < Tile::kPvVec; ++e) o[i][e] *= scale;
    if (partial) {
      const int64_t slot =
          ((static_cast<int64_t>(r) * gridDim.y + kh) * a.num_splits + split) * kSmallRows + row;
#pragma unroll
      for (int c = 0; c < Tile::kPvChunks; ++c) {
        float* dst = a.partial_o + slot * D + (px + DG * c) * kVec;
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          *reinterpret_cast<float4*>(dst + e) =
              make_float4(o[i][c * kVec + e], o[i][c * kVec + e + 1], o[i][c * kVec + e + 2],
                          o[i][c * kVec + e + 3]);
        }
      }
      if (px == 0) {
        a.partial_ml[slot * 2] = m_s[row];
        a.partial_ml[slot * 2 + 1] = l;
      }
    } else {
      const int flat = row0 + row;
      const int64_t t = req.q_begin + flat / G;
      const int h = kh * G + flat % G;
      T* dst = static_cast<T*>(a.out) + row_offset<D>(a.out_stride, t, h);
#pragma unroll
      for (int c = 0; c < Tile::kPvChunks; ++c) {
        store_vec<T, kVec>(dst + (px + DG * c) * kVec, &o[i][c * kVec]);
      }
    }
  }
}

// ---- Grids (host side: the launchers and the CPU emulation test share them) -----------------

inline dim3 small_grid(const AttentionArgs& a, int num_requests) {
  return dim3(static_cast<unsigned>(a.num_splits), static_cast<unsigned>(a.num_kv_heads),
              static_cast<unsigned>(num_requests));
}

template <typename T, int D>
inline dim3 large_grid(const AttentionArgs& a, int num_requests) {
  constexpr int kRows = AttnTile<T, D, false>::kRows;  // the same for every cache type
  const int64_t tiles = (static_cast<int64_t>(a.max_query_len) * a.group + kRows - 1) / kRows;
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(a.num_kv_heads),
              static_cast<unsigned>(num_requests));
}

}  // namespace vllm::cuda::detail

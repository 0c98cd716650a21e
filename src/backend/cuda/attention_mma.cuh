// BF16 paged-attention prefill on tensor cores (mma.sync m16n8k16, f32 accumulation): the
// large-block counterpart of attention_tiled.cuh for BF16, same work split and masking (see
// there; shared pieces in attention_common.cuh), with the two products on tensor cores and the
// softmax in the accumulators' layout.
//
// Block: 4 warps, 64 query rows (16 per warp: one m16 block each), one kv head, keys in
// tiles of kKeys. Pipeline per tile:
//   barrier A  tile t landed (cp.async, two stages as in attention_tiled.cuh); every warp
//              left tile t - 1, so its stage may be refilled: the copy of tile t + 1 starts
//   S = Q K^T      per warp 16 x kKeys, f32 accumulators; Q's A fragments and K's B
//                  fragments are 32-bit shared-memory loads (two adjacent bf16: rows padded
//                  by 16 bytes so the 8 rows a load touches fall in different banks)
//   softmax        each lane holds 2 rows x (kKeys / 4) scores; row max / sum over the 4
//                  lanes of a row by shuffles; scale, causal mask, exp2 in f32
//   O = alpha O + P V   P (rounded to bf16) is the A operand straight from the S registers;
//                  V's B fragments pair two keys of one column (two 16-bit loads)
//   No second barrier: P stays in registers, and only barrier A guards the shared stages.
// A warp whose rows all precede a tile (the causal diagonal) skips its arithmetic.
//
// Tile shapes: kKeys = 64 for D <= 128 (S 32 + O 64 registers per lane), 32 for D = 256
// (O alone is 128 registers per lane); shared memory 87-101 KB, two blocks per SM.
// On compute capability 9.0 devices the wgmma kernel (sm90a/attention_wgmma.cu) takes head
// dims 128 and 256 instead, over a BF16 or an FP8 cache (attention_wgmma.h).
// An FP8 cache (C = KvFp8) lands in the shared stages as e4m3 bytes (half the copy) and each
// fragment register is converted to BF16 pairs as it is read (exact: e4m3 values are BF16
// values); k_scale is in the softmax scale and v_scale in the final normalisation
// (kv_fp8.cuh). Next steps here (the prefill-speed issue): ldmatrix(.trans)
// fragment loads (V's 16-bit loads use half of each shared-memory wavefront), Q fragments
// kept in registers.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/mma.cuh"

namespace vllm::cuda::detail {

template <int D, typename C = __nv_bfloat16>
struct MmaTile {
  static constexpr int kWarps = kAttnThreads / 32;
  static constexpr int kRows = 16 * kWarps;
  static constexpr int kKeys = D == 256 ? 32 : 64;
  // Cache elements per shared K / V row (a 16-byte pad); bf16 elements per Q row.
  static constexpr int kKvStride = D + 16 / static_cast<int>(sizeof(C));
  static constexpr int kQStride = D + 8;
  static constexpr int kKvTileElems = kKeys * kKvStride;
  static constexpr int kQElems = kRows * kQStride;
  static constexpr int kQBytes = kQElems * 2;
  static constexpr int kSmemBytes =
      kQBytes + kAttnStages * 2 * kKvTileElems * static_cast<int>(sizeof(C));
  static_assert(kKeys % 16 == 0 && D % 16 == 0 && kSmemBytes <= 227 * 1024);
  static_assert(kSplitChunkAlign % kKeys == 0);
};

template <int D>
inline dim3 mma_grid(const AttentionArgs& a, int num_requests) {
  constexpr int kRows = MmaTile<D>::kRows;
  const int64_t tiles = (static_cast<int64_t>(a.max_query_len) * a.group + kRows - 1) / kRows;
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(a.num_kv_heads),
              static_cast<unsigned>(num_requests));
}

__device__ __forceinline__ uint32_t load_u32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

template <int D, typename C = __nv_bfloat16>
__global__ void __launch_bounds__(kAttnThreads, 1) mma_prefill_kernel(const AttentionArgs a) {
  pdl_wait();
  pdl_launch_next();
  using T = __nv_bfloat16;
  using Tile = MmaTile<D, C>;
  constexpr int kKeys = Tile::kKeys;
  constexpr int kRows = Tile::kRows;
  constexpr int kKeyBlocks = kKeys / 8;  // n8 blocks of S
  constexpr int kDimBlocks = D / 8;      // n8 blocks of O

  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);                   // [kRows][kQStride]
  C* kv_s = reinterpret_cast<C*>(smem + Tile::kQBytes);  // [stage][K|V][key][kKvStride]

  const int tid = threadIdx.x;
  const int kh = blockIdx.y;
  PrefillCta cta;
  if (!prefill_cta(a, kRows, cta)) return;
  const RequestView& req = cta.req;
  const int G = a.group;
  const int row0 = cta.row0, rows_valid = cta.rows_valid, pos0 = cta.pos0, k_end = cta.k_end;
  const int num_tiles = (k_end + kKeys - 1) / kKeys;
  const int32_t* table = cta.table;

  // Q tile and the first K/V tile, one cp.async group.
  bool bad = false;
  load_kv_tile<C, D, Tile>(a, table, kh, 0, k_end, kv_s, bad);
  {
    const T* query = static_cast<const T*>(a.query);
    constexpr int kChunks = D / 8;
    static_assert(kRows * kChunks % kAttnThreads == 0);
#pragma unroll
    for (int iter = 0; iter < kRows * kChunks / kAttnThreads; ++iter) {
      const int i = tid + iter * kAttnThreads;
      const int row = i / kChunks;
      const int c = i % kChunks;
      const T* src = query;
      int bytes = 0;
      if (row < rows_valid) {
        const int flat = row0 + row;
        const int64_t t = req.q_begin + flat / G;
        src = query + row_offset<D>(a.query_stride, t, kh * G + flat % G) + c * 8;
        bytes = 16;
      }
      cp_async_16(q_s + row * Tile::kQStride + c * 8, src, bytes);
    }
  }
  cp_async_commit();

  // This lane's two accumulator rows (block-local) and their causal limits.
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int r_lo = warp * 16 + g;
  const int r_hi = r_lo + 8;
  const int pos_lo = r_lo < rows_valid ? pos0 + (row0 + r_lo) / G : -1;
  const int pos_hi = r_hi < rows_valid ? pos0 + (row0 + r_hi) / G : -1;
  const int warp_last = min(warp * 16 + 15, rows_valid - 1);
  const int warp_pos_max = warp * 16 < rows_valid ? pos0 + (row0 + warp_last) / G : -1;

  float o[kDimBlocks][4];
#pragma unroll
  for (int db = 0; db < kDimBlocks; ++db) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[db][i] = 0.0f;
  }
  float m_lo = -INFINITY, m_hi = -INFINITY;  // running row max, log2 units
  float l_lo = 0.0f, l_hi = 0.0f;            // running row sum

  for (int it = 0; it < num_tiles; ++it) {
    const int k0 = it * kKeys;
    const C* k_tile = kv_s + (it % kAttnStages) * 2 * Tile::kKvTileElems;
    const C* v_tile = k_tile + Tile::kKvTileElems;
    cp_async_wait_all();
    __syncthreads();  // A
    if (it + 1 < num_tiles) {
      load_kv_tile<C, D, Tile>(a, table, kh, k0 + kKeys, k_end,
                               kv_s + ((it + 1) % kAttnStages) * 2 * Tile::kKvTileElems, bad);
      cp_async_commit();
    }
    if (k0 > warp_pos_max) continue;  // warp-uniform: every row of this warp precedes the tile

    // S = Q K^T.
    float s[kKeyBlocks][4];
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[nb][i] = 0.0f;
    }
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      const T* q_lo = q_s + r_lo * Tile::kQStride + kc * 16 + 2 * t;
      const T* q_hi = q_lo + 8 * Tile::kQStride;
      const uint32_t af[4] = {load_u32(q_lo), load_u32(q_hi), load_u32(q_lo + 8),
                              load_u32(q_hi + 8)};
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; ++nb) {
        const C* kp = k_tile + (nb * 8 + g) * Tile::kKvStride + kc * 16 + 2 * t;
        const uint32_t bf[2] = {load_kv_bf16x2(kp), load_kv_bf16x2(kp + 8)};
        mma_m16n8k16_bf16(s[nb], af, bf);
      }
    }

    // Scale, mask and the online softmax of rows lo (c0, c1) and hi (c2, c3).
    float max_lo = -INFINITY, max_hi = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + nb * 8 + 2 * t + (i & 1);
        const int pos = i < 2 ? pos_lo : pos_hi;
        s[nb][i] = key <= pos && key < k_end ? s[nb][i] * a.scale_log2 : -INFINITY;
      }
      max_lo = fmaxf(max_lo, fmaxf(s[nb][0], s[nb][1]));
      max_hi = fmaxf(max_hi, fmaxf(s[nb][2], s[nb][3]));
    }
    max_lo = group_max<4>(max_lo);
    max_hi = group_max<4>(max_hi);
    const float new_lo = fmaxf(m_lo, max_lo);
    const float new_hi = fmaxf(m_hi, max_hi);
    const float use_lo = new_lo == -INFINITY ? 0.0f : new_lo;  // no visible key yet: p = 0
    const float use_hi = new_hi == -INFINITY ? 0.0f : new_hi;
    const float alpha_lo = exp2f(m_lo - use_lo);
    const float alpha_hi = exp2f(m_hi - use_hi);
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb) {
      s[nb][0] = exp2f(s[nb][0] - use_lo);
      s[nb][1] = exp2f(s[nb][1] - use_lo);
      s[nb][2] = exp2f(s[nb][2] - use_hi);
      s[nb][3] = exp2f(s[nb][3] - use_hi);
      sum_lo += s[nb][0] + s[nb][1];
      sum_hi += s[nb][2] + s[nb][3];
    }
    l_lo = l_lo * alpha_lo + group_sum<4>(sum_lo);
    l_hi = l_hi * alpha_hi + group_sum<4>(sum_hi);
    m_lo = new_lo;
    m_hi = new_hi;
#pragma unroll
    for (int db = 0; db < kDimBlocks; ++db) {
      o[db][0] *= alpha_lo;
      o[db][1] *= alpha_lo;
      o[db][2] *= alpha_hi;
      o[db][3] *= alpha_hi;
    }

    // O += P V, 16 keys at a time.
#pragma unroll
    for (int j = 0; j < kKeys / 16; ++j) {
      const uint32_t pa[4] = {pack_bf16x2(s[2 * j][0], s[2 * j][1]),
                              pack_bf16x2(s[2 * j][2], s[2 * j][3]),
                              pack_bf16x2(s[2 * j + 1][0], s[2 * j + 1][1]),
                              pack_bf16x2(s[2 * j + 1][2], s[2 * j + 1][3])};
      const C* v_col = v_tile + (j * 16 + 2 * t) * Tile::kKvStride + g;
#pragma unroll
      for (int db = 0; db < kDimBlocks; ++db) {
        const C* vp = v_col + db * 8;
        const uint32_t bf[2] = {
            pack_bf16x2_bits(kv_bf16_bits(vp), kv_bf16_bits(vp + Tile::kKvStride)),
            pack_bf16x2_bits(kv_bf16_bits(vp + 8 * Tile::kKvStride),
                             kv_bf16_bits(vp + 9 * Tile::kKvStride))};
        mma_m16n8k16_bf16(o[db], pa, bf);
      }
    }
  }

  const bool any_bad = __syncthreads_or(bad) != 0;
  const float nan = __int_as_float(0x7fc00000);
  float inv_lo = l_lo > 0.0f ? a.v_scale / l_lo : 0.0f;
  float inv_hi = l_hi > 0.0f ? a.v_scale / l_hi : 0.0f;
  if (any_bad) inv_lo = inv_hi = nan;
  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = half == 0 ? r_lo : r_hi;
    if (row >= rows_valid) continue;
    const float inv = half == 0 ? inv_lo : inv_hi;
    const int flat = row0 + row;
    const int64_t token = req.q_begin + flat / G;
    T* dst = out + row_offset<D>(a.out_stride, token, kh * G + flat % G) + 2 * t;
#pragma unroll
    for (int db = 0; db < kDimBlocks; ++db) {
      *reinterpret_cast<uint32_t*>(dst + db * 8) =
          pack_bf16x2(o[db][2 * half] * inv, o[db][2 * half + 1] * inv);
    }
  }
}

}  // namespace vllm::cuda::detail

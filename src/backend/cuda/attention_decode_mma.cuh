// BF16 decode attention on tensor cores (mma.sync m16n8k16, f32 accumulation), over a BF16 or
// an FP8 cache: the small-block kernel of BF16 queries (attention_tiled.cuh's kSmall, kept as
// the CUDA-core path). Same grid, same requests (q_len * G <= kSmallRows rows: decode, short
// speculative chunks), same key chunks (request_chunk at the CUDA-core small kernel's key tile),
// same masking, same outputs and split partials for attention_combine.cuh.
//
// Why: a decode block reads each K/V byte once and does one flop per byte and query row with it
// (two over an FP8 cache), so it should run at memory bandwidth. The CUDA-core kernel computes all
// 16 rows in f32 with its 4 warps on one tile at a time (two block barriers per tile) and is bound
// by that arithmetic; here the products run on tensor cores and the warps stream keys
// independently.
//
// Block: 4 warps, one request, one kv head, the request's rows (token-major: row = token * G +
// g) as the m16 rows of every mma (rows past them are padding: zero Q, masked, never written),
// over the block's key chunk [k_begin, k_end) in warp tiles of kKeys keys. Warp w takes tiles
// w, w + 4, w + 8, ... with its own online softmax (row max and sum, O in the accumulator
// layout) and its own ring of kSlots shared-memory slots, filled by its own lanes' cp.async:
// no block barrier inside the key loop. A warp's pipeline (K and V of a tile in separate slots,
// so that the V of this tile and the K of the next are landing while S is computed):
//   prologue   K_0, V_0, K_1 issued, one cp.async group each (past the warp's last tile the
//              groups are empty, so every wait counts the same)
//   tile i     wait for K_i (two younger groups may stay in flight), __syncwarp
//              S = Q K_i^T      16 rows x 16 keys; Q's A fragments prebuilt in shared memory
//              __syncwarp: K_i's slot is free and takes V_{i+1}
//              softmax          scale, causal mask, running max / sum (4 lanes per row)
//              wait for V_i, __syncwarp
//              O = alpha O + P V_i   P (bf16) straight from S's registers
//              __syncwarp: V_i's slot is free and takes K_{i+2}
//   merge      a block barrier (which also agrees on bad block ids); every warp's O, row max
//              and row sum to shared memory (over the ring); a barrier; all threads combine the
//              4 warps' rows and write the outputs (or the split partials, then the combine).
//
// Fragments from 8-element reads. The k order of an mma is free as long as A and B agree, and
// so is the column order of V and O (the store knows it), so every lane reads 8 consecutive
// cache elements of a row at once (16 bytes BF16, 8 bytes FP8) instead of pairs:
//   S    mma kc = 2c + h: k indices {2t, 2t + 1, 2t + 8, 2t + 9} are dims 32c + 8t + 4h + {0..3}
//        (lane (g, t) reads K row g of each n8 block at dims 32c + 8t .. + 7)
//   P V  n8 block 8q + j: column n is dim 64q + 8n + j (lane (g, t) reads V rows 2t, 2t + 1,
//        2t + 8, 2t + 9 at dims 64q + 8g .. + 7, and holds O at dims 64q + 16t .. + 15)
// Slots are unpadded, with each row's 32-byte granules XOR-swizzled by the row (one pattern for
// K, whose reads touch rows g, another for V, rows 2t), so these reads are free of bank
// conflicts (but for FP8 at D = 64, whose 64-byte rows leave V reads two-way).
//
// FP8 cache (C = KvFp8): the e4m3 bytes land in the slots as they are (half the copy) and are
// converted exactly to BF16 pairs as they are read; k_scale is in scale_log2 and v_scale in the
// final normalisation (kv_fp8.cuh).
//
// Sizes (DecodeMmaTile; registers from ptxas for sm_90, no spills): at D = 256 16-key tiles,
// 3 slots per warp, 104 KB of shared memory and 254 registers a thread (O alone is 128), two
// blocks per SM; over an FP8 cache 65 KB (the merge buffer) and 225 registers, two per SM. At
// D = 128 52 KB (FP8 34 KB) and 163 (157) registers, three per SM.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_tiled.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/mma.cuh"

namespace vllm::cuda::detail {

template <int D, typename C = __nv_bfloat16>
struct DecodeMmaTile {
  static constexpr int kWarps = kAttnThreads / kWarpSize;
  // Keys per warp tile: two n8 blocks of S, one k16 step of P V. Larger tiles would make the
  // ring too large for two blocks per SM at D = 256.
  static constexpr int kKeys = 16;
  // Slots per warp: K_i, V_i and K_{i + 1}: about a tile in flight per warp while it computes.
  static constexpr int kSlots = 3;
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(C));
  static constexpr int kSlotBytes = kKeys * kRowBytes;
  // Q as A fragments: one 16-byte entry per (mma k chunk, lane).
  static constexpr int kQFragBytes = D / 16 * kWarpSize * 16;
  static constexpr int kRingBytes = kWarps * kSlots * kSlotBytes;
  // After the key loop, over Q and the ring: every warp's O rows, f32, padded by 16 bytes.
  static constexpr int kMergeStride = D + 4;
  static constexpr int kMergeBytes = kWarps * kSmallRows * kMergeStride * 4;
  static constexpr int kMlOffset =
      kQFragBytes + kRingBytes > kMergeBytes ? kQFragBytes + kRingBytes : kMergeBytes;
  static constexpr int kSmemBytes = kMlOffset + kWarps * kSmallRows * 2 * 4;  // + row max, sum
  // Blocks per SM the compiler is asked to fit by registers, at most what the shared memory
  // allows (228 KB an SM, 1 KB reserved per block): at D = 256 O alone is 128 registers a lane
  // and a bound of three blocks spills; at D <= 128 three fit without spills (four spill).
  static constexpr int kSmemBlocks = 228 * 1024 / (kSmemBytes + 1024);
  static constexpr int kRegisterBlocks = D == 256 ? 2 : 3;
  static constexpr int kMinBlocks = kRegisterBlocks < kSmemBlocks ? kRegisterBlocks : kSmemBlocks;
  // A split request's chunks are the CUDA-core small kernel's (the combine reads them so).
  static constexpr int kChunkAlign = AttnTile<__nv_bfloat16, D, true>::kKeys;
  static_assert(D % 64 == 0 && kRowBytes >= 64, "whole 64-dim groups of V, 32-byte granules");
  static_assert(kChunkAlign % kKeys == 0, "chunks are whole warp tiles");
  static_assert(kRowBytes / 16 % 2 == 0, "the two lanes of a key copy whole 16-byte chunks");
  static_assert(kSmemBytes <= 227 * 1024 && kMinBlocks >= 1);
};

// Byte offset of (row, byte column) in a K (kV false) or V slot: row-major, unpadded, each 32-byte
// granule's index XOR-ed with a function of the row (within the row's 128-byte lines). K reads
// touch rows {g} x 64 bytes (BF16) or 32 bytes (FP8) per phase, V reads rows {2t} x 32 bytes,
// so K needs rows 0..3 (and 0, 1 for 64-byte reads) apart, V rows 0, 2, 4, 6.
template <int kRowBytes, bool kV>
__device__ __forceinline__ int decode_slot_offset(int row, int col_byte) {
  constexpr int kMask = kRowBytes >= 128 ? 3 : kRowBytes / 32 - 1;
  const int f = kV ? (row ^ (row >> 2)) & 3 : ((row & 1) << 1) | ((row >> 1) & 1);
  return row * kRowBytes + (col_byte ^ ((f & kMask) << 5));
}

// One warp's cp.async copies of the K (kV false) or V rows of keys [k0, k0 + kKeys) of kv head
// kh into a slot: lanes 2k and 2k + 1 copy key k's row, 32 bytes per step (one block-table
// read per lane). Keys at or past k_end are zero-filled without reading; a block id outside
// [0, num_blocks) is not read either and sets `bad`.
template <int D, typename C, bool kV>
__device__ __forceinline__ void load_decode_slot(const AttentionArgs& a, const int32_t* table,
                                                 int kh, int k0, int k_end, unsigned char* slot,
                                                 int lane, bool& bad) {
  using Tile = DecodeMmaTile<D, C>;
  static_assert(Tile::kKeys * 2 == kWarpSize, "two lanes per key");
  constexpr int kVec = 16 / static_cast<int>(sizeof(C));
  constexpr int kChunks = Tile::kRowBytes / 16;  // 16-byte chunks per row
  const C* cache = static_cast<const C*>(a.kv_cache);
  const int key = lane / 2;
  const int j = k0 + key;
  const C* src = cache;
  int bytes = 0;
  if (j < k_end) {
    const int32_t block = table[j >> a.block_size_log2];
    if (block >= 0 && block < a.num_blocks) {
      const int block_size = 1 << a.block_size_log2;
      const int64_t row = static_cast<int64_t>(block) * 2 * block_size + (kV ? block_size : 0) +
                          (j & (block_size - 1));
      src = cache + row * a.num_kv_heads * D + static_cast<int64_t>(kh) * D;
      bytes = 16;
    } else {
      bad = true;
    }
  }
#pragma unroll
  for (int step = 0; step < kChunks / 2; ++step) {
    const int col = 2 * step + lane % 2;
    cp_async_16(slot + decode_slot_offset<Tile::kRowBytes, kV>(key, col * 16),
                bytes != 0 ? src + col * kVec : cache, bytes);
  }
}

// The low (high) bf16 halves of two registers as one pair, x's in the low half.
__device__ __forceinline__ uint32_t pair_low_halves(uint32_t x, uint32_t y) {
  return (x & 0xffffu) | (y << 16);
}
__device__ __forceinline__ uint32_t pair_high_halves(uint32_t x, uint32_t y) {
  return (x >> 16) | (y & 0xffff0000u);
}

template <int D, typename C = __nv_bfloat16>
__global__ void __launch_bounds__(kAttnThreads, DecodeMmaTile<D, C>::kMinBlocks)
    mma_decode_kernel(const AttentionArgs a) {
  pdl_wait();
  pdl_launch_next();
  using T = __nv_bfloat16;
  using Tile = DecodeMmaTile<D, C>;
  constexpr int kKeys = Tile::kKeys;
  constexpr int kWarps = Tile::kWarps;
  constexpr int kSlots = Tile::kSlots;
  constexpr int kRowBytes = Tile::kRowBytes;
  constexpr int kElem = static_cast<int>(sizeof(C));
  constexpr int kDimBlocks = D / 8;  // n8 blocks of O

  extern __shared__ __align__(16) unsigned char smem[];
  auto* q_frag = reinterpret_cast<uint4*>(smem);   // [D / 16][lane]
  unsigned char* ring = smem + Tile::kQFragBytes;  // [warp][slot][key][D] swizzled
  auto* merge_o = reinterpret_cast<float*>(smem);  // after the loop: [warp][row][stride]
  auto* merge_ml = reinterpret_cast<float*>(smem + Tile::kMlOffset);  // [warp][row][max, sum]

  const int tid = threadIdx.x;
  const int r = blockIdx.z;
  const int kh = blockIdx.y;
  const int split = blockIdx.x;
  const RequestView req = load_request(a, r);
  if (!req.valid) {
    if (split == 0 && req.in_range) fill_nan_rows<T, D>(a, req, kh);
    return;
  }
  const int G = a.group;
  const int rows_valid = req.q_len * G;
  if (rows_valid == 0 || rows_valid > kSmallRows) return;  // no rows, or the prefill kernel's
  const int pos0 = req.seq_len - req.q_len;                // position of the first query
  const int kv_end = pos0 + (rows_valid - 1) / G + 1;      // keys the last row sees
  const int32_t chunk = request_chunk<Tile::kChunkAlign>(req.seq_len, a.num_splits);
  const int k_begin = split * chunk;
  if (k_begin >= kv_end) return;  // this request needs fewer chunks
  const int k_end = kv_end - k_begin > chunk ? k_begin + chunk : kv_end;
  const bool partial = chunks_of<Tile::kChunkAlign>(req.seq_len, a.num_splits) > 1;
  const int num_tiles = (k_end - k_begin + kKeys - 1) / kKeys;
  const int32_t* table = a.block_tables + static_cast<int64_t>(r) * a.max_blocks_per_seq;

  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = lane / 4;
  const int t = lane % 4;
  const int my_tiles = warp < num_tiles ? (num_tiles - warp + kWarps - 1) / kWarps : 0;
  unsigned char* my_ring = ring + warp * kSlots * Tile::kSlotBytes;
  bool bad = false;
  // Copy h of this warp (K of its tile h / 2 for even h, V for odd) into slot h % kSlots.
  auto issue = [&](int h) {
    if (h < 2 * my_tiles) {
      const int k0 = k_begin + (warp + kWarps * (h / 2)) * kKeys;
      unsigned char* slot = my_ring + (h % kSlots) * Tile::kSlotBytes;
      if (h % 2 == 0) {
        load_decode_slot<D, C, false>(a, table, kh, k0, k_end, slot, lane, bad);
      } else {
        load_decode_slot<D, C, true>(a, table, kh, k0, k_end, slot, lane, bad);
      }
    }
    cp_async_commit();
  };
  static_assert(kSlots == 3, "the waits below keep two copies in flight");
  issue(0);
  issue(1);
  issue(2);

  // Q's A fragments, while the first copies are in flight: entry (kc, lane (fg, ft)) holds rows
  // fg and fg + 8 at the dims of kc's k indices (the order above); rows past the request's are 0.
  {
    const T* query = static_cast<const T*>(a.query);
    constexpr int kEntries = D / 16 * kWarpSize;
    static_assert(kEntries % kAttnThreads == 0);
#pragma unroll
    for (int iter = 0; iter < kEntries / kAttnThreads; ++iter) {
      const int e = tid + iter * kAttnThreads;
      const int kc = e / kWarpSize;
      const int fg = (e % kWarpSize) / 4;
      const int ft = e % 4;
      const int dim = kc / 2 * 32 + ft * 8 + kc % 2 * 4;
      uint2 rows[2] = {make_uint2(0, 0), make_uint2(0, 0)};  // rows fg, fg + 8
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = fg + 8 * i;
        if (row < rows_valid) {
          const int64_t token = req.q_begin + row / G;
          const T* src = query + row_offset<D>(a.query_stride, token, kh * G + row % G) + dim;
          rows[i] = *reinterpret_cast<const uint2*>(src);
        }
      }
      q_frag[e] = make_uint4(rows[0].x, rows[1].x, rows[0].y, rows[1].y);
    }
  }
  __syncthreads();  // Q fragments visible to every warp

  // This lane's two accumulator rows and their causal limits (-1: a padding row).
  const int pos_lo = g < rows_valid ? pos0 + g / G : -1;
  const int pos_hi = g + 8 < rows_valid ? pos0 + (g + 8) / G : -1;
  float o[kDimBlocks][4];
  zero_fragments(o);
  float m_lo = -INFINITY, m_hi = -INFINITY;  // running row max, log2 units
  float l_lo = 0.0f, l_hi = 0.0f;            // running row sum

  for (int i = 0; i < my_tiles; ++i) {
    const int k0 = k_begin + (warp + kWarps * i) * kKeys;
    const unsigned char* k_slot = my_ring + (2 * i) % kSlots * Tile::kSlotBytes;
    const unsigned char* v_slot = my_ring + (2 * i + 1) % kSlots * Tile::kSlotBytes;
    cp_async_wait_pending<2>();
    __syncwarp();  // K_i landed for every lane

    // S = Q K^T: 16 rows x 2 n8 blocks of keys.
    float s[2][4];
    zero_fragments(s);
#pragma unroll 2
    for (int c = 0; c < D / 32; ++c) {
      const uint4 qa = q_frag[(2 * c) * kWarpSize + lane];
      const uint4 qb = q_frag[(2 * c + 1) * kWarpSize + lane];
      const uint32_t a0[4] = {qa.x, qa.y, qa.z, qa.w};
      const uint32_t a1[4] = {qb.x, qb.y, qb.z, qb.w};
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        uint32_t kw[4];
        load_kv_bf16x8(
            reinterpret_cast<const C*>(k_slot + decode_slot_offset<kRowBytes, false>(
                                                    nb * 8 + g, (32 * c + 8 * t) * kElem)),
            kw);
        const uint32_t b0[2] = {kw[0], kw[1]};
        const uint32_t b1[2] = {kw[2], kw[3]};
        mma_m16n8k16_bf16(s[nb], a0, b0);
        mma_m16n8k16_bf16(s[nb], a1, b1);
      }
    }
    __syncwarp();  // every lane has read K_i
    issue(2 * i + 3);

    // Scale, mask and the online softmax of rows lo (c0, c1) and hi (c2, c3).
    float max_lo = -INFINITY, max_hi = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + nb * 8 + 2 * t + (e & 1);
        const int pos = e < 2 ? pos_lo : pos_hi;
        s[nb][e] = key <= pos && key < k_end ? s[nb][e] * a.scale_log2 : -INFINITY;
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
    for (int nb = 0; nb < 2; ++nb) {
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
    const uint32_t pa[4] = {pack_bf16x2(s[0][0], s[0][1]), pack_bf16x2(s[0][2], s[0][3]),
                            pack_bf16x2(s[1][0], s[1][1]), pack_bf16x2(s[1][2], s[1][3])};

    cp_async_wait_pending<2>();
    __syncwarp();  // V_i landed for every lane

    // O += P V: per 64-dim group, four V rows of 8 dims make the B fragments of 8 n8 blocks.
#pragma unroll
    for (int q = 0; q < D / 64; ++q) {
      const int col = (64 * q + 8 * g) * kElem;
      uint32_t v[4][4];  // rows 2t, 2t + 1, 2t + 8, 2t + 9
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int row = 2 * t + (k & 1) + (k >> 1) * 8;
        load_kv_bf16x8(
            reinterpret_cast<const C*>(v_slot + decode_slot_offset<kRowBytes, true>(row, col)),
            v[k]);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int w = j / 2;
        const uint32_t b[2] = {
            j % 2 == 0 ? pair_low_halves(v[0][w], v[1][w]) : pair_high_halves(v[0][w], v[1][w]),
            j % 2 == 0 ? pair_low_halves(v[2][w], v[3][w]) : pair_high_halves(v[2][w], v[3][w])};
        mma_m16n8k16_bf16(o[8 * q + j], pa, b);
      }
    }
    __syncwarp();  // every lane has read V_i
    issue(2 * i + 4);
  }
  cp_async_wait_all();  // only empty groups are left

  // ---- Merge the warps ----
  const bool any_bad = __syncthreads_or(bad) != 0;  // also: every warp has left the ring
  if (t == 0) {
    float* ml = merge_ml + (warp * kSmallRows + g) * 2;
    ml[0] = m_lo;
    ml[1] = l_lo;
    ml[16] = m_hi;  // row g + 8
    ml[17] = l_hi;
  }
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int row = g + 8 * hi;
    if (row >= rows_valid) continue;
    float* dst = merge_o + (warp * kSmallRows + row) * Tile::kMergeStride + 16 * t;
#pragma unroll
    for (int q = 0; q < D / 64; ++q) {
      // Dims 64q + 16t + e: e < 8 from c[2 hi] of block 8q + e, else c[2 hi + 1] of 8q + e - 8.
#pragma unroll
      for (int e4 = 0; e4 < 4; ++e4) {
        const int c = 2 * hi + e4 / 2;
        const int j = e4 % 2 * 4;
        *reinterpret_cast<float4*>(dst + 64 * q + 4 * e4) = make_float4(
            o[8 * q + j][c], o[8 * q + j + 1][c], o[8 * q + j + 2][c], o[8 * q + j + 3][c]);
      }
    }
  }
  __syncthreads();

  // Each thread: 8 dims of a row, summed over the warps at the row's common max.
  constexpr int kVecs = D / 8;
  for (int i = tid; i < rows_valid * kVecs; i += kAttnThreads) {
    const int row = i / kVecs;
    const int col = i % kVecs * 8;
    float m_w[kWarps];
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      m_w[w] = merge_ml[(w * kSmallRows + row) * 2];
      m_max = fmaxf(m_max, m_w[w]);
    }
    const float m_use = m_max == -INFINITY ? 0.0f : m_max;
    float l_sum = 0.0f;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(m_w[w] - m_use);
      l_sum += f * merge_ml[(w * kSmallRows + row) * 2 + 1];
      const float* src = merge_o + (w * kSmallRows + row) * Tile::kMergeStride + col;
#pragma unroll
      for (int e = 0; e < 8; e += 4) {
        const float4 v = *reinterpret_cast<const float4*>(src + e);
        acc[e] = fmaf(f, v.x, acc[e]);
        acc[e + 1] = fmaf(f, v.y, acc[e + 1]);
        acc[e + 2] = fmaf(f, v.z, acc[e + 2]);
        acc[e + 3] = fmaf(f, v.w, acc[e + 3]);
      }
    }
    float scale = partial ? a.v_scale : (l_sum > 0.0f ? a.v_scale / l_sum : 0.0f);
    if (any_bad) scale = __int_as_float(0x7fc00000);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] *= scale;
    if (partial) {
      const int64_t slot =
          ((static_cast<int64_t>(r) * gridDim.y + kh) * a.num_splits + split) * kSmallRows + row;
      float* dst = a.partial_o + slot * D + col;
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
      if (col == 0) {
        a.partial_ml[slot * 2] = m_max;
        a.partial_ml[slot * 2 + 1] = l_sum;
      }
    } else {
      const int64_t token = req.q_begin + row / G;
      T* dst = static_cast<T*>(a.out) + row_offset<D>(a.out_stride, token, kh * G + row % G) + col;
      store_vec<T, 8>(dst, acc);
    }
  }
}

}  // namespace vllm::cuda::detail

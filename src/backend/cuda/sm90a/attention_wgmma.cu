// BF16 paged-attention prefill on Hopper's warpgroup tensor cores (wgmma, sm_90a), head dims
// 128 and 256: the sm_90 replacement of attention_mma.cuh's mma_prefill_kernel, with the same
// grid, work split, masking and outputs (see there and attention_common.cuh): query rows are
// (token, GQA head) pairs of one kv head, a request's queries are its last q_len positions
// and see keys [0, position], keys come through the block table, scores and softmax are f32,
// P is rounded to BF16 for the second product, the output once on store. Bad block ids turn
// the CTA's rows NaN; requests the small kernel handles return at once.
//
// CTA: two warpgroups (256 threads), 128 query rows, 64 per warpgroup; keys in tiles of kKeys.
// Each warpgroup computes S = Q K^T (64 x kKeys) with wgmma from shared memory (SS) and
// O += P V (64 x D) with P from registers (RS): S's accumulators are, pair by pair, P's A
// fragments (wgmma.cuh), so P never touches shared memory.
//
// Shared memory, every tile 128-byte swizzled in 64-column sub-tiles (wgmma.cuh):
//   Q          [D/64][128 rows][64]    loaded once; the output is staged here at the end
//   K stages   2 x [D/64][kKeys][64]   S's B operand, K-major
//   V stages   2 x [D/64][kKeys][64]   O's B operand as it lands: row-major [key][dim] is
//                                      MN-major for P V (imm-trans-b)
// All 256 threads copy with 16-byte cp.async through the block table (any block size).
//
// Pipeline (FlashAttention-3's intra-warpgroup overlap: the softmax of one tile runs while
// the tensor cores multiply P V of the tile before):
//   prologue   copies {Q, K_0} and {K_1, V_0}; S_0 = Q K_0^T; softmax -> P_0
//   tile j     wait for this thread's copies of {K_{j+1}, V_j}, fence them for the tensor
//              cores, barrier: everyone's copies landed, and every warpgroup finished tile
//              j - 1, so S_j (K stage j % 2) and P_{j-1} V_{j-1} (V stage (j + 1) % 2) are
//              done with their stages
//              issue S_{j+1} = Q K_{j+1}^T, then O += P_j V_j
//              copy K_{j+2} into K stage j % 2 and V_{j+1} into V stage (j + 1) % 2
//              wait for S_{j+1}: scale, causal mask (diagonal tiles only), row max, exp2,
//              row sums (per thread; the 4 lanes of a row add theirs up at the end)
//              wait for P_j V_j: P_{j+1} = bf16(S_{j+1}); O *= exp2(m_old - m_new)
// One barrier per key tile; a tile's copies land while the tile before it is multiplied.
//
// Tile shapes. D = 256: kKeys = 64; registers per thread O 128 + S 32 + P 16 (f32, f32, bf16
// pairs), shared memory 64 KB Q + 128 KB K/V. D = 128: kKeys = 128; O 64 + S 64 + P 32,
// 32 KB + 128 KB. One CTA per SM (the 255 registers a thread may hold at 256 threads).
//
// An FP8 cache (C = KvFp8, kv_fp8.cuh). wgmma reads its operands from shared memory as they
// stand, so the e4m3 tiles cannot be widened on the way into fragments as the mma.sync kernel
// does. Each K / V tile's cp.async copies land as e4m3 codes in a staging buffer (one for K,
// one for V: 16 KB each, so 32 KB more shared memory), and the thread that copied a chunk
// widens it to exact BF16 (fp8.cuh's bit moves) and stores it in the swizzled stage, after
// its wait for the copies and before the fence and barrier that already precede the stage's
// use; the stage it writes is the one the plain pipeline's cp.async would have written then,
// free by the same argument. Only a thread's own chunks pass through its hands, so the staging
// buffers need no barrier of their own. The prologue converts K_0 before it copies K_1 into
// the K staging buffer. k_scale is in the softmax scale and v_scale in the normalisation, as
// in every kernel.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_wgmma.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/wgmma.cuh"

namespace vllm::cuda::detail {
namespace {

using bf16 = __nv_bfloat16;

template <int D, typename C>
struct WgmmaTile {
  static constexpr bool kFp8 = std::is_same_v<C, KvFp8>;
  static constexpr int kThreads = 256;  // two warpgroups, both copy and both multiply
  static constexpr int kRows = 128;     // query rows per CTA: 64 per warpgroup (wgmma's M)
  // Keys per tile: as wide as the registers allow next to O (D / 2 floats a thread).
  static constexpr int kKeys = D == 256 ? 64 : 128;
  static constexpr int kSubTiles = D / 64;                 // 64-column swizzled sub-tiles of a row
  static constexpr int kChunks = D / 8;                    // 16-byte chunks of a row
  static constexpr int kRowsPerPass = kThreads / kChunks;  // rows one pass of copies covers
  static constexpr int kQSubBytes = kRows * 128;
  static constexpr int kKvSubBytes = kKeys * 128;
  static constexpr int kQBytes = kSubTiles * kQSubBytes;
  static constexpr int kKvBytes = kSubTiles * kKvSubBytes;  // one K or V tile
  // FP8: one e4m3 tile (row-major [kKeys][D]) each for K and V, copied in 16-code chunks.
  static constexpr int kStagingBytes = kFp8 ? kKeys * D : 0;
  static constexpr int kCodeChunks = D / 16;  // 16-code chunks of a row
  static constexpr int kCodeRowsPerPass = kThreads / kCodeChunks;
  static constexpr int kSmemBytes = kQBytes + 4 * kKvBytes + 2 * kStagingBytes + 1024;
  // FlashAttention-3's intra-warpgroup overlap (the pipeline above). false: the plain order
  // S_j, softmax, P_j V_j per tile (same stages, one barrier per tile), kept to tell a
  // pipeline fault from an operand fault.
  static constexpr bool kOverlap = true;
  static_assert(D == 128 || D == 256);
  static_assert(kRowsPerPass % 8 == 0, "a thread's rows must share their swizzle phase");
  static_assert(kKeys % kRowsPerPass == 0 && kRows % kRowsPerPass == 0);
  static_assert(kKeys % kCodeRowsPerPass == 0);
  static_assert(kSmemBytes <= 227 * 1024);
};

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Barrier of the 128 threads of warpgroup `wg` (ids 1 and 2; 0 is __syncthreads). Immediate
// ids, so the kernel reserves three barriers rather than all sixteen.
__device__ __forceinline__ void warpgroup_barrier(int wg) {
  if (wg == 0) {
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  }
}

// This thread's part of copying rows [k0, k0 + kKeys) of the K (kv = 0) or V (kv = 1) cache
// of kv head kh into a swizzled tile. Keys at or past k_end are zero-filled without reading;
// a block id outside the cache is not read either and sets `bad`.
// FP8 (C = KvFp8): the codes go to `tile`, the staging buffer, row-major, 16 a copy.
template <int D, typename C>
__device__ __forceinline__ void copy_kv_tile(const AttentionArgs& a, const int32_t* table, int kh,
                                             int kv, int k0, int k_end, unsigned char* tile,
                                             bool& bad) {
  using Tile = WgmmaTile<D, C>;
  if constexpr (Tile::kFp8) {
    const auto* cache = static_cast<const uint8_t*>(a.kv_cache);
    const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * D;
    const int block_size = 1 << a.block_size_log2;
    const int chunk = static_cast<int>(threadIdx.x) % Tile::kCodeChunks;
    const int row = static_cast<int>(threadIdx.x) / Tile::kCodeChunks;
#pragma unroll
    for (int i = 0; i < Tile::kKeys / Tile::kCodeRowsPerPass; ++i) {
      const int r = row + i * Tile::kCodeRowsPerPass;
      const int j = k0 + r;
      const uint8_t* src = cache;
      int bytes = 0;
      if (j < k_end) {
        const int32_t block = table[j >> a.block_size_log2];
        if (block >= 0 && block < a.num_blocks) {
          const int64_t slot =
              (static_cast<int64_t>(block) * 2 + kv) * block_size + (j & (block_size - 1));
          src = cache + slot * row_elems + static_cast<int64_t>(kh) * D + chunk * 16;
          bytes = 16;
        } else {
          bad = true;
        }
      }
      cp_async_16(tile + r * D + chunk * 16, src, bytes);
    }
    return;
  }
  const bf16* cache = static_cast<const bf16*>(a.kv_cache);
  const int64_t row_elems = static_cast<int64_t>(a.num_kv_heads) * D;
  const int block_size = 1 << a.block_size_log2;
  const int chunk = static_cast<int>(threadIdx.x) % Tile::kChunks;
  const int row = static_cast<int>(threadIdx.x) / Tile::kChunks;
  const uint32_t dst = (chunk / 8) * Tile::kKvSubBytes + swizzle_128b_offset(row, chunk % 8);
#pragma unroll
  for (int i = 0; i < Tile::kKeys / Tile::kRowsPerPass; ++i) {
    const int j = k0 + row + i * Tile::kRowsPerPass;
    const bf16* src = cache;
    int bytes = 0;
    if (j < k_end) {
      const int32_t block = table[j >> a.block_size_log2];
      if (block >= 0 && block < a.num_blocks) {
        const int64_t slot =
            (static_cast<int64_t>(block) * 2 + kv) * block_size + (j & (block_size - 1));
        src = cache + slot * row_elems + static_cast<int64_t>(kh) * D + chunk * 8;
        bytes = 16;
      } else {
        bad = true;
      }
    }
    cp_async_16(tile + dst + i * Tile::kRowsPerPass * 128, src, bytes);
  }
}

// FP8: this thread's chunks of a staged e4m3 tile (the ones its copy_kv_tile copied, landed)
// as exact BF16 (the NaN codes as NaN) into the swizzled stage `tile`: 16 codes become two
// 8-element chunks.
template <int D>
__device__ __forceinline__ void widen_kv_tile(const unsigned char* staging, unsigned char* tile) {
  using Tile = WgmmaTile<D, KvFp8>;
  const int chunk = static_cast<int>(threadIdx.x) % Tile::kCodeChunks;
  const int row = static_cast<int>(threadIdx.x) / Tile::kCodeChunks;
#pragma unroll 1  // registers: O and S are live around it
  for (int i = 0; i < Tile::kKeys / Tile::kCodeRowsPerPass; ++i) {
    const int r = row + i * Tile::kCodeRowsPerPass;
    const uint4 codes = *reinterpret_cast<const uint4*>(staging + r * D + chunk * 16);
    const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
    uint4 out[2];
    uint32_t* o = &out[0].x;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint2 v = e4m3x4_keep_nan(words[w], e4m3x4_to_bf16x4_exact(words[w]));
      o[2 * w] = v.x;
      o[2 * w + 1] = v.y;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = 2 * chunk + h;  // 8-element chunk of the BF16 row
      *reinterpret_cast<uint4*>(tile + (c / 8) * Tile::kKvSubBytes +
                                swizzle_128b_offset(r, c % 8)) = out[h];
    }
  }
}

// This thread's part of copying the CTA's query rows (zero past rows_valid) into the Q tile.
template <int D>
__device__ __forceinline__ void copy_q_tile(const AttentionArgs& a, const RequestView& req, int kh,
                                            int row0, int rows_valid, unsigned char* q_tile) {
  using Tile = WgmmaTile<D, bf16>;
  const bf16* query = static_cast<const bf16*>(a.query);
  const int chunk = static_cast<int>(threadIdx.x) % Tile::kChunks;
  const int row = static_cast<int>(threadIdx.x) / Tile::kChunks;
  const uint32_t dst = (chunk / 8) * Tile::kQSubBytes + swizzle_128b_offset(row, chunk % 8);
#pragma unroll
  for (int i = 0; i < Tile::kRows / Tile::kRowsPerPass; ++i) {
    const int r = row + i * Tile::kRowsPerPass;
    const bf16* src = query;
    int bytes = 0;
    if (r < rows_valid) {
      const int flat = row0 + r;
      const int64_t t = req.q_begin + flat / a.group;
      src = query + row_offset<D>(a.query_stride, t, kh * a.group + flat % a.group) + chunk * 8;
      bytes = 16;
    }
    cp_async_16(q_tile + dst + i * Tile::kRowsPerPass * 128, src, bytes);
  }
}

// Issues S = Q K^T for the warpgroup's 64 rows: D / 16 products of m64 n kKeys k16.
// q_desc: the warpgroup's rows of sub-tile 0; k_desc: the K stage's sub-tile 0.
template <int D>
__device__ __forceinline__ void issue_qk(float (&s)[WgmmaTile<D, bf16>::kKeys / 2], uint64_t q_desc,
                                         uint64_t k_desc) {
  using Tile = WgmmaTile<D, bf16>;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t q_off = (kk / 4) * Tile::kQSubBytes + (kk % 4) * 32;
    const uint32_t k_off = (kk / 4) * Tile::kKvSubBytes + (kk % 4) * 32;
    wgmma_m64k16_bf16_ss(s, q_desc + (q_off >> 4), k_desc + (k_off >> 4), kk > 0 ? 1 : 0);
  }
}

// Issues O += P V: kKeys / 16 products of m64 nD k16, P's fragments from registers.
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2],
                                         const uint32_t (&p)[WgmmaTile<D, bf16>::kKeys / 4],
                                         uint64_t v_desc) {
#pragma unroll
  for (int kk = 0; kk < WgmmaTile<D, bf16>::kKeys / 16; ++kk) {
    const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    wgmma_m64k16_bf16_rs_bmn(o, a, v_desc + ((kk * 16 * 128) >> 4), 1);
  }
}

// Online softmax of one S tile for this thread's two rows (h = 0: row g, h = 1: row g + 8).
// Leaves exp2(S * scale - m_new) in s, updates the running max m (log2 units) and this
// thread's partial row sums l, and returns in alpha the factor that moves O to the new max.
// kMasked: keys past a row's position become -inf (pos -1: a padding row, all masked).
template <int kKeys, bool kMasked>
__device__ __forceinline__ void online_softmax(float (&s)[kKeys / 2], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float scale_log2, int k0,
                                               const int (&pos)[2]) {
  const int t = static_cast<int>(threadIdx.x) % 4;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < kKeys / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v = s[4 * i + e] * scale_log2;
      if constexpr (kMasked) {
        const int key = k0 + 8 * i + 2 * t + (e & 1);
        if (key > pos[e / 2]) v = -INFINITY;
      }
      s[4 * i + e] = v;
      mx[e / 2] = fmaxf(mx[e / 2], v);
    }
  }
  float use[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = fmaxf(m[h], group_max<4>(mx[h]));
    use[h] = m_new == -INFINITY ? 0.0f : m_new;  // no visible key yet: p = 0, alpha = 0
    alpha[h] = fast_exp2(m[h] - use[h]);
    m[h] = m_new;
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kKeys / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = fast_exp2(s[4 * i + e] - use[e / 2]);
      s[4 * i + e] = p;
      sum[e / 2] += p;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + sum[h];
}

template <int D, typename C>
__global__ void __launch_bounds__(WgmmaTile<D, C>::kThreads, 1)
    wgmma_prefill_kernel(const AttentionArgs a) {
  pdl_wait();
  pdl_launch_next();
  using Tile = WgmmaTile<D, C>;
  constexpr int kKeys = Tile::kKeys;
  constexpr int kRows = Tile::kRows;

  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must start on 1,024-byte boundaries.
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  unsigned char* q_s = smem;
  unsigned char* k_s = q_s + Tile::kQBytes;  // stage st at + st * kKvBytes
  unsigned char* v_s = k_s + 2 * Tile::kKvBytes;
  unsigned char* k_codes = v_s + 2 * Tile::kKvBytes;  // FP8: the staging buffers
  unsigned char* v_codes = k_codes + Tile::kStagingBytes;
  // Where copy_kv_tile sends a K / V tile headed for stage `st`: the stage itself, or for
  // FP8 the staging buffer, widened into the stage by widen() after the copies land.
  auto k_dst = [&](int st) { return Tile::kFp8 ? k_codes : k_s + st * Tile::kKvBytes; };
  auto v_dst = [&](int st) { return Tile::kFp8 ? v_codes : v_s + st * Tile::kKvBytes; };
  auto widen = [&](int k_stage, int v_stage) {
    if constexpr (Tile::kFp8) {
      if (k_stage >= 0) widen_kv_tile<D>(k_codes, k_s + k_stage * Tile::kKvBytes);
      if (v_stage >= 0) widen_kv_tile<D>(v_codes, v_s + v_stage * Tile::kKvBytes);
    }
  };

  const int kh = blockIdx.y;
  PrefillCta cta;
  if (!prefill_cta(a, kRows, cta)) return;
  const RequestView& req = cta.req;
  const int G = a.group;
  const int row0 = cta.row0, rows_valid = cta.rows_valid, pos0 = cta.pos0, k_end = cta.k_end;
  const int num_tiles = (k_end + kKeys - 1) / kKeys;
  const int32_t* table = cta.table;

  bool bad = false;
  copy_q_tile<D>(a, req, kh, row0, rows_valid, q_s);
  copy_kv_tile<D, C>(a, table, kh, 0, 0, k_end, k_dst(0), bad);
  if constexpr (Tile::kOverlap) cp_async_commit();
  copy_kv_tile<D, C>(a, table, kh, 1, 0, k_end, v_dst(0), bad);
  if constexpr (Tile::kOverlap && !Tile::kFp8) {
    copy_kv_tile<D, C>(a, table, kh, 0, kKeys, k_end, k_dst(1), bad);
  }
  cp_async_commit();

  // This thread's accumulator rows (CTA-local) and their positions; -1: a padding row.
  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int r_lo = wg * 64 + (static_cast<int>(threadIdx.x) % 128) / 32 * 16 + lane / 4;
  const int rows[2] = {r_lo, r_lo + 8};
  int pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) pos[h] = rows[h] < rows_valid ? pos0 + (row0 + rows[h]) / G : -1;
  // Tiles reaching past the warpgroup's first position need the mask (all of them when the
  // warpgroup has no valid row).
  const int wg_first_pos = wg * 64 < rows_valid ? pos0 + (row0 + wg * 64) / G : -1;

  const uint64_t q_desc = wgmma_desc_sw128(q_s + wg * 64 * 128);
  const uint64_t k_desc = wgmma_desc_sw128(k_s);
  const uint64_t v_desc = wgmma_desc_sw128_mn(v_s, Tile::kKvSubBytes);
  constexpr uint64_t kKvStageDesc = Tile::kKvBytes >> 4;  // descriptor step of one stage

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  static_assert(Tile::kKeys == WgmmaTile<D, bf16>::kKeys);
  float s[kKeys / 2];
  uint32_t p[kKeys / 4];
  float m[2] = {-INFINITY, -INFINITY};  // running row max, log2 units
  float l[2] = {0.0f, 0.0f};            // this thread's part of the running row sum
  float alpha[2];

  auto softmax = [&](int k0) {
    if (k0 + kKeys - 1 > wg_first_pos) {
      online_softmax<kKeys, true>(s, m, l, alpha, a.scale_log2, k0, pos);
    } else {
      online_softmax<kKeys, false>(s, m, l, alpha, a.scale_log2, k0, pos);
    }
  };
  auto to_bf16 = [&] {
#pragma unroll
    for (int i = 0; i < kKeys / 4; ++i) p[i] = bf16x2_bits(s[2 * i], s[2 * i + 1]);
  };

  if constexpr (!Tile::kOverlap) {
    for (int j = 0; j < num_tiles; ++j) {
      cp_async_wait_all();  // K_j and V_j, stage j % 2 (this thread's)
      widen(j % 2, j % 2);
      fence_proxy_async_shared();
      __syncthreads();  // ... everyone's; and every warpgroup left stage (j + 1) % 2
      if (j + 1 < num_tiles) {
        copy_kv_tile<D, C>(a, table, kh, 0, (j + 1) * kKeys, k_end, k_dst((j + 1) % 2), bad);
        copy_kv_tile<D, C>(a, table, kh, 1, (j + 1) * kKeys, k_end, v_dst((j + 1) % 2), bad);
      }
      cp_async_commit();
      wgmma_fence();
      issue_qk<D>(s, q_desc, k_desc + (j % 2) * kKvStageDesc);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_registers(s);
      softmax(j * kKeys);
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i / 2) % 2];
      to_bf16();
      wgmma_fence();
      issue_pv<D>(o, p, v_desc + (j % 2) * kKvStageDesc);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_registers(o);
      wgmma_fence_registers(p);
    }
  } else {
    // Prologue: S_0 and P_0 (O is still zero: no rescale).
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // Q and K_0 (this thread's)
    if constexpr (Tile::kFp8) {
      widen(0, -1);  // K_0 leaves the K staging buffer, then K_1 comes in
      copy_kv_tile<D, C>(a, table, kh, 0, kKeys, k_end, k_dst(1), bad);
      cp_async_commit();
    }
    fence_proxy_async_shared();
    __syncthreads();
    wgmma_fence();
    issue_qk<D>(s, q_desc, k_desc);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_registers(s);
    softmax(0);
    to_bf16();

    // Tiles 0 .. num_tiles - 2: S of the next tile overlaps P V of this one. Every commit
    // is unconditional, so the compiler can follow which group holds which accumulators.
    for (int j = 0; j + 1 < num_tiles; ++j) {
      cp_async_wait_all();  // K_{j+1} and V_j (this thread's)
      widen((j + 1) % 2, j % 2);
      fence_proxy_async_shared();
      __syncthreads();

      wgmma_fence();
      issue_qk<D>(s, q_desc, k_desc + ((j + 1) % 2) * kKvStageDesc);
      wgmma_commit();
      issue_pv<D>(o, p, v_desc + (j % 2) * kKvStageDesc);
      wgmma_commit();

      if (j + 2 < num_tiles) {
        copy_kv_tile<D, C>(a, table, kh, 0, (j + 2) * kKeys, k_end, k_dst(j % 2), bad);
      }
      copy_kv_tile<D, C>(a, table, kh, 1, (j + 1) * kKeys, k_end, v_dst((j + 1) % 2), bad);
      cp_async_commit();

      wgmma_wait<1>();  // S_{j+1}; P_j V_j may still run
      wgmma_fence_registers(s);
      softmax((j + 1) * kKeys);
      wgmma_wait<0>();  // P_j V_j
      wgmma_fence_registers(o);
      wgmma_fence_registers(p);
      to_bf16();
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i / 2) % 2];
    }
    // The last tile: P V only.
    cp_async_wait_all();  // V_{num_tiles - 1}
    widen(-1, (num_tiles - 1) % 2);
    fence_proxy_async_shared();
    __syncthreads();
    wgmma_fence();
    issue_pv<D>(o, p, v_desc + ((num_tiles - 1) % 2) * kKvStageDesc);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_registers(o);
  }

  // Epilogue: 1 / row sum (NaN for the whole CTA after a bad block id), rounded to BF16,
  // staged in the warpgroup's own Q rows (its products are done with them), then 16-byte
  // stores of whole rows.
  const bool any_bad = __syncthreads_or(bad) != 0;
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = group_sum<4>(l[h]);
    inv[h] = any_bad ? __int_as_float(0x7fc00000) : (sum > 0.0f ? a.v_scale / sum : 0.0f);
  }
  const int t = lane % 4;
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t off = (i / 8) * Tile::kQSubBytes + swizzle_128b_offset(rows[h], i % 8) + 4 * t;
      *reinterpret_cast<uint32_t*>(q_s + off) =
          bf16x2_bits(o[4 * i + 2 * h] * inv[h], o[4 * i + 2 * h + 1] * inv[h]);
    }
  }
  warpgroup_barrier(wg);
  bf16* out = static_cast<bf16*>(a.out);
  const int chunk = static_cast<int>(threadIdx.x) % Tile::kChunks;
  constexpr int kRowsPerPass = 128 / Tile::kChunks;  // of the warpgroup's 128 threads
#pragma unroll 4
  for (int i = 0; i < 64 / kRowsPerPass; ++i) {
    const int row =
        wg * 64 + (static_cast<int>(threadIdx.x) % 128) / Tile::kChunks + i * kRowsPerPass;
    if (row >= rows_valid) break;
    const int flat = row0 + row;
    const int64_t token = req.q_begin + flat / G;
    const uint32_t off = (chunk / 8) * Tile::kQSubBytes + swizzle_128b_offset(row, chunk % 8);
    *reinterpret_cast<uint4*>(out + row_offset<D>(a.out_stride, token, kh * G + flat % G) +
                              chunk * 8) = *reinterpret_cast<const uint4*>(q_s + off);
  }
}

}  // namespace

template <int D, typename C>
Status launch_attention_prefill_wgmma(const AttentionArgs& args, int num_requests,
                                      cudaStream_t stream) {
  using Tile = WgmmaTile<D, C>;
  constexpr auto kernel = &wgmma_prefill_kernel<D, C>;
  VLLM_RETURN_IF_ERROR(opt_in_shared_memory<kernel>(
      Tile::kSmemBytes, "cudaFuncSetAttribute(wgmma_prefill_kernel, MaxDynamicSharedMemorySize)"));
  const int64_t tiles =
      ceil_div(static_cast<int64_t>(args.max_query_len) * args.group, Tile::kRows);
  if (tiles <= 0) return Status::ok();
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(args.num_kv_heads),
                  static_cast<unsigned>(num_requests));
  launch_pdl(kernel, grid, Tile::kThreads, Tile::kSmemBytes, stream, args);
  return check_launch("paged_attention wgmma prefill kernel");
}

template Status launch_attention_prefill_wgmma<128, __nv_bfloat16>(const AttentionArgs&, int,
                                                                   cudaStream_t);
template Status launch_attention_prefill_wgmma<256, __nv_bfloat16>(const AttentionArgs&, int,
                                                                   cudaStream_t);
template Status launch_attention_prefill_wgmma<128, KvFp8>(const AttentionArgs&, int, cudaStream_t);
template Status launch_attention_prefill_wgmma<256, KvFp8>(const AttentionArgs&, int, cudaStream_t);

}  // namespace vllm::cuda::detail

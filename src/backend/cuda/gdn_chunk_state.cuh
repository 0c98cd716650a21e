// The chunked delta rule's third kernel (gdn_chunk.cuh says what the three do): per (request,
// value head, 64 value columns) the request's chunks in order, the state in f32 registers.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn_batch.cuh"
#include "backend/cuda/gdn_chunk.cuh"
#include "backend/cuda/gdn_state.cuh"
#include "backend/cuda/mma.cuh"

namespace vllm::cuda::detail {

// ---- 3. per (request, value head, value slice): the chunks in order --------------------------

__global__ void __launch_bounds__(kStateThreads, 1)
    gdn_chunk_state_kernel(const ChunkRuleParams p) {
  pdl_wait();
  pdl_launch_next();
  using T = __nv_bfloat16;
  using L = StateSmem;
  constexpr int KS = kKStride;
  constexpr int RS = kRowStride;

  const int slice = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.slices));
  const int head = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.slices)) % p.value_heads;
  const int request =
      static_cast<int>(blockIdx.x / static_cast<unsigned>(p.slices) / p.value_heads);
  if (request >= p.batch.num_requests) return;
  const RequestRows rows = request_rows(p.batch, request);
  const int num_rows = rows.end - rows.begin;
  if (num_rows == 0 || num_rows < p.min_rows) return;  // the token-by-token kernel's request
  const int tid = threadIdx.x;
  const int col0 = slice * kChunkSlice;  // this block's first value column in the head
  T* out_head = p.out + static_cast<int64_t>(head) * p.dv + col0;
  const int num_chunks = (num_rows + kChunk - 1) / kChunk;
  const int first_chunk = p.ws.chunk_first[request];
  // Padding: no state, zero outputs. So too a request whose chunks the workspace cannot hold,
  // which only a batch whose requests' rows overlap can make (the bound counts each token once).
  if (rows.slot < 0 || first_chunk < 0 || first_chunk + num_chunks > p.ws.max_chunks) {
    for (int i = tid; i < num_rows * kChunkSlice; i += kStateThreads) {
      const int n = i % kChunkSlice;
      if (col0 + n < p.dv) {
        out_head[static_cast<int64_t>(rows.begin + i / kChunkSlice) * p.out_stride + n] =
            __float2bfloat16_rn(0.0f);
      }
    }
    return;
  }

#if defined(VLLM_CUDA_EMULATION)
  unsigned char* smem = gdn_chunk_smem;
#else
  extern __shared__ __align__(16) unsigned char smem[];
#endif
  T* st = reinterpret_cast<T*>(smem + L::kST);    // [slice][KS] S^T in BF16
  T* ut = reinterpret_cast<T*>(smem + L::kUT);    // [slice][RS] U^T
  T* udt = reinterpret_cast<T*>(smem + L::kUdT);  // [slice][RS] U^T e^{G_C - G_s}

  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = lane / 4;
  const int t4 = lane % 4;
  // Warp w: rows [16 rw, +16) of the chunk (U, O, P) and of S^T, value columns [32 ch, +32)
  // of U and O, key columns [64 ch, +64) of S^T.
  const int rw = warp % 4;
  const int ch = warp / 4;
  const int r_lo = 16 * rw + g;
  const int r_hi = r_lo + 8;
  const int key_head = head / p.group;
  const int dk_tiles = (p.dk + 15) / 16;

  // One chunk's tiles into stage `stage`: q, k, k^T, W, the U~ slice, G.
  auto fetch = [&](int j, int stage) {
    unsigned char* base = smem + stage * L::kStage;
    const size_t chunk = static_cast<size_t>(first_chunk + j);
    const size_t key_tile = (chunk * p.key_heads + key_head) * kChunk;
    const size_t head_tile = chunk * p.value_heads + head;
    constexpr int kPieces = kChunkKeyDim / 8;  // of a 128-wide row
    constexpr int kRowPieces = kChunk / 8;     // of a 64-wide row
    for (int i = tid; i < 3 * kChunk * kPieces; i += kStateThreads) {
      const int which = i / (kChunk * kPieces);  // 0 q, 1 k, 2 W
      const int row = i / kPieces % kChunk;
      const int e0 = i % kPieces * 8;
      const T* src = which == 0   ? p.ws.qn + (key_tile + row) * kChunkKeyDim
                     : which == 1 ? p.ws.kn + (key_tile + row) * kChunkKeyDim
                                  : p.ws.w + (head_tile * kChunk + row) * kChunkKeyDim;
      T* dst = reinterpret_cast<T*>(base + (which == 2 ? L::kW : which * kTileK)) + row * KS;
      cp_async_16(dst + e0, src + e0, 16);
    }
    const T* kt_src = p.ws.kt + key_tile * kChunkKeyDim;  // [128][64]
    for (int i = tid; i < kChunkKeyDim * kRowPieces; i += kStateThreads) {
      const int row = i / kRowPieces;
      const int e0 = i % kRowPieces * 8;
      cp_async_16(reinterpret_cast<T*>(base + L::kKT) + row * RS + e0, kt_src + row * kChunk + e0,
                  16);
    }
    for (int i = tid; i < kChunk * kRowPieces + kChunk / 4; i += kStateThreads) {
      if (i < kChunk * kRowPieces) {
        const int row = i / kRowPieces;
        const int n0 = i % kRowPieces * 8;
        cp_async_16(reinterpret_cast<T*>(base + L::kU) + row * RS + n0,
                    p.ws.u + (head_tile * kChunk + row) * p.ws.dv_pad + col0 + n0, 16);
      } else {
        const int piece = i - kChunk * kRowPieces;
        cp_async_16(base + L::kGcum + piece * 16, p.ws.gcum + head_tile * kChunk + piece * 4, 16);
      }
    }
    cp_async_commit();
  };
  fetch(0, 0);

  // S^T rows n = 16 rw + g (+ 8) x key columns i = 64 ch + 8 it + 2 t4 (+ 1), accumulator
  // layout.
  float s_acc[8][4];
  const int64_t state_base = (static_cast<int64_t>(rows.slot) * p.value_heads + head) * p.dk * p.dv;
  // Where s_acc[it][e] lives in the slot's [Dk, Dv] state, or -1 past Dk or Dv.
  auto state_at = [&](int it, int e) -> int64_t {
    const int n = col0 + 16 * rw + g + (e >= 2 ? 8 : 0);
    const int i = 64 * ch + 8 * it + 2 * t4 + (e & 1);
    return i < p.dk && n < p.dv ? static_cast<int64_t>(i) * p.dv + n : -1;
  };
#pragma unroll
  for (int it = 0; it < 8; ++it) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t at = state_at(it, e);
      s_acc[it][e] = at >= 0 ? load_state(p.state, state_base + at, p.state_type) : 0.0f;
    }
  }
  // S^T's BF16 copy: st[n][i].
  auto store_st = [&] {
#pragma unroll
    for (int it = 0; it < 8; ++it) {
      const int i = 64 * ch + 8 * it + 2 * t4;
      *reinterpret_cast<uint32_t*>(st + r_lo * KS + i) = pack_bf16x2(s_acc[it][0], s_acc[it][1]);
      *reinterpret_cast<uint32_t*>(st + r_hi * KS + i) = pack_bf16x2(s_acc[it][2], s_acc[it][3]);
    }
  };
  store_st();

  for (int j = 0; j < num_chunks; ++j) {
    const int c0 = rows.begin + j * kChunk;
    const int valid = min(kChunk, rows.end - c0);
    // Stage j landed and is visible; every warp left chunk j - 1, so its stage may be
    // refilled, and its S^T stores are visible.
    cp_async_wait_all();
    __syncthreads();
    if (j + 1 < num_chunks) fetch(j + 1, (j + 1) % 2);
    const unsigned char* base = smem + (j % 2) * L::kStage;
    const T* qs = reinterpret_cast<const T*>(base + L::kQ);
    const T* ks = reinterpret_cast<const T*>(base + L::kK);
    const T* kts = reinterpret_cast<const T*>(base + L::kKT);
    const T* ws = reinterpret_cast<const T*>(base + L::kW);
    const T* us = reinterpret_cast<const T*>(base + L::kU);
    const float* gcum = reinterpret_cast<const float*>(base + L::kGcum);

    // ---- U = U~ - W S_0, O = Q S_0 (value columns [32 ch, +32)), P = Q K^T (all s) ----
    float u[4][4], o[4][4], pk[8][4];
    zero_fragments(o);
    zero_fragments(pk);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int n = 32 * ch + nt * 8 + 2 * t4;
      const uint32_t lo = smem_u32(us + r_lo * RS + n), hi = smem_u32(us + r_hi * RS + n);
      u[nt][0] = __uint_as_float(lo << 16);
      u[nt][1] = __uint_as_float(lo & 0xffff0000u);
      u[nt][2] = __uint_as_float(hi << 16);
      u[nt][3] = __uint_as_float(hi & 0xffff0000u);
    }
#pragma unroll
    for (int kc = 0; kc < kChunkKeyDim / 16; ++kc) {
      if (kc >= dk_tiles) break;
      const int col = kc * 16 + 2 * t4;
      uint32_t aw[4], aq[4];
      load_a(ws + r_lo * KS + col, ws + r_hi * KS + col, aw);
#pragma unroll
      for (int i = 0; i < 4; ++i) aw[i] ^= 0x80008000u;  // -W: both halves' sign bits
      load_a(qs + r_lo * KS + col, qs + r_hi * KS + col, aq);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const T* sp = st + (32 * ch + nt * 8 + g) * KS + col;
        const uint32_t b[2] = {smem_u32(sp), smem_u32(sp + 8)};
        mma_m16n8k16_bf16(u[nt], aw, b);
        mma_m16n8k16_bf16(o[nt], aq, b);
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (nt > 2 * rw + 1) continue;  // columns s past the warp's last row are masked
        const T* kp = ks + (nt * 8 + g) * KS + col;
        const uint32_t bk[2] = {smem_u32(kp), smem_u32(kp + 8)};
        mma_m16n8k16_bf16(pk[nt], aq, bk);
      }
    }
    {
      const float g_lo = gcum[r_lo], g_hi = gcum[r_hi];
      const float g_last = gcum[kChunk - 1];
      const float gamma_lo = expf(g_lo), gamma_hi = expf(g_hi);
      const float d_lo = expf(g_last - g_lo), d_hi = expf(g_last - g_hi);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = e < 2 ? r_lo : r_hi;
          const int s = nt * 8 + 2 * t4 + (e & 1);
          pk[nt][e] = s <= t ? expf((e < 2 ? g_lo : g_hi) - gcum[s]) * pk[nt][e] : 0.0f;
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        o[nt][0] *= gamma_lo;
        o[nt][1] *= gamma_lo;
        o[nt][2] *= gamma_hi;
        o[nt][3] *= gamma_hi;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = e < 2 ? r_lo : r_hi;
          const int n = 32 * ch + nt * 8 + 2 * t4 + (e & 1);
          ut[n * RS + t] = __float2bfloat16_rn(u[nt][e]);
          udt[n * RS + t] = __float2bfloat16_rn(u[nt][e] * (e < 2 ? d_lo : d_hi));
        }
      }
    }
    // U^T is complete, and every warp has read S^T (rewritten below).
    __syncthreads();

    // ---- O += P U, stored ----
#pragma unroll
    for (int kc = 0; kc < kChunk / 16; ++kc) {
      if (kc > rw) break;  // P is lower triangular
      const uint32_t ap[4] = {pack_bf16x2(pk[2 * kc][0], pk[2 * kc][1]),
                              pack_bf16x2(pk[2 * kc][2], pk[2 * kc][3]),
                              pack_bf16x2(pk[2 * kc + 1][0], pk[2 * kc + 1][1]),
                              pack_bf16x2(pk[2 * kc + 1][2], pk[2 * kc + 1][3])};
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const T* up = ut + (32 * ch + nt * 8 + g) * RS + kc * 16 + 2 * t4;
        const uint32_t b[2] = {smem_u32(up), smem_u32(up + 8)};
        mma_m16n8k16_bf16(o[nt], ap, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int n = 32 * ch + nt * 8 + 2 * t4;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = half == 0 ? r_lo : r_hi;
        if (t >= valid) continue;
        T* dst = out_head + static_cast<int64_t>(c0 + t) * p.out_stride + n;
        if (col0 + n < p.dv) dst[0] = __float2bfloat16_rn(o[nt][2 * half]);
        if (col0 + n + 1 < p.dv) dst[1] = __float2bfloat16_rn(o[nt][2 * half + 1]);
      }
    }

    // ---- S^T = Gamma_C S^T + (U^T diag(e^{G_C - G_s})) K ----
    {
      const float gamma_c = expf(gcum[kChunk - 1]);
#pragma unroll
      for (int it = 0; it < 8; ++it) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[it][e] *= gamma_c;
      }
#pragma unroll
      for (int kc = 0; kc < kChunk / 16; ++kc) {
        const int col = kc * 16 + 2 * t4;
        uint32_t a[4];
        load_a(udt + r_lo * RS + col, udt + r_hi * RS + col, a);
#pragma unroll
        for (int it = 0; it < 8; ++it) {
          const int i0 = 64 * ch + 8 * it;
          if (i0 >= p.dk) break;
          const T* kp = kts + (i0 + g) * RS + col;  // B[s][i] = k^T[i][s]
          const uint32_t b[2] = {smem_u32(kp), smem_u32(kp + 8)};
          mma_m16n8k16_bf16(s_acc[it], a, b);
        }
      }
    }
    store_st();
  }

#pragma unroll
  for (int it = 0; it < 8; ++it) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t at = state_at(it, e);
      if (at >= 0) store_state(p.state, state_base + at, s_acc[it][e], p.state_type);
    }
  }
}

}  // namespace vllm::cuda::detail

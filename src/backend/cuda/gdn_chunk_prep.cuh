// The chunked delta rule's second kernel (gdn_chunk.cuh says what the three do): every
// chunk's state-independent products at once -- q and k L2-normalised, K K^T, the triangular
// solve for T = (I + A)^{-1}, W and U~ -- into the workspace the state kernel reads.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn_batch.cuh"
#include "backend/cuda/gdn_chunk.cuh"
#include "backend/cuda/mma.cuh"

namespace vllm::cuda::detail {

// ---- 2. per chunk: normalised q, k; W; U~; G -----------------------------------------------

__global__ void __launch_bounds__(kChunkThreads, 3) gdn_chunk_prep_kernel(const ChunkRuleParams p) {
  pdl_wait();
  pdl_launch_next();
  using T = __nv_bfloat16;
  using L = PrepSmem;
  constexpr unsigned kFull = 0xffffffffu;
  constexpr int KS = kKStride;
  constexpr int RS = kRowStride;

  const int chunk = static_cast<int>(blockIdx.x);
  const int head = static_cast<int>(blockIdx.y);
  const int request = p.ws.chunk_request[chunk];
  if (request < 0) return;
  const RequestRows rows = request_rows(p.batch, request);
  const int c0 = rows.begin + (chunk - p.ws.chunk_first[request]) * kChunk;
  const int valid = min(kChunk, rows.end - c0);
  const int key_head = head / p.group;

#if defined(VLLM_CUDA_EMULATION)
  unsigned char* smem = gdn_chunk_smem;
#else
  extern __shared__ __align__(16) unsigned char smem[];
#endif
  T* ks = reinterpret_cast<T*>(smem + L::kK);          // [C][KS] k, normalised in place
  T* qs = reinterpret_cast<T*>(smem + L::kQ);          // [C][KS] q, normalised and scaled
  T* vs = reinterpret_cast<T*>(smem + L::kV);          // [C][RS] a v slice (after q)
  float* as = reinterpret_cast<float*>(smem + L::kA);  // [C][kAStride] A, columns by parity
  T* kt = reinterpret_cast<T*>(smem + L::kKT);         // [128][RS] k^T (after A)
  T* tw = reinterpret_cast<T*>(smem + L::kTw);         // [C][RS] T diag(beta Gamma)
  T* tu = reinterpret_cast<T*>(smem + L::kTu);         // [C][RS] T diag(beta)
  float* gcum = reinterpret_cast<float*>(smem + L::kGcum);
  float* beta_s = reinterpret_cast<float*>(smem + L::kBeta);

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = lane / 4;   // fragment row group
  const int t4 = lane % 4;  // fragment column pair
  const int r_lo = 16 * warp + g;
  const int r_hi = r_lo + 8;

  // ---- load: raw k and q rows; g, beta, G ----
  {
    constexpr int kPieces = kChunkKeyDim / 8;  // 16-byte pieces of a row
    for (int i = tid; i < 2 * kChunk * kPieces; i += kChunkThreads) {
      const int rr = i / kPieces;  // rows 0..63 k, 64..127 q
      const int e0 = i % kPieces * 8;
      const bool is_q = rr >= kChunk;
      const int row = rr % kChunk;
      T* dst = (is_q ? qs : ks) + row * KS + e0;
      const bool ok = row < valid && e0 < p.dk;
      const T* src = p.k;  // a valid address for the zero-filling copies
      if (ok) {
        src = (is_q ? p.q + (c0 + row) * p.q_stride : p.k + (c0 + row) * p.k_stride) +
              static_cast<int64_t>(key_head) * p.dk + e0;
      }
      if (p.qk_vec) {
        cp_async_16(dst, src, ok ? 16 : 0);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          dst[j] = ok && e0 + j < p.dk ? src[j] : __float2bfloat16_rn(0.0f);
        }
      }
    }
    cp_async_commit();
    if (warp == 0) {
      // Lane l holds g of rows l and l + 32; after the butterfly g0 / g1 are the sums up to
      // their rows and tot0 the sum of rows 0..31.
      const bool ok0 = lane < valid, ok1 = lane + 32 < valid;
      float g0 = ok0 ? p.g[(c0 + lane) * p.g_stride + head] : 0.0f;
      float g1 = ok1 ? p.g[(c0 + lane + 32) * p.g_stride + head] : 0.0f;
      beta_s[lane] = ok0 ? p.beta[(c0 + lane) * p.beta_stride + head] : 0.0f;
      beta_s[lane + 32] = ok1 ? p.beta[(c0 + lane + 32) * p.beta_stride + head] : 0.0f;
      float tot0 = g0, tot1 = g1;
#pragma unroll
      for (int off = 1; off < kWarpSize; off <<= 1) {
        const float o0 = __shfl_xor_sync(kFull, tot0, off);
        const float o1 = __shfl_xor_sync(kFull, tot1, off);
        if (lane & off) {
          g0 += o0;
          g1 += o1;
        }
        tot0 += o0;
        tot1 += o1;
      }
      gcum[lane] = g0;
      gcum[lane + 32] = tot0 + g1;
    }
    cp_async_wait_all();
  }
  __syncthreads();

  // ---- k and q rows L2-normalised in place (q also scaled), 8 lanes a row ----
  {
    const int sub = lane / 8;
    const int l8 = lane % 8;
#pragma unroll
    for (int pass = 0; pass < 2 * kChunk / 16; ++pass) {
      const int rr = pass * 16 + warp * 4 + sub;
      const bool is_q = rr >= kChunk;
      T* row = (is_q ? qs : ks) + rr % kChunk * KS;
      Pack<T, 8> lo = *reinterpret_cast<const Pack<T, 8>*>(row + l8 * 8);
      Pack<T, 8> hi = *reinterpret_cast<const Pack<T, 8>*>(row + 64 + l8 * 8);
      float inv = 1.0f;
      if (p.use_l2norm) {
        float sq = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float a = __bfloat162float(lo.v[j]), b = __bfloat162float(hi.v[j]);
          sq = fmaf(a, a, sq);
          sq = fmaf(b, b, sq);
        }
        sq += __shfl_xor_sync(kFull, sq, 1);
        sq += __shfl_xor_sync(kFull, sq, 2);
        sq += __shfl_xor_sync(kFull, sq, 4);
        inv = 1.0f / sqrtf(sq + p.l2norm_eps);
      }
      const float mult = is_q ? p.scale : 1.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        lo.v[j] = __float2bfloat16_rn((__bfloat162float(lo.v[j]) * inv) * mult);
        hi.v[j] = __float2bfloat16_rn((__bfloat162float(hi.v[j]) * inv) * mult);
      }
      *reinterpret_cast<Pack<T, 8>*>(row + l8 * 8) = lo;
      *reinterpret_cast<Pack<T, 8>*>(row + 64 + l8 * 8) = hi;
    }
  }
  __syncthreads();

  // The first value head of each key head stores the normalised rows; every head stores G.
  if (head % p.group == 0) {
    constexpr int kPieces = kChunkKeyDim / 8;
    const size_t tile = (static_cast<size_t>(chunk) * p.key_heads + key_head) * kChunk;
    for (int i = tid; i < 2 * kChunk * kPieces; i += kChunkThreads) {
      const int rr = i / kPieces;
      const int e0 = i % kPieces * 8;
      const bool is_q = rr >= kChunk;
      const int row = rr % kChunk;
      T* dst = (is_q ? p.ws.qn : p.ws.kn) + (tile + row) * kChunkKeyDim + e0;
      *reinterpret_cast<Pack<T, 8>*>(dst) =
          *reinterpret_cast<const Pack<T, 8>*>((is_q ? qs : ks) + row * KS + e0);
    }
  }
  const size_t head_tile = static_cast<size_t>(chunk) * p.value_heads + head;
  if (tid < kChunk) p.ws.gcum[head_tile * kChunk + tid] = gcum[tid];

  // ---- K K^T -> A: A[t][s] = beta_t e^{G_t - G_s} k_t . k_s for s < t ----
  {
    const int dk_tiles = (p.dk + 15) / 16;
    float kk[8][4];
    zero_fragments(kk);
#pragma unroll
    for (int kc = 0; kc < kChunkKeyDim / 16; ++kc) {
      if (kc >= dk_tiles) break;
      const int col = kc * 16 + 2 * t4;
      uint32_t ak[4];
      load_a(ks + r_lo * KS + col, ks + r_hi * KS + col, ak);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (nt > 2 * warp + 1) continue;  // columns s past the warp's last row: masked
        const T* kp = ks + (nt * 8 + g) * KS + col;
        const uint32_t b[2] = {smem_u32(kp), smem_u32(kp + 8)};
        mma_m16n8k16_bf16(kk[nt], ak, b);
      }
    }
    const float g_lo = gcum[r_lo], g_hi = gcum[r_hi];
    const float b_lo = beta_s[r_lo], b_hi = beta_s[r_hi];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = e < 2 ? r_lo : r_hi;
        const int s = nt * 8 + 2 * t4 + (e & 1);
        const float a =
            s < t ? (e < 2 ? b_lo : b_hi) * expf((e < 2 ? g_lo : g_hi) - gcum[s]) * kk[nt][e]
                  : 0.0f;
        as[t * kAStride + (s & 1) * kAHalf + (s >> 1)] = a;
      }
    }
  }
  __syncthreads();

  // ---- T = (I + A)^{-1}: column c, rows of parity h ----
  {
    const int c = tid >> 1;
    const int h = tid & 1;
    float tm[kChunk / 2];  // tm[j] = T[2 j + h][c]
#pragma unroll
    for (int j = 0; j < kChunk / 2; ++j) tm[j] = 2 * j + h == c ? 1.0f : 0.0f;
#pragma unroll
    for (int t = 1; t < kChunk; ++t) {
      // T[t][c] = -sum_{s < t} A[t][s] T[s][c] (zero terms for s < c), or 1 at t = c.
      const float* arow = as + t * kAStride + h * kAHalf;  // A[t][2 j + h]
      float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
      for (int j = 0; j < t / 2; ++j) {
        if (j & 1) {
          acc1 = fmaf(arow[j], tm[j], acc1);
        } else {
          acc0 = fmaf(arow[j], tm[j], acc0);
        }
      }
      if ((t & 1) && h == 0) acc0 = fmaf(arow[t / 2], tm[t / 2], acc0);  // s = t - 1
      float sum = acc0 + acc1;
      sum += __shfl_xor_sync(kFull, sum, 1);
      if ((t & 1) == h) tm[t / 2] = t == c ? 1.0f : -sum;
    }
    const float bc = beta_s[c];
    const float bgc = bc * expf(gcum[c]);
#pragma unroll
    for (int j = 0; j < kChunk / 2; ++j) {
      const int row = 2 * j + h;
      tu[row * RS + c] = __float2bfloat16_rn(tm[j] * bc);
      tw[row * RS + c] = __float2bfloat16_rn(tm[j] * bgc);
    }
  }
  __syncthreads();

  // ---- k^T (in A's bytes) -> shared and, for the first value head of the key head, the
  // workspace ----
  {
    T* kt_dst =
        p.ws.kt + (static_cast<size_t>(chunk) * p.key_heads + key_head) * kChunkKeyDim * kChunk;
    constexpr int kPieces = kChunk / 8;  // 16-byte pieces of a k^T row
    for (int i = tid; i < kChunkKeyDim * kPieces; i += kChunkThreads) {
      const int e = i / kPieces;  // key dim: the row of k^T
      const int s0 = i % kPieces * 8;
      Pack<T, 8> v8;
#pragma unroll
      for (int j = 0; j < 8; ++j) v8.v[j] = ks[(s0 + j) * KS + e];
      *reinterpret_cast<Pack<T, 8>*>(kt + e * RS + s0) = v8;
      if (head % p.group == 0) *reinterpret_cast<Pack<T, 8>*>(kt_dst + e * kChunk + s0) = v8;
    }
  }
  __syncthreads();

  // ---- W = T diag(beta Gamma) K and U~ = T diag(beta) V, 64 columns at a time -> workspace ----
  // Rows t of warp w need columns s <= t of T only (it is lower triangular): k chunks up to w.
  // B[s][n] of K comes from k^T (32-bit loads), of V from v's rows (two 16-bit loads).
  auto product = [&](const T* tmat, auto load_b, T* dst, int dst_stride) {
    float acc[8][4];
    zero_fragments(acc);
#pragma unroll
    for (int sc = 0; sc < kChunk / 16; ++sc) {
      if (sc > warp) break;
      const int col = sc * 16 + 2 * t4;
      uint32_t a[4];
      load_a(tmat + r_lo * RS + col, tmat + r_hi * RS + col, a);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        uint32_t b[2];
        load_b(col, nt * 8 + g, b);
        mma_m16n8k16_bf16(acc[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int n = nt * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(dst + r_lo * dst_stride + n) =
          pack_bf16x2(acc[nt][0], acc[nt][1]);
      *reinterpret_cast<uint32_t*>(dst + r_hi * dst_stride + n) =
          pack_bf16x2(acc[nt][2], acc[nt][3]);
    }
  };
  T* w_dst = p.ws.w + head_tile * kChunk * kChunkKeyDim;
  for (int half = 0; half < kChunkKeyDim / 64; ++half) {
    if (half * 64 >= p.dk) {  // columns of W past Dk are zero (k is zero there)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int n = half * 64 + nt * 8 + 2 * t4;
        *reinterpret_cast<uint32_t*>(w_dst + r_lo * kChunkKeyDim + n) = 0u;
        *reinterpret_cast<uint32_t*>(w_dst + r_hi * kChunkKeyDim + n) = 0u;
      }
      continue;
    }
    const T* kt_half = kt + half * 64 * RS;
    product(
        tw,
        [&](int s, int n, uint32_t(&b)[2]) {
          b[0] = smem_u32(kt_half + n * RS + s);
          b[1] = smem_u32(kt_half + n * RS + s + 8);
        },
        w_dst + half * 64, kChunkKeyDim);
  }
  T* u_dst = p.ws.u + head_tile * kChunk * p.ws.dv_pad;
  for (int slice = 0; slice < p.slices; ++slice) {
    const int col0 = slice * kChunkSlice;
    constexpr int kVPieces = kChunkSlice / 8;
    for (int i = tid; i < kChunk * kVPieces; i += kChunkThreads) {
      const int row = i / kVPieces;
      const int n0 = i % kVPieces * 8;
      T* dst = vs + row * RS + n0;
      const bool ok = row < valid && col0 + n0 < p.dv;
      const T* src = p.v;
      if (ok) src = p.v + (c0 + row) * p.v_stride + static_cast<int64_t>(head) * p.dv + col0 + n0;
      if (p.v_vec) {
        cp_async_16(dst, src, ok ? 16 : 0);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          dst[j] = ok && col0 + n0 + j < p.dv ? src[j] : __float2bfloat16_rn(0.0f);
        }
      }
    }
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    product(
        tu, [&](int s, int n, uint32_t(&b)[2]) { load_b_rows(vs + s * RS + n, RS, b); },
        u_dst + col0, p.ws.dv_pad);
    __syncthreads();  // every warp has read vs before the next slice lands
  }
}

}  // namespace vllm::cuda::detail

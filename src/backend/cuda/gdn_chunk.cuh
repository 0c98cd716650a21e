// The gated delta rule for prefill rows in chunks on tensor cores (gdn.cuh; the semantics of
// cpu::gated_delta_rule), for BF16 activations: the chunked form of the recurrence, as
// flash-linear-attention's chunk_gated_delta_rule computes it, in one kernel that carries the
// state across chunks. gdn_rule.cu launches it for requests of at least kChunkMinRows rows
// and the recurrent kernel for the rest.
//
// The form. Per (request, value head) the state S is Dk x Dv and token t does
//   S_t = e^{g_t} S_{t-1} + k_t^T u_t,   u_t = beta_t (v_t - e^{g_t} k_t S_{t-1}),   o_t = q_t S_t
// (k, q L2-normalised rows, q scaled). Over a chunk of C tokens starting from S_0, with G_t
// the cumulative sum of g inside the chunk and Gamma_t = e^{G_t}:
//   A = strictly lower (beta_t e^{G_t - G_s} k_t . k_s),    T = (I + A)^{-1}
//   W = T diag(beta Gamma) K,    U~ = T diag(beta) V,       U = U~ - W S_0
//   O = diag(Gamma) Q S_0 + (lower incl. diagonal (e^{G_t - G_s} q_t . k_s)) U
//   S_C = Gamma_C S_0 + (diag(e^{G_C - G_s}) K)^T U
// which is the recurrence unrolled (U's rows are the u_t). Every exponent is of a difference
// G_t - G_s <= 0 (g <= 0), so nothing overflows however long the chunk.
//
// Block: 4 warps, one (request, value head, slice of kChunkSlice value columns); it walks the
// request's rows in chunks of kChunk = 64 tokens, keeping S in f32 registers (the mma
// accumulators of S's 128 x 64 slice: warp w owns key rows [32 w, 32 w + 32)). Per chunk:
//   load     k, q rows and the v slice -> shared memory by 16-byte cp.async (zero past Dk, past
//            Dv and past the request's rows); g, beta and G = cumsum(g) (a warp scan); a
//            partial last chunk has zero rows with g = beta = 0, which leave S and every
//            valid row unchanged
//   barrier  k, q L2-normalised in place (f32 sums over 8 lanes a row; q scaled)
//   barrier  K K^T and Q K^T, warp w its 16 rows t: A -> shared (f32), P = masked Q K^T stays
//            in the warp's registers (it is the A operand of P U, same rows)
//   barrier  T by forward substitution in f32: thread pair (column c, parity h) holds the rows
//            of column c of its parity in registers; each row t is one sum over the earlier
//            rows, completed by one shuffle; T diag(beta) and T diag(beta Gamma) -> shared BF16
//   barrier  U~ (rows t of warp w), then U = U~ - W S_0 with W made 16 key columns at a time,
//            its accumulators the A fragments; Gamma Q S_0 into O's accumulators; U -> shared,
//            transposed
//   barrier  O += P U, O stored; S = Gamma_C S + (decayed K)^T U; S's BF16 copy -> shared
//            (the B operand of the next chunk's W S_0 and Q S_0)
// S itself stays f32 and is read once before the chunk loop and written once after it; the
// products round their operands (T, W, S_0, U, q, k, v) to BF16 and sum in f32, as FLA's
// kernels do, so the output and the state agree with the f32 recurrence to BF16 tolerance.
//
// Key dims up to kChunkKeyDim (zero-padded to it; Qwen's 128), value dims any size (slices of
// 64 columns, masked past Dv). Shared memory ~108 KB: two blocks per SM.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn_batch.cuh"
#include "backend/cuda/mma.cuh"

namespace vllm::cuda::detail {

constexpr int kChunk = 64;          // tokens per chunk: the triangular solve's size
constexpr int kChunkKeyDim = 128;   // key-dim capacity (rows of S, columns of k and q)
constexpr int kChunkSlice = 64;     // value columns per block
constexpr int kChunkThreads = 128;  // 4 warps of 16 chunk rows each
// Requests with at least this many rows take the chunked kernel (host-side choice): one chunk
// costs about what a few tokens of the token-by-token kernel cost.
constexpr int kChunkMinRows = 16;

struct ChunkRuleParams {
  const __nv_bfloat16* q;  // [T, Hk * Dk], row stride q_stride
  const __nv_bfloat16* k;  // [T, Hk * Dk]
  const __nv_bfloat16* v;  // [T, Hv * Dv]
  const float* g;          // [T, Hv]
  const float* beta;       // [T, Hv]
  __nv_bfloat16* out;      // [T, Hv * Dv]
  float* state;            // [num_slots, Hv, Dk, Dv]
  GdnBatchView batch;
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride, out_stride;
  int value_heads;
  int group;  // value heads per key head
  int dk;     // 1 .. kChunkKeyDim
  int dv;
  int slices;  // ceil(dv / kChunkSlice)
  int min_rows;
  float scale;
  float l2norm_eps;
  bool use_l2norm;
  bool qk_vec;  // every k / q head row starts on 16 bytes and Dk % 8 == 0: 16-byte loads
  bool v_vec;   // likewise for v's rows and Dv
};

// Shared memory layout (element strides padded so that a warp's 32-bit fragment loads fall in
// 32 different banks).
struct ChunkSmem {
  static constexpr int kKStride = kChunkKeyDim + 8;  // bf16: k, q rows; S^T rows
  static constexpr int kRowStride = kChunk + 8;      // bf16: v, T, U^T rows (64 wide)
  static constexpr int kAHalf = 36;                  // f32: A row = even columns | odd columns
  static constexpr int kAStride = 2 * kAHalf;
  static constexpr int kK = 0;  // byte offsets
  static constexpr int kQ = kK + kChunk * kKStride * 2;
  static constexpr int kV = kQ + kChunk * kKStride * 2;
  static constexpr int kA = kV + kChunk * kRowStride * 2;
  static constexpr int kTw = kA + kChunk * kAStride * 4;
  static constexpr int kTu = kTw + kChunk * kRowStride * 2;
  static constexpr int kUT = kTu + kChunk * kRowStride * 2;
  static constexpr int kST = kUT + kChunkSlice * kRowStride * 2;
  static constexpr int kGcum = kST + kChunkSlice * kKStride * 2;
  static constexpr int kBeta = kGcum + kChunk * 4;
  static constexpr int kBytes = kBeta + kChunk * 4;
  static_assert(kChunkSlice == kChunk, "U^T and v rows share the 64-wide stride");
  static_assert(2 * kBytes <= 227 * 1024, "two blocks per SM");
};

__device__ __forceinline__ uint32_t smem_u32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
__device__ __forceinline__ float bf16_at(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

#if defined(VLLM_CUDA_EMULATION)
extern unsigned char gdn_chunk_smem[];
#endif

__global__ void __launch_bounds__(kChunkThreads, 2)
    gated_delta_rule_chunk_kernel(const ChunkRuleParams p) {
  pdl_wait();
  pdl_launch_next();
  using T = __nv_bfloat16;
  using L = ChunkSmem;
  constexpr unsigned kFull = 0xffffffffu;
  constexpr int KS = L::kKStride;
  constexpr int RS = L::kRowStride;

  const int slice = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.slices));
  const int head = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.slices)) % p.value_heads;
  const int request =
      static_cast<int>(blockIdx.x / static_cast<unsigned>(p.slices) / p.value_heads);
  if (request >= p.batch.num_requests) return;
  const RequestRows rows = request_rows(p.batch, request);
  const int num_rows = rows.end - rows.begin;
  if (num_rows == 0 || num_rows < p.min_rows) return;  // the recurrent kernel's request
  const int tid = threadIdx.x;
  const int col0 = slice * kChunkSlice;  // this block's first value column in the head
  T* out_head = p.out + static_cast<int64_t>(head) * p.dv + col0;
  if (rows.slot < 0) {  // padding: no state, zero outputs
    for (int i = tid; i < num_rows * kChunkSlice; i += kChunkThreads) {
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
  T* ks = reinterpret_cast<T*>(smem + L::kK);          // [C][KS] normalised k
  T* qs = reinterpret_cast<T*>(smem + L::kQ);          // [C][KS] normalised, scaled q
  T* vs = reinterpret_cast<T*>(smem + L::kV);          // [C][RS] v slice
  float* as = reinterpret_cast<float*>(smem + L::kA);  // [C][kAStride] A, columns by parity
  T* tw = reinterpret_cast<T*>(smem + L::kTw);         // [C][RS] T diag(beta Gamma)
  T* tu = reinterpret_cast<T*>(smem + L::kTu);         // [C][RS] T diag(beta)
  T* ut = reinterpret_cast<T*>(smem + L::kUT);         // [slice][RS] U^T
  T* st = reinterpret_cast<T*>(smem + L::kST);         // [slice][KS] S^T in BF16
  float* gcum = reinterpret_cast<float*>(smem + L::kGcum);
  float* beta_s = reinterpret_cast<float*>(smem + L::kBeta);

  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = lane / 4;   // fragment row group
  const int t4 = lane % 4;  // fragment column pair
  const int key_head = head / p.group;
  const int dk_tiles = (p.dk + 15) / 16;  // 16-wide key-dim chunks holding any of Dk

  // S rows [32 warp + 16 mi, +16) x columns [8 nt, +8) of the slice, accumulator layout.
  float s_acc[2][8][4];
  float* state = p.state + (static_cast<int64_t>(rows.slot) * p.value_heads + head) * p.dk * p.dv;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 32 * warp + 16 * mi + g + (e >= 2 ? 8 : 0);
        const int n = col0 + nt * 8 + 2 * t4 + (e & 1);
        s_acc[mi][nt][e] = i < p.dk && n < p.dv ? state[static_cast<int64_t>(i) * p.dv + n] : 0.0f;
      }
    }
  }
  // S's BF16 copy, transposed: st[n][i].
  auto store_st = [&] {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 32 * warp + 16 * mi + g + (e >= 2 ? 8 : 0);
          const int n = nt * 8 + 2 * t4 + (e & 1);
          st[n * KS + i] = __float2bfloat16_rn(s_acc[mi][nt][e]);
        }
      }
    }
  };
  store_st();

  const int sub = lane / 8;  // the k / q norm: 8 lanes a row, 4 rows a warp
  const int l8 = lane % 8;
  for (int c0 = rows.begin; c0 < rows.end; c0 += kChunk) {
    const int valid = min(kChunk, rows.end - c0);
    // The previous chunk's reads of every buffer below are done; its S^T stores are visible.
    __syncthreads();

    // ---- load: raw k, q rows and the v slice (zero past Dk, Dv and the request's rows), g
    // and beta; G = cumsum(g) by a butterfly scan in warp 0 -------------------------------
    {
      constexpr int kPieces = kChunkKeyDim / 8;  // 16-byte pieces of a k / q row
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
          for (int j = 0; j < 8; ++j)
            dst[j] = ok && e0 + j < p.dk ? src[j] : __float2bfloat16_rn(0.0f);
        }
      }
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
      if (warp == 0) {
        // Lane l holds g of rows l and l + 32; incl: the sum up to its row, tot: the sum of
        // its aligned block of lanes (the whole 32 at the end).
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
    // k and q rows L2-normalised in place (q also scaled), 8 lanes a row.
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
    __syncthreads();

    // ---- K K^T -> A (shared), Q K^T -> P (registers); warp rows [16 warp, +16) -----------
    const int r_lo = 16 * warp + g;
    const int r_hi = r_lo + 8;
    float qk[8][4];
    {
      float kk[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) kk[nt][e] = qk[nt][e] = 0.0f;
      }
#pragma unroll
      for (int kc = 0; kc < kChunkKeyDim / 16; ++kc) {
        if (kc >= dk_tiles) break;
        const int col = kc * 16 + 2 * t4;
        const uint32_t ak[4] = {smem_u32(ks + r_lo * KS + col), smem_u32(ks + r_hi * KS + col),
                                smem_u32(ks + r_lo * KS + col + 8),
                                smem_u32(ks + r_hi * KS + col + 8)};
        const uint32_t aq[4] = {smem_u32(qs + r_lo * KS + col), smem_u32(qs + r_hi * KS + col),
                                smem_u32(qs + r_lo * KS + col + 8),
                                smem_u32(qs + r_hi * KS + col + 8)};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          if (nt > 2 * warp + 1) continue;  // columns s past the warp's last row: masked
          const T* kp = ks + (nt * 8 + g) * KS + col;
          const uint32_t b[2] = {smem_u32(kp), smem_u32(kp + 8)};
          mma_m16n8k16_bf16(kk[nt], ak, b);
          mma_m16n8k16_bf16(qk[nt], aq, b);
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
          const float decay = s <= t ? expf((e < 2 ? g_lo : g_hi) - gcum[s]) : 0.0f;
          const float a = s < t ? (e < 2 ? b_lo : b_hi) * decay * kk[nt][e] : 0.0f;
          as[t * L::kAStride + (s & 1) * L::kAHalf + (s >> 1)] = a;
          qk[nt][e] *= decay;
        }
      }
    }
    __syncthreads();

    // ---- T = (I + A)^{-1}: column c, rows of parity h ------------------------------------
    {
      const int c = tid >> 1;
      const int h = tid & 1;
      float tm[kChunk / 2];  // tm[j] = T[2 j + h][c]
#pragma unroll
      for (int j = 0; j < kChunk / 2; ++j) tm[j] = 2 * j + h == c ? 1.0f : 0.0f;
#pragma unroll
      for (int t = 1; t < kChunk; ++t) {
        // T[t][c] = -sum_{s < t} A[t][s] T[s][c] (zero terms for s < c), or 1 at t = c.
        const float* arow = as + t * L::kAStride + h * L::kAHalf;  // A[t][2 j + h]
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

    // ---- U = T diag(beta) V - T diag(beta Gamma) K S_0; O = Gamma Q S_0 -------------------
    // W is made 16 key columns at a time, each pair of n8 tiles used at once as the A
    // fragment (negated) of its k chunk of W S_0, so only 8 of its accumulators are live.
    float u[8][4];
    float o[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) u[nt][e] = o[nt][e] = 0.0f;
    }
#pragma unroll
    for (int sc = 0; sc < kChunk / 16; ++sc) {
      if (sc > warp) break;  // T is lower triangular: rows of warp w reach s < 16 (w + 1)
      const int col = sc * 16 + 2 * t4;
      const uint32_t au[4] = {smem_u32(tu + r_lo * RS + col), smem_u32(tu + r_hi * RS + col),
                              smem_u32(tu + r_lo * RS + col + 8),
                              smem_u32(tu + r_hi * RS + col + 8)};
      // B[s][n] from rows s = col, col + 1, col + 8, col + 9 of v, column n = 8 nt + g.
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const T* vp = vs + col * RS + nt * 8 + g;
        const uint32_t b[2] = {pack_bf16x2(bf16_at(vp), bf16_at(vp + RS)),
                               pack_bf16x2(bf16_at(vp + 8 * RS), bf16_at(vp + 9 * RS))};
        mma_m16n8k16_bf16(u[nt], au, b);
      }
    }
#pragma unroll
    for (int kc = 0; kc < kChunkKeyDim / 16; ++kc) {
      if (kc >= dk_tiles) break;
      float w[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int sc = 0; sc < kChunk / 16; ++sc) {
        if (sc > warp) break;
        const int col = sc * 16 + 2 * t4;
        const uint32_t aw[4] = {smem_u32(tw + r_lo * RS + col), smem_u32(tw + r_hi * RS + col),
                                smem_u32(tw + r_lo * RS + col + 8),
                                smem_u32(tw + r_hi * RS + col + 8)};
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const T* kp = ks + col * KS + kc * 16 + half * 8 + g;
          const uint32_t b[2] = {pack_bf16x2(bf16_at(kp), bf16_at(kp + KS)),
                                 pack_bf16x2(bf16_at(kp + 8 * KS), bf16_at(kp + 9 * KS))};
          mma_m16n8k16_bf16(w[half], aw, b);
        }
      }
      const int col = kc * 16 + 2 * t4;
      const uint32_t aw[4] = {pack_bf16x2(-w[0][0], -w[0][1]), pack_bf16x2(-w[0][2], -w[0][3]),
                              pack_bf16x2(-w[1][0], -w[1][1]), pack_bf16x2(-w[1][2], -w[1][3])};
      const uint32_t aq[4] = {smem_u32(qs + r_lo * KS + col), smem_u32(qs + r_hi * KS + col),
                              smem_u32(qs + r_lo * KS + col + 8),
                              smem_u32(qs + r_hi * KS + col + 8)};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const T* sp = st + (nt * 8 + g) * KS + col;
        const uint32_t b[2] = {smem_u32(sp), smem_u32(sp + 8)};
        mma_m16n8k16_bf16(u[nt], aw, b);  // u -= W S_0
        mma_m16n8k16_bf16(o[nt], aq, b);  // o = Q S_0
      }
    }
    {
      const float gamma_lo = expf(gcum[r_lo]), gamma_hi = expf(gcum[r_hi]);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        o[nt][0] *= gamma_lo;
        o[nt][1] *= gamma_lo;
        o[nt][2] *= gamma_hi;
        o[nt][3] *= gamma_hi;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = nt * 8 + 2 * t4 + (e & 1);
          ut[n * RS + (e < 2 ? r_lo : r_hi)] = __float2bfloat16_rn(u[nt][e]);
        }
      }
    }
    // U^T is complete, and every warp has read S^T (rewritten below).
    __syncthreads();

    // ---- O += P U, stored --------------------------------------------------------------
#pragma unroll
    for (int kc = 0; kc < kChunk / 16; ++kc) {
      if (kc > warp) break;  // P is lower triangular
      const uint32_t ap[4] = {pack_bf16x2(qk[2 * kc][0], qk[2 * kc][1]),
                              pack_bf16x2(qk[2 * kc][2], qk[2 * kc][3]),
                              pack_bf16x2(qk[2 * kc + 1][0], qk[2 * kc + 1][1]),
                              pack_bf16x2(qk[2 * kc + 1][2], qk[2 * kc + 1][3])};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const T* up = ut + (nt * 8 + g) * RS + kc * 16 + 2 * t4;
        const uint32_t b[2] = {smem_u32(up), smem_u32(up + 8)};
        mma_m16n8k16_bf16(o[nt], ap, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = e < 2 ? r_lo : r_hi;
        const int n = nt * 8 + 2 * t4 + (e & 1);
        if (t < valid && col0 + n < p.dv) {
          out_head[static_cast<int64_t>(c0 + t) * p.out_stride + n] = __float2bfloat16_rn(o[nt][e]);
        }
      }
    }

    // ---- S = Gamma_C S + (diag(e^{G_C - G_s}) K)^T U --------------------------------------
    {
      const float g_last = gcum[kChunk - 1];
      const float gamma_c = expf(g_last);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s_acc[mi][nt][e] *= gamma_c;
        }
      }
#pragma unroll
      for (int kc = 0; kc < kChunk / 16; ++kc) {
        const int s0 = kc * 16 + 2 * t4;
        const float d0 = expf(g_last - gcum[s0]), d1 = expf(g_last - gcum[s0 + 1]);
        const float d8 = expf(g_last - gcum[s0 + 8]), d9 = expf(g_last - gcum[s0 + 9]);
        uint32_t b[8][2];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const T* up = ut + (nt * 8 + g) * RS + s0;
          b[nt][0] = smem_u32(up);
          b[nt][1] = smem_u32(up + 8);
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const int i0 = 32 * warp + 16 * mi;
          if (i0 >= p.dk) break;
          const T* kp = ks + s0 * KS + i0 + g;  // A[i][s] = K[s][i] e^{G_C - G_s}
          const uint32_t a[4] = {
              pack_bf16x2(bf16_at(kp) * d0, bf16_at(kp + KS) * d1),
              pack_bf16x2(bf16_at(kp + 8) * d0, bf16_at(kp + KS + 8) * d1),
              pack_bf16x2(bf16_at(kp + 8 * KS) * d8, bf16_at(kp + 9 * KS) * d9),
              pack_bf16x2(bf16_at(kp + 8 * KS + 8) * d8, bf16_at(kp + 9 * KS + 8) * d9)};
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) mma_m16n8k16_bf16(s_acc[mi][nt], a, b[nt]);
        }
      }
    }
    store_st();
  }

#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 32 * warp + 16 * mi + g + (e >= 2 ? 8 : 0);
        const int n = col0 + nt * 8 + 2 * t4 + (e & 1);
        if (i < p.dk && n < p.dv) state[static_cast<int64_t>(i) * p.dv + n] = s_acc[mi][nt][e];
      }
    }
  }
}

}  // namespace vllm::cuda::detail

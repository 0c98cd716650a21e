// The gated delta rule for prefill rows in chunks on tensor cores (gdn.cuh; the semantics of
// cpu::gated_delta_rule), for BF16 activations: the chunked form of the recurrence, as
// flash-linear-attention's chunk_gated_delta_rule computes it. gdn_rule.cu launches it for
// requests of at least kChunkMinRows rows and the token-by-token kernel for the rest.
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
// G_t - G_s <= 0 (g <= 0), so nothing overflows however long the chunk. Everything up to W and
// U~ is independent of the state, so it runs for all chunks at once; only the rest walks the
// chunks in order. Three kernels:
//
// 1. gdn_chunk_index_kernel (one block of 256 threads): numbers the chunks of the chunked
//    requests (those of at least min_rows rows with a state slot) across the batch:
//    chunk_first[r], and chunk_request[c] for every chunk c (-1 past the last).
// 2. gdn_chunk_prep_kernel (gdn_chunk_prep.cuh), 4 warps per (chunk, value head), all chunks in
//    parallel, three blocks per SM:
//      load     k, q rows -> shared memory by 16-byte cp.async (zero past Dk and past the
//               request's rows); g, beta and G = cumsum(g) (a warp scan); a partial last
//               chunk has zero rows with g = beta = 0, which leave S and every valid row as
//               they are
//      barrier  k, q L2-normalised in place (f32 sums over 8 lanes a row; q scaled); the
//               first value head of each key head stores them to the workspace
//      barrier  K K^T (warp w its rows [16 w, +16)) -> A in shared memory (f32)
//      barrier  T by forward substitution in f32: thread pair (column c, parity h) holds the
//               rows of column c of its parity in registers; each row t is one sum over the
//               earlier rows, completed by one shuffle; T diag(beta), T diag(beta Gamma) ->
//               shared BF16
//      barrier  k^T -> shared (over A) and, for the first value head of each key head, the
//               workspace
//      barrier  W = T diag(beta Gamma) K -> workspace; then per 64-column slice of v (over q):
//               load, barrier, U~ = T diag(beta) V -> workspace, barrier
// 3. gdn_chunk_state_kernel (gdn_chunk_state.cuh), 8 warps per (request, value head, slice of
//    64 value columns), one block per SM: S^T (64 x 128) in f32 registers, warp (rw, ch) =
//    (w % 4, w / 4) owning rows [16 rw, +16) x key columns [64 ch, +64); the request's chunks in
//    order, each chunk's q, k, k^T, W, U~ slice and G landed by cp.async while the chunk before
//    computes (two stages):
//      barrier  stage landed, the next stage's copies issued;
//               warp (rw, ch): U = U~ - W S_0 and O = Gamma Q S_0 for rows [16 rw, +16) x value
//               columns [32 ch, +32); P = masked Q K^T for the same rows, kept in registers
//               (the A operand of P U); U^T and (U diag(e^{G_C - G_s}))^T -> shared
//      barrier  O += P U, stored; S^T = Gamma_C S^T + (U^T diag(e^{G_C - G_s})) K; S^T's BF16
//               copy -> shared (the B operand of the next chunk's W S_0 and Q S_0)
// Fragments are 32-bit shared-memory loads wherever the operand's layout allows (hence k^T next
// to k); B operands that pair two rows (v in U~) take two 16-bit loads.
// S stays f32 and is read once before the chunk loop and written once after it (rounded then
// to the state's storage type, gdn_state.cuh); the products round their operands (T, W, U~,
// S_0, U, q, k, v) to BF16 and sum in f32, as FLA's kernels do, so the output and the state
// agree with the f32 recurrence to BF16 tolerance.
//
// Key dims up to kChunkKeyDim (zero-padded to it; Qwen's 128), value dims any size (slices of
// 64 columns, masked past Dv). The workspace holds, per chunk, the normalised q and k (and
// k^T) of each key head and W, U~ and G of each value head (chunk_workspace_layout).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn_batch.cuh"
#include "backend/cuda/gdn_state.cuh"
#include "backend/cuda/mma.cuh"

namespace vllm::cuda::detail {

constexpr int kChunk = 64;          // tokens per chunk: the triangular solve's size
constexpr int kChunkKeyDim = 128;   // key-dim capacity (rows of S, columns of k and q)
constexpr int kChunkSlice = 64;     // value columns per block
constexpr int kChunkThreads = 128;  // prep: 4 warps of 16 chunk rows each
constexpr int kStateThreads = 256;  // state: 8 warps, 16 chunk rows x 32 value columns each
constexpr int kChunkIndexThreads = 256;
// Requests with at least this many rows take the chunked kernels (host-side choice). Measured
// on an H100 at Qwen3.5-4B's heads (GdnCudaBench): one request of 16 rows takes 23 us token by
// token and 38 us chunked, of 64 rows 78 and 40 us; the two cross near 28 rows.
constexpr int kChunkMinRows = 32;

// The chunked kernels' scratch in device memory, per chunk c of the batch (global numbering):
// q, k rows normalised [c][key head][64][128] and k transposed [c][key head][128][64], W
// [c][value head][64][128], U~ [c][value head][64][dv_pad] (BF16), G [c][value head][64] (F32).
struct ChunkWorkspace {
  int32_t* chunk_request;  // [max_chunks]
  int32_t* chunk_first;    // [num_requests]
  __nv_bfloat16* qn;
  __nv_bfloat16* kn;
  __nv_bfloat16* kt;  // k transposed: [c][key head][128][64]
  __nv_bfloat16* w;
  __nv_bfloat16* u;
  float* gcum;
  int max_chunks;
  int dv_pad;  // slices * kChunkSlice
};

struct ChunkRuleParams {
  const __nv_bfloat16* q;  // [T, Hk * Dk], row stride q_stride
  const __nv_bfloat16* k;  // [T, Hk * Dk]
  const __nv_bfloat16* v;  // [T, Hv * Dv]
  const float* g;          // [T, Hv]
  const float* beta;       // [T, Hv]
  __nv_bfloat16* out;      // [T, Hv * Dv]
  void* state;             // [num_slots, Hv, Dk, Dv] of state_type (gdn_state.cuh)
  StateType state_type;
  GdnBatchView batch;
  ChunkWorkspace ws;
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride, out_stride;
  int key_heads;
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

// Element strides of the shared tiles, padded so that a warp's 32-bit fragment loads fall in
// 32 different banks.
constexpr int kKStride = kChunkKeyDim + 8;  // bf16: 128-wide rows (k, q, W, S^T)
constexpr int kRowStride = kChunk + 8;      // bf16: 64-wide rows (v, T, U~, U^T)
constexpr int kAHalf = 36;                  // f32: A row = even columns | odd columns
constexpr int kAStride = 2 * kAHalf;
static_assert(kChunkSlice == kChunk, "64-wide rows share one stride");

constexpr int kTileK = kChunk * kKStride * 2;    // bytes of a 64 x 128 tile
constexpr int kTileV = kChunk * kRowStride * 2;  // bytes of a 64 x 64 tile

constexpr int kTileKT = kChunkKeyDim * kRowStride * 2;  // bytes of k^T: 128 x 64

// The prep kernel's tiles; A (f32, until the solve) and then k^T share their bytes, and so do
// q (until its rows are stored) and the v slices.
struct PrepSmem {  // byte offsets
  static constexpr int kK = 0;
  static constexpr int kQ = kK + kTileK;
  static constexpr int kV = kQ;
  static constexpr int kA = kQ + kTileK;
  static constexpr int kKT = kA;
  static constexpr int kTw = kA + kChunk * kAStride * 4;
  static constexpr int kTu = kTw + kTileV;
  static constexpr int kGcum = kTu + kTileV;
  static constexpr int kBeta = kGcum + kChunk * 4;
  static constexpr int kBytes = kBeta + kChunk * 4;
  static_assert(kTileKT <= kChunk * kAStride * 4 && kTileV <= kTileK, "shared regions");
  static_assert(3 * (kBytes + 1024) <= 228 * 1024, "three blocks per SM");
};

struct StateSmem {
  static constexpr int kQ = 0;  // within a stage
  static constexpr int kK = kQ + kTileK;
  static constexpr int kKT = kK + kTileK;
  static constexpr int kW = kKT + kTileKT;
  static constexpr int kU = kW + kTileK;
  static constexpr int kGcum = kU + kTileV;
  static constexpr int kStage = kGcum + kChunk * 4;
  static constexpr int kST = 2 * kStage;     // S^T [64][kKStride]
  static constexpr int kUT = kST + kTileK;   // U^T [64][kRowStride]
  static constexpr int kUdT = kUT + kTileV;  // (diag(e^{G_C - G_s}) U)^T
  static constexpr int kBytes = kUdT + kTileV;
  static_assert(kBytes <= 227 * 1024 && kStage % 16 == 0, "one block per SM");
};

// Bytes of the workspace for max_chunks chunks (256-byte aligned parts) and the parts' offsets.
struct ChunkWorkspaceLayout {
  size_t request = 0, first = 0, qn = 0, kn = 0, kt = 0, w = 0, u = 0, gcum = 0, bytes = 0;
};
inline ChunkWorkspaceLayout chunk_workspace_layout(int64_t max_chunks, int64_t requests,
                                                   int64_t key_heads, int64_t value_heads,
                                                   int64_t dv_pad) {
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  ChunkWorkspaceLayout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at += align(bytes);
    return offset;
  };
  const size_t tile = static_cast<size_t>(kChunk) * kChunkKeyDim * 2;
  l.request = take(static_cast<size_t>(max_chunks) * 4);
  l.first = take(static_cast<size_t>(requests) * 4);
  l.qn = take(static_cast<size_t>(max_chunks * key_heads) * tile);
  l.kn = take(static_cast<size_t>(max_chunks * key_heads) * tile);
  l.kt = take(static_cast<size_t>(max_chunks * key_heads) * tile);
  l.w = take(static_cast<size_t>(max_chunks * value_heads) * tile);
  l.u = take(static_cast<size_t>(max_chunks * value_heads * kChunk * dv_pad) * 2);
  l.gcum = take(static_cast<size_t>(max_chunks * value_heads * kChunk) * 4);
  l.bytes = at;
  return l;
}

// The workspace's parts at `base` (a layout's bytes) for max_chunks chunks.
inline ChunkWorkspace carve_chunk_workspace(void* base, const ChunkWorkspaceLayout& l,
                                            int max_chunks, int dv_pad) {
  auto* b = static_cast<unsigned char*>(base);
  ChunkWorkspace ws;
  ws.chunk_request = reinterpret_cast<int32_t*>(b + l.request);
  ws.chunk_first = reinterpret_cast<int32_t*>(b + l.first);
  ws.qn = reinterpret_cast<__nv_bfloat16*>(b + l.qn);
  ws.kn = reinterpret_cast<__nv_bfloat16*>(b + l.kn);
  ws.kt = reinterpret_cast<__nv_bfloat16*>(b + l.kt);
  ws.w = reinterpret_cast<__nv_bfloat16*>(b + l.w);
  ws.u = reinterpret_cast<__nv_bfloat16*>(b + l.u);
  ws.gcum = reinterpret_cast<float*>(b + l.gcum);
  ws.max_chunks = max_chunks;
  ws.dv_pad = dv_pad;
  return ws;
}

__device__ __forceinline__ uint32_t smem_u32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
__device__ __forceinline__ float bf16_at(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
// The A fragment of rows [r, r + 8) and [r + 8, r + 16) x columns [col, col + 16) of a
// row-major BF16 tile (mma.cuh's layout): lo = row r + g, hi = row r + g + 8, col = 16 kc + 2 t.
__device__ __forceinline__ void load_a(const __nv_bfloat16* lo, const __nv_bfloat16* hi,
                                       uint32_t (&a)[4]) {
  a[0] = smem_u32(lo);
  a[1] = smem_u32(hi);
  a[2] = smem_u32(lo + 8);
  a[3] = smem_u32(hi + 8);
}
// The B fragment B[s][n] = X[s][n] of a row-major tile X (k index = row): rows s, s + 1, s + 8,
// s + 9 of column n, where p = &X[s][n] and stride is X's row stride.
__device__ __forceinline__ void load_b_rows(const __nv_bfloat16* p, int stride, uint32_t (&b)[2]) {
  b[0] = pack_bf16x2(bf16_at(p), bf16_at(p + stride));
  b[1] = pack_bf16x2(bf16_at(p + 8 * stride), bf16_at(p + 9 * stride));
}

#if defined(VLLM_CUDA_EMULATION)
extern unsigned char gdn_chunk_smem[];
#endif

// ---- 1. chunk numbering ---------------------------------------------------------------------

__global__ void __launch_bounds__(kChunkIndexThreads)
    gdn_chunk_index_kernel(const ChunkRuleParams p) {
  pdl_wait();
  pdl_launch_next();
#if defined(VLLM_CUDA_EMULATION)
  int* scan = reinterpret_cast<int*>(gdn_chunk_smem);
#else
  extern __shared__ __align__(16) int scan[];
#endif
  const int tid = threadIdx.x;
  int carry = 0;
  for (int base = 0; base < p.batch.num_requests; base += kChunkIndexThreads) {
    const int r = base + tid;
    int n = 0;
    if (r < p.batch.num_requests) {
      const RequestRows rows = request_rows(p.batch, r);
      const int len = rows.end - rows.begin;
      if (len > 0 && len >= p.min_rows && rows.slot >= 0) n = (len + kChunk - 1) / kChunk;
    }
    scan[tid] = n;
    __syncthreads();
    for (int off = 1; off < kChunkIndexThreads; off <<= 1) {
      const int add = tid >= off ? scan[tid - off] : 0;
      __syncthreads();
      scan[tid] += add;
      __syncthreads();
    }
    if (r < p.batch.num_requests) {
      const int first = carry + scan[tid] - n;
      p.ws.chunk_first[r] = first;
      for (int i = 0; i < n && first + i < p.ws.max_chunks; ++i) p.ws.chunk_request[first + i] = r;
    }
    carry += scan[kChunkIndexThreads - 1];
    __syncthreads();
  }
  for (int c = carry + tid; c < p.ws.max_chunks; c += kChunkIndexThreads) {
    p.ws.chunk_request[c] = -1;
  }
}

}  // namespace vllm::cuda::detail

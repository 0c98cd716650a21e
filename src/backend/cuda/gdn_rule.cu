// The gated delta rule on the GPU (gdn.cuh; the semantics of cpu::gated_delta_rule): the
// token-by-token recurrent kernel below, for decode rows, short requests and F32 activations,
// and for BF16 requests of at least kChunkMinRows rows the chunked tensor-core kernels of
// gdn_chunk.cuh (numbering), gdn_chunk_prep.cuh and gdn_chunk_state.cuh. Both forms run in one
// call over disjoint requests (each skips the other's).
//
// The recurrent form:
// Per (request r, value head h) the state S is Dk x Dv f32 (64 KB at 128 x 128) and each
// token t does, with k and q of key head h / (Hv / Hk) L2-normalised (q also scaled):
//   S *= exp(g);  mem = S^T k;  delta = beta (v - mem);  S += k delta^T;  out = S^T q.
// Column j of S depends only on column j, on k and q, and on v[j]: columns never talk.
//
// Mapping. Each warp owns kColsPerWarp = 8 columns of one (request, head), split over
// kRowGroups = 4 lanes per column: lane = row_group * 8 + column, and row group g holds rows
// [g * C/4, (g + 1) * C/4) of its column in registers, where C is the kernel's key-dim
// capacity (32 floats per lane at C = 128). The column sums mem and out are per-lane partial
// sums over the lane's rows, completed by two xor shuffles across the row groups (lanes 8
// and 16 apart), after which the four lanes of a column hold the same bits and so apply the
// same delta.
//   - The state is read once before the token loop and written once after it; the loop
//     itself touches only q, k, v, g, beta and out.
//   - Warps are independent (a block is just kWarpsPerBlock of them): no block barriers, so
//     warps of different heads and requests interleave freely on an SM. Decode of Qwen3.5-4B
//     (Hv = 32, Dv = 128) at batch 1 is 512 warps, ~4 per SM of an H200.
//   - k and q of the current token sit in the warp's shared memory, normalised once per
//     token: lane l loads elements l, l + 32, ... (coalesced), one warp_sum each gives the
//     norms, and the lane stores the normalised values. A lane then reads its C/4 rows of
//     k/q as float4s; the 8 lanes of one row group read the same address (a broadcast).
//   - Double buffering: while token t is computed from buffer t % 2, the loads of token t + 1
//     (q, k, v, g, beta) are already in flight in registers; after the compute they are
//     normalised into buffer (t + 1) % 2. One __syncwarp per token then orders those stores
//     before the next token's reads, and every lane's reads of token t - 1's buffer (the one
//     being overwritten) before them.
// Key dims. The capacity C is a template parameter (32, 64, 128 or 256) so the state stays in
// registers; Dk is any size up to C, the kernel for the smallest C >= Dk runs it, and larger
// Dk are refused. Rows Dk .. C - 1 are zeros in the registers and in the staged k and q, so
// they add exact zeros to every sum and never change; only the state load and store and the
// k/q loads are masked, the token loop's arithmetic is the same as at Dk = C (Qwen's 128).
// Dv is any size (the columns past Dv are idle lanes that still take part in the shuffles).
//
// The wide kernel (Dk in (64, 128], Qwen's 128, and Dv a multiple of 16). At decode each
// token is one step, so the kernel is the state's load and store: 64 KB each way per head at
// 128 x 128 in f32, about as many bytes as a 4B model's weights at batch 64. The kernel above
// moves it 4 bytes a lane (8 lanes of a row group cover 32 bytes of a row). The wide kernel
// gives a warp 16 columns in kWideRowGroups = 8 row groups of 16 rows, and each lane 4
// adjacent columns: lane = row_group * 4 + column group, so a lane moves its state in
// 16-byte loads and stores (8-byte for 16-bit states), a warp's row group covers 64 bytes of
// a row, and the warp count halves. Its column sums complete over the 8 row groups with three
// xor shuffles (lanes 4, 8 and 16 apart) per column; everything else, including the order of
// each lane's sums and the staging of k and q, is the kernel above at C = 128.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn.cuh"
#include "backend/cuda/gdn_batch.cuh"
#include "backend/cuda/gdn_chunk.cuh"
#include "backend/cuda/gdn_chunk_prep.cuh"
#include "backend/cuda/gdn_chunk_state.cuh"
#include "backend/cuda/gdn_state.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
#if defined(VLLM_CUDA_EMULATION)
// The emulated blocks' shared memory for the chunked kernel (tests/cuda_emulation).
alignas(16) unsigned char detail::gdn_chunk_smem[std::max(detail::PrepSmem::kBytes,
                                                          detail::StateSmem::kBytes)];
#endif
namespace {
using detail::pdl_launch_next;
using detail::pdl_wait;

using detail::from_float;
using detail::GdnBatchView;
using detail::kWarpSize;
using detail::load_state;
using detail::StateType;
using detail::store_state;
using detail::to_float;

constexpr int kRowGroups = 4;                         // lanes per state column
constexpr int kColsPerWarp = kWarpSize / kRowGroups;  // 8
constexpr int kWarpsPerBlock = 4;
constexpr unsigned kFullMask = 0xffffffffu;
// The largest key-dim capacity: 64 state floats per lane, still without register spills.
constexpr int kMaxKeyDim = 256;

// The smallest Dk that dispatch_rule gives the kernel of capacity kCap (the capacities double
// from 32): the kernel loads k/q elements below it unmasked.
template <int kCap>
constexpr int min_key_dim() {
  return kCap == 32 ? 1 : kCap / 2 + 1;
}

template <typename T>
struct RuleParams {
  const T* q;         // [T, Hk * Dk], row stride q_stride
  const T* k;         // [T, Hk * Dk]
  const T* v;         // [T, Hv * Dv]
  const float* g;     // [T, Hv]
  const float* beta;  // [T, Hv]
  T* out;             // [T, Hv * Dv]
  void* state;        // [num_slots, Hv, Dk, Dv] of state_type
  StateType state_type;
  GdnBatchView batch;
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride, out_stride;
  int value_heads;
  int group;  // value heads per key head
  int dk;     // 1 .. the kernel's capacity
  int dv;
  int col_tiles;         // ceil(dv / kColsPerWarp)
  int chunked_min_rows;  // requests with at least this many rows are the chunked kernel's
  float scale;
  float l2norm_eps;
  bool use_l2norm;
};

// The staging buffers of one block of the kernel of capacity kCap.
template <int kCap>
constexpr size_t rule_smem_bytes() {
  return sizeof(float) * kWarpsPerBlock * 2 * 2 * kCap;
}

#if defined(VLLM_CUDA_EMULATION)
alignas(16) unsigned char gdn_rule_smem[rule_smem_bytes<kMaxKeyDim>()];
#endif

// One token's k and q of a key head, for a warp of either kernel: lane l holds elements
// e * 32 + l (e < C / 32; coalesced loads). Those below kMinDk exist at every Dk the kernel
// takes, so their loads are unmasked; the rest exist when below Dk, and missing ones are
// zeros. load() reads them into registers; stage() writes them normalised into the warp's
// staging buffers.
template <typename T, int kCap, int kMinDk>
struct TokenQk {
  static constexpr int kPerLane = kCap / kWarpSize;
  static_assert(kPerLane >= 1, "a lane stages at least one element");
  bool ok[kPerLane];
  float k[kPerLane], q[kPerLane];

  __device__ __forceinline__ TokenQk(int dk, int lane) {
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      ok[e] = (e + 1) * kWarpSize <= kMinDk || e * kWarpSize + lane < dk;
    }
  }

  // Token t of the key head whose first element is column qk_col.
  __device__ __forceinline__ void load(const RuleParams<T>& p, int t, int64_t qk_col, int lane) {
    const T* kt = p.k + t * p.k_stride + qk_col;
    const T* qt = p.q + t * p.q_stride + qk_col;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      k[e] = ok[e] ? to_float(kt[e * kWarpSize + lane]) : 0.0f;
      q[e] = ok[e] ? to_float(qt[e * kWarpSize + lane]) : 0.0f;
    }
  }

  // x / sqrt(sum(x^2) + eps) (then q's scale), as the CPU op: (x * inv) * scale. Every lane of
  // the warp calls it (the norms are warp sums).
  __device__ __forceinline__ void stage(const RuleParams<T>& p, float* k_dst, float* q_dst,
                                        int lane) const {
    float k_inv = 1.0f, q_inv = 1.0f;
    if (p.use_l2norm) {
      float k_sq = 0.0f, q_sq = 0.0f;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        k_sq += k[e] * k[e];
        q_sq += q[e] * q[e];
      }
      k_sq = detail::warp_sum(k_sq);
      q_sq = detail::warp_sum(q_sq);
      k_inv = 1.0f / sqrtf(k_sq + p.l2norm_eps);
      q_inv = 1.0f / sqrtf(q_sq + p.l2norm_eps);
    }
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      k_dst[e * kWarpSize + lane] = k[e] * k_inv;
      q_dst[e * kWarpSize + lane] = (q[e] * q_inv) * p.scale;
    }
  }
};

// A padding request (slot -1) has no state and zero outputs: kCols adjacent columns from
// out_col, on every row.
template <int kCols, typename T>
__device__ __forceinline__ void zero_outputs(const RuleParams<T>& p,
                                             const detail::RequestRows& rows, int64_t out_col) {
  for (int t = rows.begin; t < rows.end; ++t) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) p.out[t * p.out_stride + out_col + c] = from_float<T>(0.0f);
  }
}

// kCap: the key-dim capacity C (see the top of the file); p.dk <= kCap.
template <typename T, int kCap>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize)
    gated_delta_rule_kernel(RuleParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  constexpr int kRows = kCap / kRowGroups;  // state rows per lane
  static_assert(kRows % 4 == 0, "rows are read as float4");
  constexpr int kMinDk = min_key_dim<kCap>();
  // stage[warp][buffer][k, q][C] in dynamic shared memory; elements Dk .. C - 1 stay zero.
#if defined(VLLM_CUDA_EMULATION)
  auto& stage = *reinterpret_cast<float(*)[kWarpsPerBlock][2][2][kCap]>(gdn_rule_smem);
#else
  extern __shared__ __align__(16) float rule_smem[];
  auto& stage = *reinterpret_cast<float(*)[kWarpsPerBlock][2][2][kCap]>(rule_smem);
#endif

  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  const int64_t items_per_request = static_cast<int64_t>(p.value_heads) * p.col_tiles;
  // Every early return below is uniform across the warp (it depends on the item only), so
  // the full-mask shuffles and __syncwarp see all 32 lanes.
  if (item >= items_per_request * p.batch.num_requests) return;
  const int request = static_cast<int>(item / items_per_request);
  const int head = static_cast<int>(item / p.col_tiles % p.value_heads);
  const int tile = static_cast<int>(item % p.col_tiles);
  const int key_head = head / p.group;
  const int row_group = lane / kColsPerWarp;
  const int col = tile * kColsPerWarp + lane % kColsPerWarp;
  const bool col_ok = col < p.dv;
  const bool writes_out = col_ok && row_group == 0;

  const detail::RequestRows rows = detail::request_rows(p.batch, request);
  if (rows.begin == rows.end || rows.end - rows.begin >= p.chunked_min_rows) return;
  const int64_t out_col = static_cast<int64_t>(head) * p.dv + col;
  if (rows.slot < 0) {
    if (writes_out) zero_outputs<1>(p, rows, out_col);
    return;
  }

  // This lane's rows of its column: state[slot, head, first_row + i, col] for i < own_rows
  // (fewer than kRows, or none, when Dk < C); the other registers hold zeros.
  const int first_row = row_group * kRows;
  const int own_rows = col_ok ? min(max(p.dk - first_row, 0), kRows) : 0;
  // Read once into f32 registers, rounded to the storage type once after the last row.
  const int64_t state_at =
      ((static_cast<int64_t>(rows.slot) * p.value_heads + head) * p.dk + min(first_row, p.dk)) *
          p.dv +
      col;
  float s[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    s[i] = i < own_rows
               ? load_state(p.state, state_at + static_cast<int64_t>(i) * p.dv, p.state_type)
               : 0.0f;
  }

  const int64_t qk_col = static_cast<int64_t>(key_head) * p.dk;
  // kMinDk is known at compile time, so Dk = C has no masked k/q loads in its first half.
  TokenQk<T, kCap, kMinDk> qk(p.dk, lane);
  const int64_t v_col = col_ok ? out_col : 0;
  float v_next = 0.0f, g_next = 0.0f, beta_next = 0.0f;
  auto load_token = [&](int t) {
    qk.load(p, t, qk_col, lane);
    v_next = to_float(p.v[t * p.v_stride + v_col]);  // idle lanes read column 0: in bounds
    g_next = p.g[t * p.g_stride + head];
    beta_next = p.beta[t * p.beta_stride + head];
  };
  auto stage_token = [&](int buffer) {
    qk.stage(p, stage[warp][buffer][0], stage[warp][buffer][1], lane);
  };

  load_token(rows.begin);
  stage_token(0);
  float v_cur = v_next, g_cur = g_next, beta_cur = beta_next;
  __syncwarp();
  int buffer = 0;
  for (int t = rows.begin; t < rows.end; ++t) {
    const bool has_next = t + 1 < rows.end;  // uniform across the warp
    if (has_next) load_token(t + 1);
    const float4* k4 = reinterpret_cast<const float4*>(&stage[warp][buffer][0][row_group * kRows]);
    const float4* q4 = reinterpret_cast<const float4*>(&stage[warp][buffer][1][row_group * kRows]);

    // Decay, and this lane's part of mem = S^T k (four independent sums for latency).
    const float decay = expf(g_cur);
    float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;
#pragma unroll
    for (int i = 0; i < kRows; i += 4) {
      const float4 kv = k4[i / 4];
      s[i] *= decay;
      s[i + 1] *= decay;
      s[i + 2] *= decay;
      s[i + 3] *= decay;
      m0 = fmaf(s[i], kv.x, m0);
      m1 = fmaf(s[i + 1], kv.y, m1);
      m2 = fmaf(s[i + 2], kv.z, m2);
      m3 = fmaf(s[i + 3], kv.w, m3);
    }
    float mem = (m0 + m1) + (m2 + m3);
    mem += __shfl_xor_sync(kFullMask, mem, kColsPerWarp);
    mem += __shfl_xor_sync(kFullMask, mem, 2 * kColsPerWarp);
    const float delta = (v_cur - mem) * beta_cur;

    // The rank-1 update, and this lane's part of out = S^T q.
    float o0 = 0.0f, o1 = 0.0f, o2 = 0.0f, o3 = 0.0f;
#pragma unroll
    for (int i = 0; i < kRows; i += 4) {
      const float4 kv = k4[i / 4];
      const float4 qv = q4[i / 4];
      s[i] = fmaf(kv.x, delta, s[i]);
      s[i + 1] = fmaf(kv.y, delta, s[i + 1]);
      s[i + 2] = fmaf(kv.z, delta, s[i + 2]);
      s[i + 3] = fmaf(kv.w, delta, s[i + 3]);
      o0 = fmaf(s[i], qv.x, o0);
      o1 = fmaf(s[i + 1], qv.y, o1);
      o2 = fmaf(s[i + 2], qv.z, o2);
      o3 = fmaf(s[i + 3], qv.w, o3);
    }
    float o = (o0 + o1) + (o2 + o3);
    o += __shfl_xor_sync(kFullMask, o, kColsPerWarp);
    o += __shfl_xor_sync(kFullMask, o, 2 * kColsPerWarp);
    if (writes_out) p.out[t * p.out_stride + out_col] = from_float<T>(o);

    if (has_next) stage_token(buffer ^ 1);
    // Orders this token's buffer reads before the next token's stores into it (two tokens
    // on), and the stores just made before the next token's reads.
    __syncwarp();
    buffer ^= 1;
    v_cur = v_next;
    g_cur = g_next;
    beta_cur = beta_next;
  }

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (i < own_rows) {
      store_state(p.state, state_at + static_cast<int64_t>(i) * p.dv, s[i], p.state_type);
    }
  }
}

constexpr int kWideRowGroups = 8;
constexpr int kWideColsPerLane = 4;
constexpr int kWideColsPerWarp = kWarpSize / kWideRowGroups * kWideColsPerLane;  // 16
constexpr int kWideCap = 128;

// Whether the wide kernel takes these head dims.
constexpr bool wide_rule_fits(int64_t dk, int64_t dv) {
  return dk > kWideCap / 2 && dk <= kWideCap && dv % kWideColsPerWarp == 0;
}

// Four adjacent state elements (i a multiple of 4) in their storage type, as f32: one 16-byte
// load for F32, one 8-byte load for BF16 / F16.
// kL2: through L2 only (ld.global.cg), for a load before pdl_wait (docs/design.md).
template <bool kL2 = false>
__device__ __forceinline__ float4 load_state4(const void* base, int64_t i, StateType type) {
  if (type == StateType::kF32) {
    const auto* at = reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    if constexpr (kL2) return __ldcg(at);
    return *at;
  }
  const auto* at2 = reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(base) + i);
  uint2 w;
  if constexpr (kL2) {
    w = __ldcg(at2);
  } else {
    w = *at2;
  }
  auto half_of = [&](uint32_t word, int h) {  // element h of a 16-bit pair, as f32
    const auto bits = static_cast<unsigned short>(word >> (16 * h));
    if (type == StateType::kBF16) {
      const uint32_t f_bits = static_cast<uint32_t>(bits) << 16;  // BF16 -> f32 is exact
      float f;
      memcpy(&f, &f_bits, sizeof f);
      return f;
    }
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  };
  return make_float4(half_of(w.x, 0), half_of(w.x, 1), half_of(w.y, 0), half_of(w.y, 1));
}

// The same four elements set to v rounded to the storage type (each to nearest, ties to even).
__device__ __forceinline__ void store_state4(void* base, int64_t i, float4 v, StateType type) {
  if (type == StateType::kF32) {
    *reinterpret_cast<float4*>(static_cast<float*>(base) + i) = v;
    return;
  }
  uint2 w;
  if (type == StateType::kBF16) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    memcpy(&w.x, &lo, sizeof w.x);
    memcpy(&w.y, &hi, sizeof w.y);
  } else {
    const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
    memcpy(&w.x, &lo, sizeof w.x);
    memcpy(&w.y, &hi, sizeof w.y);
  }
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(base) + i) = w;
}

// The wide kernel (see the top of the file); p.col_tiles = Dv / 16, wide_rule_fits(p.dk, p.dv).
// kEarly: the batch's rows and slots (copied from the host before the step's kernels) and the
// warp's state (written by this layer's kernel in an earlier step, or zeroed at the start of
// this one) are loaded before pdl_wait, through L2, while the conv and gating kernels still
// run: the state's round trip leaves the step's chain (docs/design.md, launch_pdl).
template <typename T, bool kEarly>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize)
    gated_delta_rule_wide_kernel(RuleParams<T> p) {
  if constexpr (!kEarly) {
    pdl_wait();
    pdl_launch_next();
  }
  constexpr int kCap = kWideCap;
  constexpr int kRows = kCap / kWideRowGroups;  // 16 state rows per lane
  constexpr int kMinDk = kCap / 2 + 1;
  constexpr int kC = kWideColsPerLane;
#if defined(VLLM_CUDA_EMULATION)
  auto& stage = *reinterpret_cast<float(*)[kWarpsPerBlock][2][2][kCap]>(gdn_rule_smem);
#else
  extern __shared__ __align__(16) float rule_smem[];
  auto& stage = *reinterpret_cast<float(*)[kWarpsPerBlock][2][2][kCap]>(rule_smem);
#endif

  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  const int64_t items_per_request = static_cast<int64_t>(p.value_heads) * p.col_tiles;
  // Early returns are uniform across the warp (they depend on the item only); under kEarly
  // each waits first, as every thread must.
  if (item >= items_per_request * p.batch.num_requests) {
    if (kEarly) pdl_wait();
    return;
  }
  const int request = static_cast<int>(item / items_per_request);
  const int head = static_cast<int>(item / p.col_tiles % p.value_heads);
  const int tile = static_cast<int>(item % p.col_tiles);
  const int key_head = head / p.group;
  const int row_group = lane / (kWarpSize / kWideRowGroups);
  const int col = tile * kWideColsPerWarp + (lane % (kWarpSize / kWideRowGroups)) * kC;
  const bool writes_out = row_group == 0;

  const detail::RequestRows rows = detail::request_rows<kEarly>(p.batch, request);
  if (rows.begin == rows.end || rows.end - rows.begin >= p.chunked_min_rows) {
    if (kEarly) pdl_wait();
    return;
  }
  const int64_t out_col = static_cast<int64_t>(head) * p.dv + col;
  if (rows.slot < 0) {
    if constexpr (kEarly) {
      pdl_wait();
      pdl_launch_next();
    }
    if (writes_out) zero_outputs<kC>(p, rows, out_col);
    return;
  }

  const int first_row = row_group * kRows;
  const int own_rows = min(max(p.dk - first_row, 0), kRows);
  const int64_t state_at =
      ((static_cast<int64_t>(rows.slot) * p.value_heads + head) * p.dk + min(first_row, p.dk)) *
          p.dv +
      col;
  float s[kRows][kC];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float4 v =
        i < own_rows
            ? load_state4<kEarly>(p.state, state_at + static_cast<int64_t>(i) * p.dv, p.state_type)
            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    s[i][0] = v.x;
    s[i][1] = v.y;
    s[i][2] = v.z;
    s[i][3] = v.w;
  }
  if constexpr (kEarly) {  // q, k, v, g and beta are the kernels' before
    pdl_wait();
    pdl_launch_next();
  }

  const int64_t qk_col = static_cast<int64_t>(key_head) * p.dk;
  TokenQk<T, kCap, kMinDk> qk(p.dk, lane);
  float v_next[kC] = {}, g_next = 0.0f, beta_next = 0.0f;
  auto load_token = [&](int t) {
    qk.load(p, t, qk_col, lane);
#pragma unroll
    for (int c = 0; c < kC; ++c) v_next[c] = to_float(p.v[t * p.v_stride + out_col + c]);
    g_next = p.g[t * p.g_stride + head];
    beta_next = p.beta[t * p.beta_stride + head];
  };
  auto stage_token = [&](int buffer) {
    qk.stage(p, stage[warp][buffer][0], stage[warp][buffer][1], lane);
  };
  // Completes a column sum over the 8 row groups.
  auto row_group_sum = [](float v) {
    v += __shfl_xor_sync(kFullMask, v, 4);
    v += __shfl_xor_sync(kFullMask, v, 8);
    v += __shfl_xor_sync(kFullMask, v, 16);
    return v;
  };

  load_token(rows.begin);
  stage_token(0);
  float v_cur[kC], g_cur = g_next, beta_cur = beta_next;
#pragma unroll
  for (int c = 0; c < kC; ++c) v_cur[c] = v_next[c];
  __syncwarp();
  int buffer = 0;
  for (int t = rows.begin; t < rows.end; ++t) {
    const bool has_next = t + 1 < rows.end;  // uniform across the warp
    if (has_next) load_token(t + 1);
    const float4* k4 = reinterpret_cast<const float4*>(&stage[warp][buffer][0][first_row]);
    const float4* q4 = reinterpret_cast<const float4*>(&stage[warp][buffer][1][first_row]);

    const float decay = expf(g_cur);
    float mem[kC] = {};
#pragma unroll
    for (int i = 0; i < kRows; i += 4) {
      const float4 kv = k4[i / 4];
      const float kr[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          s[i + r][c] *= decay;
          mem[c] = fmaf(s[i + r][c], kr[r], mem[c]);
        }
      }
    }
    float delta[kC];
#pragma unroll
    for (int c = 0; c < kC; ++c) delta[c] = (v_cur[c] - row_group_sum(mem[c])) * beta_cur;

    float o[kC] = {};
#pragma unroll
    for (int i = 0; i < kRows; i += 4) {
      const float4 kv = k4[i / 4];
      const float4 qv = q4[i / 4];
      const float kr[4] = {kv.x, kv.y, kv.z, kv.w};
      const float qr[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          s[i + r][c] = fmaf(kr[r], delta[c], s[i + r][c]);
          o[c] = fmaf(s[i + r][c], qr[r], o[c]);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) o[c] = row_group_sum(o[c]);
    if (writes_out) {
#pragma unroll
      for (int c = 0; c < kC; ++c) p.out[t * p.out_stride + out_col + c] = from_float<T>(o[c]);
    }

    if (has_next) stage_token(buffer ^ 1);
    __syncwarp();
    buffer ^= 1;
#pragma unroll
    for (int c = 0; c < kC; ++c) v_cur[c] = v_next[c];
    g_cur = g_next;
    beta_cur = beta_next;
  }

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (i < own_rows) {
      store_state4(p.state, state_at + static_cast<int64_t>(i) * p.dv,
                   make_float4(s[i][0], s[i][1], s[i][2], s[i][3]), p.state_type);
    }
  }
}

// early: gated_delta_rule_wide_kernel's kEarly (GdnBatch::states_settled).
template <typename T>
Status launch_rule_wide(RuleParams<T> p, bool early, cudaStream_t stream) {
  VLLM_CHECK(wide_rule_fits(p.dk, p.dv));
  p.col_tiles = p.dv / kWideColsPerWarp;
  const int64_t items = static_cast<int64_t>(p.batch.num_requests) * p.value_heads * p.col_tiles;
  const int64_t blocks = detail::ceil_div(items, kWarpsPerBlock);
  if (blocks > INT_MAX) {
    return make_error(ErrorCode::kUnsupported,
                      "cuda::gated_delta_rule: {} requests x {} heads exceed the grid limit",
                      p.batch.num_requests, p.value_heads);
  }
#if defined(VLLM_CUDA_EMULATION)
  (void)stream;
  emu::launch(dim3(static_cast<unsigned>(blocks)), kWarpsPerBlock * kWarpSize, gdn_rule_smem,
              rule_smem_bytes<kWideCap>(), [&] {
                if (early) {
                  gated_delta_rule_wide_kernel<T, true>(p);
                } else {
                  gated_delta_rule_wide_kernel<T, false>(p);
                }
              });
  return Status::ok();
#else
  detail::launch_pdl(early && pdl_early_loads() ? gated_delta_rule_wide_kernel<T, true>
                                                : gated_delta_rule_wide_kernel<T, false>,
                     static_cast<unsigned>(blocks), kWarpsPerBlock * kWarpSize,
                     rule_smem_bytes<kWideCap>(), stream, p);
  return check_launch("gated_delta_rule_wide_kernel");
#endif
}

template <typename T, int kCap>
Status launch_rule(const RuleParams<T>& p, cudaStream_t stream) {
  VLLM_CHECK(p.dk >= min_key_dim<kCap>() && p.dk <= kCap);
  const int64_t items = static_cast<int64_t>(p.batch.num_requests) * p.value_heads * p.col_tiles;
  const int64_t blocks = detail::ceil_div(items, kWarpsPerBlock);
  if (blocks > INT_MAX) {
    return make_error(ErrorCode::kUnsupported,
                      "cuda::gated_delta_rule: {} requests x {} heads exceed the grid limit",
                      p.batch.num_requests, p.value_heads);
  }
#if defined(VLLM_CUDA_EMULATION)
  (void)stream;
  emu::launch(dim3(static_cast<unsigned>(blocks)), kWarpsPerBlock * kWarpSize, gdn_rule_smem,
              rule_smem_bytes<kCap>(), [&] { gated_delta_rule_kernel<T, kCap>(p); });
  return Status::ok();
#else
  detail::launch_pdl(gated_delta_rule_kernel<T, kCap>, static_cast<unsigned>(blocks),
                     kWarpsPerBlock * kWarpSize, rule_smem_bytes<kCap>(), stream, p);
  return check_launch("gated_delta_rule_kernel");
#endif
}

// A kernel of the chunked form with `smem` bytes of dynamic shared memory (limits raised once).
template <typename Kernel>
Status launch_chunk_kernel(Kernel kernel, const char* name, dim3 grid, int threads, int smem,
                           const detail::ChunkRuleParams& p, cudaStream_t stream) {
#if defined(VLLM_CUDA_EMULATION)
  (void)name;
  (void)stream;
  emu::launch(grid, static_cast<unsigned>(threads), detail::gdn_chunk_smem,
              static_cast<size_t>(smem), [&] { kernel(p); });
  return Status::ok();
#else
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               smem) != cudaSuccess) {
    return make_error(ErrorCode::kInternal,
                      "cuda::gated_delta_rule: {} cannot take {} bytes of shared memory", name,
                      smem);
  }
  detail::launch_pdl(kernel, grid, threads, static_cast<size_t>(smem), stream, p);
  return check_launch(name);
#endif
}

// The chunked form: numbering, the per-chunk products of all chunks at once, then the chunks
// of each request in order (gdn_chunk.cuh).
Status launch_chunked(const detail::ChunkRuleParams& p, cudaStream_t stream) {
  const int64_t state_blocks =
      static_cast<int64_t>(p.batch.num_requests) * p.value_heads * p.slices;
  if (state_blocks > INT_MAX || p.value_heads > detail::kMaxGridY) {
    return make_error(ErrorCode::kUnsupported,
                      "cuda::gated_delta_rule: {} requests x {} heads exceed the grid limit",
                      p.batch.num_requests, p.value_heads);
  }
  VLLM_RETURN_IF_ERROR(launch_chunk_kernel(detail::gdn_chunk_index_kernel, "gdn_chunk_index_kernel",
                                           dim3(1), detail::kChunkIndexThreads,
                                           detail::kChunkIndexThreads * sizeof(int), p, stream));
  VLLM_RETURN_IF_ERROR(launch_chunk_kernel(
      detail::gdn_chunk_prep_kernel, "gdn_chunk_prep_kernel",
      dim3(static_cast<unsigned>(p.ws.max_chunks), static_cast<unsigned>(p.value_heads)),
      detail::kChunkThreads, detail::PrepSmem::kBytes, p, stream));
  return launch_chunk_kernel(detail::gdn_chunk_state_kernel, "gdn_chunk_state_kernel",
                             dim3(static_cast<unsigned>(state_blocks)), detail::kStateThreads,
                             detail::StateSmem::kBytes, p, stream);
}

// Whether the chunked form runs for this call, and its workspace layout.
struct ChunkPlan {
  bool chunked = false;
  int min_rows = 0;
  int64_t max_chunks = 0;
  detail::ChunkWorkspaceLayout layout;
};

ChunkPlan plan_chunked(DType act, int64_t tokens, int64_t requests, int64_t key_heads,
                       int64_t value_heads, int64_t dk, int64_t dv, int32_t max_query_len,
                       const GatedDeltaRuleParams& params) {
  ChunkPlan plan;
  plan.min_rows = params.chunked_min_rows > 0 ? params.chunked_min_rows : detail::kChunkMinRows;
  // max_query_len is a bound: the kernels check each request's own rows (and no request of a
  // batch of fewer than min_rows tokens can have min_rows of them).
  plan.chunked = act == DType::kBF16 && dk <= detail::kChunkKeyDim && tokens >= plan.min_rows &&
                 dv > 0 && requests > 0 && max_query_len >= plan.min_rows;
  if (!plan.chunked) return plan;
  // A chunked request of n >= min_rows rows has ceil(n / 64) <= (n + 63) / 64 chunks, and at
  // most T / min_rows requests are chunked: at most (T + 63 min(R, T / min_rows)) / 64 in all.
  const int64_t chunked_requests = std::min<int64_t>(requests, tokens / plan.min_rows);
  plan.max_chunks = (tokens + (detail::kChunk - 1) * chunked_requests) / detail::kChunk;
  const int64_t dv_pad = detail::ceil_div(dv, detail::kChunkSlice) * detail::kChunkSlice;
  plan.layout =
      detail::chunk_workspace_layout(plan.max_chunks, requests, key_heads, value_heads, dv_pad);
  return plan;
}

// The kernel of the smallest capacity that holds p.dk (1 .. kMaxKeyDim, checked); the wide
// kernel where it fits.
template <typename T>
Status dispatch_rule(const RuleParams<T>& p, bool early, cudaStream_t stream) {
  if (p.dk <= 32) return launch_rule<T, 32>(p, stream);
  if (p.dk <= 64) return launch_rule<T, 64>(p, stream);
  if (wide_rule_fits(p.dk, p.dv)) return launch_rule_wide<T>(p, early, stream);
  if (p.dk <= 128) return launch_rule<T, 128>(p, stream);
  static_assert(kMaxKeyDim == 256);
  return launch_rule<T, 256>(p, stream);
}

}  // namespace

size_t gated_delta_rule_workspace_size(const Tensor& q, const Tensor& state, const GdnBatch& batch,
                                       const GatedDeltaRuleParams& params) {
  if (state.ndim() != 4 || q.ndim() != 2 || state.size(2) == 0 || q.size(1) % state.size(2) != 0 ||
      batch.state_indices.ndim() != 1) {
    return 0;  // the op refuses these shapes
  }
  const ChunkPlan plan =
      plan_chunked(q.dtype(), q.size(0), batch.state_indices.size(0), q.size(1) / state.size(2),
                   state.size(1), state.size(2), state.size(3), batch.max_query_len, params);
  return plan.chunked ? plan.layout.bytes : 0;
}

Status gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                        const Tensor& beta, const GdnBatch& batch,
                        const GatedDeltaRuleParams& params, Tensor& state, Tensor& out,
                        cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::gated_delta_rule";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "q", q, {DType::kF32, DType::kBF16}));
  VLLM_RETURN_IF_ERROR(
      detail::check_cuda_tensor(kOp, "state", state, {DType::kF32, DType::kBF16, DType::kF16}));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "state", state, q));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "state", state));
  if (state.ndim() != 4) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: state {} must be [num_slots, value heads, Dk, Dv]", kOp,
                      state.to_string());
  }
  const int64_t num_slots = state.size(0), hv = state.size(1), dk = state.size(2),
                dv = state.size(3);
  if (q.ndim() != 2 || dk == 0 || q.size(1) == 0 || q.size(1) % dk != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: q {} must be [tokens, key heads * {}] (Dk of state {})", kOp,
                      q.to_string(), dk, shape_to_string(state.shape()));
  }
  const int64_t tokens = q.size(0), hk = q.size(1) / dk;
  if (hv == 0 || hv % hk != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: {} value heads (state) are not a multiple of {} key heads (q)", kOp, hv,
                      hk);
  }
  if (dk > kMaxKeyDim) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: key head dim {} exceeds the {} this kernel holds in registers", kOp, dk,
                      kMaxKeyDim);
  }
  struct Expect {
    std::string_view name;
    const Tensor* t;
    Shape shape;
    bool activation;  // q's dtype, else F32
  };
  const Expect expects[] = {{"k", &k, q.shape(), true},
                            {"v", &v, {tokens, hv * dv}, true},
                            {"g", &g, {tokens, hv}, false},
                            {"beta", &beta, {tokens, hv}, false},
                            {"out", &out, {tokens, hv * dv}, true}};
  for (const Expect& e : expects) {
    VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, e.name, *e.t));
    VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, e.name, *e.t, q));
    if (e.activation) {
      VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, e.name, *e.t, q));
    } else {
      VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, e.name, *e.t, {DType::kF32}));
    }
    if (e.t->shape() != e.shape) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} {} must be {}", kOp, e.name,
                        e.t->to_string(), shape_to_string(e.shape));
    }
  }
  VLLM_ASSIGN_OR_RETURN(detail::Rows q_rows, detail::as_rows(kOp, "q", q));
  VLLM_ASSIGN_OR_RETURN(detail::Rows k_rows, detail::as_rows(kOp, "k", k));
  VLLM_ASSIGN_OR_RETURN(detail::Rows v_rows, detail::as_rows(kOp, "v", v));
  VLLM_ASSIGN_OR_RETURN(detail::Rows g_rows, detail::as_rows(kOp, "g", g));
  VLLM_ASSIGN_OR_RETURN(detail::Rows beta_rows, detail::as_rows(kOp, "beta", beta));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));
  VLLM_ASSIGN_OR_RETURN(detail::Rows state_rows, detail::as_rows(kOp, "state", state));
  // Other warps still read q, k, v, g and beta (and the state) while one writes out.
  const std::pair<std::string_view, const detail::Rows*> inputs[] = {
      {"q", &q_rows}, {"k", &k_rows}, {"v", &v_rows}, {"g", &g_rows}, {"beta", &beta_rows}};
  for (const auto& [name, rows] : inputs) {
    const size_t size = name == "g" || name == "beta" ? sizeof(float) : q.element_size();
    VLLM_RETURN_IF_ERROR(
        detail::check_no_overlap(kOp, "out", out_rows, out.element_size(), name, *rows, size));
    VLLM_RETURN_IF_ERROR(detail::check_no_overlap(kOp, "state", state_rows, state.element_size(),
                                                  name, *rows, size));
  }
  VLLM_RETURN_IF_ERROR(detail::check_no_overlap(kOp, "state", state_rows, state.element_size(),
                                                "out", out_rows, out.element_size()));
  VLLM_ASSIGN_OR_RETURN(detail::GdnBatchView view,
                        detail::check_gdn_batch(kOp, batch, q, tokens, num_slots));
  if (hv > INT_MAX / 2 || dv > INT_MAX / 2) {
    return make_error(ErrorCode::kUnsupported, "{}: {} value heads of {} values are too many", kOp,
                      hv, dv);
  }
  if (tokens == 0 || dv == 0 || view.num_requests == 0) return Status::ok();

  DeviceGuard guard(q.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  const float scale = params.scale != 0.0f
                          ? params.scale
                          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  // The fields both forms' parameters share (the token-by-token RuleParams<T>, the chunked
  // ChunkRuleParams).
  auto fill_common = [&](auto& p, auto type_tag) {
    using T = decltype(type_tag);
    p.q = static_cast<const T*>(q_rows.data);
    p.k = static_cast<const T*>(k_rows.data);
    p.v = static_cast<const T*>(v_rows.data);
    p.g = static_cast<const float*>(g_rows.data);
    p.beta = static_cast<const float*>(beta_rows.data);
    p.out = static_cast<T*>(out_rows.data);
    p.state = state.data_ptr();
    p.state_type = detail::state_type(state.dtype());
    p.batch = view;
    p.q_stride = q_rows.row_stride;
    p.k_stride = k_rows.row_stride;
    p.v_stride = v_rows.row_stride;
    p.g_stride = g_rows.row_stride;
    p.beta_stride = beta_rows.row_stride;
    p.out_stride = out_rows.row_stride;
    p.value_heads = static_cast<int>(hv);
    p.group = static_cast<int>(hv / hk);
    p.dk = static_cast<int>(dk);
    p.dv = static_cast<int>(dv);
    p.scale = scale;
    p.l2norm_eps = params.l2norm_eps;
    p.use_l2norm = params.use_qk_l2norm;
  };
  // BF16 requests of chunked_min_rows rows or more take the chunked form, when the batch may
  // hold one.
  const ChunkPlan plan = plan_chunked(q.dtype(), tokens, view.num_requests, hk, hv, dk, dv,
                                      batch.max_query_len, params);
  if (plan.chunked) {
    const Tensor& ws = params.workspace;
    if (!ws.defined() || !ws.device().is_cuda() || ws.device() != q.device() ||
        !ws.is_contiguous() || ws.nbytes() < plan.layout.bytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}: the chunked form needs a contiguous workspace of {} bytes on {} "
                        "(gated_delta_rule_workspace_size), got {}",
                        kOp, plan.layout.bytes, q.device().to_string(),
                        ws.defined() ? ws.to_string() : std::string("none"));
    }
    if (plan.max_chunks > INT_MAX) {
      return make_error(ErrorCode::kUnsupported, "{}: {} tokens are too many for one call", kOp,
                        tokens);
    }
    using T = __nv_bfloat16;
    detail::ChunkRuleParams p{};
    fill_common(p, T{});
    const int slices = static_cast<int>(detail::ceil_div(dv, detail::kChunkSlice));
    p.ws = detail::carve_chunk_workspace(const_cast<void*>(ws.data_ptr()), plan.layout,
                                         static_cast<int>(plan.max_chunks),
                                         slices * detail::kChunkSlice);
    p.key_heads = static_cast<int>(hk);
    p.slices = slices;
    p.min_rows = plan.min_rows;
    p.qk_vec = dk % 8 == 0 && detail::rows_aligned(q_rows, sizeof(T), 16) &&
               detail::rows_aligned(k_rows, sizeof(T), 16);
    p.v_vec = dv % 8 == 0 && detail::rows_aligned(v_rows, sizeof(T), 16);
    VLLM_RETURN_IF_ERROR(launch_chunked(p, stream));
  }
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    RuleParams<T> p{};
    fill_common(p, T{});
    p.col_tiles = static_cast<int>(detail::ceil_div(dv, kColsPerWarp));
    p.chunked_min_rows = plan.chunked ? plan.min_rows : INT_MAX;
    return dispatch_rule<T>(p, batch.states_settled, stream);
  };
  if (q.dtype() == DType::kF32) return run(float{});
  return run(__nv_bfloat16{});
}

}  // namespace vllm::cuda

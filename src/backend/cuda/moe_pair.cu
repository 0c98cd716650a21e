// The per-pair path of the MoE expert op (moe_plan.cuh) for batches of a few tokens: no
// grouping by expert, no expert-output buffer and no combine launch. Two kernels:
//
//   gate/up: grid (column groups, pairs). A block serves one (token, slot) pair p; its expert
//            e = topk_ids[p] comes from one load, so the weight rows' loads start one memory
//            round trip after launch (the grouped paths wait for the grouping's counts,
//            offsets and permutation first). The token's row x goes to shared memory. Warp w
//            owns act column c: gate row c and up row I + c of expert e, each lane loading
//            several 16-byte chunks of both rows before it uses any (8 of each for BF16:
//            2048 columns a round trip), and writes act[p][c] = silu(gate . x) * (up . x).
//   down:    grid (row groups, tokens). A block serves kDownRows output rows of one token t,
//            one warp per slot of t: the warp loads its chunks of those rows of down[e] and
//            of act[p] together (for BF16 two chunks of each row a lane: 512 columns a round
//            trip) and reduces one dot product per row, rounded to the storage
//            type (the expert output, as on the other paths). After one barrier, thread r
//            sums row r's slots in slot order, weighted, in f32, adds the shared expert's
//            sigmoid-gated row and rounds out[t][h] once: the combine of the other paths,
//            fused.
// Tokens that share an expert read its rows once each (from L2 when they run together), which
// is why only small batches take this path (kMoePairMaxTokens, moe.cuh).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/moe_plan.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda::detail {
namespace {

constexpr int kPairWarps = 8;
constexpr int kPairThreads = kPairWarps * kWarpSize;
constexpr int kGateUpUnroll = 4;   // chunks of each of the two rows a lane keeps in flight
constexpr int kDownRows = 8;       // output rows of a down block (each warp: all of them, one slot)
constexpr int kDownMaxWarps = 16;  // warps of a down block: one per slot up to this many

template <typename T>
struct PairParams {
  const T* x;  // [T, H], row stride ldx
  int64_t ldx;
  const T* gate_up;  // [E, 2I, H]
  const T* down;     // [E, H, I]
  T* act;            // [T * k, I]
  const int64_t* ids;
  const float* weights;
  const T* shared;  // [T, H] at shared_stride, or null
  int64_t shared_stride;
  const void* gate;  // [T] at gate_stride, F32 or T
  int64_t gate_stride;
  bool gate_f32;
  T* out;  // [T, H] at out_stride
  int64_t out_stride;
  int hidden, inter, experts, top_k;
  // FP8 experts (MoeProblem::fp8): e4m3 bytes in place of gate_up / down, with their scales.
  const uint8_t* gate_up8;
  const uint8_t* down8;
  MoeFp8Scales gate_up_scales, down_scales;
};

// Stages n elements of src into shared memory (16-byte copies when kN says so).
template <typename T, int kN>
__device__ __forceinline__ void stage(T* dst, const T* src, int n) {
  if constexpr (sizeof(T) * kN == 16) {
    for (int i = threadIdx.x; i < n / kN; i += kPairThreads) {
      reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
    }
  } else {
    for (int i = threadIdx.x; i < n; i += kPairThreads) dst[i] = src[i];
  }
}

// The same for a block that runs before pdl_wait: x was written by a kernel that finished
// before this one launched, so the loads go to L2 (ld.global.cg), where that kernel's writes
// are, never to a line an earlier kernel left in this SM's L1.
__device__ __forceinline__ void stage_from_l2(__nv_bfloat16* dst, const __nv_bfloat16* src, int n) {
  for (int i = threadIdx.x; i < n / 8; i += kPairThreads) {
    reinterpret_cast<int4*>(dst)[i] = __ldcg(reinterpret_cast<const int4*>(src) + i);
  }
}

template <typename T, int kN>
__global__ void __launch_bounds__(kPairThreads, 2) moe_pair_gate_up_kernel(PairParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  extern __shared__ __align__(16) unsigned char smem[];
  T* x = reinterpret_cast<T*>(smem);  // [H]: the pair's token row
  const int pair = blockIdx.y;
  const int64_t e = p.ids[pair];
  if (e < 0 || e >= p.experts) return;  // the whole block; the down kernel skips this pair
  const int col = blockIdx.x * kPairWarps + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const T* gate_row =
      p.gate_up + (e * 2 * p.inter + min(col, p.inter - 1)) * static_cast<int64_t>(p.hidden);
  const T* up_row = gate_row + static_cast<int64_t>(p.inter) * p.hidden;
  const int chunks = p.hidden / kN;
  Pack<T, kN> wg[kGateUpUnroll], wu[kGateUpUnroll];
  auto load = [&](int c) {
#pragma unroll
    for (int i = 0; i < kGateUpUnroll; ++i) {
      const int ci = c + i * kWarpSize;
      if (ci < chunks) {
        wg[i] = load_weight_pack<T, kN>(gate_row + int64_t{ci} * kN);
        wu[i] = load_weight_pack<T, kN>(up_row + int64_t{ci} * kN);
      }
    }
  };
  // The first weight chunks are in flight while the block stages x.
  load(lane);
  stage<T, kN>(x, p.x + static_cast<int64_t>(pair / p.top_k) * p.ldx, p.hidden);
  __syncthreads();
  if (col >= p.inter) return;  // whole warps leave; no barrier below
  float g = 0.0f, u = 0.0f;
  for (int c = lane; c < chunks;) {
#pragma unroll
    for (int i = 0; i < kGateUpUnroll; ++i) {
      const int ci = c + i * kWarpSize;
      if (ci < chunks) {
        const Pack<T, kN> xv = *reinterpret_cast<const Pack<T, kN>*>(x + int64_t{ci} * kN);
        g = dot_pack<T, kN>(wg[i], xv, g);
        u = dot_pack<T, kN>(wu[i], xv, u);
      }
    }
    c += kWarpSize * kGateUpUnroll;
    if (c < chunks) load(c);
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) {
    p.act[static_cast<int64_t>(pair) * p.inter + col] = from_float<T>(g / (1.0f + expf(-g)) * u);
  }
}

// The down kernels' fused combine, after their barrier: thread r < kDownRows sums output
// row h0 + r's expert outputs y_s[slot][r] in slot order, weighted, in f32, adds the shared
// expert's sigmoid-gated row and rounds out[t][h] once.
template <typename T>
__device__ __forceinline__ void combine_down_row(const PairParams<T>& p,
                                                 const float (*y_s)[kDownRows], int t, int h0) {
  const int r = threadIdx.x;
  if (r >= kDownRows || h0 + r >= p.hidden) return;
  const int64_t first_pair = static_cast<int64_t>(t) * p.top_k;
  float acc = 0.0f;
  for (int slot = 0; slot < p.top_k; ++slot) {
    const int64_t e = p.ids[first_pair + slot];
    if (e >= 0 && e < p.experts) acc += p.weights[first_pair + slot] * y_s[slot][r];
  }
  const int h = h0 + r;
  if (p.shared != nullptr) {
    const float g = p.gate_f32 ? static_cast<const float*>(p.gate)[t * p.gate_stride]
                               : to_float(static_cast<const T*>(p.gate)[t * p.gate_stride]);
    acc += 1.0f / (1.0f + expf(-g)) * to_float(p.shared[t * p.shared_stride + h]);
  }
  p.out[t * p.out_stride + h] = from_float<T>(acc);
}

// Block: one warp per slot (slots past kDownMaxWarps wrap around), kDownRows output rows.
constexpr int kDownUnroll = 1;  // chunks of each row a lane keeps in flight
template <typename T, int kN>
__global__ void __launch_bounds__(kDownMaxWarps* kWarpSize) moe_pair_down_kernel(PairParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  __shared__ float y_s[kMoePairMaxSlots][kDownRows];  // expert outputs, rounded to T
  const int t = blockIdx.y;
  const int h0 = blockIdx.x * kDownRows;
  const int warps = blockDim.x / kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first_pair = static_cast<int64_t>(t) * p.top_k;
  const int chunks = p.inter / kN;
  for (int slot = warp; slot < p.top_k; slot += warps) {
    const int64_t e = p.ids[first_pair + slot];
    const bool use = e >= 0 && e < p.experts;
    const T* base = p.down + (use ? e : 0) * p.hidden * static_cast<int64_t>(p.inter);
    const T* act = p.act + (first_pair + slot) * p.inter;
    const T* rows[kDownRows];
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) {
      rows[r] = base + static_cast<int64_t>(min(h0 + r, p.hidden - 1)) * p.inter;
    }
    float dot[kDownRows];
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) dot[r] = 0.0f;
    if (use) {
      for (int c = lane; c < chunks; c += kWarpSize * kDownUnroll) {
        Pack<T, kN> w[kDownRows][kDownUnroll], a[kDownUnroll];
#pragma unroll
        for (int i = 0; i < kDownUnroll; ++i) {
          const int ci = c + i * kWarpSize;
          if (ci < chunks) {
#pragma unroll
            for (int r = 0; r < kDownRows; ++r) {
              w[r][i] = load_weight_pack<T, kN>(rows[r] + int64_t{ci} * kN);
            }
            a[i] = load_pack<T, kN>(act + int64_t{ci} * kN);
          }
        }
#pragma unroll
        for (int i = 0; i < kDownUnroll; ++i) {
          if (c + i * kWarpSize < chunks) {
#pragma unroll
            for (int r = 0; r < kDownRows; ++r) dot[r] = dot_pack<T, kN>(w[r][i], a[i], dot[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) {
      const float y = to_float(from_float<T>(warp_sum(dot[r])));  // the expert output
      if (lane == r) y_s[slot][r] = y;
    }
  }
  __syncthreads();
  combine_down_row(p, y_s, t, h0);
}

// ---- BF16: more of each row in flight ------------------------------------------------------
// The same two products for BF16 rows of whole 16-byte chunks (the common case; the kernels
// above serve F32 and unaligned rows): a lane issues every chunk it reads in a round before it
// uses the first, and keeps them as the raw words it loaded, widened only at the FMA, so twice
// the chunks of the kernels above fit in the registers that keep two blocks on an SM. Each
// lane adds its chunks in the order the kernels above do, so the results are the same bits.
// gate/up: kWholeGateUpChunks chunks of both rows a lane per round (2048 columns: a
// 35B-A3B row in one round trip).
constexpr int kWholeGateUpChunks = 8;

// acc + w . x over the 8 BF16 elements of two 16-byte chunks, in element order.
__device__ __forceinline__ float dot_bf16x8(const uint4& w, const uint4& x, float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(ws[i] << 16), __uint_as_float(xs[i] << 16), acc);
    acc = fmaf(__uint_as_float(ws[i] & 0xffff0000u), __uint_as_float(xs[i] & 0xffff0000u), acc);
  }
  return acc;
}

__device__ __forceinline__ uint4 load_weight_chunk(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// The pair of gate/up block y. With the last slot ahead, the blocks of every token's last
// slot come first (y < tokens), so they are the ones resident while the kernel before runs.
template <bool kAhead>
__device__ __forceinline__ int gate_up_pair(const PairParams<__nv_bfloat16>& p, int y) {
  if (!kAhead) return y;
  const int tokens = static_cast<int>(gridDim.y) / p.top_k;
  if (y < tokens) return y * p.top_k + p.top_k - 1;
  const int routed = p.top_k - 1;  // >= 1 here: y >= tokens needs more than one slot
  y -= tokens;
  return y / routed * p.top_k + y % routed;
}

// kAhead (MoePairArgs::last_slot_ahead): a block of the last slot does all its work before
// pdl_wait. Its expert is known without the routing that the kernel before writes, its x was
// written before that kernel launched, and its act row is read only by the down kernel after
// this one.
template <bool kAhead>
__global__ void __launch_bounds__(kPairThreads, 2)
    moe_pair_gate_up_whole_kernel(PairParams<__nv_bfloat16> p) {
  using T = __nv_bfloat16;
  constexpr int kN = 8;
  extern __shared__ __align__(16) unsigned char smem[];
  T* x = reinterpret_cast<T*>(smem);  // [H]: the pair's token row
  const int pair = gate_up_pair<kAhead>(p, blockIdx.y);
  const bool ahead = kAhead && pair % p.top_k == p.top_k - 1;
  if (!ahead) {
    pdl_wait();
    pdl_launch_next();
  }
  const int64_t e = ahead ? p.experts - 1 : p.ids[pair];
  if (e < 0 || e >= p.experts) return;  // the whole block; the down kernel skips this pair
  const int col = blockIdx.x * kPairWarps + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const T* gate_row =
      p.gate_up + (e * 2 * p.inter + min(col, p.inter - 1)) * static_cast<int64_t>(p.hidden);
  const T* up_row = gate_row + static_cast<int64_t>(p.inter) * p.hidden;
  const int chunks = p.hidden / kN;
  float g = 0.0f, u = 0.0f;
  for (int c0 = 0; c0 < chunks; c0 += kWarpSize * kWholeGateUpChunks) {
    uint4 wg[kWholeGateUpChunks], wu[kWholeGateUpChunks];
#pragma unroll
    for (int i = 0; i < kWholeGateUpChunks; ++i) {
      const int ci = c0 + lane + i * kWarpSize;
      if (ci < chunks) {
        wg[i] = load_weight_chunk(gate_row + int64_t{ci} * kN);
        wu[i] = load_weight_chunk(up_row + int64_t{ci} * kN);
      }
    }
    if (c0 == 0) {  // the first round's chunks are in flight while the block stages x
      const T* row = p.x + static_cast<int64_t>(pair / p.top_k) * p.ldx;
      if (ahead) {
        stage_from_l2(x, row, p.hidden);
      } else {
        stage<T, kN>(x, row, p.hidden);
      }
      __syncthreads();
      if (col >= p.inter) {  // whole warps leave; no barrier below
        if (ahead) pdl_wait();
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < kWholeGateUpChunks; ++i) {
      const int ci = c0 + lane + i * kWarpSize;
      if (ci < chunks) {
        const uint4 xv = *reinterpret_cast<const uint4*>(x + int64_t{ci} * kN);
        g = dot_bf16x8(wg[i], xv, g);
        u = dot_bf16x8(wu[i], xv, u);
      }
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) {
    p.act[static_cast<int64_t>(pair) * p.inter + col] = from_float<T>(g / (1.0f + expf(-g)) * u);
  }
  if (ahead) {  // the kernel must not finish before the ones it follows
    pdl_wait();
    pdl_launch_next();
  }
}

// Down: kWholeDownUnroll chunks of each of the block's kDownRows rows a lane per round (512
// columns: a 35B-A3B row in one round trip), 64 registers of weights. At most 96 registers a
// thread: an SM's four schedulers each hold a quarter of its registers, and two blocks of
// nine warps (top-8 and the shared expert) put five warps on one of them (5 x 32 x 96 <=
// 16,384), so a batch-1 grid of 256 blocks is one wave.
constexpr int kWholeDownUnroll = 2;

// kAhead (MoePairArgs::last_slot_ahead): the warp of every token's last slot issues its
// first round of weight loads before pdl_wait, its expert needing no routing. (pdl_wait
// returns at once after the first time, so each round calls it rather than keeping a
// register to know.)
template <bool kAhead>
__global__ void __maxnreg__(96) moe_pair_down_whole_kernel(PairParams<__nv_bfloat16> p) {
  using T = __nv_bfloat16;
  constexpr int kN = 8;
  if constexpr (!kAhead) {
    pdl_wait();
    pdl_launch_next();
  }
  __shared__ float y_s[kMoePairMaxSlots][kDownRows];  // expert outputs, rounded to T
  const int t = blockIdx.y;
  const int h0 = blockIdx.x * kDownRows;
  const int warps = blockDim.x / kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first_pair = static_cast<int64_t>(t) * p.top_k;
  const int chunks = p.inter / kN;
  for (int slot = warp; slot < p.top_k; slot += warps) {
    const bool ahead = kAhead && slot == p.top_k - 1;
    if (kAhead && !ahead) pdl_wait();
    const int64_t e = ahead ? p.experts - 1 : p.ids[first_pair + slot];
    const bool use = e >= 0 && e < p.experts;
    const T* base = p.down + (use ? e : 0) * p.hidden * static_cast<int64_t>(p.inter);
    const T* act = p.act + (first_pair + slot) * p.inter;
    // The block's rows, all inside the expert: hidden % kDownRows == 0 (launch_pair).
    const T* rows = base + static_cast<int64_t>(h0) * p.inter;
    float dot[kDownRows];
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) dot[r] = 0.0f;
    if (use) {
      for (int c = lane; c < chunks; c += kWarpSize * kWholeDownUnroll) {
        uint4 w[kDownRows][kWholeDownUnroll], a[kWholeDownUnroll];
#pragma unroll
        for (int i = 0; i < kWholeDownUnroll; ++i) {
          const int ci = c + i * kWarpSize;
          if (ci < chunks) {
#pragma unroll
            for (int r = 0; r < kDownRows; ++r)
              w[r][i] = load_weight_chunk(rows + r * p.inter + ci * kN);
            if constexpr (!kAhead) a[i] = *reinterpret_cast<const uint4*>(act + int64_t{ci} * kN);
          }
        }
        if constexpr (kAhead) {
          pdl_wait();  // act is the gate/up kernel's
#pragma unroll
          for (int i = 0; i < kWholeDownUnroll; ++i) {
            const int ci = c + i * kWarpSize;
            if (ci < chunks) a[i] = *reinterpret_cast<const uint4*>(act + int64_t{ci} * kN);
          }
        }
#pragma unroll
        for (int i = 0; i < kWholeDownUnroll; ++i) {
          if (c + i * kWarpSize < chunks) {
#pragma unroll
            for (int r = 0; r < kDownRows; ++r) dot[r] = dot_bf16x8(w[r][i], a[i], dot[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) {
      const float y = to_float(from_float<T>(warp_sum(dot[r])));  // the expert output
      if (lane == r) y_s[slot][r] = y;
    }
  }
  if constexpr (kAhead) {
    pdl_wait();
    pdl_launch_next();
  }
  __syncthreads();
  combine_down_row(p, y_s, t, h0);
}

// ---- FP8 experts (W8A16) -------------------------------------------------------------------
// The same two products over block-scaled e4m3 rows: a chunk is 16 weights (one 16-byte load)
// under one scale (kVec: H, I and the block widths multiples of 16). The chunk's codes become
// their exact f32 values by bit moves (fp8_chunk_to_float_exact: conversion instructions,
// 2.5 a weight, bound these kernels at a fraction of the memory's speed), their products with
// x sum in f32 and the scale multiplies that sum once: x meets the f32 dequantized weight,
// as on the CPU. Without kVec a lane takes one element at a time, each weight its e4m3 value
// times its scale, rounded to BF16 under BF16 activations (fp8_weight). The activations are
// read as in the kernels above.
constexpr int kFp8GateUpUnroll = 4;  // chunks of each of the two rows a lane keeps in flight
constexpr int kFp8DownUnroll = 1;    // 8 rows x 16 weights: a 35B-A3B row (I = 512) in one round

// Row r of expert e's scales of one stacked weight.
__device__ __forceinline__ const float* fp8_scale_row(const MoeFp8Scales& s, int64_t e, int r) {
  return s.at + e * s.expert_stride + static_cast<int64_t>(r / s.block_n) * s.cols_grid;
}

// acc + scale * (codes . x) over one 16-weight chunk of a row (its e4m3 bytes and its scale)
// and 16 floats.
template <typename T>
__device__ __forceinline__ float dot_fp8_chunk(const uint4& w, float scale, const float* x,
                                               float acc) {
  float wf[kFp8Chunk];
  fp8_chunk_to_float_exact(w, wf);
  float dot = 0.0f;
#pragma unroll
  for (int j = 0; j < kFp8Chunk; ++j) dot = fmaf(x[j], wf[j], dot);
  return fmaf(dot, scale, acc);
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kPairThreads, 2) moe_pair_gate_up_fp8_kernel(PairParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  extern __shared__ __align__(16) unsigned char smem[];
  T* x = reinterpret_cast<T*>(smem);  // [H]: the pair's token row
  const int pair = blockIdx.y;
  const int64_t e = p.ids[pair];
  if (e < 0 || e >= p.experts) return;  // the whole block; the down kernel skips this pair
  const int col = blockIdx.x * kPairWarps + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int c = min(col, p.inter - 1);
  const uint8_t* gate_row = p.gate_up8 + (e * 2 * p.inter + c) * static_cast<int64_t>(p.hidden);
  const uint8_t* up_row = gate_row + static_cast<int64_t>(p.inter) * p.hidden;
  const float* gate_s = fp8_scale_row(p.gate_up_scales, e, c);
  const float* up_s = fp8_scale_row(p.gate_up_scales, e, p.inter + c);
  const int block_k = p.gate_up_scales.block_k;
  float g = 0.0f, u = 0.0f;
  if constexpr (kVec) {
    const int chunks = p.hidden / kFp8Chunk;
    uint4 wg[kFp8GateUpUnroll], wu[kFp8GateUpUnroll];
    auto load = [&](int c0) {
#pragma unroll
      for (int i = 0; i < kFp8GateUpUnroll; ++i) {
        const int ci = c0 + i * kWarpSize;
        if (ci < chunks) {
          wg[i] = load_weight16(gate_row + int64_t{ci} * kFp8Chunk);
          wu[i] = load_weight16(up_row + int64_t{ci} * kFp8Chunk);
        }
      }
    };
    load(lane);  // in flight while the block stages x
    stage<T, 16 / sizeof(T)>(x, p.x + static_cast<int64_t>(pair / p.top_k) * p.ldx, p.hidden);
    __syncthreads();
    if (col >= p.inter) return;  // whole warps leave; no barrier below
    for (int c0 = lane; c0 < chunks;) {
#pragma unroll
      for (int i = 0; i < kFp8GateUpUnroll; ++i) {
        const int ci = c0 + i * kWarpSize;
        if (ci < chunks) {
          const int kb = ci * kFp8Chunk / block_k;
          float xf[kFp8Chunk];
          load_x16(x + int64_t{ci} * kFp8Chunk, xf);
          g = dot_fp8_chunk<T>(wg[i], __ldg(gate_s + kb), xf, g);
          u = dot_fp8_chunk<T>(wu[i], __ldg(up_s + kb), xf, u);
        }
      }
      c0 += kWarpSize * kFp8GateUpUnroll;
      if (c0 < chunks) load(c0);
    }
  } else {
    stage<T, 1>(x, p.x + static_cast<int64_t>(pair / p.top_k) * p.ldx, p.hidden);
    __syncthreads();
    if (col >= p.inter) return;
    for (int kk = lane; kk < p.hidden; kk += kWarpSize) {
      const float xv = to_float(x[kk]);
      g = fmaf(xv, fp8_weight<T>(e4m3_to_float(__ldg(gate_row + kk)), __ldg(gate_s + kk / block_k)),
               g);
      u = fmaf(xv, fp8_weight<T>(e4m3_to_float(__ldg(up_row + kk)), __ldg(up_s + kk / block_k)), u);
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) {
    p.act[static_cast<int64_t>(pair) * p.inter + col] = from_float<T>(g / (1.0f + expf(-g)) * u);
  }
}

// Block: one warp per slot (slots past kDownMaxWarps wrap around), kDownRows output rows.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kDownMaxWarps* kWarpSize)
    moe_pair_down_fp8_kernel(PairParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  extern __shared__ __align__(16) unsigned char smem[];
  // [kMoePairMaxSlots][kDownRows]: expert outputs, rounded to T
  auto* y_s = reinterpret_cast<float(*)[kDownRows]>(smem);
  const int t = blockIdx.y;
  const int h0 = blockIdx.x * kDownRows;
  const int warps = blockDim.x / kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first_pair = static_cast<int64_t>(t) * p.top_k;
  const int block_k = p.down_scales.block_k;
  for (int slot = warp; slot < p.top_k; slot += warps) {
    const int64_t e = p.ids[first_pair + slot];
    const bool use = e >= 0 && e < p.experts;
    const int64_t ee = use ? e : 0;
    const T* act = p.act + (first_pair + slot) * p.inter;
    const uint8_t* rows[kDownRows];
    const float* srows[kDownRows];
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) {
      const int h = min(h0 + r, p.hidden - 1);
      rows[r] = p.down8 + (ee * p.hidden + h) * static_cast<int64_t>(p.inter);
      srows[r] = fp8_scale_row(p.down_scales, ee, h);
    }
    float dot[kDownRows];
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) dot[r] = 0.0f;
    if (use) {
      if constexpr (kVec) {
        const int chunks = p.inter / kFp8Chunk;
        for (int c = lane; c < chunks; c += kWarpSize * kFp8DownUnroll) {
          uint4 w[kDownRows][kFp8DownUnroll];
#pragma unroll
          for (int i = 0; i < kFp8DownUnroll; ++i) {
            const int ci = c + i * kWarpSize;
            if (ci < chunks) {
#pragma unroll
              for (int r = 0; r < kDownRows; ++r) {
                w[r][i] = load_weight16(rows[r] + int64_t{ci} * kFp8Chunk);
              }
            }
          }
#pragma unroll
          for (int i = 0; i < kFp8DownUnroll; ++i) {
            const int ci = c + i * kWarpSize;
            if (ci < chunks) {
              const int kb = ci * kFp8Chunk / block_k;
              float af[kFp8Chunk];
              load_x16(act + int64_t{ci} * kFp8Chunk, af);
#pragma unroll
              for (int r = 0; r < kDownRows; ++r) {
                dot[r] = dot_fp8_chunk<T>(w[r][i], __ldg(srows[r] + kb), af, dot[r]);
              }
            }
          }
        }
      } else {
        for (int kk = lane; kk < p.inter; kk += kWarpSize) {
          const float a = to_float(act[kk]);
#pragma unroll
          for (int r = 0; r < kDownRows; ++r) {
            const float w =
                fp8_weight<T>(e4m3_to_float(__ldg(rows[r] + kk)), __ldg(srows[r] + kk / block_k));
            dot[r] = fmaf(a, w, dot[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) {
      const float y = to_float(from_float<T>(warp_sum(dot[r])));  // the expert output
      if (lane == r) y_s[slot][r] = y;
    }
  }
  __syncthreads();
  combine_down_row(p, y_s, t, h0);
}

#if defined(VLLM_CUDA_EMULATION)
// The emulated blocks' dynamic shared memory (tests/cuda_emulation): what a launch may take.
alignas(16) unsigned char smem[kMoePairMaxSmemBytes];
#endif

// A launch of one of the FP8 kernels (in the CPU emulator: run there, at once).
template <typename T>
Status run_fp8(void (*kernel)(PairParams<T>), const char* name, dim3 grid, unsigned threads,
               size_t smem_bytes, cudaStream_t stream, const PairParams<T>& p) {
#if defined(VLLM_CUDA_EMULATION)
  (void)name;
  (void)stream;
  emu::launch(grid, threads, smem, smem_bytes, [&] { kernel(p); });
  return Status::ok();
#else
  launch_pdl(kernel, grid, threads, smem_bytes, stream, p);
  return check_launch(name);
#endif
}

constexpr size_t kDownFp8SmemBytes = sizeof(float) * kMoePairMaxSlots * kDownRows;

template <typename T>
Status launch_pair_fp8(const PairParams<T>& p, const MoeProblem& pr, int64_t pairs,
                       cudaStream_t stream) {
  const bool vec_x = is_aligned(pr.x, 16) && (pr.tokens == 1 || (pr.ldx * sizeof(T)) % 16 == 0);
  const bool vec_gu = pr.hidden % kFp8Chunk == 0 && p.gate_up_scales.block_k % kFp8Chunk == 0 &&
                      is_aligned(pr.gate_up, 16) && vec_x;
  const dim3 gu_grid(static_cast<unsigned>(ceil_div(pr.inter, kPairWarps)),
                     static_cast<unsigned>(pairs));
  const size_t x_smem = static_cast<size_t>(pr.hidden) * sizeof(T);
  VLLM_RETURN_IF_ERROR(
      run_fp8(vec_gu ? moe_pair_gate_up_fp8_kernel<T, true> : moe_pair_gate_up_fp8_kernel<T, false>,
              "moe_pair_gate_up_fp8_kernel", gu_grid, kPairThreads, x_smem, stream, p));
  const dim3 dn_grid(static_cast<unsigned>(ceil_div(pr.hidden, kDownRows)),
                     static_cast<unsigned>(pr.tokens));
  const unsigned dn_threads = static_cast<unsigned>(std::min(p.top_k, kDownMaxWarps) * kWarpSize);
  const bool vec_dn = pr.inter % kFp8Chunk == 0 && p.down_scales.block_k % kFp8Chunk == 0 &&
                      is_aligned(pr.down, 16) && is_aligned(pr.act, 16);
  return run_fp8(vec_dn ? moe_pair_down_fp8_kernel<T, true> : moe_pair_down_fp8_kernel<T, false>,
                 "moe_pair_down_fp8_kernel", dn_grid, dn_threads, kDownFp8SmemBytes, stream, p);
}

template <typename T>
Status launch_pair(const MoeProblem& pr, const MoePairArgs& a, cudaStream_t stream) {
  constexpr int kN = 16 / sizeof(T);
  PairParams<T> p{};
  p.x = static_cast<const T*>(pr.x);
  p.ldx = pr.ldx;
  p.gate_up = static_cast<const T*>(pr.gate_up);
  p.down = static_cast<const T*>(pr.down);
  p.act = static_cast<T*>(pr.act);
  p.ids = a.ids;
  p.weights = a.weights;
  p.shared = static_cast<const T*>(a.shared);
  p.shared_stride = a.shared_stride;
  p.gate = a.gate;
  p.gate_stride = a.gate_stride;
  p.gate_f32 = a.gate_f32;
  p.out = static_cast<T*>(a.out);
  p.out_stride = a.out_stride;
  p.hidden = static_cast<int>(pr.hidden);
  p.inter = static_cast<int>(pr.inter);
  p.experts = a.experts;
  p.top_k = a.top_k;

  const int64_t pairs = pr.tokens * a.top_k;
  if (pr.fp8) {
    p.gate_up = nullptr;
    p.down = nullptr;
    p.gate_up8 = static_cast<const uint8_t*>(pr.gate_up);
    p.down8 = static_cast<const uint8_t*>(pr.down);
    p.gate_up_scales = pr.gate_up_scales;
    p.down_scales = pr.down_scales;
    return launch_pair_fp8(p, pr, pairs, stream);
  }
  const dim3 gu_grid(static_cast<unsigned>(ceil_div(pr.inter, kPairWarps)),
                     static_cast<unsigned>(pairs));
  const bool vec_gu = pr.hidden % kN == 0 && is_aligned(pr.x, 16) && is_aligned(pr.gate_up, 16) &&
                      (pr.tokens == 1 || (pr.ldx * sizeof(T)) % 16 == 0);
  const size_t x_smem = static_cast<size_t>(pr.hidden) * sizeof(T);
  void (*gate_up)(PairParams<T>) = moe_pair_gate_up_kernel<T, 1>;
  if constexpr (sizeof(T) == 2) {
    if (vec_gu) {
      gate_up = a.last_slot_ahead ? moe_pair_gate_up_whole_kernel<true>
                                  : moe_pair_gate_up_whole_kernel<false>;
    }
  } else {
    if (vec_gu) gate_up = moe_pair_gate_up_kernel<T, kN>;
  }
  launch_pdl(gate_up, gu_grid, kPairThreads, x_smem, stream, p);
  VLLM_RETURN_IF_ERROR(check_launch("moe_pair_gate_up_kernel"));

  const dim3 dn_grid(static_cast<unsigned>(ceil_div(pr.hidden, kDownRows)),
                     static_cast<unsigned>(pr.tokens));
  const unsigned dn_threads = static_cast<unsigned>(std::min(a.top_k, kDownMaxWarps) * kWarpSize);
  const bool vec_dn = pr.inter % kN == 0 && is_aligned(pr.down, 16) && is_aligned(pr.act, 16);
  void (*down)(PairParams<T>) = vec_dn ? moe_pair_down_kernel<T, kN> : moe_pair_down_kernel<T, 1>;
  if constexpr (sizeof(T) == 2) {
    if (vec_dn && pr.hidden % kDownRows == 0 && kDownRows * pr.inter <= INT_MAX) {
      down =
          a.last_slot_ahead ? moe_pair_down_whole_kernel<true> : moe_pair_down_whole_kernel<false>;
    }
  }
  launch_pdl(down, dn_grid, dn_threads, 0, stream, p);
  return check_launch("moe_pair_down_kernel");
}

}  // namespace

size_t moe_pair_smem_bytes(DType dtype, int64_t hidden) {
  return static_cast<size_t>(hidden) * dtype_size(dtype);
}

Status launch_moe_pair_gemv(const MoeProblem& problem, const MoePairArgs& args,
                            cudaStream_t stream) {
  if (moe_pair_smem_bytes(problem.dtype, problem.hidden) > kMoePairMaxSmemBytes ||
      args.top_k > kMoePairMaxSlots || problem.tokens > kMaxGridY ||
      problem.tokens * args.top_k > kMaxGridY) {
    return make_error(ErrorCode::kInternal, "launch_moe_pair_gemv: unchecked sizes");
  }
  if (problem.dtype == DType::kF32) return launch_pair<float>(problem, args, stream);
  return launch_pair<__nv_bfloat16>(problem, args, stream);
}

}  // namespace vllm::cuda::detail

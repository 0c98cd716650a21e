// How paged attention splits its work, shared by the op entry (host) and the kernels
// (device): the launch arguments, the key-split (flash-decoding) plan and the workspace
// layout. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace vllm::cuda::detail {

// ---- Key splitting ------------------------------------------------------------------------
// A request whose query rows (q_len x GQA group) fit one "small" block (decode, or a short
// speculative chunk) is handled by one block per kv head; at small batch that is too few
// blocks for the GPU, so its keys are split into chunks, one block each, whose partial
// softmax results (unnormalised output, row max, row sum) a second kernel merges. Larger
// requests (prefill) have enough blocks from their query tiles and are not split.

// Query rows of a small block: a whole GQA group of one token for every group size up to 16.
constexpr int kSmallRows = 16;
// Most chunks per request (a 64-lane combine step handles them in two passes per lane).
constexpr int kMaxSplits = 64;
// Fewest keys per chunk: one key tile of the head-dim-256 small kernel (32 keys; the other
// head dims' small kernels take 64-key tiles, so their chunks are at least 64 keys). Shorter
// chunks spread a batch-1 decode over more SMs; the combine merges more of them.
constexpr int kMinKeysPerSplit = 32;
// Blocks the split aims for: about four waves of the H200's 132 SMs at two resident small
// blocks per SM, so the last wave's tail is short.
constexpr int kTargetSplitBlocks = 1024;
// Chunks are a multiple of every kernel's key tile (16, 32 or 64 keys).
constexpr int kSplitChunkAlign = 64;

struct SplitPlan {
  int32_t num_splits = 1;  // most chunks per request (grid.x of the small kernel)
  int32_t chunk = 1;       // keys per chunk of a max_seq_len request (each request's own chunk
                           // is request_chunk(seq_len, num_splits), attention_common.cuh)
};

// The same plan for the same (R, Hk, max_seq_len): a batch shape always gets one split.
// max_seq_len only bounds the grid: it may exceed every request (a CUDA graph captured for
// the longest sequence the engine allows).
inline SplitPlan plan_splits(int64_t num_requests, int64_t num_kv_heads, int64_t max_seq_len) {
  SplitPlan plan;
  const int64_t seq = max_seq_len > 0 ? max_seq_len : 1;
  plan.chunk = static_cast<int32_t>(seq);
  const int64_t base_blocks = num_requests * num_kv_heads;
  if (base_blocks <= 0 || base_blocks >= kTargetSplitBlocks || seq < 2 * kMinKeysPerSplit) {
    return plan;
  }
  int64_t splits = (kTargetSplitBlocks + base_blocks - 1) / base_blocks;
  splits = splits < kMaxSplits ? splits : kMaxSplits;
  const int64_t by_length = seq / kMinKeysPerSplit;
  splits = splits < by_length ? splits : by_length;
  if (splits <= 1) return plan;
  int64_t chunk = (seq + splits - 1) / splits;
  chunk = (chunk + kSplitChunkAlign - 1) / kSplitChunkAlign * kSplitChunkAlign;
  splits = (seq + chunk - 1) / chunk;  // rounding the chunk up may leave fewer chunks
  if (splits <= 1) return plan;
  plan.num_splits = static_cast<int32_t>(splits);
  plan.chunk = static_cast<int32_t>(chunk);
  return plan;
}

// Workspace layout when num_splits > 1, for the small block of request r, kv head kh, chunk
// s and row i (i < kSmallRows), with idx = ((r * Hk + kh) * num_splits + s) * kSmallRows + i:
//   partial_o  F32 [idx][D]   output not yet divided by the row sum
//   partial_ml F32 [idx][2]   row max (log2 units) and row sum
inline size_t split_workspace_floats(int64_t num_requests, int64_t num_kv_heads, int64_t head_dim,
                                     const SplitPlan& plan) {
  if (plan.num_splits <= 1) return 0;
  const int64_t slots = num_requests * num_kv_heads * plan.num_splits * kSmallRows;
  return static_cast<size_t>(slots * (head_dim + 2));
}

// ---- Launch arguments ----------------------------------------------------------------------

struct AttentionArgs {
  const void* query = nullptr;  // [T, Hq * D], row stride query_stride elements
  int64_t query_stride = 0;
  void* out = nullptr;  // [T, Hq * D], row stride out_stride elements
  int64_t out_stride = 0;
  const void* kv_cache = nullptr;  // [num_blocks, 2, block_size, Hk, D]
  int32_t num_blocks = 0;
  int32_t block_size_log2 = 0;
  int32_t num_kv_heads = 0;
  const int32_t* block_tables = nullptr;  // [>= R, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  const int32_t* query_start_loc = nullptr;  // [R + 1]
  const int32_t* seq_lens = nullptr;         // [R]
  int32_t num_tokens = 0;
  int32_t group = 1;  // Hq / Hk
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
  float scale_log2 = 0.0f;  // softmax scale * log2(e): scores are kept in log2 units (with an
                            // FP8 cache, times k_scale: S = q . k_e4m3 * that)
  float v_scale = 1.0f;     // FP8 cache: the outputs' factor (O = v_scale * P V_e4m3); else 1
  // Key splitting of small blocks (num_splits == 1: none, partial_* unused); each request
  // splits by its own length (request_chunk).
  int32_t num_splits = 1;
  float* partial_o = nullptr;
  float* partial_ml = nullptr;
  // Host-side launch choice: BF16 prefill blocks on tensor cores (attention_mma.cuh), and
  // with it, for head dims 128 and 256 on a compute capability 9.0 device, on Hopper's
  // warpgroup tensor cores instead (sm90a/attention_wgmma.cu).
  bool tensor_cores = false;
  bool wgmma = false;
  // BF16 small blocks (decode) on tensor cores (attention_decode_mma.cuh).
  bool decode_tensor_cores = false;
};

// Launchers, one instantiation per storage type T of query and output (float,
// __nv_bfloat16), head dim and cache element type C: T itself, or KvFp8 (kv_fp8.cuh) for an
// F8_E4M3 cache.
// Small: every request's small block(s), grid (num_splits, Hk, R); requests with more rows
// return at once (on tensor cores for BF16 when args.decode_tensor_cores).
// Large: grid (q_tiles, Hk, R) over the requests the small kernel skips (on tensor cores for
// BF16 when args.tensor_cores, on wgmma when args.wgmma).
// Combine: merges the chunks of split small blocks, grid (Hk, R).
template <typename T, int D, typename C = T>
Status launch_attention_small(const AttentionArgs& args, int num_requests, cudaStream_t stream);
template <typename T, int D, typename C = T>
Status launch_attention_large(const AttentionArgs& args, int num_requests, cudaStream_t stream);
template <typename T, int D>
Status launch_attention_combine(const AttentionArgs& args, int num_requests, cudaStream_t stream);
// Any head dim up to 256 that has no tiled instantiation (attention_generic.cu): one warp
// per (token, query head), no key splitting; grid (T, ceil(Hq / 4)).
template <typename T, typename C = T>
Status launch_attention_generic(const AttentionArgs& args, int head_dim, int num_requests,
                                cudaStream_t stream);

}  // namespace vllm::cuda::detail

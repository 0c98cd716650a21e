// Paged attention for head dims the tiled kernels do not instantiate (anything up to 256
// other than 64, 128 and 256: the small test checkpoints' 16, 20, 24, 32, say). Correct,
// not fast: real models use 64, 128 or 256 and take attention.cu's tiled kernels.
//
// One warp per (query token, query head): lane l holds dims l, l + 32, ... of the query,
// walks the request's visible keys one by one through the block table (the dot product is a
// warp reduction), and keeps an online softmax and its share of the output in registers.
// Same semantics and f32 arithmetic as the tiled kernels (attention.cuh), for a cache of
// the query's dtype or FP8 (C = KvFp8, read element by element; kv_fp8.cuh).
#include <cuda_bf16.h>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda::detail {
namespace {

constexpr int kMaxDims = 256;
constexpr int kPerLane = kMaxDims / kWarpSize;  // 8
constexpr int kWarpsPerBlock = 4;

template <typename T, typename C>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize)
    attention_generic_kernel(AttentionArgs args, int head_dim, int num_requests) {
  pdl_wait();
  pdl_launch_next();
  const int lane = threadIdx.x % kWarpSize;
  const int t = blockIdx.x;
  const int q_heads = args.num_kv_heads * args.group;
  const int h = blockIdx.y * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (h >= q_heads) return;
  // The request owning token t: the last r with query_start_loc[r] <= t.
  int lo = 0, hi = num_requests - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (args.query_start_loc[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int r = lo;
  const int start = args.query_start_loc[r], end = args.query_start_loc[r + 1];
  const int seq_len = args.seq_lens[r];
  T* out = static_cast<T*>(args.out) + static_cast<int64_t>(t) * args.out_stride +
           static_cast<int64_t>(h) * head_dim;
  const int q_len = end - start;
  if (t >= end || q_len > seq_len || seq_len > args.max_blocks_per_seq << args.block_size_log2) {
    for (int d = lane; d < head_dim; d += kWarpSize)
      out[d] = from_float<T>(__int_as_float(0x7fc00000));
    return;
  }
  const int position = seq_len - q_len + (t - start);
  const T* q = static_cast<const T*>(args.query) + static_cast<int64_t>(t) * args.query_stride +
               static_cast<int64_t>(h) * head_dim;
  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarpSize;
    qv[i] = d < head_dim ? to_float(q[d]) : 0.0f;
    acc[i] = 0.0f;
  }
  const int kv_head = h / args.group;
  const int block_size = 1 << args.block_size_log2;
  const int64_t token_stride = static_cast<int64_t>(args.num_kv_heads) * head_dim;
  const int64_t block_stride = 2 * block_size * token_stride;
  const C* cache = static_cast<const C*>(args.kv_cache);
  const int32_t* table = args.block_tables + static_cast<int64_t>(r) * args.max_blocks_per_seq;
  float m = -INFINITY, l = 0.0f;
  bool bad = false;
  for (int j = 0; j <= position; ++j) {
    const int block = table[j >> args.block_size_log2];
    if (block < 0 || block >= args.num_blocks) {
      bad = true;
      break;
    }
    const C* k = cache + block * block_stride + (j & (block_size - 1)) * token_stride +
                 static_cast<int64_t>(kv_head) * head_dim;
    const C* v = k + block_size * token_stride;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < head_dim) dot += qv[i] * to_float(k[d]);
    }
    const float s = warp_sum(dot) * args.scale_log2;  // log2 units
    const float m_new = fmaxf(m, s);
    const float correction = exp2f(m - m_new);
    const float p = exp2f(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + i * kWarpSize;
      acc[i] = acc[i] * correction + (d < head_dim ? p * to_float(v[d]) : 0.0f);
    }
    m = m_new;
  }
  const float inv = bad ? __int_as_float(0x7fc00000) : args.v_scale / l;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarpSize;
    if (d < head_dim) out[d] = from_float<T>(acc[i] * inv);
  }
}

}  // namespace

template <typename T, typename C>
Status launch_attention_generic(const AttentionArgs& args, int head_dim, int num_requests,
                                cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > kMaxDims) {
    return make_error(ErrorCode::kUnsupported, "cuda::paged_attention: head_dim {} above {}",
                      head_dim, kMaxDims);
  }
  const int q_heads = args.num_kv_heads * args.group;
  const dim3 grid(static_cast<unsigned>(args.num_tokens),
                  static_cast<unsigned>(ceil_div(q_heads, kWarpsPerBlock)));
#if defined(VLLM_CUDA_EMULATION)  // tests/cuda_emulation: run in the CPU emulator, at once
  (void)stream;
  emu::launch(grid, kWarpsPerBlock * kWarpSize, nullptr, 0,
              [&] { attention_generic_kernel<T, C>(args, head_dim, num_requests); });
  return Status::ok();
#else
  launch_pdl(attention_generic_kernel<T, C>, grid, kWarpsPerBlock * kWarpSize, 0, stream, args,
             head_dim, num_requests);
  return check_launch("attention_generic_kernel");
#endif
}

template Status launch_attention_generic<float>(const AttentionArgs&, int, int, cudaStream_t);
template Status launch_attention_generic<__nv_bfloat16>(const AttentionArgs&, int, int,
                                                        cudaStream_t);
template Status launch_attention_generic<float, KvFp8>(const AttentionArgs&, int, int,
                                                       cudaStream_t);
template Status launch_attention_generic<__nv_bfloat16, KvFp8>(const AttentionArgs&, int, int,
                                                               cudaStream_t);

}  // namespace vllm::cuda::detail

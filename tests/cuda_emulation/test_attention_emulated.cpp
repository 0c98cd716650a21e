// Paged attention's CUDA kernels run on the CPU (emulator.h) against the CPU reference op:
// the indexing, causal masking, key splitting and merging, small/large block routing and
// the never-read guarantees (NaN-poisoned cache blocks, slots and table entries) are checked
// on every CI run, not only where a GPU is. The shapes are smaller than the GPU test's
// (one OS thread per CUDA thread is slow) but reach every code path: split and unsplit small
// blocks, several tokens in a small block, large blocks with partial last tiles, every
// tile shape (D 64/128/256 x F32/BF16), block sizes 16/32/64, GQA groups 1 to 16.
//
// An emulated small block costs about its keys (128 threads, barriers for every key tile), so
// contexts are only as long as a path needs: a few hundred keys already split into several
// 64-key chunks (attention_plan.h: at most 1024 / (R x Hk) chunks, each at least 32 keys
// rounded up to 64) with a partial last chunk, beside a shorter request that fills fewer of
// the grid's chunks and a 1-key one that is not split.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "cuda/attention_batch.h"
#include "cuda/cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::AttnCase;

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : 1e-2;
}

// A host tensor labelled as a CUDA tensor: the emulated kernels read it directly.
Tensor as_cuda(const Tensor& host) {
  return Tensor::borrow(host.data_ptr(), host.shape(), host.dtype(), Device::cuda(), nullptr);
}

// Runs the op on `b` (emulated) and returns its output; `max_seq_len` overrides the host
// bound when positive.
Tensor run_emulated(const cuda_test::HostBatch& b, const AttnCase& c, bool tensor_cores = true,
                    int32_t max_seq_len = 0) {
  Tensor out = cuda_test::fill_nan(b.query.shape(), b.query.dtype());
  Tensor starts = cuda_test::i32_tensor(b.query_start_loc);
  Tensor seq_lens = cuda_test::i32_tensor(b.seq_lens);
  cuda::PagedAttentionParams params;
  params.query_start_loc = as_cuda(starts);
  params.seq_lens = as_cuda(seq_lens);
  params.max_query_len = b.max_query_len;
  params.max_seq_len = max_seq_len > 0 ? max_seq_len : b.max_seq_len;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.tensor_cores = tensor_cores;
  params.decode_tensor_cores = tensor_cores;
  const size_t bytes = cuda::paged_attention_workspace_size(
      static_cast<int64_t>(b.seq_lens.size()), c.kv_heads, c.head_dim, params.max_seq_len);
  Tensor workspace_host, workspace;
  if (c.workspace && bytes > 0) {
    workspace_host = cuda_test::fill_nan({static_cast<int64_t>(bytes / 4)}, DType::kF32);
    workspace = as_cuda(workspace_host);
  }
  Tensor out_dev = as_cuda(out);
  Status s = cuda::paged_attention(as_cuda(b.query), as_cuda(b.kv_cache), as_cuda(b.block_tables),
                                   params, workspace, out_dev, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return cuda_test::to_f32(out);
}

std::vector<AttnCase> emulated_cases() {
  return {
      // Decode with key splitting: 1-, 4- and 8-chunk requests in one batch (8 chunks of 64
      // keys in the grid; the last chunks hold 8 and 2 keys).
      {"decode split", {1, 1, 1}, {1, 200, 450}, 2, 4, 64, 16},
      // 5 chunks of 64 keys (the D=256 kernels' 32-key tiles, two a chunk), the last partial.
      {"decode split D=256", {1, 1}, {300, 5}, 1, 6, 256, 32},
      // More chunks than a warp's lanes (40): the combine's second (m, l) on lanes 0-7, not on
      // the others.
      {"decode 40 chunks", {1}, {2500}, 1, 2, 64, 16},
      {"decode G=16", {1, 1}, {80, 33}, 1, 16, 128, 16},
      {"decode no workspace", {1, 1}, {400, 31}, 1, 2, 128, 64, false},
      // Several tokens in one small block, split (10 chunks, the last of 24 keys).
      {"5 queries at 600", {5}, {600}, 1, 2, 64, 16},
      // Prefill: large blocks (partial last tile) next to a small one.
      {"prefill varlen", {40, 3}, {40, 3}, 1, 2, 64, 16},
      {"prefill G=1 D=128", {70}, {70}, 2, 1, 128, 32},
      // Chunked prefill from cached KV, and a mixed batch.
      {"chunked 37 at 300", {37}, {300}, 1, 3, 128, 32},
      {"mixed D=256", {1, 20, 1}, {520, 20, 9}, 1, 2, 256, 16},
      {"chunked D=256 G=4", {33}, {90}, 1, 4, 256, 16},
  };
}

TEST(AttentionEmulated, MatchesCpu) {
  std::mt19937 rng(424242);
  for (const AttnCase& c : emulated_cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      cuda_test::HostBatch b = cuda_test::make_batch(c, dtype, rng);
      Tensor ref = cuda_test::cpu_reference(b, c);
      // BF16: the tensor-core kernels (prefill and decode) and the CUDA-core ones.
      for (bool tensor_cores : {true, false}) {
        if (dtype == DType::kF32 && !tensor_cores) continue;
        SCOPED_TRACE(cuda_test::describe(c, dtype) + (tensor_cores ? "" : " (CUDA cores)"));
        EXPECT_TRUE(
            cuda_test::relative_l2(run_emulated(b, c, tensor_cores), ref, tolerance(dtype)));
      }
    }
  }
}

// Row-strided query (the q columns of a fused qkv buffer) and output (a column slice of a
// wider buffer whose other columns must stay NaN), through both prefill and decode kernels.
TEST(AttentionEmulated, StridedQueryAndOutput) {
  std::mt19937 rng(99);
  const AttnCase c{"strided", {1, 20}, {300, 90}, 1, 4, 64, 16};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(cuda_test::describe(c, dtype));
    cuda_test::HostBatch b = cuda_test::make_batch(c, dtype, rng);
    Tensor ref = cuda_test::cpu_reference(b, c);
    const int64_t tokens = b.query.size(0), width = b.query.size(1);
    const int64_t fused_width = width + 2 * c.kv_heads * c.head_dim;
    Tensor fused = cuda_test::fill_nan({tokens, fused_width}, dtype);
    const size_t elem = dtype_size(dtype);
    for (int64_t t = 0; t < tokens; ++t) {
      std::memcpy(static_cast<char*>(fused.data_ptr()) + t * fused_width * elem,
                  static_cast<const char*>(b.query.data_ptr()) + t * width * elem, width * elem);
    }
    Tensor out_big = cuda_test::fill_nan({tokens, width + 16}, dtype);
    Tensor starts = cuda_test::i32_tensor(b.query_start_loc);
    Tensor seq_lens = cuda_test::i32_tensor(b.seq_lens);
    cuda::PagedAttentionParams params;
    params.query_start_loc = as_cuda(starts);
    params.seq_lens = as_cuda(seq_lens);
    params.max_query_len = b.max_query_len;
    params.max_seq_len = b.max_seq_len;
    params.scale = 0.125f;
    for (bool tensor_cores : {true, false}) {
      params.tensor_cores = tensor_cores;
      params.decode_tensor_cores = tensor_cores;
      Tensor q_view = as_cuda(fused).slice(1, 0, width);
      Tensor out_view = as_cuda(out_big).slice(1, 8, 8 + width);
      Tensor workspace;
      Status s = cuda::paged_attention(q_view, as_cuda(b.kv_cache), as_cuda(b.block_tables), params,
                                       workspace, out_view, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      Tensor got = cuda_test::to_f32(out_big);
      EXPECT_TRUE(
          cuda_test::relative_l2(got.slice(1, 8, 8 + width).clone(), ref, tolerance(dtype)));
      int64_t written_outside = 0;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t col = 0; col < width + 16; ++col) {
          if ((col < 8 || col >= 8 + width) &&
              !std::isnan(got.data<float>()[t * (width + 16) + col])) {
            ++written_outside;
          }
        }
      }
      EXPECT_EQ(written_outside, 0);
    }
  }
}

// Device-side values past the host bounds: NaN rows, nothing read out of bounds (the
// emulated kernel reads host memory, so an out-of-bounds read would crash or show here).
TEST(AttentionEmulated, BrokenDeviceInputsGiveNanRows) {
  std::mt19937 rng(7);
  const AttnCase c{"bounds", {1, 1, 6}, {700, 900, 800}, 2, 2, 64, 16};
  cuda_test::HostBatch b = cuda_test::make_batch(c, DType::kF32, rng);
  Tensor ref = cuda_test::cpu_reference(b, c);
  cuda_test::HostBatch broken = b;
  broken.block_tables = b.block_tables.clone();
  broken.seq_lens[1] = 1000;  // past max_seq_len = 900 below
  broken.block_tables.data<int32_t>()[2 * broken.block_tables.size(1) + 3] = static_cast<int32_t>(
      b.kv_cache.size(0) + 7);  // outside the cache, inside request 2's context
  Tensor got = run_emulated(broken, c, true, 900);
  EXPECT_TRUE(cuda_test::relative_l2(got.slice(0, 0, 1).clone(), ref.slice(0, 0, 1).clone(), 1e-5));
  int64_t not_nan = 0;
  for (int64_t i = got.size(1); i < got.numel(); ++i) {
    if (!std::isnan(got.data<float>()[i])) ++not_nan;
  }
  EXPECT_EQ(not_nan, 0);
}

}  // namespace
}  // namespace vllm

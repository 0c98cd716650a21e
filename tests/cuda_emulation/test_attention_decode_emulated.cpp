// The tensor-core decode kernel (attention_decode_mma.cuh, BF16 small blocks) run on the CPU
// (emulator.h) against the CPU reference op over the same cache, BF16 and FP8, on every CI run:
// head dims 64 / 128 / 256, GQA groups 1, 2, 6, 8 and 16, several tokens in one small block (up
// to 16 rows), contexts that are not whole key tiles (1, 17, 100, 500+) and of different
// lengths in one batch, with and without key splitting (the combine merging its partials), and
// block sizes 16 / 32 / 64. Outputs and the split workspace start as NaN, and make_batch
// poisons what must not be read, so a row or partial never written, or a read past a request's
// context, fails. The CUDA-core small kernel (decode_tensor_cores off) runs on the same
// batches: both match the reference, and their bits differ (the switch reaches both kernels).
//
// Tolerance: the BF16 attention tests' 1e-2 relative L2 (P is rounded to bf16 for the product).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "cuda/attention_batch.h"
#include "cuda/cuda_test_util.h"
#include "tensor/kv_cache.h"

namespace vllm {
namespace {

using cuda_test::AttnCase;

constexpr double kTolerance = 1e-2;

Tensor as_cuda(const Tensor& host) {
  return Tensor::borrow(host.data_ptr(), host.shape(), host.dtype(), Device::cuda(), nullptr);
}

// The op (emulated) on BF16 batch `b` over `cache` (the batch's own or an FP8 one), decode on
// tensor cores or on the CUDA-core kernel; the output as F32.
Tensor run_decode(const cuda_test::HostBatch& b, const AttnCase& c, const Tensor& cache,
                  const KvCacheScales& scales, bool decode_tensor_cores) {
  Tensor out = cuda_test::fill_nan(b.query.shape(), b.query.dtype());
  Tensor starts = cuda_test::i32_tensor(b.query_start_loc);
  Tensor seq_lens = cuda_test::i32_tensor(b.seq_lens);
  cuda::PagedAttentionParams params;
  params.query_start_loc = as_cuda(starts);
  params.seq_lens = as_cuda(seq_lens);
  params.max_query_len = b.max_query_len;
  params.max_seq_len = b.max_seq_len;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.kv_scales = scales;
  params.decode_tensor_cores = decode_tensor_cores;
  const size_t bytes = cuda::paged_attention_workspace_size(
      static_cast<int64_t>(b.seq_lens.size()), c.kv_heads, c.head_dim, params.max_seq_len);
  Tensor workspace_host, workspace;
  if (c.workspace && bytes > 0) {
    workspace_host = cuda_test::fill_nan({static_cast<int64_t>(bytes / 4)}, DType::kF32);
    workspace = as_cuda(workspace_host);
  }
  Tensor out_dev = as_cuda(out);
  Status s = cuda::paged_attention(as_cuda(b.query), as_cuda(cache), as_cuda(b.block_tables),
                                   params, workspace, out_dev, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return cuda_test::to_f32(out);
}

bool bitwise_equal(const Tensor& x, const Tensor& y) {
  return x.numel() == y.numel() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.nbytes())) == 0;
}

// A batch of requests with at most 16 query rows per kv head (so only the small kernel runs),
// over its BF16 cache and, where `fp8`, over an FP8 one; where `cuda_cores`, the CUDA-core
// small kernel too. Sized for the emulator (one OS thread per CUDA thread): a pass costs about
// its keys, and a few hundred keys already split into 5-10 chunks (attention_plan.h) with a
// partial last one, so no context is longer than that.
struct DecodeCase {
  AttnCase c;
  bool fp8;
  bool cuda_cores;
};

std::vector<DecodeCase> decode_cases() {
  return {
      // Qwen3.5-27B's shape (G 6, D 256): contexts of 1 key, under one tile, across a split.
      {{"G=6 D=256", {1, 1, 1, 1}, {1, 17, 100, 530}, 1, 6, 256, 16}, true, false},
      {{"G=6 D=256 no split", {1, 1}, {530, 17}, 1, 6, 256, 16, false}, true, false},
      {{"G=1 D=128", {1, 1, 1}, {17, 501, 3}, 1, 1, 128, 32}, false, true},
      {{"G=2 D=128 no split", {1, 1}, {100, 525}, 1, 2, 128, 64, false}, true, false},
      {{"G=8 D=256 block 64", {1, 1}, {1, 129}, 1, 8, 256, 64}, true, false},
      {{"G=16 D=128", {1, 1}, {33, 300}, 1, 16, 128, 16}, false, true},
      {{"G=4 D=64 Hk=2", {1, 1}, {65, 300}, 2, 4, 64, 16}, true, false},
      // Several tokens in one small block: rows past 8 (the mma's upper half), causal limits
      // that differ within the block, a split whose last chunk some rows see nothing of.
      {{"2 tokens G=6 D=256", {2, 1}, {300, 50}, 1, 6, 256, 16}, true, false},
      {{"5 tokens G=2 D=128", {5, 1}, {600, 2}, 1, 2, 128, 16}, false, false},
  };
}

TEST(AttentionDecodeEmulated, MatchesCpuOverBf16AndFp8Caches) {
  const KvCacheScales scaled{0.004f, 0.05f};
  std::mt19937 rng(31337);
  int64_t compared = 0, differing = 0;
  for (const DecodeCase& d : decode_cases()) {
    const AttnCase& c = d.c;
    cuda_test::HostBatch b = cuda_test::make_batch(c, DType::kBF16, rng);
    ASSERT_LE(b.max_query_len * c.group, 16) << c.name;
    {
      SCOPED_TRACE(cuda_test::describe(c, DType::kBF16) + " BF16 cache");
      Tensor ref = cuda_test::cpu_reference(b, c);
      Tensor mma = run_decode(b, c, b.kv_cache, {}, true);
      EXPECT_TRUE(cuda_test::relative_l2(mma, ref, kTolerance));
      if (d.cuda_cores) {
        Tensor cuda_cores = run_decode(b, c, b.kv_cache, {}, false);
        EXPECT_TRUE(cuda_test::relative_l2(cuda_cores, ref, kTolerance));
        ++compared;
        if (!bitwise_equal(mma, cuda_cores)) ++differing;
      }
    }
    if (d.fp8) {
      SCOPED_TRACE(cuda_test::describe(c, DType::kBF16) + " FP8 cache");
      Tensor cache = cuda_test::fp8_cache(b.kv_cache, scaled);
      Tensor ref = cuda_test::cpu_reference_fp8(b, c, cache, scaled);
      EXPECT_TRUE(cuda_test::relative_l2(run_decode(b, c, cache, scaled, true), ref, kTolerance));
    }
  }
  EXPECT_EQ(differing, compared) << "decode_tensor_cores does not change the kernel";
}

// A block id outside the cache inside a decode request's context: that request's rows come out
// NaN (split and not), nothing is read out of bounds, the request beside it is unaffected.
TEST(AttentionDecodeEmulated, BadBlockIdGivesNanRows) {
  std::mt19937 rng(12);
  for (bool split : {true, false}) {
    const AttnCase c{"bad block", {1, 1}, {200, 300}, 1, 6, 128, 16, split};
    SCOPED_TRACE(cuda_test::describe(c, DType::kBF16));
    cuda_test::HostBatch b = cuda_test::make_batch(c, DType::kBF16, rng);
    Tensor ref = cuda_test::cpu_reference(b, c);
    cuda_test::HostBatch broken = b;
    broken.block_tables = b.block_tables.clone();
    broken.block_tables.data<int32_t>()[broken.block_tables.size(1) + 5] =
        static_cast<int32_t>(b.kv_cache.size(0) + 7);  // request 1's keys 80..95
    Tensor got = run_decode(broken, c, broken.kv_cache, {}, true);
    EXPECT_TRUE(
        cuda_test::relative_l2(got.slice(0, 0, 1).clone(), ref.slice(0, 0, 1).clone(), kTolerance));
    int64_t not_nan = 0;
    for (int64_t i = got.size(1); i < got.numel(); ++i) {
      if (!std::isnan(got.data<float>()[i])) ++not_nan;
    }
    EXPECT_EQ(not_nan, 0);
  }
}

}  // namespace
}  // namespace vllm

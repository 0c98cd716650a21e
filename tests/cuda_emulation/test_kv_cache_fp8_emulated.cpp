// The FP8 KV cache's CUDA kernels run on the CPU (emulator.h) against the CPU reference, on
// every CI run: the host definition of the saturating e4m3 cast against cuda_fp8.h's own
// (the cast the write kernel calls), the write kernel bit for bit against the CPU op (F32,
// BF16 and F16 rows, row strides, padding slots), and every attention kernel over an FP8
// cache -- the small (decode, split and unsplit; BF16 on tensor cores and on CUDA cores) and
// combine kernels, the CUDA-core prefill kernel, the mma.sync prefill kernel that BF16 prefill
// takes (on sm_90 too: the dispatch is checked here) and the generic kernel of other head dims
// -- against the CPU op over the same FP8 cache, with scales of 1 and others (some keys
// saturated).
//
// Tolerances as the float-cache tests (1e-5 F32, 1e-2 BF16): the kernels read the e4m3 values
// exactly and apply k_scale inside the softmax scale and v_scale at the end, where the CPU
// multiplies every element; the two differ by f32 rounding only.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_wgmma.h"
#include "backend/cuda/cache.cuh"
#include "base/float_convert.h"
#include "cuda/attention_batch.h"
#include "cuda/cuda_test_util.h"
#include "tensor/kv_cache.h"

namespace vllm {
namespace {

using cuda_test::AttnCase;

Tensor as_cuda(const Tensor& host) {
  return Tensor::borrow(host.data_ptr(), host.shape(), host.dtype(), Device::cuda(), nullptr);
}

uint8_t cuda_satfinite(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// ---- The conversion ------------------------------------------------------------------------

TEST(KvFp8Conversion, HostCastEqualsCudasSatfiniteCast) {
  int64_t checked = 0;
  auto check = [&](float x) {
    ASSERT_EQ(f32_to_fp8e4m3_satfinite(x), cuda_satfinite(x)) << x;
    ++checked;
  };
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) check(bf16_to_f32(static_cast<uint16_t>(bits)));
  std::mt19937 rng(17);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    float x;
    std::memcpy(&x, &bits, sizeof x);
    check(x);
  }
  for (float x : {0.0f, -0.0f, 448.0f, 464.0f, 464.01f, 480.0f, -1e38f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                  std::ldexp(1.0f, -10), std::ldexp(1.5f, -10)}) {
    check(x);
  }
  // Decoding: every non-NaN code as cuda_fp8.h decodes it.
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    const __half h(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3));
    EXPECT_EQ(fp8e4m3_to_f32(static_cast<uint8_t>(code)), __half2float(h)) << code;
  }
  EXPECT_GT(checked, 1000000);
}

// ---- The cache write -----------------------------------------------------------------------

TEST(KvFp8CacheWriteEmulated, EqualsTheCpuOpBitForBit) {
  std::mt19937 rng(3);
  const int64_t blocks = 6, bs = 4, heads = 3, dim = 40, row = heads * dim, tokens = 7;
  const KvCacheScales scales{0.004f, 0.25f};  // keys of normal(0, 1): some saturate
  const std::vector<int64_t> slot_ids = {5, -1, 0, 23, 11, -3, 12};
  Tensor slots = Tensor::empty({tokens}, DType::kI64);
  std::copy(slot_ids.begin(), slot_ids.end(), slots.data<int64_t>());
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // key and value as column slices of one fused row (row strides, as from a qkv GEMM).
    Tensor fused = cuda_test::random_tensor({tokens, 2 * row + 8}, dtype, rng, 0.0f, 1.0f);
    Tensor key = fused.slice(1, 8, 8 + row), value = fused.slice(1, 8 + row, 8 + 2 * row);
    Tensor got = Tensor::zeros({blocks, 2, bs, heads, dim}, DType::kF8E4M3);
    Tensor got_dev = as_cuda(got);
    Status s = cuda::reshape_and_cache(as_cuda(fused).slice(1, 8, 8 + row),
                                       as_cuda(fused).slice(1, 8 + row, 8 + 2 * row), got_dev,
                                       as_cuda(slots), nullptr, scales);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    Tensor want = Tensor::zeros({blocks, 2, bs, heads, dim}, DType::kF8E4M3);
    ASSERT_TRUE(cpu::reshape_and_cache(cuda_test::to_f32(key), cuda_test::to_f32(value), want,
                                       slots, scales)
                    .is_ok());
    EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), static_cast<size_t>(got.numel())), 0);
    int64_t saturated = 0;
    for (int64_t i = 0; i < got.numel(); ++i) saturated += (got.data<uint8_t>()[i] & 0x7F) == 0x7E;
    EXPECT_GT(saturated, 0);
  }
  // The float path still copies (its emulated launch), and bad scales are refused for FP8.
  Tensor rows = cuda_test::random_tensor({tokens, row}, DType::kBF16, rng, 0.0f, 1.0f);
  Tensor bf16 = Tensor::zeros({blocks, 2, bs, heads, dim}, DType::kBF16);
  Tensor bf16_dev = as_cuda(bf16);
  ASSERT_TRUE(cuda::reshape_and_cache(as_cuda(rows), as_cuda(rows), bf16_dev, as_cuda(slots),
                                      nullptr, {-1.0f, 0.0f})
                  .is_ok());
  EXPECT_EQ(bf16.data<uint16_t>()[0], rows.data<uint16_t>()[2 * row]);      // slot 0: token 2
  EXPECT_EQ(bf16.data<uint16_t>()[9 * row + 5], rows.data<uint16_t>()[5]);  // slot 5: token 0
  Tensor fp8 = Tensor::zeros({blocks, 2, bs, heads, dim}, DType::kF8E4M3);
  Tensor fp8_dev = as_cuda(fp8);
  EXPECT_EQ(cuda::reshape_and_cache(as_cuda(rows), as_cuda(rows), fp8_dev, as_cuda(slots), nullptr,
                                    {1.0f, 0.0f})
                .code(),
            ErrorCode::kInvalidArgument);
}

// ---- Attention -----------------------------------------------------------------------------

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : 1e-2;
}

Tensor run_emulated(const cuda_test::HostBatch& b, const AttnCase& c, const Tensor& cache,
                    const KvCacheScales& scales, bool tensor_cores) {
  Tensor out = cuda_test::fill_nan(b.query.shape(), b.query.dtype());
  Tensor starts = cuda_test::i32_tensor(b.query_start_loc);
  Tensor seq_lens = cuda_test::i32_tensor(b.seq_lens);
  cuda::PagedAttentionParams params;
  params.query_start_loc = as_cuda(starts);
  params.seq_lens = as_cuda(seq_lens);
  params.max_query_len = b.max_query_len;
  params.max_seq_len = b.max_seq_len;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.tensor_cores = tensor_cores;
  params.decode_tensor_cores = tensor_cores;
  params.kv_scales = scales;
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

TEST(AttentionFp8Emulated, EveryKernelMatchesTheCpuOverTheSameCache) {
  const std::vector<AttnCase> cases = {
      // Small kernel with key splitting (1, 4 and 8 chunks, the last ones partial) and the
      // combine; a few hundred keys split as thousands do (test_attention_emulated.cpp).
      {"decode split", {1, 1, 1}, {1, 200, 450}, 2, 4, 64, 16},
      {"decode split D=256 G=6", {1, 1}, {300, 5}, 1, 6, 256, 32},
      {"decode G=16 no workspace", {1, 1}, {80, 33}, 1, 16, 128, 16, false},
      // Prefill blocks (the tensor-core and the CUDA-core kernels), partial last tiles.
      {"prefill varlen", {40, 3}, {40, 3}, 1, 2, 64, 16},
      {"prefill G=1 D=128", {70}, {70}, 2, 1, 128, 32},
      // Chunked prefill continuing from cached KV, odd lengths, a mixed batch.
      {"chunked 37 at 301", {37}, {301}, 1, 3, 128, 32},
      {"mixed D=256", {1, 21, 1}, {521, 21, 9}, 1, 2, 256, 16},
      {"chunked D=256 G=4", {33}, {91}, 1, 4, 256, 16},
      // The generic kernel (head dims without a tiled instantiation).
      {"generic D=32", {1, 9}, {45, 30}, 2, 2, 32, 16},
      {"generic D=80 G=3", {5, 1}, {17, 64}, 1, 3, 80, 8},
  };
  // Scales of 1 on the first cases only (the same code with factors of 1).
  const KvCacheScales unit{1.0f, 1.0f}, scaled{0.004f, 0.05f};
  std::mt19937 rng(8080);
  for (size_t i = 0; i < cases.size(); ++i) {
    const AttnCase& c = cases[i];
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      cuda_test::HostBatch b = cuda_test::make_batch(c, dtype, rng);
      for (const KvCacheScales& scales : {scaled, unit}) {
        if (i >= 2 && scales.k_scale == 1.0f) continue;
        Tensor cache = cuda_test::fp8_cache(b.kv_cache, scales);
        Tensor ref = cuda_test::cpu_reference_fp8(b, c, cache, scales);
        for (bool tensor_cores : {true, false}) {
          if (dtype == DType::kF32 && !tensor_cores) continue;
          SCOPED_TRACE(cuda_test::describe(c, dtype) +
                       fmt::format(" k_scale={} v_scale={}{}", scales.k_scale, scales.v_scale,
                                   tensor_cores ? "" : " (CUDA cores)"));
          EXPECT_TRUE(cuda_test::relative_l2(run_emulated(b, c, cache, scales, tensor_cores), ref,
                                             tolerance(dtype)));
        }
      }
    }
  }
}

// The scales matter: the same bytes read under other scales give other outputs (the kernels
// apply k_scale and v_scale, not 1).
TEST(AttentionFp8Emulated, ScalesAreApplied) {
  std::mt19937 rng(5);
  const AttnCase c{"scales", {1, 20}, {300, 90}, 1, 4, 64, 16};
  cuda_test::HostBatch b = cuda_test::make_batch(c, DType::kF32, rng);
  const KvCacheScales scales{0.01f, 0.02f};
  Tensor cache = cuda_test::fp8_cache(b.kv_cache, scales);
  Tensor ref = cuda_test::cpu_reference_fp8(b, c, cache, scales);
  EXPECT_TRUE(cuda_test::relative_l2(run_emulated(b, c, cache, scales, true), ref, 1e-5));
  for (const KvCacheScales& other : {KvCacheScales{0.02f, 0.02f}, KvCacheScales{0.01f, 0.04f}}) {
    EXPECT_FALSE(cuda_test::relative_l2(run_emulated(b, c, cache, other, true), ref, 1e-2));
  }
}

// On a compute capability 9.0 device BF16 prefill takes the wgmma kernel at head dims 128 and
// 256 over a BF16 or an FP8 cache, when tensor cores and wgmma are asked for; F32 queries
// never do.
TEST(AttentionFp8Emulated, WgmmaPrefillTakesBf16AndFp8Caches) {
  using cuda::detail::use_wgmma_prefill;
  for (int64_t d : {128, 256}) {
    EXPECT_TRUE(use_wgmma_prefill(DType::kBF16, DType::kBF16, d, true, true));
    EXPECT_TRUE(use_wgmma_prefill(DType::kBF16, DType::kF8E4M3, d, true, true));
    EXPECT_FALSE(use_wgmma_prefill(DType::kBF16, DType::kF8E4M3, d, false, true));
    EXPECT_FALSE(use_wgmma_prefill(DType::kBF16, DType::kF8E4M3, d, true, false));
    EXPECT_FALSE(use_wgmma_prefill(DType::kBF16, DType::kBF16, d, false, true));
    EXPECT_FALSE(use_wgmma_prefill(DType::kBF16, DType::kBF16, d, true, false));
    EXPECT_FALSE(use_wgmma_prefill(DType::kF32, DType::kF8E4M3, d, true, true));
  }
  EXPECT_FALSE(use_wgmma_prefill(DType::kBF16, DType::kBF16, 64, true, true));
  EXPECT_FALSE(use_wgmma_prefill(DType::kBF16, DType::kF8E4M3, 64, true, true));
}

TEST(AttentionFp8Emulated, RefusesBadScalesAndOtherCacheDtypes) {
  std::mt19937 rng(1);
  const AttnCase c{"args", {1}, {20}, 1, 2, 64, 16};
  cuda_test::HostBatch b = cuda_test::make_batch(c, DType::kBF16, rng);
  Tensor cache = cuda_test::fp8_cache(b.kv_cache, {});
  Tensor starts = cuda_test::i32_tensor(b.query_start_loc);
  Tensor seq_lens = cuda_test::i32_tensor(b.seq_lens);
  cuda::PagedAttentionParams params;
  params.query_start_loc = as_cuda(starts);
  params.seq_lens = as_cuda(seq_lens);
  params.max_query_len = b.max_query_len;
  params.max_seq_len = b.max_seq_len;
  Tensor out = cuda_test::fill_nan(b.query.shape(), DType::kBF16);
  Tensor out_dev = as_cuda(out);
  Tensor workspace;
  params.kv_scales = {std::nanf(""), 1.0f};
  EXPECT_EQ(cuda::paged_attention(as_cuda(b.query), as_cuda(cache), as_cuda(b.block_tables), params,
                                  workspace, out_dev, nullptr)
                .code(),
            ErrorCode::kInvalidArgument);
  params.kv_scales = {};
  Tensor f16 = Tensor::zeros(b.kv_cache.shape(), DType::kF16);
  EXPECT_FALSE(cuda::paged_attention(as_cuda(b.query), as_cuda(f16), as_cuda(b.block_tables),
                                     params, workspace, out_dev, nullptr)
                   .is_ok());
}

}  // namespace
}  // namespace vllm

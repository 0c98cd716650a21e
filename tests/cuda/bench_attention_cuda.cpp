// Timing mode for paged attention (not a test: it asserts no speed). Runs only with
// VLLM_BENCH=1 on a machine with a GPU:
//   VLLM_BENCH=1 ./vllm_cuda_tests --gtest_filter='AttentionCudaBench.*'
// Attention shapes of Qwen3.5-4B (16 query heads, 4 kv heads), Qwen3.5-27B (24 / 4) and
// Qwen3.5-35B-A3B (16 / 2), head_dim 256, BF16, block size 16, shuffled block tables:
//   * decode at batch 1, 16, 64 and contexts 1024, 8192: KV bytes read / time against the
//     H200's ~4.3 TB/s (each request reads its context's K and V once per kv head), on the
//     default tensor-core kernel ("decode") and on the CUDA-core one ("decode CUDA");
//   * prefill of one and of four 2048-token prompts from position 0: causal FLOPs (4 * D per
//     visible query-key pair and head) / time against ~790 TFLOP/s dense BF16, on the default
//     tensor-core kernel ("prefill": wgmma on compute capability 9.0), on the mma.sync one
//     ("prefill mma") and on the CUDA-core kernel ("prefill CUDA").
// Cache contents are a constant (timing does not depend on values); the block ranges rotate
// over several copies so small cases read HBM, not L2.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_bench_util.h"
#include "cuda_test_util.h"

namespace vllm {
namespace {

constexpr double kBandwidthGBs = 4300.0;  // H200 device copy, measured
constexpr double kPeakTflops = 790.0;     // H200 dense BF16, measured
constexpr int64_t kHeadDim = 256;
constexpr int64_t kBlockSize = 16;
constexpr size_t kRotationBytes = size_t{1} << 29;  // >= 512 MiB of KV per case (L2: 60 MB)

struct ModelShape {
  const char* name;
  int64_t q_heads;
  int64_t kv_heads;
};

struct BenchCase {
  ModelShape model;
  int64_t batch;
  int32_t q_len;
  int32_t seq_len;
};

Tensor device_i32(const std::vector<int32_t>& v) {
  Tensor host = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), host.data<int32_t>());
  auto d = cuda::copy_to_device(host);
  VLLM_CHECK_MSG(d.has_value(), "{}", d.status().to_string());
  return *d;
}

// Which prefill kernel a case times (decode cases: kCudaCores times the CUDA-core decode kernel,
// the others the default tensor-core one).
enum class Prefill { kDefault, kMma, kCudaCores };

const char* phase_name(const BenchCase& c, Prefill prefill) {
  if (c.q_len == 1) return prefill == Prefill::kCudaCores ? "decode CUDA" : "decode";
  switch (prefill) {
    case Prefill::kDefault:
      return "prefill";
    case Prefill::kMma:
      return "prefill mma";
    case Prefill::kCudaCores:
      return "prefill CUDA";
  }
  return "prefill";
}

void run_case(const BenchCase& c, std::mt19937& rng, Prefill prefill = Prefill::kDefault) {
  const int64_t blocks_per_request = (c.seq_len + kBlockSize - 1) / kBlockSize;
  const int64_t set_blocks = c.batch * blocks_per_request;
  const double kv_bytes = static_cast<double>(c.batch) * c.seq_len * c.model.kv_heads * kHeadDim *
                          2 * 2;  // K and V, 2 bytes each
  const double block_bytes = static_cast<double>(kBlockSize) * c.model.kv_heads * kHeadDim * 4;
  const int sets = static_cast<int>(std::clamp<double>(
      static_cast<double>(kRotationBytes) / (static_cast<double>(set_blocks) * block_bytes), 1.0,
      16.0));
  const int64_t num_blocks = set_blocks * sets;
  auto cache = Tensor::try_empty({num_blocks, 2, kBlockSize, c.model.kv_heads, kHeadDim},
                                 DType::kBF16, Device::cuda());
  ASSERT_TRUE(cache) << cache.status().to_string();
  ASSERT_EQ(cudaMemset(cache->data_ptr(), 0x3c, cache->nbytes()), cudaSuccess);

  // Shuffled block ids, a disjoint range per set.
  std::vector<Tensor> tables;
  for (int s = 0; s < sets; ++s) {
    std::vector<int32_t> ids(static_cast<size_t>(set_blocks));
    std::iota(ids.begin(), ids.end(), static_cast<int32_t>(s * set_blocks));
    std::shuffle(ids.begin(), ids.end(), rng);
    Tensor host = Tensor::empty({c.batch, blocks_per_request}, DType::kI32);
    std::copy(ids.begin(), ids.end(), host.data<int32_t>());
    auto d = cuda::copy_to_device(host);
    ASSERT_TRUE(d);
    tables.push_back(*d);
  }
  const int64_t tokens = c.batch * c.q_len;
  const int64_t width = c.model.q_heads * kHeadDim;
  auto query = cuda::copy_to_device(
      cuda_test::random_tensor({tokens, width}, DType::kBF16, rng, 0.0f, 1.0f));
  auto out = Tensor::try_empty({tokens, width}, DType::kBF16, Device::cuda());
  ASSERT_TRUE(query && out);
  std::vector<int32_t> starts(static_cast<size_t>(c.batch) + 1);
  for (size_t r = 0; r < starts.size(); ++r) starts[r] = static_cast<int32_t>(r) * c.q_len;
  cuda::PagedAttentionParams params;
  params.query_start_loc = device_i32(starts);
  params.seq_lens = device_i32(std::vector<int32_t>(static_cast<size_t>(c.batch), c.seq_len));
  params.max_query_len = c.q_len;
  params.max_seq_len = c.seq_len;
  params.scale = 1.0f / 16.0f;
  params.tensor_cores = prefill != Prefill::kCudaCores;
  params.decode_tensor_cores = prefill != Prefill::kCudaCores;
  params.wgmma = prefill == Prefill::kDefault;
  const size_t ws_bytes =
      cuda::paged_attention_workspace_size(c.batch, c.model.kv_heads, kHeadDim, c.seq_len);
  Tensor workspace;
  if (ws_bytes > 0) {
    auto ws = Tensor::try_empty({static_cast<int64_t>(ws_bytes)}, DType::kU8, Device::cuda());
    ASSERT_TRUE(ws);
    workspace = *ws;
  }

  const double us = cuda_test::time_launches(
      [&](int i) {
        return cuda::paged_attention(*query, *cache, tables[static_cast<size_t>(i)], params,
                                     workspace, *out, nullptr);
      },
      sets);
  if (us <= 0.0) return;
  const bool decode = c.q_len == 1;
  std::string figure;
  double ratio = 0.0;
  if (decode) {
    const double gbs = kv_bytes / (us * 1e-6) / 1e9;
    figure = fmt::format("{:.0f} GB/s", gbs);
    ratio = gbs / kBandwidthGBs;
  } else {
    // Visible (query, key) pairs of a causal prefill from position 0, per query head.
    const double pairs = static_cast<double>(c.q_len) * (c.q_len + 1) / 2.0;
    const double flops = 4.0 * kHeadDim * pairs * c.model.q_heads * c.batch;
    const double tflops = flops / (us * 1e-6) / 1e12;
    figure = fmt::format("{:.1f} TFLOP/s", tflops);
    ratio = tflops / kPeakTflops;
  }
  std::printf("| %-11s | %-12s | %5lld | %7d | %10.1f | %14s | %6.1f%% | %s |\n", c.model.name,
              phase_name(c, prefill), static_cast<long long>(c.batch), c.seq_len, us,
              figure.c_str(), 100.0 * ratio, ws_bytes > 0 ? "yes" : "no");
}

TEST(AttentionCudaBench, Qwen35Shapes) {
  if (!cuda_test::bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time paged attention";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(cuda::init().is_ok());
  const ModelShape models[] = {
      {"Qwen3.5-4B", 16, 4}, {"Qwen3.5-27B", 24, 4}, {"Qwen3.5-35B", 16, 2}};
  std::mt19937 rng(11);
  std::printf(
      "\n| model       | phase        | batch | context |  median us | figure         | "
      "of roof | split |\n");
  std::printf(
      "|-------------|--------------|-------|---------|------------|----------------|------"
      "---|-------|\n");
  for (const ModelShape& m : models) {
    for (int64_t batch : {1, 16, 64}) {
      for (int32_t context : {1024, 8192}) {
        run_case({m, batch, 1, context}, rng);
        run_case({m, batch, 1, context}, rng, Prefill::kCudaCores);
      }
    }
    for (int64_t prompts : {1, 4}) {
      run_case({m, prompts, 2048, 2048}, rng);
      run_case({m, prompts, 2048, 2048}, rng, Prefill::kMma);
    }
    run_case({m, 1, 2048, 2048}, rng, Prefill::kCudaCores);
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace vllm

// The FP8 KV cache on the GPU against the CPU reference (tensor/kv_cache.h):
//   - the cache write (reshape_and_cache) bit for bit: F32 / BF16 / F16 rows, fused-qkv
//     slices and contiguous tensors, rows that are not whole 16-byte units, scales with
//     saturated elements, -1 padding, the untouched slots left as they were;
//   - paged attention over an FP8 cache through every kernel: decode (split and unsplit, the
//     combine), 16k contexts, prefill from position 0 and continuing from cached KV, mixed
//     batches, GQA groups 1..8, head dims 64 / 128 / 256 and the generic kernel's (20, 96),
//     F32 and BF16, BF16 prefill on the mma.sync kernel (the default: FP8 caches never take
//     wgmma, even when asked on sm_90) and on CUDA cores; scales of 1 and others; against the
//     CPU op over the same FP8 cache, tolerances as for float caches (1e-5 F32, 1e-2 BF16);
//   - the engine on the golden checkpoints in BF16 with `--kv-cache-dtype fp8`: twice the
//     BF16 cache's blocks in the same memory, and transformers' greedy tokens where the
//     reference margin is at least the FP8 cache's margin (as on the CPU) plus BF16's.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_batch.h"
#include "backend/cpu/attention.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cache.cuh"
#include "backend/cuda/runtime.h"
#include "base/float_convert.h"
#include "cuda_device_util.h"
#include "cuda_test_util.h"
#include "engine/engine_core.h"
#include "loader/safetensors.h"
#include "model/model.h"
#include "tensor/kv_cache.h"

namespace vllm {
namespace {

namespace fs = std::filesystem;
using cuda_test::AttnCase;
using cuda_test::random_tensor;
using cuda_test::to_device;
using cuda_test::to_f32;
using cuda_test::to_host;

// ---- The cache write ---------------------------------------------------------------------

class KvFp8CacheCuda : public cuda_test::CudaTest {
 protected:
  std::mt19937 rng_{4242};
};

TEST_F(KvFp8CacheCuda, WriteMatchesCpuBitForBit) {
  constexpr int64_t kBlockSize = 16;
  const KvCacheScales scales[] = {{1.0f, 1.0f}, {0.004f, 0.3f}};
  struct Case {
    int64_t tokens, kv_heads, head_dim, num_blocks;
    int64_t column_offset;  // of k in a fused [T, offset + q + k + v] buffer; -1: contiguous
  };
  const Case cases[] = {
      {1, 4, 256, 3, -1}, {13, 1, 64, 2, 8}, {100, 2, 128, 9, 0}, {37, 3, 5, 4, 1}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Case& c : cases) {
      for (const KvCacheScales& s : scales) {
        SCOPED_TRACE(fmt::format("{} T={} Hk={} D={} offset={} k_scale={}", dtype_name(dtype),
                                 c.tokens, c.kv_heads, c.head_dim, c.column_offset, s.k_scale));
        const int64_t row = c.kv_heads * c.head_dim;
        const Shape shape{c.num_blocks, 2, kBlockSize, c.kv_heads, c.head_dim};
        Tensor slots = Tensor::empty({c.tokens}, DType::kI64);
        std::vector<int64_t> ids(static_cast<size_t>(c.num_blocks * kBlockSize));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng_);
        for (int64_t t = 0; t < c.tokens; ++t) {
          slots.data<int64_t>()[t] = t % 5 == 4 ? -1 : ids[static_cast<size_t>(t)];
        }
        const int64_t offset = std::max<int64_t>(c.column_offset, 0);
        const int64_t width = offset + 3 * row;
        Tensor qkv = random_tensor({c.tokens, width}, dtype, rng_, 0.0f, 1.0f);
        Tensor all = to_f32(qkv);
        Tensor key_f32 = all.slice(1, offset + row, offset + 2 * row).clone();
        Tensor value_f32 = all.slice(1, offset + 2 * row, width).clone();
        Tensor qkv_gpu = to_device(qkv);
        ASSERT_TRUE(qkv_gpu.defined());
        Tensor key_gpu = qkv_gpu.slice(1, offset + row, offset + 2 * row);
        Tensor value_gpu = qkv_gpu.slice(1, offset + 2 * row, width);
        if (c.column_offset < 0) {
          key_gpu = to_device(qkv.slice(1, row, 2 * row).clone().view({c.tokens, c.kv_heads, -1}));
          value_gpu =
              to_device(qkv.slice(1, 2 * row, 3 * row).clone().view({c.tokens, c.kv_heads, -1}));
        }
        Tensor poisoned = Tensor::empty(shape, DType::kF8E4M3);
        std::memset(poisoned.data_ptr(), 0x7F, static_cast<size_t>(poisoned.numel()));
        Tensor want = poisoned.clone();
        ASSERT_TRUE(cpu::reshape_and_cache(key_f32, value_f32, want, slots, s).is_ok());
        Tensor cache_gpu = to_device(poisoned);
        Status st =
            cuda::reshape_and_cache(key_gpu, value_gpu, cache_gpu, to_device(slots), nullptr, s);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        Tensor got = to_host(cache_gpu);
        ASSERT_TRUE(got.defined());
        EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), static_cast<size_t>(got.numel())),
                  0);
      }
    }
  }
}

// ---- Attention ---------------------------------------------------------------------------

std::vector<AttnCase> fp8_cases() {
  std::vector<int32_t> decode64(64, 1), lens64(64);
  std::mt19937 rng(1);
  for (auto& l : lens64) l = 1 + static_cast<int32_t>(rng() % 5000);
  return {
      {"decode R=64", decode64, lens64, 4, 4, 128, 16},
      {"decode G=8 D=256", {1, 1, 1, 1, 1}, {1, 33, 511, 513, 4097}, 2, 8, 256, 16},
      {"decode edges D=64", {1, 1, 1, 1}, {1, 16, 17, 1000}, 2, 1, 64, 32},
      {"long 16k", {1}, {16384}, 4, 4, 256, 16},
      {"long 16k no split", {1}, {16384}, 4, 4, 256, 16, false},
      {"prefill 2048 D=256 G=4", {2048}, {2048}, 2, 4, 256, 16},
      {"prefill D=128 G=4 varlen", {333, 1000}, {333, 1000}, 2, 4, 128, 16},
      {"prefill G=1 D=64", {513, 64}, {513, 64}, 3, 1, 64, 16},
      {"chunked D=256 G=6", {100, 33, 250}, {1000, 700, 251}, 4, 6, 256, 16},
      {"chunked D=128 G=8 block 32", {70, 129}, {1200, 900}, 2, 8, 128, 32},
      {"mixed G=4 D=256", {1, 300, 1, 1}, {5000, 1200, 30, 2500}, 4, 4, 256, 16},
      {"generic D=20 mixed", {1, 40, 3}, {90, 40, 200}, 2, 3, 20, 4},
      {"generic D=96 mixed", {1, 130}, {600, 130}, 2, 4, 96, 16},
  };
}

class AttentionFp8Cuda : public cuda_test::CudaTest {
 protected:
  std::mt19937 rng_{99};
};

TEST_F(AttentionFp8Cuda, EveryKernelMatchesCpu) {
  const KvCacheScales scale_sets[] = {{1.0f, 1.0f}, {0.004f, 0.05f}};
  auto copy = [](const Tensor& t) {
    auto r = cuda::copy_to_device(t);
    VLLM_CHECK_MSG(r.has_value(), "{}", r.status().to_string());
    return *r;
  };
  for (const AttnCase& c : fp8_cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      cuda_test::HostBatch b = cuda_test::make_batch(c, dtype, rng_);
      Tensor query = copy(b.query), tables = copy(b.block_tables);
      cuda::PagedAttentionParams params;
      params.query_start_loc = copy(cuda_test::i32_tensor(b.query_start_loc));
      params.seq_lens = copy(cuda_test::i32_tensor(b.seq_lens));
      params.max_query_len = b.max_query_len;
      params.max_seq_len = b.max_seq_len;
      params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const size_t bytes = cuda::paged_attention_workspace_size(
          static_cast<int64_t>(b.seq_lens.size()), c.kv_heads, c.head_dim, b.max_seq_len);
      Tensor workspace;
      if (c.workspace && bytes > 0) {
        workspace =
            Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32, Device::cuda());
      }
      for (const KvCacheScales& scales : scale_sets) {
        Tensor host_cache = cuda_test::fp8_cache(b.kv_cache, scales);
        Tensor ref = cuda_test::cpu_reference_fp8(b, c, host_cache, scales);
        Tensor cache = copy(host_cache);
        params.kv_scales = scales;
        // BF16 prefill: tensor cores with wgmma asked for (the wgmma kernel on compute
        // capability 9.0 at head dims 128 / 256), tensor cores without it (mma.sync), and CUDA
        // cores; BF16 decode: tensor cores, and CUDA cores.
        struct Variant {
          bool tensor_cores, wgmma;
          const char* name;
        };
        for (const Variant v : {Variant{true, true, ""}, Variant{true, false, " (mma.sync)"},
                                Variant{false, false, " (CUDA cores)"}}) {
          if (dtype == DType::kF32 && !v.tensor_cores) continue;
          if (dtype == DType::kF32 && !v.wgmma) continue;  // F32 never takes wgmma
          SCOPED_TRACE(cuda_test::describe(c, dtype) + fmt::format(" k_scale={} v_scale={}{}",
                                                                   scales.k_scale, scales.v_scale,
                                                                   v.name));
          params.tensor_cores = v.tensor_cores;
          params.decode_tensor_cores = v.tensor_cores;
          params.wgmma = v.wgmma;
          Tensor out = copy(cuda_test::fill_nan(b.query.shape(), dtype));
          Status s = cuda::paged_attention(query, cache, tables, params, workspace, out, nullptr);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          EXPECT_TRUE(cuda_test::relative_l2(cuda_test::to_host_f32(out), ref,
                                             dtype == DType::kF32 ? 1e-5 : 1e-2));
        }
      }
    }
  }
}

// The prefill kernels widen e4m3 codes to BF16 (the wgmma kernel by bit moves and a BF16
// multiply, which must keep subnormal codes, and then restore the NaN codes). With every key
// code 0 the scores are equal, so a request's first query row, which sees key 0 only, comes out
// as key 0's V row exactly: here every code across the kv heads and dims of that row, the NaN
// codes 0x7f / 0xff (what the cache write stores for a NaN activation) as NaN.
TEST_F(AttentionFp8Cuda, PrefillTakesEveryCodeExactly) {
  for (int64_t d : {128, 256}) {
    const AttnCase c{"every code", {300}, {300}, 256 / d, 2, d, 16};
    cuda_test::HostBatch b = cuda_test::make_batch(c, DType::kBF16, rng_);
    Tensor cache = cuda_test::fp8_cache(b.kv_cache, {1.0f, 1.0f});
    const int64_t bs = c.block_size, row = c.kv_heads * d;
    uint8_t* codes = cache.data<uint8_t>();
    for (int64_t blk = 0; blk < cache.size(0); ++blk) {  // every K code 0
      std::memset(codes + blk * 2 * bs * row, 0, static_cast<size_t>(bs * row));
    }
    const int32_t block0 = b.block_tables.data<int32_t>()[0];
    uint8_t* v0 = codes + (static_cast<int64_t>(block0) * 2 + 1) * bs * row;  // key 0's V row
    for (int64_t i = 0; i < row; ++i) v0[i] = static_cast<uint8_t>(i);
    auto copy = [](const Tensor& t) { return cuda::copy_to_device(t).value(); };
    Tensor query = copy(b.query), tables = copy(b.block_tables), dev_cache = copy(cache);
    cuda::PagedAttentionParams params;
    params.query_start_loc = copy(cuda_test::i32_tensor(b.query_start_loc));
    params.seq_lens = copy(cuda_test::i32_tensor(b.seq_lens));
    params.max_query_len = b.max_query_len;
    params.max_seq_len = b.max_seq_len;
    params.scale = 1.0f / std::sqrt(static_cast<float>(d));
    params.kv_scales = {1.0f, 1.0f};
    for (bool wgmma : {true, false}) {
      SCOPED_TRACE(fmt::format("head dim {}{}", d, wgmma ? "" : " (mma.sync)"));
      params.wgmma = wgmma;
      Tensor out = copy(cuda_test::fill_nan(b.query.shape(), DType::kBF16));
      Tensor workspace;
      const Status st =
          cuda::paged_attention(query, dev_cache, tables, params, workspace, out, nullptr);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      const Tensor got = to_host(out);
      int mismatches = 0;
      for (int64_t h = 0; h < c.kv_heads * c.group; ++h) {
        for (int64_t i = 0; i < d; ++i) {
          const float want = fp8e4m3_to_f32(v0[(h / c.group) * d + i]);
          const float have = bf16_to_f32(got.data<uint16_t>()[h * d + i]);
          const bool ok = std::isnan(want) ? std::isnan(have) : have == want;
          if (!ok && mismatches++ < 8) {
            ADD_FAILURE() << "head " << h << " dim " << i << ": code "
                          << int{v0[(h / c.group) * d + i]} << " gave " << have << ", want "
                          << want;
          }
        }
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

// ---- The engine --------------------------------------------------------------------------

struct EngineRun {
  std::vector<std::vector<int32_t>> tokens;
  int32_t num_blocks = 0;
};

EngineRun run_golden(const std::string& name, const std::string& kv_cache_dtype,
                     const std::vector<std::vector<int32_t>>& prompts, int64_t steps) {
  LoadOptions options;
  options.device = Device::cuda();
  options.dtype = DType::kBF16;
  options.kv_cache_dtype = kv_cache_dtype;
  auto model = load_model(fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name, options);
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  if (!model) return {};
  engine::EngineConfig config;
  config.scheduler.max_model_len = 256;
  config.scheduler.max_num_seqs = 8;
  config.kv_cache_memory_bytes = 8 << 20;
  auto core = engine::EngineCore::create(std::move(*model), config, {});
  EXPECT_TRUE(core.has_value()) << core.status().to_string();
  if (!core) return {};
  EngineRun run;
  run.num_blocks = (*core)->stats().num_usable_blocks + 1;
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = steps;
  p.ignore_eos = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Status s = (*core)->add_request("r" + std::to_string(i), prompts[i], p);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  std::map<std::string, std::vector<int32_t>> out;
  for (int step = 0; (*core)->has_unfinished_requests() && step < 5000; ++step) {
    auto outputs = (*core)->step();
    EXPECT_TRUE(outputs.has_value()) << outputs.status().to_string();
    if (!outputs) break;
    for (const engine::EngineCoreOutput& o : *outputs) {
      out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(),
                               o.new_token_ids.end());
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) run.tokens.push_back(out["r" + std::to_string(i)]);
  return run;
}

class KvFp8EngineCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
    ASSERT_TRUE(cuda::init().is_ok());
  }
};

// The FP8 cache's margins on the CPU (test_kv_cache_fp8_engine.cpp) plus BF16's
// (test_engine_cuda.cpp).
float fp8_margin_for(const std::string& model) {
  return model == "llama" || model == "qwen3" ? 0.3f : 0.5f;
}

TEST_P(KvFp8EngineCuda, GoldenGreedyTokensAndTwiceTheBlocks) {
  const fs::path dir = fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / GetParam();
  auto reference = SafetensorsFile::open(dir / "reference.safetensors");
  ASSERT_TRUE(reference.has_value());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Tensor> ref_tokens, ref_margins;
  for (int p = 0; reference->contains("prompt." + std::to_string(p) + ".token_ids"); ++p) {
    const std::string key = "prompt." + std::to_string(p) + ".";
    Tensor ids = *reference->tensor(key + "token_ids");
    prompts.emplace_back(ids.data<int64_t>(), ids.data<int64_t>() + ids.size(0));
    ref_tokens.push_back(*reference->tensor(key + "greedy_token_ids"));
    ref_margins.push_back(*reference->tensor(key + "greedy_margins"));
  }
  const int64_t steps = ref_tokens[0].size(0);
  const EngineRun fp8 = run_golden(GetParam(), "fp8", prompts, steps);
  const EngineRun bf16 = run_golden(GetParam(), "auto", {}, 0);
  ASSERT_EQ(fp8.tokens.size(), prompts.size());
  EXPECT_EQ(fp8.num_blocks / 2, bf16.num_blocks) << "1-byte elements instead of 2";
  const float margin = fp8_margin_for(GetParam());
  int64_t compared = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int64_t s = 0; s < steps; ++s) {
      if (ref_margins[p].data<float>()[s] < margin) break;
      ASSERT_LT(static_cast<size_t>(s), fp8.tokens[p].size());
      ASSERT_EQ(fp8.tokens[p][static_cast<size_t>(s)], ref_tokens[p].data<int64_t>()[s])
          << GetParam() << " prompt " << p << " step " << s;
      ++compared;
    }
  }
  EXPECT_GE(compared, 4);
  std::printf(
      "%-14s CUDA BF16, fp8 KV cache: %d blocks (bf16: %d), %lld greedy steps equal "
      "at margin >= %.2f\n",
      GetParam().c_str(), fp8.num_blocks, bf16.num_blocks, static_cast<long long>(compared),
      margin);
}

INSTANTIATE_TEST_SUITE_P(Golden, KvFp8EngineCuda,
                         ::testing::Values("llama", "qwen3", "qwen3_5_dense", "qwen3_5_moe",
                                           "qwen3_next"));

}  // namespace
}  // namespace vllm

// The models end to end on CUDA against the transformers references in tests/golden/ (f32,
// computed on the CPU), by the rule for CUDA in docs/design.md: in BF16, logits within
// relative L2 3e-2 (attention-only models; 1.5e-1 for the hybrids) at every prefill position
// and decode step -- the MoE hybrids at their median and 90th-percentile position, see
// bf16_tolerance -- and greedy tokens equal up to the first reference step whose top-2
// log-prob margin is below 0.05 (0.25 for the hybrids): not the 2e-2 / 0.05 once planned,
// which transformers' own BF16 misses on these checkpoints. In F32 (--dtype float32), 1e-3
// everywhere (measured: <= 2e-5).
// Chunked prefill on CUDA gives the whole-prompt logits. Without a GPU every test is skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/runtime.h"
#include "loader/safetensors.h"
#include "model/model.h"
#include "ops/ops.h"
#include "unit/model_harness.h"

namespace vllm {
namespace {

namespace fs = std::filesystem;

int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

// One step through the model harness, logits brought to the host.
Tensor host_step(Model& model, ModelCache& cache,
                 std::vector<std::pair<testing::Seq*, int64_t>> work) {
  Tensor logits = testing::step(model, cache, std::move(work));
  if (!logits.defined()) return logits;
  auto host = ops::to_host(model.context(), logits);
  EXPECT_TRUE(host.has_value()) << host.status().to_string();
  return host.has_value() ? *host : Tensor();
}

struct Tolerance {
  DType dtype;
  double logits;  // every position and decode step (unless only_quantiles)
  float margin;
  // MoE hybrids: `logits` bounds the median and 90th-percentile prefill position, and each
  // single position only `per_position` (a router decision flipped by rounding).
  bool only_quantiles = false;
  double per_position = 0;
  std::string mamba_ssm_cache_dtype = "auto";  // vLLM's --mamba-ssm-cache-dtype
};

class GoldenCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA model tests skipped";
  }
  std::unique_ptr<Model> load(DType dtype, const std::string& ssm_state_dtype = "auto") {
    LoadOptions options;
    options.device = Device::cuda();
    options.dtype = dtype;
    options.mamba_ssm_cache_dtype = ssm_state_dtype;
    auto model = load_model(fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / GetParam(), options);
    EXPECT_TRUE(model.has_value()) << model.status().to_string();
    return model.has_value() ? std::move(*model) : nullptr;
  }
  void check_reference(const Tolerance& tol);
};

void GoldenCuda::check_reference(const Tolerance& tol) {
  const fs::path dir = fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / GetParam();
  auto model = load(tol.dtype, tol.mamba_ssm_cache_dtype);
  ASSERT_TRUE(model);
  auto reference = SafetensorsFile::open(dir / "reference.safetensors");
  ASSERT_TRUE(reference.has_value()) << reference.status().to_string();
  const int64_t vocab = model->config().vocab_size;
  int prompts = 0;
  double worst_decode = 0;
  std::vector<double> prefill_errors;
  int64_t compared = 0;
  for (int p = 0; reference->contains("prompt." + std::to_string(p) + ".token_ids"); ++p) {
    ++prompts;
    const std::string key = "prompt." + std::to_string(p) + ".";
    Tensor ids = *reference->tensor(key + "token_ids");
    Tensor ref_logits = *reference->tensor(key + "logits");
    Tensor ref_greedy = *reference->tensor(key + "greedy_token_ids");
    Tensor ref_margins = *reference->tensor(key + "greedy_margins");
    Tensor ref_greedy_logits = *reference->tensor(key + "greedy_logits");
    const int64_t n = ids.size(0), steps = ref_greedy.size(0);
    auto cache = model->create_cache(
        CacheConfig{(n + steps) / testing::kBlockSize + 2, testing::kBlockSize, 2});
    ASSERT_TRUE(cache.has_value()) << cache.status().to_string();
    testing::Seq seq;
    seq.slot = 1;
    seq.tokens.assign(ids.data<int64_t>(), ids.data<int64_t>() + n);
    seq.blocks.resize(static_cast<size_t>(cache->config.num_blocks));
    std::iota(seq.blocks.rbegin(), seq.blocks.rend(), 0);  // blocks in reverse order
    Tensor logits = host_step(*model, *cache, {{&seq, n}});
    ASSERT_TRUE(logits.defined());
    for (int64_t i = 0; i < n; ++i) {
      const double err = testing::rel_l2(logits.data<float>() + i * vocab,
                                         ref_logits.data<float>() + i * vocab, vocab);
      EXPECT_LE(err, tol.only_quantiles ? tol.per_position : tol.logits)
          << GetParam() << " prompt " << p << " position " << i;
      prefill_errors.push_back(err);
    }
    int64_t next = argmax(logits.data<float>() + (n - 1) * vocab, vocab);
    for (int64_t s = 0; s < steps; ++s) {
      if (ref_margins.data<float>()[s] < tol.margin) break;
      ASSERT_EQ(next, ref_greedy.data<int64_t>()[s])
          << GetParam() << " prompt " << p << " step " << s;
      ++compared;
      if (s + 1 == steps) break;
      seq.tokens.push_back(next);
      Tensor step_logits = host_step(*model, *cache, {{&seq, 1}});
      ASSERT_TRUE(step_logits.defined());
      const double err = testing::rel_l2(step_logits.data<float>(),
                                         ref_greedy_logits.data<float>() + (s + 1) * vocab, vocab);
      EXPECT_LE(err, tol.logits) << GetParam() << " prompt " << p << " decode step " << s + 1;
      worst_decode = std::max(worst_decode, err);
      next = argmax(step_logits.data<float>(), vocab);
    }
  }
  EXPECT_GE(prompts, 3);
  EXPECT_GE(compared, tol.margin > 0.1f ? 4 : 8) << "too few greedy steps compared";
  std::sort(prefill_errors.begin(), prefill_errors.end());
  const size_t positions = prefill_errors.size();
  ASSERT_GT(positions, 0u);
  EXPECT_LE(prefill_errors[positions / 2], tol.logits) << "median prefill position";
  EXPECT_LE(prefill_errors[positions * 9 / 10], tol.logits) << "90th-percentile prefill position";
  std::printf(
      "%-14s cuda %s: %d prompts, prefill rel L2 over %zu positions: median %.2e, p90 "
      "%.2e, worst %.2e; worst decode %.2e, %lld greedy tokens equal\n",
      GetParam().c_str(), std::string(dtype_name(tol.dtype)).c_str(), prompts, positions,
      prefill_errors[positions / 2], prefill_errors[positions * 9 / 10], prefill_errors.back(),
      worst_decode, static_cast<long long>(compared));
}

// BF16 bounds. transformers itself, run in bfloat16 on these small random-weight checkpoints,
// lands from its own float32 logits at 2.5e-2 (llama), 3.3e-2 (qwen3), 1.1e-1
// (qwen3_5_dense) and 1.8e-1 (qwen3_5_moe) at the worst prefill position, and on the hybrids
// its greedy tokens leave the float32 ones at steps whose top-2 margin is up to 0.20
// (scripts/bf16_error_floor.py, BENCHMARKS.md): the Gated DeltaNet layers of these random
// models amplify rounding. So the 2e-2 / 0.05 rule is below what BF16 inference reaches on
// them. Attention-only models are held to 3e-2 and margin 0.05; the dense hybrid to 1.5e-1
// and margin 0.25. In the MoE hybrids rounding also flips router decisions: a token whose
// k-th and (k+1)-th expert scores lie close takes another expert, and that position's logits
// jump (we traced flips at expert-score margins up to 0.3 in the last layer). Which positions
// flip differs between any two BF16 implementations, so their worst position says little:
// transformers' median / p90 / worst on qwen3_5_moe are 4.0e-2 / 1.1e-1 / 1.8e-1, ours
// 3.3e-2 / 1.1e-1 / 4.3e-1. They are held to 1.5e-1 at the median and the 90th percentile,
// 1.0 at any single position (unrelated logits are ~1.4 apart), and margin 0.25.
Tolerance bf16_tolerance(const std::string& model) {
  if (model == "llama" || model == "qwen3") return {DType::kBF16, 3e-2, 0.05f};
  if (model == "qwen3_5_moe" || model == "qwen3_5_moe_fp8" || model == "qwen3_next") {
    return {DType::kBF16, 1.5e-1, 0.25f, /*only_quantiles=*/true, /*per_position=*/1.0};
  }
  return {DType::kBF16, 1.5e-1, 0.25f};
}

TEST_P(GoldenCuda, Bf16MatchesTransformers) {
  check_reference(bf16_tolerance(GetParam()));
}

// --mamba-ssm-cache-dtype bfloat16: the hybrids' recurrent state kept in BF16 between steps
// (read into f32, rounded once per step) under the same BF16 rule and margin; the
// attention-only models have no such state and run as above.
TEST_P(GoldenCuda, Bf16SsmStateMatchesTransformers) {
  Tolerance tol = bf16_tolerance(GetParam());
  tol.mamba_ssm_cache_dtype = "bfloat16";
  check_reference(tol);
}

TEST_P(GoldenCuda, F32MatchesTransformers) {
  check_reference({DType::kF32, 1e-3, 1e-3f});
}

// Prefill in chunks of 1, 3, 7, 17, 33 and 40 tokens gives the logits of one whole-prompt step.
// Attention-only models run the same arithmetic either way, up to BF16 rounding of the split:
// 1e-2 at every position. In the hybrids the whole 70-token prompt runs the delta rule in its
// chunked tensor-core form (chunks of 64 from the prompt's start), chunks of 33 and 40 in
// that form from other starts, and chunks under 32 tokens token by token: two BF16
// computations of the same function, whose differences these random-weight hybrids amplify as
// they amplify any BF16 rounding (the goldens' BF16 rule above), so they are held to that
// rule: 1.5e-1 at every position, for the MoE hybrids at the median and 90th percentile
// (1.0 at any single position, where rounding flipped a router decision).
TEST_P(GoldenCuda, ChunkedPrefillMatchesWhole) {
  const fs::path dir = fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / GetParam();
  auto model = load(DType::kBF16);
  ASSERT_TRUE(model);
  auto reference = SafetensorsFile::open(dir / "reference.safetensors");
  ASSERT_TRUE(reference.has_value());
  // The longest prompt: prompt 3 (prompt 2 in the FP8 references, which have three).
  const std::string key = reference->contains("prompt.3.token_ids") ? "prompt.3." : "prompt.2.";
  Tensor ids = *reference->tensor(key + "token_ids");
  const int64_t n = ids.size(0), vocab = model->config().vocab_size;
  constexpr int64_t kBlocks = 32;
  auto run = [&](int64_t chunk) {
    auto cache = model->create_cache(CacheConfig{kBlocks, testing::kBlockSize, 3});
    EXPECT_TRUE(cache.has_value());
    testing::Seq seq;
    seq.tokens.assign(ids.data<int64_t>(), ids.data<int64_t>() + n);
    seq.slot = 2;
    for (int32_t b = 0; b < kBlocks; ++b) seq.blocks.push_back(kBlocks - 1 - b);
    std::vector<float> logits;
    while (seq.computed < n) {
      Tensor part = host_step(*model, *cache, {{&seq, std::min(chunk, n - seq.computed)}});
      if (!part.defined()) break;  // the failure is already reported
      logits.insert(logits.end(), part.data<float>(), part.data<float>() + part.numel());
    }
    return logits;
  };
  const Tolerance tol = GetParam() == "llama" || GetParam() == "qwen3"
                            ? Tolerance{DType::kBF16, 1e-2, 0.0f}
                            : bf16_tolerance(GetParam());
  const std::vector<float> whole = run(n);
  ASSERT_EQ(static_cast<int64_t>(whole.size()), n * vocab);
  for (int64_t chunk : {1, 3, 7, 17, 33, 40}) {
    const std::vector<float> chunked = run(chunk);
    ASSERT_EQ(chunked.size(), whole.size());
    std::vector<double> errors;
    for (int64_t i = 0; i < n; ++i) {
      const double err =
          testing::rel_l2(chunked.data() + i * vocab, whole.data() + i * vocab, vocab);
      EXPECT_LE(err, tol.only_quantiles ? tol.per_position : tol.logits)
          << GetParam() << " chunk " << chunk << " position " << i;
      errors.push_back(err);
    }
    std::sort(errors.begin(), errors.end());
    EXPECT_LE(errors[errors.size() / 2], tol.logits) << "median position, chunk " << chunk;
    EXPECT_LE(errors[errors.size() * 9 / 10], tol.logits) << "p90 position, chunk " << chunk;
    std::printf(
        "%-14s chunked prefill of %lld: rel L2 to the whole prompt's logits median %.2e, "
        "p90 %.2e, worst %.2e\n",
        GetParam().c_str(), static_cast<long long>(chunk), errors[errors.size() / 2],
        errors[errors.size() * 9 / 10], errors.back());
  }
}

// qwen3_5_dense_fp8: every linear layer block-scaled FP8 (W8A16 on CUDA), held to the dense
// hybrid's rule against the same transformers reference; qwen3_5_moe_fp8: FP8 experts (the
// per-pair, gather and grouped expert kernels over e4m3 rows) with BF16 in_proj_b / in_proj_a,
// held to the MoE hybrid's rule.
INSTANTIATE_TEST_SUITE_P(Models, GoldenCuda,
                         ::testing::Values("llama", "qwen3", "qwen3_5_dense", "qwen3_5_moe",
                                           "qwen3_next", "qwen3_5_dense_fp8", "qwen3_5_moe_fp8"));

}  // namespace
}  // namespace vllm

// Backend parity for the structured-output bitmask on GPU logits: cuda::TokenBitmaskApplier
// against the CPU's vllm::apply_token_bitmask on the same rows and masks (the result must be
// bit-identical: each logit is either kept or -inf), and the engine's Sampler on CUDA logits
// with allowed_token_bitmask against the same Sampler on the host copy. Without a GPU every
// test but the argument check is skipped.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/runtime.h"
#include "backend/cuda/token_bitmask.cuh"
#include "cuda_test_util.h"
#include "engine/sampler.h"
#include "engine/sampling_ops.h"
#include "sampling_reference.h"

namespace vllm {
namespace {

using cuda_test::kNegInf;

Tensor random_logits(int64_t rows, int64_t vocab, std::mt19937& rng) {
  Tensor t = Tensor::empty({rows, vocab}, DType::kF32);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int64_t i = 0; i < rows * vocab; ++i) t.data<float>()[i] = normal(rng);
  return t;
}

std::span<const float> row_of(const Tensor& t, int64_t r) {
  return {t.data<float>() + r * t.stride(0), static_cast<size_t>(t.size(1))};
}

// The kinds of masks a grammar produces, and the edge cases of the packing.
enum class MaskKind { kRandom, kSparse, kAllOnes, kAllZero, kShort, kLong, kEmpty };

std::vector<uint32_t> make_mask(MaskKind kind, int64_t vocab, std::mt19937& rng) {
  const auto words = static_cast<size_t>((vocab + 31) / 32);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<uint32_t> m(words, 0u);
  switch (kind) {
    case MaskKind::kRandom:
      for (uint32_t& w : m) w = bits(rng);
      break;
    case MaskKind::kSparse: {  // a few allowed tokens, most words zero
      std::uniform_int_distribution<int64_t> any(0, vocab - 1);
      for (int k = 0; k < 40; ++k) {
        const int64_t id = any(rng);
        m[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
      }
      break;
    }
    case MaskKind::kAllOnes:
      std::fill(m.begin(), m.end(), 0xFFFFFFFFu);
      break;
    case MaskKind::kAllZero:
      break;
    case MaskKind::kShort:  // covers the first half of the vocabulary only
      m.resize(words / 2);
      for (uint32_t& w : m) w = bits(rng) | 1u;
      break;
    case MaskKind::kLong:  // words past the vocabulary's end, with bits set
      m.resize(words + 3);
      for (uint32_t& w : m) w = bits(rng);
      break;
    case MaskKind::kEmpty:
      m.clear();
      break;
  }
  return m;
}

::testing::AssertionResult bitwise_equal(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "token " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

class TokenBitmaskCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: token bitmask tests skipped";
    Status status = cuda::init();
    ASSERT_TRUE(status.is_ok()) << status.to_string();
  }
  std::mt19937 rng_{4242};
};

// Every mask kind on vocabularies of real sizes (Qwen3's padded 151,936, Llama 3's 128,256),
// one that is not a multiple of 32, and a single token; unmasked rows stay as they were. Two
// steps on one applier: its buffers are reused and grown.
TEST_F(TokenBitmaskCuda, MatchesCpuOnEveryMaskKind) {
  const std::vector<MaskKind> kinds = {MaskKind::kRandom,  MaskKind::kSparse, MaskKind::kAllOnes,
                                       MaskKind::kAllZero, MaskKind::kShort,  MaskKind::kLong,
                                       MaskKind::kEmpty};
  cuda::TokenBitmaskApplier applier(Device::cuda());
  for (const int64_t vocab : {int64_t{1000}, int64_t{151936}, int64_t{128256}, int64_t{1}}) {
    const auto rows = static_cast<int64_t>(kinds.size()) + 2;  // rows 1 and 4 unmasked
    Tensor host = random_logits(rows, vocab, rng_);
    std::vector<std::vector<uint32_t>> masks;
    std::vector<cuda::RowBitmask> entries;
    masks.reserve(kinds.size());
    int64_t row = 0;
    for (MaskKind kind : kinds) {
      if (row == 1 || row == 4) ++row;
      masks.push_back(make_mask(kind, vocab, rng_));
      entries.push_back({row++, masks.back()});
    }
    auto device = cuda::copy_to_device(host);
    ASSERT_TRUE(device) << device.status().to_string();
    Status status = applier.apply(*device, entries, nullptr);
    ASSERT_TRUE(status.is_ok()) << status.to_string();
    auto back = cuda::copy_to_host(*device);
    ASSERT_TRUE(back) << back.status().to_string();

    Tensor want = host.clone();
    for (const cuda::RowBitmask& e : entries) {
      std::span<float> r(want.data<float>() + e.row * vocab, static_cast<size_t>(vocab));
      apply_token_bitmask(r, e.words);
    }
    for (int64_t r = 0; r < rows; ++r) {
      SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " row " << r);
      EXPECT_TRUE(bitwise_equal(row_of(*back, r), row_of(want, r)));
    }
  }
}

// Logits rows further apart than the vocabulary (a column slice): the columns past the
// slice are not written.
TEST_F(TokenBitmaskCuda, StridedRows) {
  const int64_t rows = 3, vocab = 4000, width = vocab + 5;
  Tensor host = random_logits(rows, width, rng_);
  auto wide = cuda::copy_to_device(host);
  ASSERT_TRUE(wide);
  Tensor view = wide->slice(1, 0, vocab);
  ASSERT_EQ(view.stride(0), width);
  std::vector<std::vector<uint32_t>> masks = {make_mask(MaskKind::kRandom, vocab, rng_),
                                              make_mask(MaskKind::kSparse, vocab, rng_)};
  const std::vector<cuda::RowBitmask> entries = {{2, masks[0]}, {0, masks[1]}};
  cuda::TokenBitmaskApplier applier(Device::cuda());
  ASSERT_TRUE(applier.apply(view, entries, nullptr).is_ok());
  auto back = cuda::copy_to_host(*wide);
  ASSERT_TRUE(back);
  Tensor want = host.clone();
  for (const cuda::RowBitmask& e : entries) {
    apply_token_bitmask(
        std::span<float>(want.data<float>() + e.row * width, static_cast<size_t>(vocab)), e.words);
  }
  for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(bitwise_equal(row_of(*back, r), row_of(want, r)));
}

// The engine's Sampler on CUDA logits honours allowed_token_bitmask exactly as on the CPU:
// same tokens (random rows whose draw lands near a CDF edge of the masked distribution are
// skipped), every token allowed, logprobs of the masked logits, including the host path for
// more than 20 logprobs. A row allowing one token gets it whatever its parameters.
TEST_F(TokenBitmaskCuda, EngineSamplerAppliesBitmasks) {
  const int64_t vocab = 151936;
  const int rows = 12;
  std::vector<SamplingParams> params(rows);
  std::vector<std::vector<int32_t>> prompts(rows), outputs(rows);
  std::vector<std::vector<uint32_t>> masks(rows);
  const std::vector<int32_t> eos = {151645};
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(vocab) - 1);
  for (int r = 0; r < rows; ++r) {
    SamplingParams& p = params[r];
    p.temperature = r % 3 == 0 ? 0.0 : 0.8;
    if (r % 2 == 0) p.seed = 500 + r;
    p.top_p = r % 4 == 1 ? 0.9 : 1.0;
    p.logprobs = std::array<int32_t, 4>{0, 3, 25, -1}[r % 4];
    for (int i = 0; i < 10; ++i) prompts[r].push_back(any(rng_));
    for (int i = 0; i < r % 3; ++i) outputs[r].push_back(any(rng_));
    if (r == 5) continue;  // no grammar: sampled from the whole vocabulary
    if (r == 7) {          // exactly one allowed token
      masks[r].assign(static_cast<size_t>((vocab + 31) / 32), 0u);
      masks[r][12345 / 32] = 1u << (12345 % 32);
    } else {
      masks[r] = make_mask(r % 2 ? MaskKind::kSparse : MaskKind::kRandom, vocab, rng_);
    }
  }
  std::vector<SamplingRequestState> states;
  for (int r = 0; r < rows; ++r) {
    SamplingRequestState s;
    s.params = &params[r];
    s.prompt_token_ids = prompts[r];
    s.output_token_ids = outputs[r];
    s.eos_token_ids = eos;
    s.allowed_token_bitmask = masks[r];
    states.push_back(s);
  }
  Sampler cpu(91), gpu(91), draws_of(91);
  for (int step = 0; step < 2; ++step) {
    Tensor logits = random_logits(rows, vocab, rng_);
    auto logits_gpu = cuda::copy_to_device(logits);
    ASSERT_TRUE(logits_gpu);
    const std::vector<double> u = draws_of.take_draws(states);
    const std::vector<SampleResult> want = cpu.sample(logits, states);
    const std::vector<SampleResult> got = gpu.sample(*logits_gpu, states);
    ASSERT_EQ(got.size(), want.size());
    for (int r = 0; r < rows; ++r) {
      SCOPED_TRACE(::testing::Message() << "step " << step << " row " << r);
      const int32_t token = got[r].token_id;
      ASSERT_GE(token, 0);
      ASSERT_LT(token, vocab);
      if (!masks[r].empty()) {
        EXPECT_TRUE((masks[r][static_cast<size_t>(token) / 32] >> (token % 32)) & 1u)
            << "token " << token << " is not allowed by the row's mask";
      }
      if (r == 7) {
        EXPECT_EQ(token, 12345);
      }
      if (!params[r].is_greedy()) {
        const std::span<const float> raw = row_of(logits, r);
        std::vector<float> masked(raw.begin(), raw.end());
        if (!masks[r].empty()) apply_token_bitmask(masked, masks[r]);
        cuda_test::Case c{params[r], prompts[r], outputs[r], eos};
        std::vector<float> final_logits =
            cuda_test::cpu_before_top_p(cuda_test::cpu_edited(masked, c), params[r]);
        apply_top_p(final_logits, params[r].top_p);
        if (cuda_test::near_cdf_edge(final_logits, u[r], 1e-5)) continue;
      }
      EXPECT_EQ(token, want[r].token_id);
      EXPECT_NEAR(got[r].logprob, want[r].logprob, 1e-4);
      EXPECT_EQ(got[r].rank, want[r].rank);
      EXPECT_EQ(got[r].top_token_ids, want[r].top_token_ids);
      ASSERT_EQ(got[r].top_logprobs.size(), want[r].top_logprobs.size());
      for (size_t j = 0; j < want[r].top_logprobs.size(); ++j) {
        if (std::isinf(want[r].top_logprobs[j])) {
          EXPECT_EQ(got[r].top_logprobs[j], want[r].top_logprobs[j]) << j;
        } else {
          EXPECT_NEAR(got[r].top_logprobs[j], want[r].top_logprobs[j], 1e-4) << j;
        }
      }
    }
  }
}

TEST_F(TokenBitmaskCuda, RefusesBadRows) {
  Tensor host = random_logits(2, 100, rng_);
  auto logits = cuda::copy_to_device(host);
  ASSERT_TRUE(logits);
  const std::vector<uint32_t> mask(4, 0xFFu);
  cuda::TokenBitmaskApplier applier(Device::cuda());
  for (int64_t bad : {int64_t{-1}, int64_t{2}}) {
    const std::vector<cuda::RowBitmask> entries = {{bad, mask}};
    Status s = applier.apply(*logits, entries, nullptr);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("outside the 2 logits rows"), std::string::npos) << s.message();
  }
  auto back = cuda::copy_to_host(*logits);
  ASSERT_TRUE(back);
  EXPECT_TRUE(bitwise_equal(row_of(*back, 0), row_of(host, 0)));  // nothing was written
}

// Needs no GPU: logits on the CPU are refused before any CUDA call.
TEST(TokenBitmaskCudaArgs, RefusesCpuLogits) {
  Tensor logits = Tensor::empty({1, 64}, DType::kF32);
  const std::vector<uint32_t> mask(2, 1u);
  const std::vector<cuda::RowBitmask> entries = {{0, mask}};
  cuda::TokenBitmaskApplier applier(Device::cuda());
  Status s = applier.apply(logits, entries, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("must be on"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vllm

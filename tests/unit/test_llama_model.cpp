// Llama / Qwen3 on the CPU backend over the paged KV cache: chunked prefill and batching give
// the same logits as one request alone, and bad checkpoints fail at load naming the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "loader/checkpoint.h"
#include "loader/safetensors_writer.h"
#include "model/model.h"
#include "tools/tiny_checkpoint.h"
#include "unit/model_harness.h"
#include "unit/temp_dir.h"

namespace vllm {
namespace test_llama_model {
namespace {

namespace fs = std::filesystem;
using testing::kBlockSize;
using testing::rel_l2;
using testing::Seq;
using testing::step;

class TinyModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::write_tiny_checkpoint(dir_.path(), GetParam(), 7).is_ok());
    auto model = load_model(dir_.path(), LoadOptions{});
    ASSERT_TRUE(model.has_value()) << model.status().to_string();
    model_ = std::move(*model);
  }
  ModelCache new_cache() {
    auto cache = model_->create_cache(CacheConfig{64, kBlockSize, 4});
    EXPECT_TRUE(cache.has_value());
    return std::move(*cache);
  }

  testing::TempDir dir_{"vllm_tiny_model"};
  std::unique_ptr<Model> model_;
};

std::vector<int64_t> prompt(int64_t n, int64_t salt) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + salt * 101 + 5) % 512;
  return t;
}

TEST_P(TinyModelTest, ChunkedPrefillMatchesWholePrefill) {
  const int64_t n = 23, vocab = model_->config().vocab_size;
  ModelCache whole_cache = new_cache();
  Seq whole{prompt(n, 1), {9, 3, 14, 0, 21, 7}};
  Tensor reference = step(*model_, whole_cache, {{&whole, n}});
  ASSERT_TRUE(reference.defined());
  for (int64_t chunk : {1, 3, 7}) {
    ModelCache cache = new_cache();
    Seq seq{prompt(n, 1), {2, 30, 11, 5, 17, 40}};
    std::vector<float> logits;
    while (seq.computed < n) {
      Tensor part = step(*model_, cache, {{&seq, std::min(chunk, n - seq.computed)}});
      ASSERT_TRUE(part.defined());
      logits.insert(logits.end(), part.data<float>(), part.data<float>() + part.numel());
    }
    EXPECT_LT(rel_l2(logits.data(), reference.data<float>(), n * vocab), 1e-5) << "chunk " << chunk;
  }
}

TEST_P(TinyModelTest, BatchedRequestsMatchAlone) {
  const int64_t vocab = model_->config().vocab_size;
  const std::vector<int64_t> lens = {11, 5, 17};
  // Alone: prefill then three greedy-free decode steps with fixed next tokens.
  std::vector<std::vector<float>> alone(lens.size());
  for (size_t r = 0; r < lens.size(); ++r) {
    ModelCache cache = new_cache();
    Seq seq{prompt(lens[r] + 3, int64_t(r)), {}};
    for (int32_t b = 0; b < 6; ++b) seq.blocks.push_back(b);
    Tensor p = step(*model_, cache, {{&seq, lens[r]}});
    alone[r].assign(p.data<float>(), p.data<float>() + p.numel());
    for (int k = 0; k < 3; ++k) {
      Tensor d = step(*model_, cache, {{&seq, 1}});
      alone[r].insert(alone[r].end(), d.data<float>(), d.data<float>() + vocab);
    }
  }
  // Together: one mixed prefill step, then three batched decode steps; blocks interleaved.
  ModelCache cache = new_cache();
  std::vector<Seq> seqs;
  for (size_t r = 0; r < lens.size(); ++r) {
    Seq seq{prompt(lens[r] + 3, int64_t(r)), {}};
    for (int32_t b = 0; b < 6; ++b) seq.blocks.push_back(b * 3 + int32_t(r));
    seqs.push_back(seq);
  }
  std::vector<std::vector<float>> together(lens.size());
  Tensor p = step(*model_, cache, {{&seqs[0], lens[0]}, {&seqs[1], lens[1]}, {&seqs[2], lens[2]}});
  int64_t row = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    together[r].assign(p.data<float>() + row * vocab, p.data<float>() + (row + lens[r]) * vocab);
    row += lens[r];
  }
  for (int k = 0; k < 3; ++k) {
    Tensor d = step(*model_, cache, {{&seqs[0], 1}, {&seqs[1], 1}, {&seqs[2], 1}});
    for (size_t r = 0; r < lens.size(); ++r) {
      together[r].insert(together[r].end(), d.data<float>() + r * vocab,
                         d.data<float>() + (r + 1) * vocab);
    }
  }
  for (size_t r = 0; r < lens.size(); ++r) {
    ASSERT_EQ(together[r].size(), alone[r].size());
    EXPECT_LT(rel_l2(together[r].data(), alone[r].data(), int64_t(alone[r].size())), 1e-5)
        << "request " << r;
  }
}

// Rewrites the checkpoint with `drop` removed and `reshape` cut to its first row.
std::unique_ptr<testing::TempDir> corrupted_copy(const fs::path& src, const std::string& drop,
                                                 const std::string& reshape) {
  auto dst = std::make_unique<testing::TempDir>("vllm_bad_model");
  fs::copy_file(src / "config.json", *dst / "config.json");
  auto ckpt = Checkpoint::open(src);
  EXPECT_TRUE(ckpt.has_value());
  NamedTensors tensors;
  for (const std::string& name : ckpt->names()) {
    if (name == drop) continue;
    Tensor t = *ckpt->tensor(name);
    if (name == reshape) t = t.slice(0, 0, 1).clone();
    tensors.emplace_back(name, t);
  }
  EXPECT_TRUE(write_safetensors(*dst / "model.safetensors", tensors).is_ok());
  return dst;
}

TEST_P(TinyModelTest, MissingOrMisshapedTensorFailsAtLoadNamingIt) {
  const std::string missing = "model.layers.1.mlp.up_proj.weight";
  auto bad = corrupted_copy(dir_.path(), missing, "");
  auto model = load_model(bad->path(), LoadOptions{});
  ASSERT_FALSE(model.has_value());
  EXPECT_EQ(model.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(model.status().message().find(missing), std::string::npos) << model.status().message();

  const std::string misshaped = "model.layers.0.self_attn.k_proj.weight";
  bad = corrupted_copy(dir_.path(), "", misshaped);
  model = load_model(bad->path(), LoadOptions{});
  ASSERT_FALSE(model.has_value());
  EXPECT_EQ(model.status().code(), ErrorCode::kInvalidFormat);
  EXPECT_NE(model.status().message().find(misshaped), std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find("expected [32, 96]"), std::string::npos)
      << model.status().message();
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyModelTest, ::testing::Values("llama", "qwen3"));

}  // namespace
}  // namespace test_llama_model
}  // namespace vllm

// Qwen3.5 / Qwen3.5-MoE / Qwen3-Next on the CPU backend with small random checkpoints in the
// shipped layouts (hybrid_checkpoint.h): chunked prefill and batching with other requests
// give the logits of one request alone (GDN state slots in any order, reused slots reset when
// a request starts), equivalent layouts of the same weights give the same logits, and bad
// checkpoints fail at load naming the tensor. Exactness against transformers itself is the
// golden tests' job (tests/golden/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "hybrid_checkpoint.h"
#include "model/model.h"
#include "model/state_copy.h"
#include "unit/model_harness.h"
#include "unit/temp_dir.h"

namespace vllm {
namespace test_qwen3_5_model {
namespace {

using testing::HybridCheckpointWriter;
using testing::HybridSpec;
using Family = HybridSpec::Family;

using testing::i64;
using testing::kBlockSize;
using testing::rel_l2;
using testing::Seq;
using testing::step;

constexpr int64_t kSlots = 6;

std::vector<int64_t> prompt(int64_t n, int64_t salt) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + salt * 53 + 5) % 96;
  return t;
}

std::unique_ptr<Model> load(const testing::TempDir& dir, const HybridSpec& spec) {
  Status s = HybridCheckpointWriter(spec).write(dir.path());
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  auto model = load_model(dir.path(), LoadOptions{});
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  return model.has_value() ? std::move(*model) : nullptr;
}

ModelCache new_cache(Model& model) {
  auto cache = model.create_cache(CacheConfig{48, kBlockSize, kSlots});
  EXPECT_TRUE(cache.has_value()) << cache.status().to_string();
  return std::move(*cache);
}

// Logits of a whole prompt in one step.
std::vector<float> whole_prompt(Model& model, const std::vector<int64_t>& tokens) {
  ModelCache cache = new_cache(model);
  Seq seq{tokens, {9, 3, 14, 0, 21, 7, 30, 31}, 4, 0};
  Tensor t = step(model, cache, {{&seq, static_cast<int64_t>(tokens.size())}});
  return t.defined() ? std::vector<float>(t.data<float>(), t.data<float>() + t.numel())
                     : std::vector<float>();
}

struct Flavour {
  std::string name;
  HybridSpec spec;
};
void PrintTo(const Flavour& f, std::ostream* os) {
  *os << f.name;
}

std::vector<Flavour> flavours() {
  HybridSpec dense;
  dense.family = Family::kQwen3_5;
  dense.tie_word_embeddings = true;
  HybridSpec moe;
  moe.family = Family::kQwen3_5Moe;
  moe.conditional = true;
  moe.fused_experts = true;
  moe.seed = 2;
  HybridSpec next;  // layers 0, 2, 3 dense; layer 1 sparse with per-expert weights
  next.family = Family::kQwen3Next;
  next.moe = true;
  next.decoder_sparse_step = 2;
  next.mlp_only_layers = {3};
  next.seed = 3;
  return {{"qwen3_5", dense}, {"qwen3_5_moe", moe}, {"qwen3_next", next}};
}

class HybridModelTest : public ::testing::TestWithParam<Flavour> {
 protected:
  void SetUp() override {
    model_ = load(dir_, GetParam().spec);
    ASSERT_NE(model_, nullptr);
  }
  testing::TempDir dir_{"vllm_hybrid_model"};
  std::unique_ptr<Model> model_;
};

TEST_P(HybridModelTest, ChunkedPrefillMatchesWholePrefill) {
  const int64_t n = 23, vocab = model_->config().vocab_size;
  const std::vector<float> reference = whole_prompt(*model_, prompt(n, 1));
  ASSERT_EQ(static_cast<int64_t>(reference.size()), n * vocab);
  for (float v : reference) ASSERT_TRUE(std::isfinite(v));
  for (int64_t chunk : {1, 3, 7}) {
    ModelCache cache = new_cache(*model_);
    Seq seq{prompt(n, 1), {2, 30, 11, 5, 17, 40}, 1, 0};
    std::vector<float> logits;
    while (seq.computed < n) {
      Tensor part = step(*model_, cache, {{&seq, std::min(chunk, n - seq.computed)}});
      ASSERT_TRUE(part.defined());
      logits.insert(logits.end(), part.data<float>(), part.data<float>() + part.numel());
    }
    EXPECT_LT(rel_l2(logits.data(), reference.data(), n * vocab), 1e-5) << "chunk " << chunk;
  }
}

// Prefix caching's contract: a state slot copied at a block boundary (copy_state_slots) and
// restored into another slot lets a second request continue on the first one's KV blocks as
// if it had computed the prefix itself.
TEST_P(HybridModelTest, RestoredStateSnapshotContinuesThePrefix) {
  const int64_t n = 23, prefix = 8, vocab = model_->config().vocab_size;
  const std::vector<float> reference = whole_prompt(*model_, prompt(n, 1));
  ModelCache cache = new_cache(*model_);
  Seq a{prompt(n, 1), {2, 30, 11, 5, 17, 40}, 0, 0};
  ASSERT_TRUE(step(*model_, cache, {{&a, prefix}}).defined());
  const std::vector<int32_t> snapshot_slot = {4}, a_slot = {0};
  ASSERT_TRUE(copy_state_slots(cache, a_slot, snapshot_slot).is_ok());
  ASSERT_TRUE(step(*model_, cache, {{&a, n - prefix}}).defined());  // a's slot moves on

  Seq b{prompt(n, 1), {2, 30, 7, 9, 13, 21}, 3, prefix};  // a's first two blocks
  const std::vector<int32_t> b_slot = {3};
  ASSERT_TRUE(copy_state_slots(cache, snapshot_slot, b_slot).is_ok());
  Tensor rest = step(*model_, cache, {{&b, n - prefix}});
  ASSERT_TRUE(rest.defined());
  EXPECT_LT(rel_l2(rest.data<float>(), reference.data() + prefix * vocab, (n - prefix) * vocab),
            1e-5);
}

TEST_P(HybridModelTest, BatchedRequestsMatchAloneWithReusedSlots) {
  const int64_t vocab = model_->config().vocab_size;
  const std::vector<int64_t> lens = {11, 5, 17};
  const std::vector<int32_t> slots = {5, 0, 2};  // not 0..R-1 in order
  std::vector<std::vector<float>> alone(lens.size());
  for (size_t r = 0; r < lens.size(); ++r) {
    ModelCache cache = new_cache(*model_);
    Seq seq{prompt(lens[r] + 3, int64_t(r)), {0, 1, 2, 3, 4, 5}, 3, 0};
    Tensor p = step(*model_, cache, {{&seq, lens[r]}});
    ASSERT_TRUE(p.defined());
    alone[r].assign(p.data<float>(), p.data<float>() + p.numel());
    for (int k = 0; k < 3; ++k) {
      Tensor d = step(*model_, cache, {{&seq, 1}});
      ASSERT_TRUE(d.defined());
      alone[r].insert(alone[r].end(), d.data<float>(), d.data<float>() + vocab);
    }
  }
  ModelCache cache = new_cache(*model_);
  // Dirty the slots first: other requests ran in them and left state behind.
  {
    std::vector<Seq> old;
    for (size_t r = 0; r < lens.size(); ++r) {
      old.push_back(Seq{prompt(9, 7 + int64_t(r)),
                        {36 + int32_t(r), 39 + int32_t(r), 42 + int32_t(r)},
                        slots[r],
                        0});
    }
    ASSERT_TRUE(step(*model_, cache, {{&old[0], 9}, {&old[1], 9}, {&old[2], 9}}).defined());
  }
  std::vector<Seq> seqs;
  for (size_t r = 0; r < lens.size(); ++r) {
    Seq seq{prompt(lens[r] + 3, int64_t(r)), {}, slots[r], 0};
    for (int32_t b = 0; b < 6; ++b) seq.blocks.push_back(b * 3 + int32_t(r));
    seqs.push_back(seq);
  }
  std::vector<std::vector<float>> together(lens.size());
  Tensor p = step(*model_, cache, {{&seqs[0], lens[0]}, {&seqs[1], lens[1]}, {&seqs[2], lens[2]}});
  ASSERT_TRUE(p.defined());
  int64_t row = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    together[r].assign(p.data<float>() + row * vocab, p.data<float>() + (row + lens[r]) * vocab);
    row += lens[r];
  }
  for (int k = 0; k < 3; ++k) {
    // Requests in a different order each step: the slot goes with the request, not the row.
    std::vector<size_t> order =
        k == 1 ? std::vector<size_t>{2, 0, 1} : std::vector<size_t>{0, 1, 2};
    std::vector<std::pair<Seq*, int64_t>> work;
    for (size_t r : order) work.push_back({&seqs[r], 1});
    Tensor d = step(*model_, cache, work);
    ASSERT_TRUE(d.defined());
    for (size_t i = 0; i < order.size(); ++i) {
      together[order[i]].insert(together[order[i]].end(), d.data<float>() + i * vocab,
                                d.data<float>() + (i + 1) * vocab);
    }
  }
  for (size_t r = 0; r < lens.size(); ++r) {
    ASSERT_EQ(together[r].size(), alone[r].size());
    EXPECT_LT(rel_l2(together[r].data(), alone[r].data(), int64_t(alone[r].size())), 1e-5)
        << "request " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Flavours, HybridModelTest, ::testing::ValuesIn(flavours()),
                         [](const auto& info) { return info.param.name; });

// Same logical weights, different shipped layouts: the logits agree.
void expect_same_logits(const HybridSpec& a, const HybridSpec& b) {
  testing::TempDir dir_a{"vllm_hybrid_a"}, dir_b{"vllm_hybrid_b"};
  auto model_a = load(dir_a, a);
  auto model_b = load(dir_b, b);
  ASSERT_TRUE(model_a && model_b);
  const std::vector<int64_t> tokens = prompt(13, 4);
  std::vector<float> la = whole_prompt(*model_a, tokens), lb = whole_prompt(*model_b, tokens);
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_FALSE(la.empty());
  EXPECT_LT(rel_l2(la.data(), lb.data(), int64_t(la.size())), 1e-6);
}

TEST(HybridModelLayouts, ConditionalGenerationSkipsVisualAndMtp) {
  HybridSpec text;
  text.family = Family::kQwen3_5;
  HybridSpec conditional = text;
  conditional.conditional = true;  // model.language_model.*, plus model.visual.* and mtp.*
  expect_same_logits(text, conditional);
}

TEST(HybridModelLayouts, FusedGdnProjectionsAndFusedExpertsMatchSeparate) {
  HybridSpec qwen3_5_moe;  // separate in_proj_qkv/z/b/a, fused experts
  qwen3_5_moe.family = Family::kQwen3_5Moe;
  qwen3_5_moe.fused_experts = true;
  HybridSpec next;  // fused in_proj_qkvz/ba per key head, per-expert weights, all layers sparse
  next.family = Family::kQwen3Next;
  next.moe = true;
  expect_same_logits(qwen3_5_moe, next);
}

TEST(HybridModelLoad, MissingOrMisshapedTensorIsNamed) {
  HybridSpec spec;
  spec.family = Family::kQwen3_5;
  spec.conditional = true;
  {
    testing::TempDir dir{"vllm_hybrid_missing"};
    const std::string name = "model.language_model.layers.1.linear_attn.A_log";
    ASSERT_TRUE(HybridCheckpointWriter(spec).write(dir.path(), {name}).is_ok());
    auto model = load_model(dir.path(), LoadOptions{});
    ASSERT_FALSE(model.has_value());
    EXPECT_NE(model.status().message().find(name), std::string::npos) << model.status().message();
  }
  for (std::string name : {"model.language_model.layers.0.linear_attn.in_proj_z.weight",
                           "model.language_model.layers.2.self_attn.q_proj.weight"}) {
    testing::TempDir dir{"vllm_hybrid_shape"};
    ASSERT_TRUE(HybridCheckpointWriter(spec).write(dir.path(), {}, {name}).is_ok());
    auto model = load_model(dir.path(), LoadOptions{});
    ASSERT_FALSE(model.has_value());
    EXPECT_NE(model.status().message().find(name), std::string::npos) << model.status().message();
    EXPECT_NE(model.status().message().find("expected"), std::string::npos);
  }
  HybridSpec next;
  next.family = Family::kQwen3Next;
  next.moe = true;
  testing::TempDir dir{"vllm_hybrid_expert"};
  const std::string expert = "model.layers.2.mlp.experts.4.down_proj.weight";
  ASSERT_TRUE(HybridCheckpointWriter(next).write(dir.path(), {expert}).is_ok());
  auto model = load_model(dir.path(), LoadOptions{});
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.status().message().find(expert), std::string::npos) << model.status().message();
}

// Experts that disagree with config.json (count or shape, per-expert or fused layout) and a
// router config asking for more experts than there are fail at load, naming what is wrong.
TEST(HybridModelLoad, ExpertsDisagreeingWithConfigAreNamed) {
  HybridSpec moe;
  moe.family = Family::kQwen3_5Moe;
  auto expect_error = [](const HybridSpec& spec, const std::vector<std::string>& reshape,
                         const std::string& needle) {
    testing::TempDir dir{"vllm_hybrid_experts"};
    ASSERT_TRUE(HybridCheckpointWriter(spec).write(dir.path(), {}, reshape).is_ok());
    auto model = load_model(dir.path(), LoadOptions{});
    ASSERT_FALSE(model.has_value()) << needle;
    EXPECT_NE(model.status().message().find(needle), std::string::npos)
        << model.status().message();
  };
  HybridSpec more = moe;  // the checkpoint has 7 experts, config.json 6
  more.checkpoint_experts = 7;
  expect_error(more, {}, "model.layers.0.mlp.experts.6.gate_proj.weight");
  HybridSpec fewer = moe;
  fewer.checkpoint_experts = 5;
  expect_error(fewer, {}, "model.layers.0.mlp.experts.5.gate_proj.weight");
  HybridSpec fused_more = more;
  fused_more.fused_experts = true;
  expect_error(fused_more, {}, "model.layers.0.mlp.experts.gate_up_proj");
  expect_error(moe, {"model.layers.1.mlp.experts.3.up_proj.weight"},
               "model.layers.1.mlp.experts.3.up_proj.weight");
  HybridSpec fused = moe;
  fused.fused_experts = true;
  expect_error(fused, {"model.layers.2.mlp.experts.down_proj"},
               "model.layers.2.mlp.experts.down_proj");
  expect_error(moe, {"model.layers.3.mlp.gate.weight"}, "model.layers.3.mlp.gate.weight");

  testing::TempDir dir{"vllm_hybrid_top_k"};
  ASSERT_TRUE(HybridCheckpointWriter(moe).write(dir.path()).is_ok());
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir.path() / "config.json"));
  config["num_experts_per_tok"] = 7;
  std::ofstream(dir.path() / "config.json") << config.dump(2);
  auto model = load_model(dir.path(), LoadOptions{});
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.status().message().find("num_experts_per_tok (7) exceeds num_experts (6)"),
            std::string::npos)
      << model.status().message();
}

TEST(HybridModelCache, ShapesAndBadBatches) {
  testing::TempDir dir{"vllm_hybrid_cache"};
  HybridSpec spec;
  auto model = load(dir, spec);
  ASSERT_NE(model, nullptr);
  const testing::HybridDims d;
  ModelCache cache = new_cache(*model);
  ASSERT_EQ(cache.kv.size(), 1u);  // one full-attention layer
  ASSERT_EQ(cache.conv_state.size(), 3u);
  EXPECT_EQ(cache.conv_state[0].shape(),
            (Shape{kSlots, 2 * d.hk * d.dk + d.hv * d.dv, d.conv - 1}));
  EXPECT_EQ(cache.ssm_state[2].shape(), (Shape{kSlots, d.hv, d.dk, d.dv}));
  EXPECT_FALSE(model->create_cache(CacheConfig{8, kBlockSize, 0}).has_value());
  Seq seq{prompt(4, 0), {1}, static_cast<int32_t>(kSlots), 0};  // slot out of range
  ForwardBatch batch;
  batch.token_ids = i64(seq.tokens);
  batch.positions = i64({0, 1, 2, 3});
  batch.slot_mapping = i64({4, 5, 6, 7});
  batch.block_tables = Tensor::zeros({1, 1}, DType::kI32);
  batch.block_tables.data<int32_t>()[0] = 1;
  batch.query_start_loc = {0, 4};
  batch.seq_lens = {4};
  batch.state_indices = {static_cast<int32_t>(kSlots)};
  batch.logits_indices = {3};
  auto out = model->forward(batch, cache);
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.status().message().find("state_indices[0]"), std::string::npos);
  batch.state_indices = {};
  EXPECT_FALSE(model->forward(batch, cache).has_value());

  // Slot copies: every slot index checked, lists of one length, no copy onto itself.
  const std::vector<int32_t> one = {1}, two = {2}, pair = {1, 2}, bad = {int32_t{kSlots}};
  EXPECT_TRUE(copy_state_slots(cache, {}, {}).is_ok());
  EXPECT_EQ(copy_state_slots(cache, one, pair).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(copy_state_slots(cache, one, bad).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(copy_state_slots(cache, one, one).code(), ErrorCode::kInvalidArgument);
  cache.ssm_state[1].data<float>()[cache.ssm_state[1].numel() / kSlots + 5] = 7.5f;  // slot 1
  ASSERT_TRUE(copy_state_slots(cache, one, two).is_ok());
  EXPECT_EQ(cache.ssm_state[1].data<float>()[2 * cache.ssm_state[1].numel() / kSlots + 5], 7.5f);
  ModelCache no_gdn;
  EXPECT_EQ(copy_state_slots(no_gdn, one, two).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace test_qwen3_5_model
}  // namespace vllm

// The pieces tensor parallelism shards with, on one process: how dimensions split over the
// ranks (model/tensor_parallel.h), weight slices from a checkpoint, placed on the device and
// made up as dummy weights (model/weights.h), and the vocab-parallel embedding op.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>

#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "base/float_convert.h"
#include "loader/safetensors_writer.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "parallel/communicator.h"
#include "unit/temp_dir.h"

namespace vllm {
namespace test_tensor_parallel_layout {
namespace {

// Only a rank and a size: what the sharding helpers read.
class FakeCommunicator final : public parallel::Communicator {
 public:
  FakeCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Status all_reduce(const ExecContext&, Tensor&) override { return Status::ok(); }
  Status all_gather(const ExecContext&, const Tensor&, Tensor&) override { return Status::ok(); }
  Status barrier() override { return Status::ok(); }
  void abort(const std::string&) override {}
  Status health() const override { return Status::ok(); }

 private:
  int rank_, size_;
};

struct Rank {
  Rank(int rank, int size) : comm(rank, size) { ctx.comm = &comm; }
  FakeCommunicator comm;
  ExecContext ctx;
};

TEST(TensorParallelLayout, EvenSplitsAndTheirErrors) {
  auto heads = tp_split(Rank(1, 2).ctx, 6, "num_attention_heads");
  ASSERT_TRUE(heads.has_value());
  EXPECT_EQ(heads->begin, 3);
  EXPECT_EQ(heads->end, 6);
  auto bad = tp_split(Rank(0, 4).ctx, 6, "num_attention_heads");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().message(),
            "tensor parallelism: num_attention_heads (6) is not divisible by "
            "--tensor-parallel-size 4");
  EXPECT_EQ(tp_split(ExecContext{}, 7, "x")->end, 7);  // one rank: everything
}

TEST(TensorParallelLayout, KvHeadsSplitOrReplicate) {
  // 8 KV heads over 4 ranks: two each.
  for (int r = 0; r < 4; ++r) {
    auto kv = tp_kv_heads(Rank(r, 4).ctx, 8);
    ASSERT_TRUE(kv.has_value());
    EXPECT_EQ(kv->begin, 2 * r);
    EXPECT_EQ(kv->size(), 2);
  }
  // 2 KV heads over 4 ranks: ranks 0, 1 hold head 0 and ranks 2, 3 head 1 (vLLM's
  // tp_rank // num_kv_head_replicas), matching the query heads each rank holds.
  const int expected[] = {0, 0, 1, 1};
  for (int r = 0; r < 4; ++r) {
    auto kv = tp_kv_heads(Rank(r, 4).ctx, 2);
    ASSERT_TRUE(kv.has_value());
    EXPECT_EQ(kv->begin, expected[r]);
    EXPECT_EQ(kv->size(), 1);
  }
  auto bad = tp_kv_heads(Rank(0, 3).ctx, 2);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("num_key_value_heads (2)"), std::string::npos);
}

TEST(TensorParallelLayout, VocabularyPaddedThenSplit) {
  auto one = tp_vocab_shard(ExecContext{}, 509);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->rows, 509);  // unpadded on one rank
  EXPECT_EQ(one->present, 509);
  auto second = tp_vocab_shard(Rank(1, 2).ctx, 509);  // 512 rows, 256 per rank
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->begin, 256);
  EXPECT_EQ(second->rows, 256);
  EXPECT_EQ(second->present, 253);
  auto last = tp_vocab_shard(Rank(3, 4).ctx, 96);  // 128 rows: rank 3 holds padding only
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->begin, 96);
  EXPECT_EQ(last->present, 0);
  auto bad = tp_vocab_shard(Rank(0, 3).ctx, 65);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("vocab_size (65, padded to 128)"), std::string::npos);
}

TEST(TensorParallelLayout, VocabParallelEmbeddingZeroesOtherRanksTokens) {
  // Rows [4, 7) of a 10-token vocabulary, hidden size 2.
  Tensor table = Tensor::empty({3, 2}, DType::kF32);
  for (int i = 0; i < 6; ++i) table.data<float>()[i] = static_cast<float>(10 + i);
  Tensor ids = Tensor::empty({4}, DType::kI64);
  const int64_t tokens[] = {4, 9, 6, 0};
  std::copy(tokens, tokens + 4, ids.data<int64_t>());
  Tensor out = Tensor::empty({4, 2}, DType::kF32);
  ASSERT_TRUE(cpu::embedding_shard(ids, table, 4, 10, out).is_ok());
  const float want[] = {10, 11, 0, 0, 14, 15, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out.data<float>()[i], want[i]) << i;
  ids.data<int64_t>()[1] = 10;  // outside the vocabulary, not merely the shard
  EXPECT_FALSE(cpu::embedding_shard(ids, table, 4, 10, out).is_ok());
}

// Expert parallelism's op: experts split over "ranks" (stacks of a range of the experts),
// each computing only the pairs routed to its own, sum to the result of all of them.
TEST(TensorParallelLayout, ExpertRangesSumToAllExperts) {
  const int64_t tokens = 5, hidden = 8, inter = 6, experts = 5, k = 2;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
    return t;
  };
  Tensor x = random({tokens, hidden}), gate_up = random({experts, 2 * inter, hidden});
  Tensor down = random({experts, hidden, inter}), weights = random({tokens, k});
  Tensor ids = Tensor::empty({tokens, k}, DType::kI64);
  for (int64_t i = 0; i < tokens * k; ++i) ids.data<int64_t>()[i] = (3 * i + 1) % experts;
  Tensor scratch = Tensor::empty(
      {static_cast<int64_t>(cpu::moe_experts_scratch_bytes(tokens, k, hidden, inter, experts))},
      DType::kU8);
  Tensor all = Tensor::empty({tokens, hidden}, DType::kF32);
  ASSERT_TRUE(cpu::moe_experts_stacked(x, gate_up, down, weights, ids, scratch, all).is_ok());
  Tensor sum = Tensor::zeros({tokens, hidden}, DType::kF32);
  for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 3}, {3, 2}}) {
    Tensor part = Tensor::empty({tokens, hidden}, DType::kF32);
    ASSERT_TRUE(cpu::moe_experts_stacked(x, gate_up.slice(0, first, first + count),
                                         down.slice(0, first, first + count), weights, ids, scratch,
                                         part, first, experts)
                    .is_ok());
    for (int64_t i = 0; i < tokens * hidden; ++i) sum.data<float>()[i] += part.data<float>()[i];
  }
  for (int64_t i = 0; i < tokens * hidden; ++i) {
    EXPECT_NEAR(sum.data<float>()[i], all.data<float>()[i], 1e-5f) << i;
  }
  Tensor part = Tensor::empty({tokens, hidden}, DType::kF32);
  EXPECT_FALSE(cpu::moe_experts_stacked(x, gate_up.slice(0, 3, 5), down.slice(0, 3, 5), weights,
                                        ids, scratch, part, 4, experts)
                   .is_ok());  // [4, 6) is not a range of 5 experts
}

class WeightSlices : public ::testing::Test {
 protected:
  void SetUp() override {
    Tensor w = Tensor::empty({4, 6}, DType::kF32);
    for (int i = 0; i < 24; ++i) w.data<float>()[i] = static_cast<float>(i);
    Tensor b = Tensor::empty({2, 3, 4}, DType::kBF16);
    for (int i = 0; i < 24; ++i) b.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(i));
    ASSERT_TRUE(write_safetensors(dir_ / "model.safetensors", {{"w", w}, {"b", b}}).is_ok());
    auto checkpoint = Checkpoint::open(dir_.path());
    ASSERT_TRUE(checkpoint.has_value());
    weights_ = std::make_unique<CheckpointWeights>(std::move(*checkpoint));
  }
  testing::TempDir dir_{"weight_slices"};
  std::unique_ptr<CheckpointWeights> weights_;
};

TEST_F(WeightSlices, CheckpointSlicesAreViewsOfTheTensor) {
  auto rows = weights_->get_slice("w", {4, 6}, WeightSlice{0, 1, 3});
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(rows->shape(), (Shape{2, 6}));
  EXPECT_TRUE(rows->is_contiguous());
  EXPECT_EQ(rows->data<float>()[0], 6.0f);
  auto cols = weights_->get_slice("w", {4, 6}, WeightSlice{1, 2, 5});
  ASSERT_TRUE(cols.has_value());
  EXPECT_FALSE(cols->is_contiguous());  // a column shard of the mapping: strided
  auto bad = weights_->get_slice("w", {4, 6}, WeightSlice{1, 4, 7});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("'w'"), std::string::npos);
  EXPECT_FALSE(weights_->get_slice("w", {4, 7}, WeightSlice{0, 0, 1}).has_value());  // shape
}

TEST_F(WeightSlices, DeviceWeightsKeepOnlyTheShardContiguous) {
  auto runtime = DeviceRuntime::create(Device::cpu(), DType::kF32);
  ASSERT_TRUE(runtime.has_value());
  DeviceWeights placed(*weights_, (*runtime)->context());
  auto cols = placed.get_slice("w", {4, 6}, WeightSlice{1, 2, 5});
  ASSERT_TRUE(cols.has_value());
  ASSERT_TRUE(cols->is_contiguous());
  ASSERT_EQ(cols->shape(), (Shape{4, 3}));
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(cols->data<float>()[r * 3 + c], r * 6 + 2 + c);
  }
  // A 3-D slice along its middle dimension (an expert stack's intermediate features).
  auto mid = placed.get_slice("b", {2, 3, 4}, WeightSlice{1, 1, 3});
  ASSERT_TRUE(mid.has_value());
  ASSERT_TRUE(mid->is_contiguous());
  ASSERT_EQ(mid->shape(), (Shape{2, 2, 4}));
  const uint16_t* bits = mid->data<uint16_t>();
  EXPECT_EQ(bf16_to_f32(bits[0]), 4.0f);    // [0, 1, 0]
  EXPECT_EQ(bf16_to_f32(bits[8]), 16.0f);   // [1, 1, 0]
  EXPECT_EQ(bf16_to_f32(bits[15]), 23.0f);  // [1, 2, 3]
}

TEST(DummyWeights, SlicesHoldTheFullTensorsElements) {
  for (const WeightSlice& slice : {WeightSlice{0, 2, 5}, WeightSlice{1, 3, 7}}) {
    DummyWeights whole(DType::kF32, Device::cpu(), 9), shards(DType::kF32, Device::cpu(), 9);
    // Names are keyed by first use: both ask for "first" before "x".
    ASSERT_TRUE(whole.get("first", {3}).has_value());
    ASSERT_TRUE(shards.get_slice("first", {3}, WeightSlice{0, 1, 2}).has_value());
    auto full = whole.get("x", {6, 8});
    auto part = shards.get_slice("x", {6, 8}, slice);
    ASSERT_TRUE(full.has_value() && part.has_value());
    Tensor expected = full->slice(slice.dim, slice.begin, slice.end).clone();
    ASSERT_EQ(part->shape(), expected.shape());
    for (int64_t i = 0; i < expected.numel(); ++i) {
      ASSERT_EQ(part->data<float>()[i], expected.data<float>()[i]) << i;
    }
    EXPECT_EQ(shards.numel_by_name().at("x"), expected.numel());
  }
  DummyWeights three(DType::kBF16, Device::cpu(), 1), three_part(DType::kBF16, Device::cpu(), 1);
  auto full = three.get("e", {2, 4, 3});
  auto part = three_part.get_slice("e", {2, 4, 3}, WeightSlice{1, 1, 3});
  ASSERT_TRUE(full.has_value() && part.has_value());
  Tensor expected = full->slice(1, 1, 3).clone();
  for (int64_t i = 0; i < expected.numel(); ++i) {
    ASSERT_EQ(part->data<uint16_t>()[i], expected.data<uint16_t>()[i]) << i;
  }
}

}  // namespace
}  // namespace test_tensor_parallel_layout
}  // namespace vllm

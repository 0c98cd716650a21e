// The messages rank 0 sends its tensor-parallel workers (engine/step_message.h): every field
// survives the round trip, and bytes that are not a well-formed message are an error.
#include <gtest/gtest.h>

#include <string>

#include "engine/step_message.h"

namespace vllm::engine {
namespace test_step_message {
namespace {

Tensor i64(std::vector<int64_t> v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

StepMessage sample_step() {
  StepMessage m;
  m.kind = StepKind::kForward;
  ForwardBatch& b = m.forward.batch;
  b.token_ids = i64({5, 6, 7, 8});
  b.positions = i64({0, 1, 2, 9});
  b.slot_mapping = i64({16, 17, 18, 41});
  b.block_tables = Tensor::zeros({2, 3}, DType::kI32);
  b.block_tables.data<int32_t>()[4] = 2;
  b.query_start_loc = {0, 3, 4};
  b.seq_lens = {3, 10};
  b.state_indices = {1, 0};
  b.logits_indices = {2, 3};
  m.forward.restores.add(9, 1);
  m.forward.saves.add(0, 11);
  m.forward.saves.add(1, 12);
  return m;
}

std::vector<int64_t> values(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

TEST(StepMessage, ForwardStepRoundTrips) {
  const StepMessage m = sample_step();
  auto back = decode_step_message(encode_step_message(m));
  ASSERT_TRUE(back.has_value()) << back.status().to_string();
  const ForwardBatch& a = m.forward.batch;
  const ForwardBatch& b = back->forward.batch;
  EXPECT_EQ(back->kind, StepKind::kForward);
  EXPECT_EQ(values(b.token_ids), values(a.token_ids));
  EXPECT_EQ(values(b.positions), values(a.positions));
  EXPECT_EQ(values(b.slot_mapping), values(a.slot_mapping));
  ASSERT_EQ(b.block_tables.shape(), a.block_tables.shape());
  EXPECT_EQ(b.block_tables.data<int32_t>()[4], 2);
  EXPECT_EQ(b.query_start_loc, a.query_start_loc);
  EXPECT_EQ(b.seq_lens, a.seq_lens);
  EXPECT_EQ(b.state_indices, a.state_indices);
  EXPECT_EQ(b.logits_indices, a.logits_indices);
  EXPECT_EQ(back->forward.restores.src_slots, m.forward.restores.src_slots);
  EXPECT_EQ(back->forward.restores.dst_slots, m.forward.restores.dst_slots);
  EXPECT_EQ(back->forward.saves.src_slots, m.forward.saves.src_slots);
  EXPECT_EQ(back->forward.saves.dst_slots, m.forward.saves.dst_slots);
}

// Most steps copy no GDN state: the empty parts round-trip as empty (an empty vector's
// data() may be null, which the decoder must not hand to memcpy).
TEST(StepMessage, EmptyPartsRoundTrip) {
  StepMessage m = sample_step();
  m.forward.restores = {};
  m.forward.saves = {};
  auto back = decode_step_message(encode_step_message(m));
  ASSERT_TRUE(back.has_value()) << back.status().to_string();
  EXPECT_TRUE(back->forward.restores.src_slots.empty());
  EXPECT_TRUE(back->forward.restores.dst_slots.empty());
  EXPECT_TRUE(back->forward.saves.src_slots.empty());
  EXPECT_TRUE(back->forward.saves.dst_slots.empty());
  EXPECT_EQ(back->forward.batch.logits_indices, m.forward.batch.logits_indices);
}

TEST(StepMessage, CacheAndShutdownRoundTrip) {
  StepMessage m;
  m.kind = StepKind::kInitCache;
  m.cache = CacheConfig{123, 16, 9};
  auto back = decode_step_message(encode_step_message(m));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->kind, StepKind::kInitCache);
  EXPECT_EQ(back->cache.num_blocks, 123);
  EXPECT_EQ(back->cache.block_size, 16);
  EXPECT_EQ(back->cache.num_state_slots, 9);
  m.kind = StepKind::kShutdown;
  back = decode_step_message(encode_step_message(m));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->kind, StepKind::kShutdown);
}

TEST(StepMessage, MalformedBytesAreErrors) {
  const std::string good = encode_step_message(sample_step());
  // Every truncation, and one trailing byte too many.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(decode_step_message(std::string_view(good).substr(0, n)).has_value()) << n;
  }
  EXPECT_FALSE(decode_step_message(good + "x").has_value());
  std::string bad_magic = good;
  bad_magic[0] ^= 1;
  EXPECT_FALSE(decode_step_message(bad_magic).has_value());
  std::string bad_kind = good;
  bad_kind[8] = 42;
  EXPECT_FALSE(decode_step_message(bad_kind).has_value());
  // A batch whose parts disagree (a logits row past the tokens).
  StepMessage m = sample_step();
  m.forward.batch.logits_indices = {4};
  auto decoded = decode_step_message(encode_step_message(m));
  ASSERT_FALSE(decoded.has_value());
  EXPECT_NE(decoded.status().message().find("logits row"), std::string::npos);
  // A huge length never allocates: it is checked against the bytes left first.
  std::string huge = good;
  const size_t dims_at = 4 + 4 + 1 + 2;  // magic, version, kind, token_ids' rank and dtype
  for (size_t i = 0; i < 8; ++i) huge[dims_at + i] = '\x7f';
  EXPECT_FALSE(decode_step_message(huge).has_value());
}

}  // namespace
}  // namespace test_step_message
}  // namespace vllm::engine

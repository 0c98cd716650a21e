// Paged attention and reshape_and_cache against a dense causal attention computed in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"

namespace vllm {
namespace test_attention {
namespace {

struct Case {
  std::vector<int32_t> seq_lens;  // context after this step
  std::vector<int32_t> q_lens;    // queries this step (the context's last q_len tokens)
  int64_t q_heads, kv_heads, head_dim, block_size;
};

void fill_random(Tensor& t, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
}

void run_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t num_req = static_cast<int64_t>(c.seq_lens.size());
  int64_t max_blocks = 0, total_blocks = 0;
  for (int32_t len : c.seq_lens) {
    const int64_t blocks = (len + c.block_size - 1) / c.block_size;
    max_blocks = std::max(max_blocks, blocks);
    total_blocks += blocks;
  }
  const int64_t num_blocks = total_blocks + 3;  // a few unused blocks
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);  // scattered blocks catch indexing mistakes

  Tensor block_tables = Tensor::zeros({num_req, max_blocks}, DType::kI32);
  Tensor cache = Tensor::zeros({num_blocks, 2, c.block_size, c.kv_heads, c.head_dim}, DType::kF32);
  std::vector<Tensor> keys, values;
  size_t next = 0;
  for (int64_t r = 0; r < num_req; ++r) {
    const int64_t len = c.seq_lens[static_cast<size_t>(r)];
    for (int64_t b = 0; b < (len + c.block_size - 1) / c.block_size; ++b) {
      block_tables.data<int32_t>()[r * max_blocks + b] = ids[next++];
    }
    Tensor k = Tensor::empty({len, c.kv_heads, c.head_dim}, DType::kF32);
    Tensor v = Tensor::empty({len, c.kv_heads, c.head_dim}, DType::kF32);
    fill_random(k, rng);
    fill_random(v, rng);
    Tensor slots = Tensor::empty({len}, DType::kI64);
    for (int64_t i = 0; i < len; ++i) {
      slots.data<int64_t>()[i] =
          block_tables.data<int32_t>()[r * max_blocks + i / c.block_size] * c.block_size +
          i % c.block_size;
    }
    ASSERT_TRUE(cpu::reshape_and_cache(k, v, cache, slots).is_ok());
    keys.push_back(k);
    values.push_back(v);
  }

  std::vector<int32_t> qsl = {0};
  for (int32_t q : c.q_lens) qsl.push_back(qsl.back() + q);
  const int64_t tokens = qsl.back();
  Tensor q = Tensor::empty({tokens, c.q_heads, c.head_dim}, DType::kF32);
  fill_random(q, rng);
  Tensor out = Tensor::empty({tokens, c.q_heads, c.head_dim}, DType::kF32);
  std::fill_n(out.data<float>(), out.numel(), NAN);
  cpu::PagedAttentionParams params{qsl, c.seq_lens, 1.0f / std::sqrt(float(c.head_dim))};
  ASSERT_TRUE(cpu::paged_attention(q, cache, block_tables, params, out).is_ok());

  double err = 0, norm = 0;
  const int64_t group = c.q_heads / c.kv_heads;
  for (int64_t r = 0; r < num_req; ++r) {
    const int64_t q_len = c.q_lens[static_cast<size_t>(r)];
    const int64_t len = c.seq_lens[static_cast<size_t>(r)];
    const float* k = keys[static_cast<size_t>(r)].data<float>();
    const float* v = values[static_cast<size_t>(r)].data<float>();
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t t = qsl[static_cast<size_t>(r)] + i, pos = len - q_len + i;
      for (int64_t h = 0; h < c.q_heads; ++h) {
        const float* qv = q.data<float>() + (t * c.q_heads + h) * c.head_dim;
        const int64_t kh = h / group;
        std::vector<double> s(static_cast<size_t>(pos + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.head_dim; ++d)
            dot += double(qv[d]) * k[(j * c.kv_heads + kh) * c.head_dim + d];
          s[size_t(j)] = dot / std::sqrt(double(c.head_dim));
          mx = std::max(mx, s[size_t(j)]);
        }
        double denom = 0;
        for (double& x : s) denom += (x = std::exp(x - mx));
        for (int64_t d = 0; d < c.head_dim; ++d) {
          double ref = 0;
          for (int64_t j = 0; j <= pos; ++j)
            ref += s[size_t(j)] / denom * v[(j * c.kv_heads + kh) * c.head_dim + d];
          const double got = out.data<float>()[(t * c.q_heads + h) * c.head_dim + d];
          ASSERT_FALSE(std::isnan(got));
          err += (got - ref) * (got - ref);
          norm += ref * ref;
        }
      }
    }
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-6);
}

TEST(PagedAttention, SingleRequestPrefill) {
  run_case({{37}, {37}, 4, 2, 16, 8}, 1);
}
TEST(PagedAttention, DecodeBatchGqa) {
  run_case({{5, 70, 1, 16}, {1, 1, 1, 1}, 6, 2, 24, 16}, 2);
}
TEST(PagedAttention, MixedChunksOddSizes) {
  run_case({{33, 9, 100}, {7, 9, 1}, 3, 1, 20, 5}, 3);
  run_case({{129}, {64}, 8, 8, 64, 16}, 4);
}

TEST(PagedAttention, BadInputsAreErrors) {
  Tensor cache = Tensor::zeros({4, 2, 4, 2, 8}, DType::kF32);
  Tensor k = Tensor::zeros({2, 2, 8}, DType::kF32);
  Tensor slots = Tensor::empty({2}, DType::kI64);
  slots.data<int64_t>()[0] = 3;
  slots.data<int64_t>()[1] = 16;  // 4 blocks * 4 = 16 slots: one past the end
  Status s = cpu::reshape_and_cache(k, k, cache, slots);
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_NE(s.message().find("slot_mapping[1] = 16"), std::string::npos) << s.message();

  Tensor q = Tensor::zeros({1, 3, 8}, DType::kF32);  // 3 heads over 2 kv heads
  Tensor out = Tensor::zeros({1, 3, 8}, DType::kF32);
  Tensor tables = Tensor::zeros({1, 1}, DType::kI32);
  std::vector<int32_t> qsl = {0, 1}, lens = {1};
  EXPECT_EQ(cpu::paged_attention(q, cache, tables, {qsl, lens, 1.0f}, out).code(),
            ErrorCode::kInvalidArgument);

  Tensor q4 = Tensor::zeros({1, 4, 8}, DType::kF32);
  Tensor out4 = Tensor::zeros({1, 4, 8}, DType::kF32);
  tables.data<int32_t>()[0] = 9;  // not a block
  EXPECT_EQ(cpu::paged_attention(q4, cache, tables, {qsl, lens, 1.0f}, out4).code(),
            ErrorCode::kOutOfRange);
  std::vector<int32_t> too_long = {5};  // one block of 4 cannot hold 5 tokens
  tables.data<int32_t>()[0] = 0;
  EXPECT_EQ(cpu::paged_attention(q4, cache, tables, {qsl, too_long, 1.0f}, out4).code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace test_attention
}  // namespace vllm

// Sampler::take_draws: the per-row draws that the CPU and GPU paths of Sampler::sample
// share. Seeded rows read their own stream at "tokens generated so far", unseeded rows
// take engine-stream draws in row order, greedy rows none; sample() uses exactly these.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/sampler.h"

namespace vllm {
namespace test_sampler_draws {
namespace {

Tensor make_logits(const std::vector<std::vector<float>>& rows) {
  Tensor t = Tensor::empty(
      {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.at(0).size())}, DType::kF32);
  float* data = t.data<float>();
  for (const auto& row : rows) data = std::copy(row.begin(), row.end(), data);
  return t;
}

std::vector<float> flat_row(int salt) {
  std::vector<float> row(64);
  for (int i = 0; i < 64; ++i) row[i] = static_cast<float>(std::cos(0.29 * i + salt));
  return row;
}

TEST(SamplerDraws, SeededUnseededAndGreedyRows) {
  SamplingParams seeded;
  seeded.seed = 9;
  SamplingParams other_seed;
  other_seed.seed = 10;
  SamplingParams unseeded;
  SamplingParams greedy;
  greedy.temperature = 0.0;
  const std::vector<int32_t> three = {4, 5, 6};
  const std::vector<SamplingRequestState> states = {
      {&seeded, {}, three, {}}, {&unseeded, {}, {}, {}},   {&greedy, {}, three, {}},
      {&unseeded, {}, {}, {}},  {&other_seed, {}, {}, {}},
  };
  Sampler a(5), b(5), c(6);
  const std::vector<double> draws = a.take_draws(states);
  ASSERT_EQ(draws.size(), states.size());
  EXPECT_EQ(draws[0], uniform_from_stream(9, 3));  // position: tokens generated so far
  EXPECT_EQ(draws[2], 0.0);                        // greedy rows draw nothing
  EXPECT_EQ(draws[4], uniform_from_stream(10, 0));
  EXPECT_NE(draws[1], draws[3]);  // consecutive engine draws
  EXPECT_EQ(a.engine_draws(), 2u);

  // The same engine seed gives the same engine draws; another seed other ones; seeded rows
  // do not depend on the engine seed.
  const std::vector<double> same = b.take_draws(states);
  const std::vector<double> other = c.take_draws(states);
  EXPECT_EQ(same, draws);
  EXPECT_NE(other[1], draws[1]);
  EXPECT_EQ(other[0], draws[0]);
  // The next step continues the engine stream.
  const std::vector<double> next = a.take_draws(states);
  EXPECT_NE(next[1], draws[1]);
  EXPECT_EQ(next[0], draws[0]);
  EXPECT_EQ(a.engine_draws(), 4u);
}

TEST(SamplerDraws, SampleUsesTakeDraws) {
  SamplingParams seeded;
  seeded.seed = 3;
  SamplingParams unseeded;
  unseeded.temperature = 1.3;
  SamplingParams greedy;
  greedy.temperature = 0.0;
  const std::vector<int32_t> out = {1, 2};
  const std::vector<SamplingRequestState> states = {{&unseeded, {}, {}, {}},
                                                    {&seeded, {}, out, {}},
                                                    {&greedy, {}, {}, {}},
                                                    {&unseeded, {}, {}, {}}};
  const std::vector<std::vector<float>> rows = {flat_row(0), flat_row(1), flat_row(2), flat_row(3)};
  Sampler sampler(11), twin(11);
  for (int step = 0; step < 5; ++step) {
    const std::vector<double> draws = twin.take_draws(states);
    const std::vector<SampleResult> results = sampler.sample(make_logits(rows), states);
    ASSERT_EQ(results.size(), rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(results[r].token_id, sample_row(rows[r], states[r], draws[r]).token_id)
          << "step " << step << " row " << r;
    }
    EXPECT_EQ(sampler.engine_draws(), twin.engine_draws());
  }
}

}  // namespace
}  // namespace test_sampler_draws
}  // namespace vllm

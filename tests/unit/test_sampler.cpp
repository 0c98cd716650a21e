// Sampler: each step on hand-computed logits (penalties, bias, min_tokens, min-p, top-k,
// top-p boundaries, logprobs and ranks), distribution tests on fixed logits, and seeded
// reproducibility across batch compositions and row orders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "engine/sampler.h"

namespace vllm {
namespace test_sampler {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Tensor make_logits(const std::vector<std::vector<float>>& rows) {
  Tensor t = Tensor::empty(
      {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.at(0).size())}, DType::kF32);
  float* data = t.data<float>();
  for (const auto& row : rows) data = std::copy(row.begin(), row.end(), data);
  return t;
}

std::vector<double> softmax(const std::vector<float>& logits) {
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += p[i] = std::exp(double(logits[i]) - m);
  for (double& v : p) v /= z;
  return p;
}

// Draws `n` tokens with the full per-row pipeline and checks each token's frequency
// against `expected` within 4.5 standard errors; tokens with probability 0 never appear.
void expect_distribution(const std::vector<float>& logits, const SamplingParams& params,
                         const std::vector<double>& expected, int n = 20000) {
  SamplingRequestState state;
  state.params = &params;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    ++counts[sample_row(logits, state, uniform_from_stream(99, i)).token_id];
  }
  for (size_t t = 0; t < logits.size(); ++t) {
    if (expected[t] == 0.0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " must never be sampled";
      continue;
    }
    const double freq = double(counts[t]) / n;
    const double se = std::sqrt(expected[t] * (1 - expected[t]) / n);
    EXPECT_NEAR(freq, expected[t], 4.5 * se + 1e-9) << "token " << t;
  }
}

// softmax(logits / temperature) restricted to `kept`, renormalised.
std::vector<double> renormalised(const std::vector<float>& logits, const std::vector<int>& kept,
                                 double temperature = 1.0) {
  std::vector<float> scaled(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) scaled[i] = float(logits[i] / temperature);
  std::vector<double> p = softmax(scaled);
  std::vector<double> out(logits.size(), 0.0);
  double z = 0;
  for (int k : kept) z += p[k];
  for (int k : kept) out[k] = p[k] / z;
  return out;
}

const std::vector<float> kEight = {1.0f, 2.0f, 0.5f, 3.0f, 2.5f, -1.0f, 0.0f, 1.5f};

TEST(SamplingOps, ArgmaxTiesGoToLowestId) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 2, 3}), 1);
  EXPECT_EQ(argmax(std::vector<float>{kNegInf, kNegInf, 0.5f}), 2);
  EXPECT_EQ(argmax(std::vector<float>{7}), 0);
}

TEST(Sampler, GreedyIsArgmaxOfProcessedLogitsAndIgnoresFilters) {
  SamplingParams p;
  p.temperature = 0.0;
  p.top_k = 1;  // ignored by greedy rows, as vLLM resets them
  p.top_p = 1e-3;
  SamplingRequestState s{&p, {}, {}, {}};
  for (double u : {0.0, 0.3, 0.999}) {
    EXPECT_EQ(sample_row(std::vector<float>{0.5f, 4.0f, 4.0f, -2.0f}, s, u).token_id, 1);
  }
}

TEST(SamplingOps, TemperatureDividesLogits) {
  std::vector<float> logits = {1.0f, -2.0f, 0.5f};
  apply_temperature(logits, 0.5);
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -4.0f, 1.0f}));
}

TEST(Sampler, TemperatureScalesTheDistribution) {
  SamplingParams p;
  p.temperature = 0.5;
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  expect_distribution(kEight, p, renormalised(kEight, all, 0.5));
  p.temperature = 1.7;
  expect_distribution(kEight, p, renormalised(kEight, all, 1.7));
}

TEST(SamplingOps, TopKKeepsTheKLargestAndTiesAtTheThreshold) {
  std::vector<float> logits = kEight;
  apply_top_k(logits, 3);
  std::vector<float> expected(8, kNegInf);
  expected[3] = 3.0f, expected[4] = 2.5f, expected[1] = 2.0f;
  EXPECT_EQ(logits, expected);

  std::vector<float> ties = {1.0f, 0.0f, 1.0f, 1.0f, 0.5f};
  apply_top_k(ties, 2);  // the 2nd largest is 1.0: all three 1.0s stay
  EXPECT_EQ(ties, (std::vector<float>{1.0f, kNegInf, 1.0f, 1.0f, kNegInf}));

  std::vector<float> untouched = kEight;
  apply_top_k(untouched, 0);
  apply_top_k(untouched, 8);
  EXPECT_EQ(untouched, kEight);
}

TEST(Sampler, TopKDistribution) {
  SamplingParams p;
  p.top_k = 3;
  expect_distribution(kEight, p, renormalised(kEight, {1, 3, 4}));
  p.top_k = -1;  // disabled
  expect_distribution(kEight, p, renormalised(kEight, {0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(SamplingOps, TopPKeepsTheSmallestSetReachingP) {
  // Four equal logits: probabilities 0.25 exactly; equal ones are ordered by id.
  auto kept_by = [](double p) {
    std::vector<float> logits = {0, 0, 0, 0};
    apply_top_p(logits, p);
    return static_cast<int>(std::count(logits.begin(), logits.end(), 0.0f));
  };
  EXPECT_EQ(kept_by(0.25), 1);  // mass exactly p after one token: the next is dropped
  EXPECT_EQ(kept_by(0.26), 2);
  EXPECT_EQ(kept_by(0.5), 2);
  EXPECT_EQ(kept_by(0.5000001), 3);
  EXPECT_EQ(kept_by(1e-9), 1);  // the most likely token always stays
  EXPECT_EQ(kept_by(1.0), 4);

  std::vector<float> logits = {0, 0, 0, 0};
  apply_top_p(logits, 0.5);
  EXPECT_EQ(logits, (std::vector<float>{0, 0, kNegInf, kNegInf}));
}

TEST(SamplingOps, TopPMatchesAFullSortOnALargeVocab) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (double p : {0.1, 0.5, 0.9, 0.99}) {
    std::vector<float> logits(3000);
    for (float& v : logits) v = normal(rng);
    std::vector<float> filtered = logits;
    apply_top_p(filtered, p);
    // Reference: sort all, keep while the mass before the token is below p.
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    std::vector<double> probs = softmax(logits);
    double before = 0;
    size_t expected_kept = 0;
    for (int id : order) {
      if (before >= p) break;
      before += probs[id];
      ++expected_kept;
    }
    size_t kept = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (filtered[i] != kNegInf) {
        ++kept;
        EXPECT_EQ(filtered[i], logits[i]);
      }
    }
    EXPECT_EQ(kept, expected_kept) << "p = " << p;
    EXPECT_GT(kept, 64u * (p > 0.9));  // the larger cases go past the first partial sort
    // Kept tokens are exactly the largest ones.
    for (size_t r = 0; r < order.size(); ++r) {
      EXPECT_EQ(filtered[order[r]] != kNegInf, r < expected_kept);
    }
  }
}

TEST(Sampler, TopPDistribution) {
  // Probabilities 1/2, 1/4, 1/8, 1/16, 1/16: top_p 0.7 keeps the first two.
  const std::vector<float> logits = {std::log(8.0f), std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplingParams p;
  p.top_p = 0.7;
  expect_distribution(logits, p, renormalised(logits, {0, 1}));
  p.top_p = 0.8;
  expect_distribution(logits, p, renormalised(logits, {0, 1, 2}));
}

TEST(Sampler, MinPDropsTokensBelowTheScaledMax) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: min_p 0.2 drops what is below 0.1.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  std::vector<float> filtered = logits;
  apply_min_p(filtered, 0.2);
  EXPECT_EQ(filtered[3], kNegInf);
  EXPECT_EQ(filtered[2], logits[2]);
  SamplingParams p;
  p.min_p = 0.2;
  expect_distribution(logits, p, renormalised(logits, {0, 1, 2}));
  p.min_p = 0.5;  // threshold 0.25: only 0.5 and 0.3 stay
  expect_distribution(logits, p, renormalised(logits, {0, 1}));
}

TEST(SamplingOps, PenaltiesOnHandComputedLogits) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<int32_t> prompt = {0, 1};
  const std::vector<int32_t> output = {3, 3, 4};
  // Repetition 2 over prompt + output: 2/2, -1*2, (2 unseen), 3/2, -2*2. Then frequency
  // 0.5 per output occurrence and presence 0.25 per output token: 3 -> 1.5 - 1 - 0.25,
  // 4 -> -4 - 0.5 - 0.25. Prompt-only tokens get no frequency / presence penalty.
  apply_penalties(logits, prompt, output, Penalties{0.25, 0.5, 2.0});
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.5f, 0.25f, -4.75f}));

  std::vector<float> negative_frequency = {0.0f, 0.0f};
  apply_penalties(negative_frequency, {}, std::vector<int32_t>{1, 1, 1},
                  Penalties{-0.5, -1.0, 1.0});  // negative values encourage repeats
  EXPECT_EQ(negative_frequency, (std::vector<float>{0.0f, 3.5f}));
}

TEST(Sampler, PenaltiesChangeTheGreedyChoice) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1.5;
  const std::vector<int32_t> prompt = {0};
  SamplingRequestState s{&p, prompt, {}, {}};
  // 3.0 / 1.5 = 2.0 < 2.5: token 1 wins.
  EXPECT_EQ(sample_row(std::vector<float>{3.0f, 2.5f}, s, 0).token_id, 1);
  p.repetition_penalty = 1.0;
  p.presence_penalty = 0.4;
  const std::vector<int32_t> output = {0};
  s.output_token_ids = output;
  EXPECT_EQ(sample_row(std::vector<float>{3.0f, 2.7f}, s, 0).token_id, 1);
  p.presence_penalty = 0.2;
  EXPECT_EQ(sample_row(std::vector<float>{3.0f, 2.7f}, s, 0).token_id, 0);
}

TEST(Sampler, LogitBias) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  apply_logit_bias(logits, {{0, 5.0f}, {2, -100.0f}});
  EXPECT_EQ(logits, (std::vector<float>{6.0f, 2.0f, -97.0f}));

  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{0, 5.0f}};
  SamplingRequestState s{&p, {}, {}, {}};
  EXPECT_EQ(sample_row(std::vector<float>{1, 2, 3}, s, 0).token_id, 0);
  p.temperature = 1.0;  // a -100 bias makes a token practically impossible
  p.logit_bias = {{2, -100.0f}, {1, -100.0f}};
  expect_distribution({1, 2, 3}, p, {1.0, 0.0, 0.0}, 2000);
}

TEST(Sampler, MinTokensMasksEosAndStopIdsUntilReached) {
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 3;
  p.stop_token_ids = {1};
  const std::vector<int32_t> eos = {2};
  const std::vector<float> logits = {0.0f, 4.0f, 5.0f, 3.0f};
  std::vector<int32_t> output = {7};
  SamplingRequestState s{&p, {}, output, eos};
  EXPECT_EQ(sample_row(logits, s, 0).token_id, 3);  // EOS (2) and stop id (1) masked
  p.ignore_eos = true;                              // vLLM masks EOS under ignore_eos too
  EXPECT_EQ(sample_row(logits, s, 0).token_id, 3);
  output = {7, 8, 9};
  s.output_token_ids = output;
  EXPECT_EQ(sample_row(logits, s, 0).token_id, 2);  // min_tokens reached
  // The returned logprob is still the raw model's.
  SampleResult masked_eos = sample_row(logits, SamplingRequestState{&p, {}, {}, eos}, 0);
  EXPECT_EQ(masked_eos.token_id, 3);
  EXPECT_EQ(masked_eos.rank, 3);
}

TEST(Sampler, LogprobsAndRanksOnHandComputedLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  SampleResult r = sample_row(logits, SamplingRequestState{&p, {}, {}, {}}, 0);
  EXPECT_EQ(r.token_id, 1);
  EXPECT_NEAR(r.logprob, 3.0 - lse, 1e-6);
  EXPECT_EQ(r.rank, 2);  // vLLM counts tokens with logprob >= the chosen one (ties included)
  EXPECT_EQ(r.top_token_ids, (std::vector<int32_t>{1, 3}));
  ASSERT_EQ(r.top_logprobs.size(), 2u);
  EXPECT_NEAR(r.top_logprobs[0], 3.0 - lse, 1e-6);
  EXPECT_NEAR(r.top_logprobs[1], 3.0 - lse, 1e-6);

  // Logprobs are of the raw logits, not of the biased ones that picked the token.
  p.logit_bias = {{0, 10.0f}};
  p.logprobs = 0;
  r = sample_row(logits, SamplingRequestState{&p, {}, {}, {}}, 0);
  EXPECT_EQ(r.token_id, 0);
  EXPECT_NEAR(r.logprob, 1.0 - lse, 1e-6);
  EXPECT_EQ(r.rank, 4);
  EXPECT_TRUE(r.top_token_ids.empty());

  TokenLogprobs all = gather_logprobs(logits, 2, -1);  // -1: the whole vocabulary, sorted
  EXPECT_EQ(all.top_token_ids, (std::vector<int32_t>{1, 3, 2, 0}));
  EXPECT_EQ(all.rank, 3);
  double total = 0;
  for (float lp : all.top_logprobs) total += std::exp(lp);
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(Sampler, PromptLogprobs) {
  Tensor logits = make_logits({{0.0f, 1.0f, 2.0f}, {5.0f, 0.0f, 0.0f}});
  const std::vector<int32_t> next = {0, 0};
  std::vector<TokenLogprobs> out = compute_prompt_logprobs(logits, next, 1);
  ASSERT_EQ(out.size(), 2u);
  const double lse0 = std::log(1 + std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(out[0].logprob, -lse0, 1e-6);
  EXPECT_EQ(out[0].rank, 3);
  EXPECT_EQ(out[0].top_token_ids, std::vector<int32_t>{2});
  EXPECT_NEAR(out[0].top_logprobs[0], 2.0 - lse0, 1e-6);
  EXPECT_EQ(out[1].rank, 1);
  EXPECT_EQ(out[1].top_token_ids, std::vector<int32_t>{0});
}

// A flat-ish distribution over 50 tokens where every draw matters.
std::vector<float> row_for(int step, int salt) {
  std::vector<float> row(50);
  for (int i = 0; i < 50; ++i) row[i] = float(std::sin(0.37 * i + 0.11 * step + salt));
  return row;
}

TEST(Sampler, SeededRequestsIgnoreBatchCompositionAndOrder) {
  SamplingParams seeded;
  seeded.seed = 42;
  seeded.top_k = 30;
  SamplingParams other_seed;
  other_seed.seed = 43;
  SamplingParams unseeded;
  unseeded.temperature = 0.8;
  constexpr int kSteps = 40;

  // Generates kSteps tokens for the seeded request, placed at `position` in a batch of
  // `batch` rows whose other rows use `filler` params.
  auto generate = [&](int batch, int position, const SamplingParams& filler, uint64_t seed) {
    Sampler sampler(seed);
    std::vector<int32_t> out;
    std::vector<std::vector<int32_t>> filler_out(batch);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<float>> rows;
      std::vector<SamplingRequestState> states;
      for (int r = 0; r < batch; ++r) {
        const bool mine = r == position;
        rows.push_back(row_for(step, mine ? 0 : r + 1));
        states.push_back(mine ? SamplingRequestState{&seeded, {}, out, {}}
                              : SamplingRequestState{&filler, {}, filler_out[r], {}});
      }
      std::vector<SampleResult> results = sampler.sample(make_logits(rows), states);
      for (int r = 0; r < batch; ++r) {
        (r == position ? out : filler_out[r]).push_back(results[r].token_id);
      }
    }
    return out;
  };
  const std::vector<int32_t> alone = generate(1, 0, unseeded, 0);
  EXPECT_EQ(generate(3, 2, unseeded, 0), alone);
  EXPECT_EQ(generate(5, 0, other_seed, 1), alone);
  EXPECT_EQ(generate(4, 1, unseeded, 12345), alone);
  // Another seed gives another sequence.
  seeded.seed = 7;
  EXPECT_NE(generate(1, 0, unseeded, 0), alone);
}

TEST(Sampler, UnseededRowsUseTheEngineStream) {
  SamplingParams p;
  SamplingParams greedy;
  greedy.temperature = 0;
  const std::vector<SamplingRequestState> states = {
      {&p, {}, {}, {}}, {&greedy, {}, {}, {}}, {&p, {}, {}, {}}};
  Tensor logits = make_logits({row_for(0, 0), row_for(0, 0), row_for(0, 0)});
  Sampler a(1), b(1), c(2);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 20; ++i) {
    for (const auto& r : a.sample(logits, states)) ta.push_back(r.token_id);
    for (const auto& r : b.sample(logits, states)) tb.push_back(r.token_id);
    for (const auto& r : c.sample(logits, states)) tc.push_back(r.token_id);
  }
  EXPECT_EQ(a.engine_draws(), 40u);  // greedy rows draw nothing
  EXPECT_EQ(ta, tb);                 // same engine seed, same tokens
  EXPECT_NE(ta, tc);
}

TEST(Sampler, StridedLogitsAndParallelRowsMatchSingleRows) {
  constexpr int kRows = 6, kVocab = 40;
  Tensor wide = Tensor::empty({kRows, kVocab + 3}, DType::kF32);
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> row = row_for(r, r);
    row.resize(kVocab);
    std::copy(row.begin(), row.end(), wide.data<float>() + r * (kVocab + 3));
    rows.push_back(row);
  }
  Tensor logits = wide.slice(1, 0, kVocab);
  ASSERT_EQ(logits.stride(0), kVocab + 3);
  std::vector<SamplingParams> params(kRows);
  std::vector<SamplingRequestState> states;
  for (int r = 0; r < kRows; ++r) {
    params[r].seed = 100 + r;
    params[r].logprobs = 3;
    params[r].temperature = r % 2 ? 0.0 : 1.0;
  }
  for (int r = 0; r < kRows; ++r) states.push_back({&params[r], {}, {}, {}});
  ThreadPool pool(3);
  Sampler sampler(0, &pool);
  std::vector<SampleResult> batch = sampler.sample(logits, states);
  ASSERT_EQ(batch.size(), size_t(kRows));
  for (int r = 0; r < kRows; ++r) {
    SampleResult single = sample_row(rows[r], states[r], uniform_from_stream(100 + r, 0));
    EXPECT_EQ(batch[r].token_id, single.token_id) << r;
    EXPECT_EQ(batch[r].logprob, single.logprob) << r;
    EXPECT_EQ(batch[r].top_token_ids, single.top_token_ids) << r;
  }
}

TEST(SamplingOps, UniformStreamIsDeterministicAndUniform) {
  EXPECT_EQ(uniform_from_stream(5, 9), uniform_from_stream(5, 9));
  EXPECT_NE(uniform_from_stream(5, 9), uniform_from_stream(5, 10));
  EXPECT_NE(uniform_from_stream(5, 9), uniform_from_stream(6, 9));
  double sum = 0;
  int low = 0;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    const double u = uniform_from_stream(123, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    low += u < 0.1;
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 4.5 * std::sqrt(1.0 / 12 / kDraws));
  EXPECT_NEAR(low / double(kDraws), 0.1, 4.5 * std::sqrt(0.09 / kDraws));
}

TEST(SamplingOps, SampleFromLogitsNeverDrawsMaskedTokens) {
  const std::vector<float> logits = {kNegInf, 0.0f, kNegInf, 0.0f, kNegInf};
  EXPECT_EQ(sample_from_logits(logits, 0.0), 1);
  EXPECT_EQ(sample_from_logits(logits, 0.4999), 1);
  EXPECT_EQ(sample_from_logits(logits, 0.5), 3);
  EXPECT_EQ(sample_from_logits(logits, std::nextafter(1.0, 0.0)), 3);
}

}  // namespace
}  // namespace test_sampler
}  // namespace vllm

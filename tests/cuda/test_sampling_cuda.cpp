// Backend parity for the sampler: cuda::DeviceSampler, and the engine's Sampler on CUDA
// logits, against the CPU sampler on the same rows and the same draws.
//
// What must agree exactly: greedy ids; the kept set after min_p / top_k / top_p (compared
// through its size, as both sides keep a prefix of the (logit desc, id asc) order); the
// sampled id when u is not near a CDF edge; ranks; top-N ids. Logprobs within 1e-4. top_p
// values and draws are chosen in the middle of their gaps (sampling_reference.h), since the
// device sums fixed-point weights and the CPU doubles. Without a GPU every test but the
// argument check is skipped. bench_sampling_cuda.cpp holds the timing mode (VLLM_BENCH=1).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling.cuh"
#include "cuda_test_util.h"
#include "engine/sampler.h"
#include "engine/sampling_ops.h"
#include "sampling_reference.h"

namespace vllm {
namespace {

using cuda_test::Case;
using cuda_test::DeviceCase;
using cuda_test::kNegInf;

constexpr double kLogprobTolerance = 1e-4;

class SamplingCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA sampler tests skipped";
    Status status = cuda::init();
    ASSERT_TRUE(status.is_ok()) << status.to_string();
    auto sampler = cuda::DeviceSampler::create(Device::cuda(), 8, 1000);
    ASSERT_TRUE(sampler) << sampler.status().to_string();
    sampler_ = std::move(sampler).value();
  }

  // Samples `cases` (one per row of host_logits) on the device with draws `u`.
  std::vector<cuda::SampledToken> run_device(const Tensor& host_logits,
                                             const std::vector<Case>& cases,
                                             const std::vector<double>& u) {
    std::vector<DeviceCase> device(cases.size());
    std::vector<cuda::SamplingRow> rows;
    for (size_t r = 0; r < cases.size(); ++r) device[r] = cuda_test::device_case(cases[r], u[r]);
    for (DeviceCase& d : device) {
      d.bind();
      rows.push_back(d.row);
    }
    auto logits = cuda::copy_to_device(host_logits);
    EXPECT_TRUE(logits) << logits.status().to_string();
    std::vector<cuda::SampledToken> out;
    if (!logits) return out;
    Status status = sampler_->sample(*logits, rows, out);
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    return out;
  }

  void expect_rows_match_cpu(const Tensor& logits, const std::vector<Case>& cases,
                             const std::vector<double>& u);

  std::unique_ptr<cuda::DeviceSampler> sampler_;
  std::mt19937 rng_{20250611};
};

std::span<const float> row_of(const Tensor& t, int64_t r) {
  return {t.data<float>() + r * t.stride(0), static_cast<size_t>(t.size(1))};
}

// Random logits rows: normal with a per-row scale, some rows with a few strong peaks.
Tensor random_logits(int64_t rows, int64_t vocab, std::mt19937& rng) {
  Tensor t = Tensor::empty({rows, vocab}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::array<float, 4>{0.5f, 1.5f, 3.0f, 5.0f}[r % 4];
    std::normal_distribution<float> normal(-1.0f, scale);
    float* row = t.data<float>() + r * vocab;
    for (int64_t i = 0; i < vocab; ++i) row[i] = normal(rng);
    if (r % 3 == 2) {
      std::uniform_int_distribution<int64_t> any(0, vocab - 1);
      for (int k = 0; k < 4; ++k) row[any(rng)] += 6.0f * scale;
    }
  }
  return t;
}

// Compares one device result with the CPU's sample_row on the same row and draw.
void expect_matches_cpu(const cuda::SampledToken& got, std::span<const float> raw, const Case& c,
                        double u, bool compare_kept) {
  const SampleResult want = sample_row(raw, c.state(), u);
  EXPECT_EQ(got.token_id, want.token_id);
  if (std::isnan(want.logprob)) {
    EXPECT_TRUE(std::isnan(got.logprob)) << got.logprob;  // a row with nothing drawable
  } else {
    EXPECT_NEAR(got.logprob, want.logprob, kLogprobTolerance);
  }
  if (got.token_id == want.token_id) {
    EXPECT_EQ(got.rank, want.rank);
  }
  EXPECT_EQ(got.top_token_ids, want.top_token_ids);
  ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
  for (size_t j = 0; j < want.top_logprobs.size(); ++j) {
    EXPECT_NEAR(got.top_logprobs[j], want.top_logprobs[j], kLogprobTolerance) << "top " << j;
  }
  if (c.params.is_greedy()) {
    EXPECT_EQ(got.num_kept, 1);
  } else if (compare_kept) {
    std::vector<float> final_logits =
        cuda_test::cpu_before_top_p(cuda_test::cpu_edited(raw, c), c.params);
    apply_top_p(final_logits, c.params.top_p);
    EXPECT_EQ(static_cast<size_t>(got.num_kept), cuda_test::count_kept(final_logits));
  }
}

std::string describe(const SamplingParams& p) {
  return fmt::format(
      "greedy={} t={} top_k={} top_p={} min_p={} logprobs={} rep={} freq={} pres={} "
      "bias={} min_tokens={}",
      p.is_greedy(), p.temperature, p.top_k, p.top_p, p.min_p, p.logprobs.value_or(0),
      p.repetition_penalty, p.frequency_penalty, p.presence_penalty, p.logit_bias.size(),
      p.min_tokens);
}

// Random filter settings; top_p, when on, keeps a chosen number of the survivors with a
// clear gap on both sides, and u falls inside the interval of a likely token.
Case random_case(std::span<const float> raw, std::mt19937& rng, double* u) {
  Case c;
  SamplingParams& p = c.params;
  auto pick = [&](auto... values) {
    const std::array<std::common_type_t<decltype(values)...>, sizeof...(values)> all{values...};
    return all[std::uniform_int_distribution<size_t>(0, all.size() - 1)(rng)];
  };
  p.temperature = pick(0.0, 0.3, 0.7, 1.0, 1.0, 1.5);
  p.top_k = pick(0, 0, 1, 3, 20, 300, 3000, 6000);
  p.min_p = pick(0.0, 0.0, 0.02, 0.2);
  p.logprobs = pick(0, 0, 1, 5, 20);
  if (!p.is_greedy() && pick(0, 1, 1) == 1) {
    const std::vector<float> before = cuda_test::cpu_before_top_p(cuda_test::cpu_edited(raw, c), p);
    const size_t survivors = cuda_test::count_kept(before);
    for (int attempt = 0; attempt < 20 && survivors > 1; ++attempt) {
      // Mostly near the top; sometimes deep into the tail.
      const size_t limit = pick(0, 1) ? std::min<size_t>(survivors - 1, 400) : survivors - 1;
      const size_t keep = std::uniform_int_distribution<size_t>(1, limit)(rng);
      const double top_p = cuda_test::top_p_keeping(before, keep, 2e-6);
      if (top_p > 0.0) {
        p.top_p = top_p;
        break;
      }
    }
  }
  *u = 0.0;
  if (!p.is_greedy()) {
    std::vector<float> final_logits = cuda_test::cpu_before_top_p(cuda_test::cpu_edited(raw, c), p);
    apply_top_p(final_logits, p.top_p);
    *u = cuda_test::u_inside(final_logits, rng, 1e-4);
  }
  return c;
}

// Samples every row of `logits` on the device, each against the CPU's sample_row.
void SamplingCuda::expect_rows_match_cpu(const Tensor& logits, const std::vector<Case>& cases,
                                         const std::vector<double>& u) {
  const std::vector<cuda::SampledToken> got = run_device(logits, cases, u);
  ASSERT_EQ(got.size(), cases.size());
  for (size_t r = 0; r < cases.size(); ++r) {
    SCOPED_TRACE(fmt::format("vocab {} row {}: {} u={}", logits.size(1), r,
                             describe(cases[r].params), u[r]));
    expect_matches_cpu(got[r], row_of(logits, static_cast<int64_t>(r)), cases[r], u[r], true);
  }
}

TEST_F(SamplingCuda, MatchesCpuOnRandomRows) {
  for (int64_t vocab : {151936, 50257, 1000, 7}) {
    const int64_t rows = vocab > 50000 ? 32 : 64;
    Tensor logits = random_logits(rows, vocab, rng_);
    std::vector<Case> cases;
    std::vector<double> u(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      cases.push_back(random_case(row_of(logits, r), rng_, &u[static_cast<size_t>(r)]));
    }
    expect_rows_match_cpu(logits, cases, u);
  }
}

// Plain rows (no edits, filters or top-N logprobs) run their passes over the row in segment
// blocks; in a batch beside rows that take the one-block path, on vocabularies from 3 ids
// (most segments empty) to Qwen3.5's 248,320, with ties, -inf runs and an all -inf row.
TEST_F(SamplingCuda, PlainRowsMatchCpu) {
  for (int64_t vocab : {int64_t{248320}, int64_t{151936}, int64_t{1000}, int64_t{7}, int64_t{3}}) {
    const int64_t rows = 24;
    Tensor logits = random_logits(rows, vocab, rng_);
    float* data = logits.data<float>();
    for (int64_t i = 0; i < vocab; ++i) {
      data[1 * vocab + i] = static_cast<float>(i % 4);                     // ties at the top
      data[2 * vocab + i] = i % 3 == 0 ? -INFINITY : data[2 * vocab + i];  // -inf runs
      data[3 * vocab + i] = -INFINITY;                                     // nothing drawable
    }
    std::vector<Case> cases(static_cast<size_t>(rows));
    std::vector<double> u(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      SamplingParams& p = cases[static_cast<size_t>(r)].params;
      p.temperature = r % 4 == 0 ? 0.0 : (r % 4 == 1 ? 0.7 : 1.0);
      if (r % 6 == 5) p.logprobs = 2;  // not plain: the one-block path in the same batch
      if (r % 8 == 7) p.top_k = 5;     // not plain either
      if (!p.is_greedy()) {
        std::vector<float> final_logits = cuda_test::cpu_before_top_p(
            cuda_test::cpu_edited(row_of(logits, r), cases[static_cast<size_t>(r)]), p);
        u[static_cast<size_t>(r)] = r == 3 ? 0.5 : cuda_test::u_inside(final_logits, rng_, 1e-4);
      }
    }
    u[5] = 0.0;  // the very first drawable token
    expect_rows_match_cpu(logits, cases, u);
  }
}

// A batch that fills up one row at a time (requests joining a running batch) grows the
// row buffers each step; the edit buffer must not grow with them (it once doubled per
// growth, to a 17 GB allocation at 256 rows).
TEST_F(SamplingCuda, GrowingBatchKeepsBuffersBounded) {
  const int64_t vocab = 1000;
  auto created = cuda::DeviceSampler::create(Device::cuda(), 1, static_cast<int32_t>(vocab));
  ASSERT_TRUE(created.has_value()) << created.status().to_string();
  std::unique_ptr<cuda::DeviceSampler> sampler = std::move(created).value();
  for (int64_t rows = 1; rows <= 300; ++rows) {
    Tensor logits = random_logits(rows, vocab, rng_);
    auto device_logits = cuda::copy_to_device(logits);
    ASSERT_TRUE(device_logits.has_value());
    std::vector<cuda::SamplingRow> params(static_cast<size_t>(rows));
    for (cuda::SamplingRow& row : params) row.greedy = true;
    std::vector<cuda::SampledToken> out;
    const Status s = sampler->sample(*device_logits, params, out);
    ASSERT_TRUE(s.is_ok()) << "rows " << rows << ": " << s.to_string();
    ASSERT_EQ(out.size(), static_cast<size_t>(rows));
  }
}

// top_p alone over the whole vocabulary, deep into the tail (the device's mass select runs
// over the full row), plus top_k above the shared-memory capacity.
TEST_F(SamplingCuda, DeepTopPAndLargeTopK) {
  const int64_t vocab = 151936, rows = 12;
  // Flat rows (normal, scale 1): 90% of the mass spreads over most of the vocabulary.
  Tensor logits = Tensor::empty({rows, vocab}, DType::kF32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < rows * vocab; ++i) logits.data<float>()[i] = normal(rng_);
  std::vector<Case> cases(rows);
  std::vector<double> u(rows);
  for (int64_t r = 0; r < rows; ++r) {
    Case& c = cases[static_cast<size_t>(r)];
    c.params.top_k = r % 3 == 0 ? 10000 : 0;
    const std::vector<float> before =
        cuda_test::cpu_before_top_p(cuda_test::cpu_edited(row_of(logits, r), c), c.params);
    // Keep about 90% of the mass: find the survivor count there, then a clear gap near it.
    const std::vector<double> mass = cuda_test::mass_before(before);
    size_t keep = 1;
    while (keep + 1 < mass.size() && mass[keep] < 0.9) ++keep;
    double top_p = 0.0;
    for (size_t k = keep; top_p == 0.0 && k + 1 < mass.size(); ++k) {
      top_p = cuda_test::top_p_keeping(before, k, 1e-6);
    }
    ASSERT_GT(top_p, 0.0);
    c.params.top_p = top_p;
    std::vector<float> final_logits = before;
    apply_top_p(final_logits, top_p);
    u[static_cast<size_t>(r)] = cuda_test::u_inside(final_logits, rng_, 1e-5);
  }
  const std::vector<cuda::SampledToken> got = run_device(logits, cases, u);
  ASSERT_EQ(got.size(), cases.size());
  for (int64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE(fmt::format("row {}: {}", r, describe(cases[static_cast<size_t>(r)].params)));
    expect_matches_cpu(got[static_cast<size_t>(r)], row_of(logits, r),
                       cases[static_cast<size_t>(r)], u[static_cast<size_t>(r)], true);
    EXPECT_GT(got[static_cast<size_t>(r)].num_kept, 100);
  }
}

// Penalties, logit bias and min_tokens masking, greedy and sampled, on the device's lists.
TEST_F(SamplingCuda, PenaltiesBiasAndMinTokens) {
  for (int64_t vocab : {50257, 1000}) {
    const int64_t rows = 48;
    Tensor logits = random_logits(rows, vocab, rng_);
    std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(vocab) - 1);
    // A small pool of ids, so prompts and outputs repeat tokens and overlap.
    std::vector<int32_t> pool(40);
    for (int32_t& id : pool) id = any(rng_);
    std::uniform_int_distribution<size_t> from_pool(0, pool.size() - 1);
    std::vector<Case> cases(rows);
    std::vector<double> u(rows);
    for (int64_t r = 0; r < rows; ++r) {
      Case& c = cases[static_cast<size_t>(r)];
      SamplingParams& p = c.params;
      for (int i = 0; i < 60; ++i) c.prompt.push_back(pool[from_pool(rng_)]);
      for (int i = 0; i < static_cast<int>(r % 7) * 5; ++i)
        c.output.push_back(pool[from_pool(rng_)]);
      c.eos = {pool[0], pool[1]};
      p.repetition_penalty = std::array<double, 3>{1.0, 1.3, 0.8}[r % 3];
      p.frequency_penalty = std::array<double, 3>{0.0, 0.5, -0.3}[(r / 3) % 3];
      p.presence_penalty = std::array<double, 2>{0.0, 0.7}[(r / 9) % 2];
      if (r % 4 == 1) p.logit_bias = {{pool[2], 5.0f}, {pool[3], -100.0f}, {any(rng_), 2.5f}};
      if (r % 5 == 2) {
        p.min_tokens = 100;  // more than any output here: EOS and stop ids masked
        p.stop_token_ids = {pool[4], pool[5]};
      }
      p.temperature = r % 2 == 0 ? 0.0 : 0.8;
      p.top_k = r % 6 == 1 ? 50 : 0;
      p.logprobs = 3;
      if (!p.is_greedy()) {
        std::vector<float> final_logits =
            cuda_test::cpu_before_top_p(cuda_test::cpu_edited(row_of(logits, r), c), p);
        u[static_cast<size_t>(r)] = cuda_test::u_inside(final_logits, rng_, 1e-4);
      }
    }
    // Greedy rows should be steered: make the penalised and biased tokens the raw favourites.
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits.data<float>() + r * vocab;
      for (size_t k = 0; k < 6; ++k) row[pool[k]] = 12.0f + static_cast<float>(k);
    }
    const std::vector<cuda::SampledToken> got = run_device(logits, cases, u);
    ASSERT_EQ(got.size(), cases.size());
    for (int64_t r = 0; r < rows; ++r) {
      SCOPED_TRACE(fmt::format("vocab {} row {}: {}", vocab, r,
                               describe(cases[static_cast<size_t>(r)].params)));
      expect_matches_cpu(got[static_cast<size_t>(r)], row_of(logits, r),
                         cases[static_cast<size_t>(r)], u[static_cast<size_t>(r)], true);
    }
  }
}

// Exact ties: top_k keeps every tie at its threshold; top_p orders ties by lower id, also
// when there are more ties than the kernel holds in shared memory; top-N ties by lower id.
TEST_F(SamplingCuda, Ties) {
  for (int64_t vocab : {1000, 151936}) {
    SCOPED_TRACE(fmt::format("vocab {}", vocab));
    Tensor logits = Tensor::empty({4, vocab}, DType::kF32);
    for (int64_t i = 0; i < 4 * vocab; ++i) logits.data<float>()[i] = 0.0f;
    float* row2 = logits.data<float>() + 2 * vocab;
    float* row3 = logits.data<float>() + 3 * vocab;
    for (int64_t i = 0; i < vocab; i += 3) row2[i] = 1.0f;  // a third of the row ties at the top
    for (int64_t i = 0; i < vocab; ++i) row3[i] = static_cast<float>(i % 5);
    std::vector<Case> cases(4);
    cases[0].params.top_p = 0.3;   // all equal: the first 30% of ids
    cases[1].params.top_k = 10;    // all equal: everything stays
    cases[2].params.top_p = 0.25;  // among the tied top third, by id
    cases[2].params.logprobs = 5;
    cases[3].params.top_k = 2;  // the 2nd largest is a 4 too: all the 4s stay
    cases[3].params.logprobs = 20;
    std::vector<double> u = {0.7013, 0.4213, 0.9011, 0.5077};
    const std::vector<cuda::SampledToken> got = run_device(logits, cases, u);
    ASSERT_EQ(got.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      SCOPED_TRACE(fmt::format("row {}: {}", r, describe(cases[r].params)));
      expect_matches_cpu(got[r], row_of(logits, r), cases[r], u[r], true);
    }
    EXPECT_EQ(got[1].num_kept, vocab);
  }
}

// min_p keeps double(v) >= max + log(min_p), exactly as on the CPU: each row holds values on
// the floats just below and just above its cutoff.
TEST_F(SamplingCuda, MinPCutoffIsExact) {
  const int64_t vocab = 1000;
  const std::vector<double> min_ps = {0.1, 0.37, 0.5, 0.9, 0.013, 0.25, 0.61, 0.77};
  const auto rows = static_cast<int64_t>(min_ps.size());
  Tensor logits = random_logits(rows, vocab, rng_);
  std::vector<Case> cases(static_cast<size_t>(rows));
  std::vector<double> u(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits.data<float>() + r * vocab;
    for (int64_t i = 0; i < vocab; ++i) row[i] = std::min(row[i], 2.0f);
    row[0] = 3.0f;  // the max
    const double cutoff = 3.0 + std::log(min_ps[static_cast<size_t>(r)]);
    float above = static_cast<float>(cutoff);
    if (static_cast<double>(above) < cutoff) above = std::nextafter(above, 10.0f);
    const float below = std::nextafter(above, -10.0f);
    for (int i = 10; i < 15; ++i) row[i] = below;
    for (int i = 20; i < 25; ++i) row[i] = above;
    Case& c = cases[static_cast<size_t>(r)];
    c.params.min_p = min_ps[static_cast<size_t>(r)];
    std::vector<float> final_logits =
        cuda_test::cpu_before_top_p(cuda_test::cpu_edited(row_of(logits, r), c), c.params);
    ASSERT_EQ(final_logits[10], kNegInf);
    ASSERT_EQ(final_logits[20], above);
    u[static_cast<size_t>(r)] = cuda_test::u_inside(final_logits, rng_, 1e-4);
  }
  const std::vector<cuda::SampledToken> got = run_device(logits, cases, u);
  ASSERT_EQ(got.size(), cases.size());
  for (int64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE(fmt::format("row {}: min_p {}", r, min_ps[static_cast<size_t>(r)]));
    expect_matches_cpu(got[static_cast<size_t>(r)], row_of(logits, r),
                       cases[static_cast<size_t>(r)], u[static_cast<size_t>(r)], true);
  }
}

// Rows given through a strided, misaligned view (the kernel's unaligned head and tail).
TEST_F(SamplingCuda, StridedMisalignedRows) {
  const int64_t vocab = 50257, rows = 6;
  Tensor wide = random_logits(rows, vocab + 5, rng_);
  Tensor host_view = wide.slice(1, 1, 1 + vocab);
  Tensor host_rows = host_view.clone();
  std::vector<Case> cases(rows);
  std::vector<double> u(rows);
  std::vector<DeviceCase> device(rows);
  std::vector<cuda::SamplingRow> device_rows;
  for (int64_t r = 0; r < rows; ++r) {
    Case& c = cases[static_cast<size_t>(r)];
    c.params.temperature = r % 2 ? 0.0 : 1.0;
    c.params.top_k = 40;
    c.params.logprobs = 4;
    if (!c.params.is_greedy()) {
      std::vector<float> final_logits =
          cuda_test::cpu_before_top_p(cuda_test::cpu_edited(row_of(host_rows, r), c), c.params);
      u[static_cast<size_t>(r)] = cuda_test::u_inside(final_logits, rng_, 1e-4);
    }
    device[static_cast<size_t>(r)] = cuda_test::device_case(c, u[static_cast<size_t>(r)]);
  }
  for (DeviceCase& d : device) {
    d.bind();
    device_rows.push_back(d.row);
  }
  auto wide_gpu = cuda::copy_to_device(wide);
  ASSERT_TRUE(wide_gpu);
  Tensor view = wide_gpu->slice(1, 1, 1 + vocab);
  std::vector<cuda::SampledToken> got;
  Status status = sampler_->sample(view, device_rows, got);
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  for (int64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE(fmt::format("row {}", r));
    expect_matches_cpu(got[static_cast<size_t>(r)], row_of(host_rows, r),
                       cases[static_cast<size_t>(r)], u[static_cast<size_t>(r)], true);
  }
}

// The engine's Sampler on CUDA logits against the same Sampler on the host copy: same
// engine seed, so the same draws; a mix of seeded, unseeded, greedy, penalised rows, and
// logprobs beyond the device's 20 (-1: the whole vocabulary) through the host path.
TEST_F(SamplingCuda, EngineSamplerMatchesCpuSampler) {
  const int64_t vocab = 50257;
  const int rows = 24;
  std::vector<SamplingParams> params(rows);
  std::vector<std::vector<int32_t>> prompts(rows), outputs(rows);
  const std::vector<int32_t> eos = {7};
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(vocab) - 1);
  for (int r = 0; r < rows; ++r) {
    SamplingParams& p = params[r];
    p.temperature = r % 4 == 0 ? 0.0 : 0.9;
    if (r % 3 == 0) p.seed = 1000 + r;
    p.top_k = r % 5 == 1 ? 40 : 0;
    p.top_p = r % 5 == 2 ? 0.9 : 1.0;
    p.min_p = r % 7 == 3 ? 0.05 : 0.0;
    p.logprobs = std::array<int32_t, 5>{0, 2, 20, 25, -1}[r % 5];
    if (r % 6 == 5) {
      p.repetition_penalty = 1.2;
      p.frequency_penalty = 0.3;
      p.presence_penalty = 0.2;
      p.logit_bias = {{any(rng_), 3.0f}};
      p.min_tokens = 4;
      p.stop_token_ids = {9};
    }
    for (int i = 0; i < 30; ++i) prompts[r].push_back(any(rng_));
    for (int i = 0; i < r % 4; ++i) outputs[r].push_back(any(rng_));
  }
  std::vector<SamplingRequestState> states;
  for (int r = 0; r < rows; ++r) states.push_back({&params[r], prompts[r], outputs[r], eos, {}});

  Sampler cpu(77), gpu(77), draws_of(77);
  for (int step = 0; step < 3; ++step) {
    Tensor logits = random_logits(rows, vocab, rng_);
    auto logits_gpu = cuda::copy_to_device(logits);
    ASSERT_TRUE(logits_gpu);
    const std::vector<double> u = draws_of.take_draws(states);
    const std::vector<SampleResult> want = cpu.sample(logits, states);
    const std::vector<SampleResult> got = gpu.sample(*logits_gpu, states);
    ASSERT_EQ(got.size(), want.size());
    for (int r = 0; r < rows; ++r) {
      SCOPED_TRACE(fmt::format("step {} row {}: {}", step, r, describe(params[r])));
      if (!params[r].is_greedy()) {
        // Skip rows whose draw lands within 1e-5 of a CDF edge.
        Case c{params[r], prompts[r], outputs[r], eos};
        std::vector<float> final_logits =
            cuda_test::cpu_before_top_p(cuda_test::cpu_edited(row_of(logits, r), c), params[r]);
        apply_top_p(final_logits, params[r].top_p);
        if (cuda_test::near_cdf_edge(final_logits, u[r], 1e-5)) continue;
      }
      EXPECT_EQ(got[r].token_id, want[r].token_id);
      EXPECT_NEAR(got[r].logprob, want[r].logprob, kLogprobTolerance);
      EXPECT_EQ(got[r].rank, want[r].rank);
      EXPECT_EQ(got[r].top_token_ids, want[r].top_token_ids);
      ASSERT_EQ(got[r].top_logprobs.size(), want[r].top_logprobs.size());
      for (size_t j = 0; j < want[r].top_logprobs.size(); ++j) {
        ASSERT_NEAR(got[r].top_logprobs[j], want[r].top_logprobs[j], kLogprobTolerance) << j;
      }
    }
    EXPECT_EQ(cpu.engine_draws(), gpu.engine_draws());
  }
}

// A seeded request gets the same tokens on the GPU whatever else is in the batch and
// wherever its row is.
TEST_F(SamplingCuda, SeededRowsIgnoreBatchComposition) {
  const int64_t vocab = 32000;
  constexpr int kSteps = 24;
  SamplingParams seeded;
  seeded.seed = 42;
  seeded.top_k = 200;
  seeded.top_p = 0.95;
  seeded.temperature = 1.1;
  SamplingParams unseeded;
  unseeded.temperature = 0.8;
  unseeded.top_p = 0.9;
  SamplingParams greedy_penalised;
  greedy_penalised.temperature = 0.0;
  greedy_penalised.repetition_penalty = 1.3;

  // The seeded row's logits depend on the step only; filler rows on their slot too.
  auto step_logits = [&](int step, int salt) {
    std::mt19937 rng(static_cast<uint32_t>(step * 1000 + salt));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> row(static_cast<size_t>(vocab));
    for (float& v : row) v = normal(rng);
    return row;
  };
  auto generate = [&](int batch, int position, const SamplingParams& filler, uint64_t seed) {
    Sampler sampler(seed);
    std::vector<int32_t> out;
    std::vector<std::vector<int32_t>> filler_out(static_cast<size_t>(batch));
    for (int step = 0; step < kSteps; ++step) {
      Tensor logits = Tensor::empty({batch, vocab}, DType::kF32);
      std::vector<SamplingRequestState> states;
      for (int r = 0; r < batch; ++r) {
        const bool mine = r == position;
        const std::vector<float> row = step_logits(step, mine ? 0 : r + 1);
        std::copy(row.begin(), row.end(), logits.data<float>() + r * vocab);
        states.push_back(
            mine ? SamplingRequestState{&seeded, {}, out, {}, {}}
                 : SamplingRequestState{&filler, {}, filler_out[static_cast<size_t>(r)], {}, {}});
      }
      auto logits_gpu = cuda::copy_to_device(logits);
      EXPECT_TRUE(logits_gpu);
      if (!logits_gpu) return out;
      const std::vector<SampleResult> results = sampler.sample(*logits_gpu, states);
      for (int r = 0; r < batch; ++r) {
        (r == position ? out : filler_out[static_cast<size_t>(r)])
            .push_back(results[static_cast<size_t>(r)].token_id);
      }
    }
    return out;
  };
  const std::vector<int32_t> alone = generate(1, 0, unseeded, 0);
  EXPECT_EQ(generate(3, 2, unseeded, 0), alone);
  EXPECT_EQ(generate(5, 0, greedy_penalised, 1), alone);
  EXPECT_EQ(generate(40, 17, unseeded, 12345), alone);
}

// Prompt logprobs of CUDA logits (copied to the host) equal those of the host logits.
TEST_F(SamplingCuda, PromptLogprobsOfGpuLogits) {
  const int64_t vocab = 1000;
  Tensor logits = random_logits(5, vocab, rng_);
  auto logits_gpu = cuda::copy_to_device(logits);
  ASSERT_TRUE(logits_gpu);
  const std::vector<int32_t> next = {3, 999, 0, 512, 77};
  for (int32_t n : {0, 3, -1}) {
    const std::vector<TokenLogprobs> want = compute_prompt_logprobs(logits, next, n);
    const std::vector<TokenLogprobs> got = compute_prompt_logprobs(*logits_gpu, next, n);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].logprob, want[i].logprob);
      EXPECT_EQ(got[i].rank, want[i].rank);
      EXPECT_EQ(got[i].top_token_ids, want[i].top_token_ids);
    }
  }
}

TEST_F(SamplingCuda, RefusesBadRows) {
  Tensor host = random_logits(1, 100, rng_);
  auto logits = cuda::copy_to_device(host);
  ASSERT_TRUE(logits);
  std::vector<cuda::SampledToken> out;
  auto expect_error = [&](cuda::SamplingRow row, const std::string& needle) {
    Status s = sampler_->sample(*logits, std::span<const cuda::SamplingRow>(&row, 1), out);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  cuda::SamplingRow base;
  base.uniform = 0.5;
  cuda::SamplingRow r = base;
  r.top_p = 0.0;
  expect_error(r, "top_p");
  r = base;
  r.uniform = 1.0;
  expect_error(r, "uniform");
  r = base;
  r.num_logprobs = 21;
  expect_error(r, "logprobs");
  const std::vector<int32_t> out_of_range = {100};
  r = base;
  r.masked_tokens = out_of_range;
  expect_error(r, "outside the vocabulary");
  const std::vector<cuda::TokenBias> twice = {{3, 1.0f}, {3, 2.0f}};
  r = base;
  r.logit_bias = twice;
  expect_error(r, "twice");
  // Two parameter rows for one logits row.
  const std::vector<cuda::SamplingRow> two(2, base);
  Status s = sampler_->sample(*logits, two, out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  // A good row still works afterwards.
  Status ok = sampler_->sample(*logits, std::span<const cuda::SamplingRow>(&base, 1), out);
  ASSERT_TRUE(ok.is_ok()) << ok.to_string();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_GE(out[0].token_id, 0);
  EXPECT_LT(out[0].token_id, 100);
}

// Needs no GPU: a sampler is only made for a CUDA device.
TEST(SamplingCudaArgs, RefusesCpuDevice) {
  auto sampler = cuda::DeviceSampler::create(Device::cpu(), 4, 100);
  ASSERT_FALSE(sampler);
  EXPECT_EQ(sampler.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(sampler.status().message().find("not a CUDA device"), std::string::npos);
}

}  // namespace
}  // namespace vllm

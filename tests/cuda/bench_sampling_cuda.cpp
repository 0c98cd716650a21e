// Timing mode for the CUDA sampler (not a test: it asserts no speed). Runs only with
// VLLM_BENCH=1 on a machine with a GPU:
//   VLLM_BENCH=1 ./vllm_cuda_tests --gtest_filter='SamplingCudaBench.*'
// Times one whole sampling step as the engine pays it (packing, copy in, kernel, copy out,
// wait) for batches of 1, 64 and 256 rows of Qwen's 151936-entry vocabulary, median of many
// steps, next to the time the logits take to stream once from HBM at the H200's ~4.3 TB/s
// and to the CPU sampler on the same rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling.cuh"
#include "engine/sampler.h"

namespace vllm {
namespace {

constexpr double kRooflineGBs = 4300.0;  // H200 device copy bandwidth
constexpr int64_t kVocab = 151936;

bool bench_enabled() {
  const char* v = std::getenv("VLLM_BENCH");
  return v != nullptr && std::string(v) == "1";
}

// Median microseconds of `fn` over `iterations` calls after `warmup` calls.
double median_us(const std::function<void()>& fn, int warmup, int iterations) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::nth_element(us.begin(), us.begin() + iterations / 2, us.end());
  return us[static_cast<size_t>(iterations / 2)];
}

struct Mode {
  const char* name;
  SamplingParams params;
};

TEST(SamplingCudaBench, StepTime) {
  if (!bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time the sampler";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(cuda::init().is_ok());

  std::vector<Mode> modes(4);
  modes[0].name = "greedy";
  modes[0].params.temperature = 0.0;
  modes[1].name = "top_k 20, top_p 0.95";
  modes[1].params.temperature = 0.7;
  modes[1].params.top_k = 20;
  modes[1].params.top_p = 0.95;
  modes[2].name = "top_p 0.9";
  modes[2].params.top_p = 0.9;
  modes[3].name = "top_k 50 + rep. penalty";
  modes[3].params.top_k = 50;
  modes[3].params.repetition_penalty = 1.1;

  std::mt19937 rng(5);
  std::vector<int32_t> history(512);  // penalised tokens: a 512-token prompt
  for (int32_t& id : history) id = std::uniform_int_distribution<int32_t>(0, kVocab - 1)(rng);

  std::printf("\n| mode | batch | GPU step us | us per row | one HBM pass us | CPU sampler us |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Mode& mode : modes) {
    for (int64_t batch : {1, 64, 256}) {
      Tensor host = Tensor::empty({batch, kVocab}, DType::kF32);
      std::normal_distribution<float> normal(-2.0f, 3.0f);
      for (int64_t i = 0; i < batch * kVocab; ++i) host.data<float>()[i] = normal(rng);
      auto logits = cuda::copy_to_device(host);
      ASSERT_TRUE(logits) << logits.status().to_string();
      std::vector<SamplingRequestState> states(static_cast<size_t>(batch),
                                               SamplingRequestState{&mode.params, history, {}, {}});
      Sampler gpu(1), cpu(1);
      const double gpu_us = median_us([&] { (void)gpu.sample(*logits, states); }, 5, 50);
      const double cpu_us = median_us([&] { (void)cpu.sample(host, states); }, 1, 5);
      const double pass_us =
          static_cast<double>(batch * kVocab) * sizeof(float) / (kRooflineGBs * 1e3);
      std::printf("| %s | %lld | %.1f | %.2f | %.1f | %.0f |\n", mode.name,
                  static_cast<long long>(batch), gpu_us, gpu_us / static_cast<double>(batch),
                  pass_us, cpu_us);
    }
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace vllm

// The timing harness of the CUDA benchmark modes (tests/cuda/bench_*_cuda.cpp): they run only
// with VLLM_BENCH=1, time single launches with CUDA events after a warm-up, and report the
// median. Benchmarks assert no speed.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace vllm::cuda_test {

constexpr double kRooflineTBs = 4.3;       // H200 device copy bandwidth, measured
constexpr double kRooflineTflops = 790.0;  // H200 dense BF16, measured
constexpr double kHbmRooflineGBs = kRooflineTBs * 1000.0;

inline bool bench_enabled() {
  const char* v = std::getenv("VLLM_BENCH");
  return v != nullptr && std::string(v) == "1";
}

// Median microseconds of one `launch(i)` (i in [0, sets) picks the buffer set, rotated so
// large cases stream from HBM rather than L2), or -1 after reporting a failure.
inline double time_launches(const std::function<Status(int)>& launch, int sets, int warmup = 20,
                            int iterations = 200) {
  auto failed = [](const std::string& what) {
    ADD_FAILURE() << what;
    return -1.0;
  };
  for (int i = 0; i < warmup; ++i) {
    Status s = launch(i % sets);
    if (!s.is_ok()) return failed(s.to_string());
  }
  std::vector<cudaEvent_t> start(iterations), stop(iterations);
  for (int i = 0; i < iterations; ++i) {
    if (cudaEventCreate(&start[i]) != cudaSuccess || cudaEventCreate(&stop[i]) != cudaSuccess) {
      return failed("cudaEventCreate failed");
    }
  }
  for (int i = 0; i < iterations; ++i) {
    cudaEventRecord(start[i]);
    Status s = launch(i % sets);
    if (!s.is_ok()) return failed(s.to_string());
    cudaEventRecord(stop[i]);
  }
  cudaError_t sync = cudaDeviceSynchronize();
  if (sync != cudaSuccess) return failed(cudaGetErrorString(sync));
  std::vector<double> us(iterations);
  for (int i = 0; i < iterations; ++i) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, start[i], stop[i]) != cudaSuccess) {
      return failed("cudaEventElapsedTime failed");
    }
    us[i] = ms * 1000.0;
    cudaEventDestroy(start[i]);
    cudaEventDestroy(stop[i]);
  }
  std::nth_element(us.begin(), us.begin() + iterations / 2, us.end());
  return us[iterations / 2];
}

}  // namespace vllm::cuda_test

// Helpers for the CUDA timing modes (VLLM_BENCH=1): the switch, and the median time of one
// launch measured with CUDA events. Timing modes assert no speed; they print tables.
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

inline bool bench_enabled() {
  const char* v = std::getenv("VLLM_BENCH");
  return v != nullptr && std::string(v) == "1";
}

// Median microseconds of one call of `launch(i)` on the legacy default stream, i cycling
// over [0, sets) (buffer sets, so large cases stream from HBM rather than L2), after
// `warmup` untimed calls. -1 after reporting a failure, so the other cases still run.
inline double median_launch_us(const std::function<Status(int)>& launch, int sets, int warmup = 10,
                               int iterations = 100) {
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

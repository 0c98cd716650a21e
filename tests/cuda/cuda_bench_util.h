// Timing helpers for the CUDA timing modes (tests that run only with VLLM_BENCH=1 and assert
// no speed): the switch, and the median time of a launch sequence measured with CUDA events.
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

constexpr double kHbmRooflineGBs = 4300.0;  // H200 device copy, read + write, measured

inline bool bench_enabled() {
  const char* v = std::getenv("VLLM_BENCH");
  return v != nullptr && std::string(v) == "1";
}

// Median microseconds of one call of `launch(i)` (i counts the calls, for rotating over
// buffer sets) on the legacy default stream, after `warmup` untimed calls; -1 after reporting
// a failure with ADD_FAILURE (the caller's other cases still run).
inline double time_launches(const std::function<Status(int)>& launch, int iterations,
                            int warmup = 10) {
  auto failed = [](const std::string& what) {
    ADD_FAILURE() << what;
    return -1.0;
  };
  for (int i = 0; i < warmup; ++i) {
    Status s = launch(i);
    if (!s.is_ok()) return failed(s.to_string());
  }
  std::vector<cudaEvent_t> start(static_cast<size_t>(iterations)), stop(start.size());
  for (size_t i = 0; i < start.size(); ++i) {
    if (cudaEventCreate(&start[i]) != cudaSuccess || cudaEventCreate(&stop[i]) != cudaSuccess) {
      return failed("cudaEventCreate failed");
    }
  }
  for (int i = 0; i < iterations; ++i) {
    cudaEventRecord(start[static_cast<size_t>(i)]);
    Status s = launch(warmup + i);
    if (!s.is_ok()) return failed(s.to_string());
    cudaEventRecord(stop[static_cast<size_t>(i)]);
  }
  cudaError_t sync = cudaDeviceSynchronize();
  if (sync != cudaSuccess) return failed(cudaGetErrorString(sync));
  std::vector<double> us(start.size());
  for (size_t i = 0; i < start.size(); ++i) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, start[i], stop[i]) != cudaSuccess) {
      return failed("cudaEventElapsedTime failed");
    }
    us[i] = ms * 1000.0;
    cudaEventDestroy(start[i]);
    cudaEventDestroy(stop[i]);
  }
  std::nth_element(us.begin(), us.begin() + iterations / 2, us.end());
  return us[static_cast<size_t>(iterations / 2)];
}

}  // namespace vllm::cuda_test

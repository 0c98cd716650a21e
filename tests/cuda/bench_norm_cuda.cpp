// Timing mode for the RMSNorm kernels (not a test: it asserts no speed). Runs only with
// VLLM_BENCH=1 on a machine with a GPU:
//   VLLM_BENCH=1 ./vllm_cuda_tests --gtest_filter='NormCudaBench.*'
// Each case times single launches with CUDA events (warm-up first, median of many), rotating
// over several buffer sets so large cases stream from HBM rather than L2, and prints bytes
// moved / time against the H200's measured ~4.3 TB/s device copy roofline. A device-to-device
// copy of the same size is timed the same way so the roofline is re-measured on the card.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/norm.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_test_util.h"

namespace vllm {
namespace {

constexpr double kRooflineGBs = 4300.0;  // H200 device copy, read + write (KINDS.md)
constexpr int kWarmup = 20;
constexpr int kIterations = 200;
constexpr size_t kRotationBytes = size_t{1} << 29;  // >= 512 MiB of buffers per case (L2: 60 MB)

#define ASSERT_CUDA(call)                                                          \
  do {                                                                             \
    cudaError_t error_ = (call);                                                   \
    ASSERT_EQ(error_, cudaSuccess) << #call << ": " << cudaGetErrorString(error_); \
  } while (0)

bool bench_enabled() {
  const char* v = std::getenv("VLLM_BENCH");
  return v != nullptr && std::string(v) == "1";
}

// Median microseconds of one launch of `launch(i)` (i picks the buffer set), or -1 after
// reporting a failure (the other cases still run).
double time_launches(const std::function<Status(int)>& launch, int sets) {
  auto failed = [](const std::string& what) {
    ADD_FAILURE() << what;
    return -1.0;
  };
  for (int i = 0; i < kWarmup; ++i) {
    Status s = launch(i % sets);
    if (!s.is_ok()) return failed(s.to_string());
  }
  std::vector<cudaEvent_t> start(kIterations), stop(kIterations);
  for (int i = 0; i < kIterations; ++i) {
    if (cudaEventCreate(&start[i]) != cudaSuccess || cudaEventCreate(&stop[i]) != cudaSuccess) {
      return failed("cudaEventCreate failed");
    }
  }
  for (int i = 0; i < kIterations; ++i) {
    cudaEventRecord(start[i]);
    Status s = launch(i % sets);
    if (!s.is_ok()) return failed(s.to_string());
    cudaEventRecord(stop[i]);
  }
  cudaError_t sync = cudaDeviceSynchronize();
  if (sync != cudaSuccess) return failed(cudaGetErrorString(sync));
  std::vector<double> us(kIterations);
  for (int i = 0; i < kIterations; ++i) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, start[i], stop[i]) != cudaSuccess) {
      return failed("cudaEventElapsedTime failed");
    }
    us[i] = ms * 1000.0;
    cudaEventDestroy(start[i]);
    cudaEventDestroy(stop[i]);
  }
  std::nth_element(us.begin(), us.begin() + kIterations / 2, us.end());
  return us[kIterations / 2];
}

struct BenchCase {
  const char* op;  // "rms_norm" or "fused_add_rms_norm"
  int64_t rows;
  int64_t hidden;
  DType act;
  DType weight;
};

void print_row(const std::string& name, const std::string& shape, const std::string& dtypes,
               double bytes, double us) {
  const double gbs = bytes / (us * 1e-6) / 1e9;
  std::printf("| %-20s | %-12s | %-10s | %9.2f | %8.1f | %5.1f%% |\n", name.c_str(), shape.c_str(),
              dtypes.c_str(), us, gbs, 100.0 * gbs / kRooflineGBs);
}

TEST(NormCudaBench, Bandwidth) {
  if (!bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time the norm kernels";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(cuda::init().is_ok());

  const BenchCase cases[] = {
      {"rms_norm", 4096, 8192, DType::kBF16, DType::kBF16},
      {"rms_norm", 4096, 8192, DType::kBF16, DType::kF32},
      {"rms_norm", 4096, 8192, DType::kF32, DType::kF32},
      {"fused_add_rms_norm", 4096, 8192, DType::kBF16, DType::kBF16},
      {"rms_norm", 4096, 8191, DType::kBF16, DType::kBF16},  // odd H: element-wise path
      {"rms_norm", 4096, 4096, DType::kBF16, DType::kBF16},
      {"rms_norm", 4096, 2048, DType::kBF16, DType::kBF16},
      {"rms_norm", 32, 8192, DType::kBF16, DType::kBF16},  // decode-sized, L2-resident
      {"fused_add_rms_norm", 32, 8192, DType::kBF16, DType::kBF16},
  };
  std::mt19937 rng(7);
  std::printf("\n| %-20s | %-12s | %-10s | %9s | %8s | %6s |\n", "op", "shape", "x/weight",
              "median us", "GB/s", "of 4.3TB/s");
  std::printf(
      "|----------------------|--------------|------------|-----------|----------|--------|\n");

  for (const BenchCase& c : cases) {
    const Shape shape{c.rows, c.hidden};
    const bool fused = std::string(c.op) == "fused_add_rms_norm";
    const double act_bytes = static_cast<double>(c.rows * c.hidden) * dtype_size(c.act);
    const double bytes = act_bytes * (fused ? 4 : 2) + c.hidden * dtype_size(c.weight);
    const int sets = static_cast<int>(
        std::clamp<double>(static_cast<double>(kRotationBytes) / (2 * act_bytes), 1.0, 16.0));

    Tensor host_x = cuda_test::random_tensor(shape, c.act, rng, 0.0f, 1.0f);
    auto w = cuda::copy_to_device(cuda_test::random_tensor({c.hidden}, c.weight, rng, 1.0f, 0.1f));
    ASSERT_TRUE(w);
    std::vector<Tensor> a, b;  // x and out (fused: x and residual)
    for (int i = 0; i < sets; ++i) {
      auto x = cuda::copy_to_device(host_x);
      auto y = cuda::copy_to_device(host_x);
      ASSERT_TRUE(x && y) << "out of device memory?";
      a.push_back(*x);
      b.push_back(*y);
    }
    const double us = time_launches(
        [&](int i) {
          return fused ? cuda::fused_add_rms_norm(a[i], b[i], *w, 1e-6f, false)
                       : cuda::rms_norm(a[i], *w, 1e-6f, false, b[i]);
        },
        sets);
    if (us <= 0.0) continue;
    print_row(c.op, fmt::format("{}x{}", c.rows, c.hidden),
              fmt::format("{}/{}", dtype_name(c.act), dtype_name(c.weight)), bytes, us);
  }

  // The roofline, re-measured here: device-to-device copies of the benchmark's size and of
  // 1 GiB (the size the ~4.3 TB/s figure was measured at).
  for (size_t copy_bytes : {size_t{4096} * 8192 * 2, size_t{1} << 30}) {
    std::vector<void*> src(2, nullptr), dst(2, nullptr);
    for (int i = 0; i < 2; ++i) {
      ASSERT_CUDA(cudaMalloc(&src[i], copy_bytes));
      ASSERT_CUDA(cudaMalloc(&dst[i], copy_bytes));
      ASSERT_CUDA(cudaMemset(src[i], 1, copy_bytes));
    }
    const double us = time_launches(
        [&](int i) {
          return cuda::cuda_status(
              cudaMemcpyAsync(dst[i], src[i], copy_bytes, cudaMemcpyDeviceToDevice),
              "cudaMemcpyAsync");
        },
        2);
    if (us > 0.0) {
      print_row("cudaMemcpy D2D", fmt::format("{} MiB", copy_bytes >> 20), "bytes",
                2.0 * static_cast<double>(copy_bytes), us);
    }
    for (int i = 0; i < 2; ++i) {
      ASSERT_CUDA(cudaFree(src[i]));
      ASSERT_CUDA(cudaFree(dst[i]));
    }
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace vllm

// Timing mode for cuda::linear (not a test: it asserts no speed). Runs only with VLLM_BENCH=1
// on a machine with a GPU:
//   VLLM_BENCH=1 ./vllm_cuda_tests --gtest_filter='GemmCudaBench.*'
// Times each projection of Qwen3.5-4B (configs/Qwen3.5-4B/config.json: hidden 2560,
// intermediate 9216, vocab 248320, 16 q heads x 256 with the output gate, 4 kv heads, GDN
// 16 key heads x 128 and 32 value heads x 128; 8 full-attention and 24 GDN layers) at decode
// (M = 1, 64) and prefill (M = 2048) sizes, as fused projections (qkv, gate_up). Each row is
// the median of single launches with weights rotated over buffer sets so they stream from HBM,
// against 790 TFLOP/s (dense BF16) and 4.3 TB/s (bytes: weight + x + out, each once). The
// last rows add the matrices up into one step of the whole model's GEMMs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_bench_util.h"

namespace vllm {
namespace {

using cuda_test::kRooflineTBs;
using cuda_test::kRooflineTflops;

constexpr size_t kRotationBytes = size_t{1} << 29;  // >= 512 MiB of weights per case (L2: 60 MB)
constexpr int kMaxSets = 16;

struct Matrix {
  const char* name;
  int64_t n, k;
  int layers;  // how many times one step runs it
  bool logits = false;
};

// Qwen3.5-4B. q_proj carries the output gate (2 x 16 x 256), k/v 4 x 256 each; GDN in_proj
// qkvz = q, k (16 x 128 each), v and z (32 x 128 each); ba = 32 + 32.
const Matrix kQwen35_4B[] = {
    {"attn qkv (q+gate,k,v)", 8192 + 1024 + 1024, 2560, 8},
    {"attn o_proj", 2560, 4096, 8},
    {"gdn in_proj qkvz", 2048 + 2048 + 4096 + 4096, 2560, 24},
    {"gdn in_proj ba", 64, 2560, 24},
    {"gdn out_proj", 2560, 4096, 24},
    {"mlp gate_up", 2 * 9216, 2560, 32},
    {"mlp down", 2560, 9216, 32},
    {"lm_head (F32 logits)", 248320, 2560, 1, true},
};

void print_header() {
  std::printf("\n| %-22s | %5s | %6s | %5s | %4s | %9s | %7s | %6s | %7s | %6s |\n", "matrix", "M",
              "N", "K", "out", "median us", "TFLOP/s", "of 790", "GB/s", "of 4.3");
  std::printf(
      "|------------------------|-------|--------|-------|------|-----------|---------|--------|"
      "---------|--------|\n");
}

void print_row(const std::string& name, int64_t m, int64_t n, int64_t k, const char* out,
               double flops, double bytes, double us) {
  const double tflops = flops / (us * 1e-6) / 1e12;
  const double gbs = bytes / (us * 1e-6) / 1e9;
  std::printf(
      "| %-22s | %5lld | %6lld | %5lld | %4s | %9.1f | %7.1f | %5.1f%% | %7.0f | %5.1f%% |\n",
      name.c_str(), static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
      out, us, tflops, 100.0 * tflops / kRooflineTflops, gbs,
      100.0 * gbs / (kRooflineTBs * 1000.0));
}

TEST(GemmCudaBench, Qwen35_4B) {
  if (!cuda_test::bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time the GEMMs";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(cuda::init().is_ok());
  auto blas = cuda::BlasContext::create(Device::cuda());
  ASSERT_TRUE(blas) << blas.status().to_string();

  print_header();
  struct StepTotal {
    double us = 0, flops = 0, bytes = 0;
  };
  std::map<int64_t, StepTotal> steps;
  for (int64_t m : {int64_t{1}, int64_t{64}, int64_t{2048}}) {
    for (const Matrix& mat : kQwen35_4B) {
      if (mat.logits && m > 64) continue;  // prefill computes logits only for sampled rows
      const DType out_dtype = mat.logits ? DType::kF32 : DType::kBF16;
      const double weight_bytes = 2.0 * static_cast<double>(mat.n * mat.k);
      const int sets = static_cast<int>(
          std::clamp<double>(static_cast<double>(kRotationBytes) / weight_bytes, 1.0, kMaxSets));
      std::vector<Tensor> weights, xs, outs;
      for (int i = 0; i < sets; ++i) {
        auto w = Tensor::try_empty({mat.n, mat.k}, DType::kBF16, Device::cuda());
        auto x = Tensor::try_empty({m, mat.k}, DType::kBF16, Device::cuda());
        auto out = Tensor::try_empty({m, mat.n}, out_dtype, Device::cuda());
        ASSERT_TRUE(w && x && out) << "out of device memory?";
        // Small values: no overflow, no denormal slow paths.
        ASSERT_TRUE(cuda::fill_uniform(*w, -0.05f, 0.05f, 2 * i + 1, nullptr).is_ok());
        ASSERT_TRUE(cuda::fill_uniform(*x, -1.0f, 1.0f, 2 * i + 2, nullptr).is_ok());
        weights.push_back(*w);
        xs.push_back(*x);
        outs.push_back(*out);
      }
      const double us = cuda_test::time_launches(
          [&](int i) {
            return cuda::linear(**blas, xs[i], weights[i], Tensor(), outs[i], nullptr);
          },
          sets);
      if (us <= 0.0) continue;
      const double flops = 2.0 * static_cast<double>(m * mat.n * mat.k);
      const double bytes =
          weight_bytes + 2.0 * static_cast<double>(m * mat.k) +
          static_cast<double>(m * mat.n) * static_cast<double>(dtype_size(out_dtype));
      print_row(mat.name, m, mat.n, mat.k, mat.logits ? "F32" : "BF16", flops, bytes, us);
      StepTotal& step = steps[m];
      step.us += us * mat.layers;
      step.flops += flops * mat.layers;
      step.bytes += bytes * mat.layers;
    }
  }
  for (const auto& [m, step] : steps) {
    print_row("one step, all layers", m, 0, 0, "", step.flops, step.bytes, step.us);
  }

  // Host cost of one call once its plan is cached (what a step pays per GEMM on the CPU).
  auto w = Tensor::try_empty({2560, 2560}, DType::kBF16, Device::cuda());
  auto x = Tensor::try_empty({1, 2560}, DType::kBF16, Device::cuda());
  auto out = Tensor::try_empty({1, 2560}, DType::kBF16, Device::cuda());
  ASSERT_TRUE(w && x && out);
  ASSERT_TRUE(cuda::linear(**blas, *x, *w, Tensor(), *out, nullptr).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  constexpr int kCalls = 1000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(cuda::linear(**blas, *x, *w, Tensor(), *out, nullptr).is_ok());
  }
  const double host_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      kCalls;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::printf("\nhost time per cached cuda::linear call (launch included): %.2f us; plans: %zu\n",
              host_us, (*blas)->cached_plans());
  std::fflush(stdout);
}

// Block-scaled FP8 products of Qwen3.5-27B (configs/Qwen3.5-27B: hidden 5120, intermediate
// 17408, 24 q heads x 256 with the gate, 4 kv heads, GDN 16 key heads x 128 and 48 value heads
// x 128; 16 attention and 48 GDN layers) at prefill sizes, 128 x 128 blocks: the BF16 weight
// through cuBLASLt, the FP8 weight as W8A16 (linear_fp8: dequantized, then cuBLASLt) and as
// W8A8 (linear_fp8_w8a8: the activations quantized, then cuBLASLt's block-scaled FP8 GEMM).
// TFLOP/s against 790 (BF16 peak) for every column; FP8's peak is twice that.
//   VLLM_BENCH=1 ./vllm_cuda_tests --gtest_filter='GemmCudaBench.Fp8Qwen35_27B'
TEST(GemmCudaBench, Fp8Qwen35_27B) {
  if (!cuda_test::bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time the GEMMs";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(cuda::init().is_ok());
  if (!cuda::runs_sm90a(0)) GTEST_SKIP() << "W8A8 block scaling needs compute capability 9.0";
  auto blas = cuda::BlasContext::create(Device::cuda());
  ASSERT_TRUE(blas) << blas.status().to_string();
  const Matrix kQwen35_27B[] = {
      {"attn qkv (q+gate,k,v)", 12288 + 1024 + 1024, 5120, 16},
      {"attn o_proj", 5120, 6144, 16},
      {"gdn in_proj qkvz", 2048 + 2048 + 6144 + 6144, 5120, 48},
      {"gdn out_proj", 5120, 6144, 48},
      {"mlp gate_up", 2 * 17408, 5120, 64},
      {"mlp down", 5120, 17408, 64},
  };
  std::printf("\n| %-22s | %5s | %6s | %5s | %-9s | %-9s | %-9s | %s |\n", "matrix", "M", "N", "K",
              "BF16 us", "W8A16 us", "W8A8 us", "W8A8 TFLOP/s (of 790)");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  struct StepTotal {
    double bf16 = 0, w8a16 = 0, w8a8 = 0, flops = 0;
  };
  std::map<int64_t, StepTotal> steps;
  for (int64_t m : {int64_t{64}, int64_t{2048}, int64_t{8192}}) {
    for (const Matrix& mat : kQwen35_27B) {
      const double fp8_bytes = static_cast<double>(mat.n * mat.k);
      const int sets = static_cast<int>(
          std::clamp<double>(static_cast<double>(kRotationBytes) / fp8_bytes, 1.0, kMaxSets / 2));
      std::vector<Tensor> bf16_w, xs, outs, xq, xs_scales;
      std::vector<LinearWeight> fp8_w;
      for (int i = 0; i < sets; ++i) {
        auto w = Tensor::try_empty({mat.n, mat.k}, DType::kBF16, Device::cuda());
        auto q = Tensor::try_empty({mat.n, mat.k}, DType::kF8E4M3, Device::cuda());
        auto sc =
            Tensor::try_empty({(mat.n + 127) / 128, mat.k / 128}, DType::kF32, Device::cuda());
        auto x = Tensor::try_empty({m, mat.k}, DType::kBF16, Device::cuda());
        auto out = Tensor::try_empty({m, mat.n}, DType::kBF16, Device::cuda());
        auto x_q = Tensor::try_empty({m, mat.k}, DType::kF8E4M3, Device::cuda());
        auto x_s = Tensor::try_empty({mat.k / 128, m}, DType::kF32, Device::cuda());
        ASSERT_TRUE(w && q && sc && x && out && x_q && x_s) << "out of device memory?";
        ASSERT_TRUE(cuda::fill_uniform(*w, -0.05f, 0.05f, 4 * i + 1, nullptr).is_ok());
        ASSERT_TRUE(cuda::fill_uniform(*q, -448.0f, 448.0f, 4 * i + 2, nullptr).is_ok());
        ASSERT_TRUE(cuda::fill_uniform(*sc, 1e-4f, 2e-4f, 4 * i + 3, nullptr).is_ok());
        ASSERT_TRUE(cuda::fill_uniform(*x, -1.0f, 1.0f, 4 * i + 4, nullptr).is_ok());
        bf16_w.push_back(*w);
        fp8_w.emplace_back(*q, *sc, WeightBlock{128, 128});
        xs.push_back(*x);
        outs.push_back(*out);
        xq.push_back(*x_q);
        xs_scales.push_back(*x_s);
      }
      const double bf16_us = cuda_test::time_launches(
          [&](int i) { return cuda::linear(**blas, xs[i], bf16_w[i], Tensor(), outs[i], nullptr); },
          sets);
      const double w8a16_us = cuda_test::time_launches(
          [&](int i) {
            return cuda::linear_fp8(**blas, xs[i], fp8_w[i], Tensor(), outs[i], nullptr);
          },
          sets);
      const double w8a8_us = cuda_test::time_launches(
          [&](int i) {
            Tensor no_pad;  // m is a multiple of 4
            return cuda::linear_fp8_w8a8(**blas, xs[i], fp8_w[i], Tensor(), xq[i], xs_scales[i],
                                         no_pad, outs[i], nullptr);
          },
          sets);
      if (bf16_us <= 0 || w8a16_us <= 0 || w8a8_us <= 0) continue;
      const double flops = 2.0 * static_cast<double>(m * mat.n * mat.k);
      const double tflops = flops / (w8a8_us * 1e-6) / 1e12;
      std::printf("| %-22s | %5lld | %6lld | %5lld | %9.1f | %9.1f | %9.1f | %.0f (%.0f%%) |\n",
                  mat.name, static_cast<long long>(m), static_cast<long long>(mat.n),
                  static_cast<long long>(mat.k), bf16_us, w8a16_us, w8a8_us, tflops,
                  100.0 * tflops / kRooflineTflops);
      StepTotal& step = steps[m];
      step.bf16 += bf16_us * mat.layers;
      step.w8a16 += w8a16_us * mat.layers;
      step.w8a8 += w8a8_us * mat.layers;
      step.flops += flops * mat.layers;
    }
  }
  for (const auto& [m, st] : steps) {
    const double tflops = st.flops / (st.w8a8 * 1e-6) / 1e12;
    std::printf("| one step, all layers | %5lld | | | %9.0f | %9.0f | %9.0f | %.0f (%.0f%%) |\n",
                static_cast<long long>(m), st.bf16, st.w8a16, st.w8a8, tflops,
                100.0 * tflops / kRooflineTflops);
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace vllm

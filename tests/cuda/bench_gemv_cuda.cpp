// Timing mode for the batched GEMV against cuBLASLt (not a test: it asserts no speed). Runs
// only with VLLM_BENCH=1 on a machine with a GPU:
//   VLLM_BENCH=1 ./vllm_cuda_tests --gtest_filter='GemvCudaBench.*'
// The decode projections of Qwen3.5-4B and Qwen3.5-27B (configs/*/config.json), fused as the
// models load them (attention q+gate/k/v, GDN in_proj qkv/z/b/a, MLP gate/up), plus o_proj,
// GDN out_proj, down and the lm_head (F32 logits), at M = 1, 2, 4, 8, 16, BF16 weights:
//   1. each matrix through cuda::linear's GEMV and through cuBLASLt (the same call with the
//      GEMV off): median time of single launches, GB/s (weight + x + out, each once) against
//      4.3 TB/s. Weight sets rotate (>= 512 MiB per case; the L2 holds 60 MB), so each launch
//      streams its weights from HBM;
//   2. one decode step's projections (each matrix times its layer count) on each path;
//   3. the GEMV's launch shapes (16- or 32-row blocks, 2/4/8 warps) per matrix at M = 1 and
//      16, the chosen one marked, to tune choose_gemv_launch.
// Prints markdown tables.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_bench_util.h"

namespace vllm {
namespace {

using cuda_test::kHbmRooflineGBs;

constexpr size_t kRotationBytes = size_t{1} << 29;
constexpr int kMaxSets = 16;

struct Matrix {
  const char* name;
  int64_t n, k;
  int layers;  // how many times one decode step runs it
  bool logits = false;
};

struct Model {
  const char* name;
  std::vector<Matrix> matrices;
};

// Qwen3.5-4B: hidden 2560, intermediate 9216, vocab 248320; 8 attention layers (16 q heads x
// 256 with the output gate, 4 kv heads) and 24 GDN layers (16 key heads and 32 value heads of
// 128: in_proj = q, k (2 x 2048), v, z (2 x 4096), b, a (2 x 32)).
// Qwen3.5-27B: hidden 5120, intermediate 17408; 16 attention layers (24 q heads x 256 with the
// gate, 4 kv heads) and 48 GDN layers (16 key heads, 48 value heads of 128).
const Model kModels[] = {
    {"4B",
     {{"attn qkv", 2 * 4096 + 2 * 1024, 2560, 8},
      {"attn o_proj", 2560, 4096, 8},
      {"gdn in_proj", 2 * 2048 + 2 * 4096 + 2 * 32, 2560, 24},
      {"gdn out_proj", 2560, 4096, 24},
      {"mlp gate_up", 2 * 9216, 2560, 32},
      {"mlp down", 2560, 9216, 32},
      {"lm_head", 248320, 2560, 1, true}}},
    {"27B",
     {{"attn qkv", 2 * 6144 + 2 * 1024, 5120, 16},
      {"attn o_proj", 5120, 6144, 16},
      {"gdn in_proj", 2 * 2048 + 2 * 6144 + 2 * 48, 5120, 48},
      {"gdn out_proj", 5120, 6144, 48},
      {"mlp gate_up", 2 * 17408, 5120, 64},
      {"mlp down", 5120, 17408, 64},
      {"lm_head", 248320, 5120, 1, true}}},
};

// The rotating operand sets of one matrix at one M.
struct Operands {
  std::vector<Tensor> weights, xs, outs;
  double bytes = 0;  // one call: weight + x + out

  bool make(const Matrix& mat, int64_t m) {
    const DType out_dtype = mat.logits ? DType::kF32 : DType::kBF16;
    const double weight_bytes = 2.0 * static_cast<double>(mat.n * mat.k);
    const int sets = static_cast<int>(std::clamp<double>(
        std::ceil(static_cast<double>(kRotationBytes) / weight_bytes), 1.0, kMaxSets));
    for (int i = 0; i < sets; ++i) {
      auto w = Tensor::try_empty({mat.n, mat.k}, DType::kBF16, Device::cuda());
      auto x = Tensor::try_empty({m, mat.k}, DType::kBF16, Device::cuda());
      auto out = Tensor::try_empty({m, mat.n}, out_dtype, Device::cuda());
      if (!w || !x || !out) return false;
      // Small values: no overflow, no denormal slow paths.
      if (!cuda::fill_uniform(*w, -0.05f, 0.05f, 2 * i + 1, nullptr).is_ok() ||
          !cuda::fill_uniform(*x, -1.0f, 1.0f, 2 * i + 2, nullptr).is_ok()) {
        return false;
      }
      weights.push_back(*w);
      xs.push_back(*x);
      outs.push_back(*out);
    }
    bytes = weight_bytes + 2.0 * static_cast<double>(m * mat.k) +
            static_cast<double>(m * mat.n) * static_cast<double>(dtype_size(out_dtype));
    return true;
  }
  int sets() const { return static_cast<int>(weights.size()); }
};

double percent_of_roofline(double bytes, double us) {
  return 100.0 * bytes / (us * 1e-6) / 1e9 / kHbmRooflineGBs;
}

class GemvCudaBench : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_test::bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time the GEMV";
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_TRUE(cuda::init().is_ok());
    auto blas = cuda::BlasContext::create(Device::cuda());
    ASSERT_TRUE(blas) << blas.status().to_string();
    blas_ = std::move(*blas);
  }

  // Median us of cuda::linear over the sets, with the GEMV up to `gemv_rows` rows.
  double time_linear(Operands& ops, int64_t gemv_rows) {
    EXPECT_TRUE(blas_->set_gemv_max_rows(gemv_rows).is_ok());
    return cuda_test::time_launches(
        [&](int i) {
          return cuda::linear(*blas_, ops.xs[i], ops.weights[i], Tensor(), ops.outs[i], nullptr);
        },
        ops.sets());
  }

  std::unique_ptr<cuda::BlasContext> blas_;
};

constexpr int64_t kBatches[] = {1, 2, 4, 8, 16};

TEST_F(GemvCudaBench, DecodeProjections) {
  std::printf(
      "\n| model | matrix | M | N | K | GEMV us | GEMV GB/s | of 4.3 TB/s | cuBLASLt us |"
      " cuBLASLt GB/s | of 4.3 TB/s | speedup |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct Step {
    double gemv_us = 0, blas_us = 0, bytes = 0;
  };
  std::vector<std::vector<Step>> steps(std::size(kModels), std::vector<Step>(std::size(kBatches)));
  for (size_t mi = 0; mi < std::size(kModels); ++mi) {
    const Model& model = kModels[mi];
    for (const Matrix& mat : model.matrices) {
      for (size_t bi = 0; bi < std::size(kBatches); ++bi) {
        const int64_t m = kBatches[bi];
        Operands ops;
        ASSERT_TRUE(ops.make(mat, m)) << "out of device memory?";
        const double gemv_us = time_linear(ops, cuda::kGemvMaxRows);
        const double blas_us = time_linear(ops, 0);
        if (gemv_us <= 0.0 || blas_us <= 0.0) continue;
        const double gbs_gemv = ops.bytes / (gemv_us * 1e-6) / 1e9;
        const double gbs_blas = ops.bytes / (blas_us * 1e-6) / 1e9;
        std::printf(
            "| %s | %s | %lld | %lld | %lld | %.1f | %.0f | %.1f%% | %.1f | %.0f | %.1f%% | "
            "%.2fx |\n",
            model.name, mat.name, static_cast<long long>(m), static_cast<long long>(mat.n),
            static_cast<long long>(mat.k), gemv_us, gbs_gemv, 100.0 * gbs_gemv / kHbmRooflineGBs,
            blas_us, gbs_blas, 100.0 * gbs_blas / kHbmRooflineGBs, blas_us / gemv_us);
        std::fflush(stdout);
        Step& step = steps[mi][bi];
        step.gemv_us += gemv_us * mat.layers;
        step.blas_us += blas_us * mat.layers;
        step.bytes += ops.bytes * mat.layers;
      }
    }
  }
  ASSERT_TRUE(blas_->set_gemv_max_rows(cuda::kGemvCrossoverRows).is_ok());

  std::printf(
      "\n| model | M | step weights MB | roofline us | GEMV us | of roofline | cuBLASLt us |"
      " of roofline | speedup |\n|---|---|---|---|---|---|---|---|---|\n");
  for (size_t mi = 0; mi < std::size(kModels); ++mi) {
    for (size_t bi = 0; bi < std::size(kBatches); ++bi) {
      const Step& s = steps[mi][bi];
      if (s.bytes == 0) continue;
      std::printf("| %s | %lld | %.0f | %.0f | %.0f | %.1f%% | %.0f | %.1f%% | %.2fx |\n",
                  kModels[mi].name, static_cast<long long>(kBatches[bi]), s.bytes / 1e6,
                  s.bytes / (kHbmRooflineGBs * 1e3), s.gemv_us,
                  percent_of_roofline(s.bytes, s.gemv_us), s.blas_us,
                  percent_of_roofline(s.bytes, s.blas_us), s.blas_us / s.gemv_us);
    }
  }
  std::fflush(stdout);
}

TEST_F(GemvCudaBench, LaunchShapes) {
  const int sms = cuda::multiprocessor_count(0);
  std::printf(
      "\n| model | matrix | M | rows x warps | blocks | us | of 4.3 TB/s | chosen |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (const Model& model : kModels) {
    for (const Matrix& mat : model.matrices) {
      for (int64_t m : {int64_t{1}, int64_t{16}}) {
        Operands ops;
        ASSERT_TRUE(ops.make(mat, m)) << "out of device memory?";
        std::vector<cuda::detail::GemvProblem> problems;
        for (int i = 0; i < ops.sets(); ++i) {
          auto p =
              cuda::detail::gemv_problem("bench", ops.xs[i], ops.weights[i], Tensor(), ops.outs[i]);
          ASSERT_TRUE(p) << p.status().to_string();
          problems.push_back(*p);
        }
        const cuda::detail::GemvLaunch chosen = cuda::detail::choose_gemv_launch(mat.n, sms);
        for (int rows : {16, 32}) {
          for (int warps : {2, 4, 8}) {
            const cuda::detail::GemvLaunch launch{rows, warps};
            const double us = cuda_test::time_launches(
                [&](int i) { return cuda::detail::launch_gemv(problems[i], launch, nullptr); },
                ops.sets());
            if (us <= 0.0) continue;
            const bool is_chosen = rows == chosen.rows_per_block && warps == chosen.warps;
            std::printf("| %s | %s | %lld | %d x %d | %lld | %.1f | %.1f%% | %s |\n", model.name,
                        mat.name, static_cast<long long>(m), rows, warps,
                        static_cast<long long>((mat.n + rows - 1) / rows), us,
                        percent_of_roofline(ops.bytes, us), is_chosen ? "<-" : "");
          }
        }
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace
}  // namespace vllm

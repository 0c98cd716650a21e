// Backend parity for RMSNorm: vllm::cuda::rms_norm / fused_add_rms_norm against the CPU
// reference ops on fresh random inputs, every dtype combination, several shapes (odd hidden
// sizes, strided and unaligned slices, out aliasing x). Outputs are poisoned with NaN first so
// an element the kernel never wrote fails; NaN never passes the error check.
//
// BF16 activations are compared with the CPU op run in f32 on the same (bf16-rounded) inputs.
// Without a GPU every test but the argument check is skipped. bench_norm_cuda.cpp holds the
// timing mode (VLLM_BENCH=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::fill_nan;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::to_f32;

constexpr float kEps = 1e-6f;

double tolerance(DType activation) {
  return activation == DType::kF32 ? 1e-6 : 1e-2;
}

std::string case_name(int64_t rows, int64_t hidden, DType act, DType weight, bool unit_offset) {
  return fmt::format("[{} x {}] x={} weight={} unit_offset={}", rows, hidden, dtype_name(act),
                     dtype_name(weight), unit_offset);
}

// Weights near 1 for the plain form, near 0 for the (1 + weight) form, as real checkpoints.
Tensor random_weight(int64_t hidden, DType dtype, bool unit_offset, std::mt19937& rng) {
  return random_tensor({hidden}, dtype, rng, unit_offset ? 0.0f : 1.0f, 0.2f);
}

class NormCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA parity tests skipped";
    Status status = cuda::init();
    ASSERT_TRUE(status.is_ok()) << status.to_string();
  }
  std::mt19937 rng_{20240611};
};

const int64_t kRows[] = {1, 3, 257};
const int64_t kHidden[] = {7, 64, 1000, 2048, 4097};
const DType kActs[] = {DType::kF32, DType::kBF16};
const DType kWeights[] = {DType::kF32, DType::kBF16, DType::kF16};

TEST_F(NormCuda, RmsNormMatchesCpu) {
  int cases = 0;
  for (int64_t rows : kRows) {
    for (int64_t hidden : kHidden) {
      for (DType act : kActs) {
        for (DType wdt : kWeights) {
          for (bool unit_offset : {false, true}) {
            SCOPED_TRACE(case_name(rows, hidden, act, wdt, unit_offset));
            Tensor x = random_tensor({rows, hidden}, act, rng_, 0.1f, 1.5f);
            Tensor w = random_weight(hidden, wdt, unit_offset, rng_);
            Tensor x_f32 = to_f32(x);
            Tensor ref = Tensor::empty({rows, hidden}, DType::kF32);
            ASSERT_TRUE(cpu::rms_norm(x_f32, w, kEps, unit_offset, ref).is_ok());

            auto x_gpu = cuda::copy_to_device(x);
            auto w_gpu = cuda::copy_to_device(w);
            auto out_gpu = cuda::copy_to_device(fill_nan({rows, hidden}, act));
            ASSERT_TRUE(x_gpu && w_gpu && out_gpu);
            Status status = cuda::rms_norm(*x_gpu, *w_gpu, kEps, unit_offset, *out_gpu);
            ASSERT_TRUE(status.is_ok()) << status.to_string();
            auto out = cuda::copy_to_host(*out_gpu);
            ASSERT_TRUE(out) << out.status().to_string();
            EXPECT_TRUE(relative_l2(to_f32(*out), ref, tolerance(act)));
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 180);
}

TEST_F(NormCuda, FusedAddRmsNormMatchesCpu) {
  for (int64_t rows : kRows) {
    for (int64_t hidden : kHidden) {
      for (DType act : kActs) {
        for (DType wdt : kWeights) {
          for (bool unit_offset : {false, true}) {
            SCOPED_TRACE(case_name(rows, hidden, act, wdt, unit_offset));
            Tensor x = random_tensor({rows, hidden}, act, rng_, 0.0f, 1.0f);
            Tensor residual = random_tensor({rows, hidden}, act, rng_, 0.2f, 3.0f);
            Tensor w = random_weight(hidden, wdt, unit_offset, rng_);
            Tensor x_ref = to_f32(x);
            Tensor residual_ref = to_f32(residual);
            ASSERT_TRUE(cpu::fused_add_rms_norm(x_ref, residual_ref, w, kEps, unit_offset).is_ok());

            auto x_gpu = cuda::copy_to_device(x);
            auto residual_gpu = cuda::copy_to_device(residual);
            auto w_gpu = cuda::copy_to_device(w);
            ASSERT_TRUE(x_gpu && residual_gpu && w_gpu);
            Status status =
                cuda::fused_add_rms_norm(*x_gpu, *residual_gpu, *w_gpu, kEps, unit_offset);
            ASSERT_TRUE(status.is_ok()) << status.to_string();
            auto x_out = cuda::copy_to_host(*x_gpu);
            auto residual_out = cuda::copy_to_host(*residual_gpu);
            ASSERT_TRUE(x_out && residual_out);
            // An element the kernel skipped keeps its input value, far from the reference.
            EXPECT_TRUE(relative_l2(to_f32(*residual_out), residual_ref, tolerance(act)))
                << "residual";
            EXPECT_TRUE(relative_l2(to_f32(*x_out), x_ref, tolerance(act))) << "x";
          }
        }
      }
    }
  }
}

// BF16 activations over an F32 residual stream: the sum is kept in f32.
TEST_F(NormCuda, FusedAddRmsNormWithF32Residual) {
  for (int64_t rows : kRows) {
    for (int64_t hidden : kHidden) {
      for (bool unit_offset : {false, true}) {
        SCOPED_TRACE(case_name(rows, hidden, DType::kBF16, DType::kBF16, unit_offset));
        Tensor x = random_tensor({rows, hidden}, DType::kBF16, rng_, 0.0f, 1.0f);
        Tensor residual = random_tensor({rows, hidden}, DType::kF32, rng_, 0.2f, 3.0f);
        Tensor w = random_weight(hidden, DType::kBF16, unit_offset, rng_);
        Tensor x_ref = to_f32(x);
        Tensor residual_ref = to_f32(residual);
        ASSERT_TRUE(cpu::fused_add_rms_norm(x_ref, residual_ref, w, kEps, unit_offset).is_ok());
        auto x_gpu = cuda::copy_to_device(x);
        auto residual_gpu = cuda::copy_to_device(residual);
        auto w_gpu = cuda::copy_to_device(w);
        ASSERT_TRUE(x_gpu && residual_gpu && w_gpu);
        Status status = cuda::fused_add_rms_norm(*x_gpu, *residual_gpu, *w_gpu, kEps, unit_offset);
        ASSERT_TRUE(status.is_ok()) << status.to_string();
        auto x_out = cuda::copy_to_host(*x_gpu);
        auto residual_out = cuda::copy_to_host(*residual_gpu);
        ASSERT_TRUE(x_out && residual_out);
        EXPECT_TRUE(relative_l2(*residual_out, residual_ref, 1e-6)) << "residual";
        EXPECT_TRUE(relative_l2(to_f32(*x_out), x_ref, 1e-2)) << "x";
      }
    }
  }
}

TEST_F(NormCuda, OutputMayAliasInput) {
  for (DType act : kActs) {
    for (int64_t hidden : {int64_t{4097}, int64_t{8192}, int64_t{40000}}) {
      SCOPED_TRACE(case_name(5, hidden, act, DType::kBF16, false));
      Tensor x = random_tensor({5, hidden}, act, rng_, 0.0f, 2.0f);
      Tensor w = random_weight(hidden, DType::kBF16, false, rng_);
      Tensor ref = Tensor::empty({5, hidden}, DType::kF32);
      ASSERT_TRUE(cpu::rms_norm(to_f32(x), w, kEps, false, ref).is_ok());
      auto x_gpu = cuda::copy_to_device(x);
      auto w_gpu = cuda::copy_to_device(w);
      ASSERT_TRUE(x_gpu && w_gpu);
      Status status = cuda::rms_norm(*x_gpu, *w_gpu, kEps, false, *x_gpu);
      ASSERT_TRUE(status.is_ok()) << status.to_string();
      auto out = cuda::copy_to_host(*x_gpu);
      ASSERT_TRUE(out);
      EXPECT_TRUE(relative_l2(to_f32(*out), ref, tolerance(act)));
    }
  }
}

// Enough rows (more than two per SM) that the launcher picks the smallest blocks that hold a
// row in registers, through both ops.
TEST_F(NormCuda, ManyRows) {
  const int64_t rows = 777;
  for (DType act : kActs) {
    for (int64_t hidden : {int64_t{64}, int64_t{2048}, int64_t{8192}}) {
      SCOPED_TRACE(case_name(rows, hidden, act, DType::kBF16, false));
      Tensor x = random_tensor({rows, hidden}, act, rng_, 0.0f, 1.0f);
      Tensor residual = random_tensor({rows, hidden}, act, rng_, 0.0f, 2.0f);
      Tensor w = random_weight(hidden, DType::kBF16, false, rng_);
      Tensor out_ref = Tensor::empty({rows, hidden}, DType::kF32);
      Tensor x_ref = to_f32(x);
      Tensor residual_ref = to_f32(residual);
      ASSERT_TRUE(cpu::rms_norm(x_ref, w, kEps, false, out_ref).is_ok());
      ASSERT_TRUE(cpu::fused_add_rms_norm(x_ref, residual_ref, w, kEps, false).is_ok());

      auto x_gpu = cuda::copy_to_device(x);
      auto residual_gpu = cuda::copy_to_device(residual);
      auto w_gpu = cuda::copy_to_device(w);
      auto out_gpu = cuda::copy_to_device(fill_nan({rows, hidden}, act));
      ASSERT_TRUE(x_gpu && residual_gpu && w_gpu && out_gpu);
      ASSERT_TRUE(cuda::rms_norm(*x_gpu, *w_gpu, kEps, false, *out_gpu).is_ok());
      ASSERT_TRUE(cuda::fused_add_rms_norm(*x_gpu, *residual_gpu, *w_gpu, kEps, false).is_ok());
      auto out = cuda::copy_to_host(*out_gpu);
      auto x_out = cuda::copy_to_host(*x_gpu);
      auto residual_out = cuda::copy_to_host(*residual_gpu);
      ASSERT_TRUE(out && x_out && residual_out);
      EXPECT_TRUE(relative_l2(to_f32(*out), out_ref, tolerance(act))) << "rms_norm";
      EXPECT_TRUE(relative_l2(to_f32(*residual_out), residual_ref, tolerance(act))) << "residual";
      EXPECT_TRUE(relative_l2(to_f32(*x_out), x_ref, tolerance(act))) << "fused x";
    }
  }
}

// Rows too long for the register-cached path (vectorised, re-reading the row) and an odd
// long row (element-wise), through both ops.
TEST_F(NormCuda, LongRows) {
  for (DType act : kActs) {
    for (int64_t hidden : {int64_t{40000}, int64_t{36865}}) {
      SCOPED_TRACE(case_name(3, hidden, act, DType::kBF16, true));
      Tensor x = random_tensor({3, hidden}, act, rng_, 0.0f, 1.0f);
      Tensor residual = random_tensor({3, hidden}, act, rng_, 0.0f, 2.0f);
      Tensor w = random_weight(hidden, DType::kBF16, true, rng_);
      Tensor out_ref = Tensor::empty({3, hidden}, DType::kF32);
      Tensor x_ref = to_f32(x);
      Tensor residual_ref = to_f32(residual);
      ASSERT_TRUE(cpu::rms_norm(x_ref, w, kEps, true, out_ref).is_ok());
      ASSERT_TRUE(cpu::fused_add_rms_norm(x_ref, residual_ref, w, kEps, true).is_ok());

      auto x_gpu = cuda::copy_to_device(x);
      auto residual_gpu = cuda::copy_to_device(residual);
      auto w_gpu = cuda::copy_to_device(w);
      auto out_gpu = cuda::copy_to_device(fill_nan({3, hidden}, act));
      ASSERT_TRUE(x_gpu && residual_gpu && w_gpu && out_gpu);
      ASSERT_TRUE(cuda::rms_norm(*x_gpu, *w_gpu, kEps, true, *out_gpu).is_ok());
      ASSERT_TRUE(cuda::fused_add_rms_norm(*x_gpu, *residual_gpu, *w_gpu, kEps, true).is_ok());
      auto out = cuda::copy_to_host(*out_gpu);
      auto x_out = cuda::copy_to_host(*x_gpu);
      auto residual_out = cuda::copy_to_host(*residual_gpu);
      ASSERT_TRUE(out && x_out && residual_out);
      EXPECT_TRUE(relative_l2(to_f32(*out), out_ref, tolerance(act))) << "rms_norm";
      EXPECT_TRUE(relative_l2(to_f32(*residual_out), residual_ref, tolerance(act))) << "residual";
      EXPECT_TRUE(relative_l2(to_f32(*x_out), x_ref, tolerance(act))) << "fused x";
    }
  }
}

// Row-strided slices: one aligned (vectorised path with a row stride), one shifted by an
// element (element-wise path). Elements of the output buffer outside the slice stay NaN.
TEST_F(NormCuda, StridedAndUnalignedSlices) {
  const int64_t rows = 9;
  const int64_t hidden = 1024;
  struct Layout {
    int64_t in_begin, out_begin;
  };
  for (DType act : kActs) {
    for (Layout layout : {Layout{0, 8}, Layout{1, 3}}) {
      SCOPED_TRACE(fmt::format("{} x from column {}, out from column {}", dtype_name(act),
                               layout.in_begin, layout.out_begin));
      const int64_t width = hidden + 16;
      Tensor x_big = random_tensor({rows, width}, act, rng_, 0.0f, 1.0f);
      Tensor w = random_weight(hidden, DType::kF32, true, rng_);
      Tensor x_f32 = to_f32(x_big).slice(1, layout.in_begin, layout.in_begin + hidden);
      Tensor ref = Tensor::empty({rows, hidden}, DType::kF32);
      ASSERT_TRUE(cpu::rms_norm(x_f32, w, kEps, true, ref).is_ok());

      auto x_gpu = cuda::copy_to_device(x_big);
      auto w_gpu = cuda::copy_to_device(w);
      auto out_big = cuda::copy_to_device(fill_nan({rows, width}, act));
      ASSERT_TRUE(x_gpu && w_gpu && out_big);
      Tensor x_view = x_gpu->slice(1, layout.in_begin, layout.in_begin + hidden);
      Tensor out_view = out_big->slice(1, layout.out_begin, layout.out_begin + hidden);
      Status status = cuda::rms_norm(x_view, *w_gpu, kEps, true, out_view);
      ASSERT_TRUE(status.is_ok()) << status.to_string();

      auto out = cuda::copy_to_host(*out_big);
      ASSERT_TRUE(out);
      Tensor out_f32 = to_f32(*out);
      EXPECT_TRUE(relative_l2(out_f32.slice(1, layout.out_begin, layout.out_begin + hidden).clone(),
                              ref, tolerance(act)));
      int64_t written_outside = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < width; ++c) {
          bool inside = c >= layout.out_begin && c < layout.out_begin + hidden;
          if (!inside && !std::isnan(out_f32.data<float>()[r * width + c])) ++written_outside;
        }
      }
      EXPECT_EQ(written_outside, 0);
    }
  }
}

TEST_F(NormCuda, RejectsBadArguments) {
  Tensor w = random_weight(64, DType::kF32, false, rng_);
  auto w_gpu = cuda::copy_to_device(w);
  auto x16 = cuda::copy_to_device(random_tensor({2, 64}, DType::kF16, rng_, 0.0f, 1.0f));
  auto x32 = cuda::copy_to_device(random_tensor({2, 64}, DType::kF32, rng_, 0.0f, 1.0f));
  auto xbf = cuda::copy_to_device(random_tensor({2, 64}, DType::kBF16, rng_, 0.0f, 1.0f));
  auto w_short = cuda::copy_to_device(random_weight(63, DType::kF32, false, rng_));
  ASSERT_TRUE(w_gpu && x16 && x32 && xbf && w_short);

  Tensor out16 = *x16;
  Status s = cuda::rms_norm(*x16, *w_gpu, kEps, false, out16);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  Tensor out_bf = *xbf;
  s = cuda::rms_norm(*x32, *w_gpu, kEps, false, out_bf);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("out"), std::string::npos) << s.message();
  Tensor out32 = *x32;
  s = cuda::rms_norm(*x32, *w_short, kEps, false, out32);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("weight"), std::string::npos) << s.message();
  s = cuda::rms_norm(*x32, w, kEps, false, out32);  // weight left on the CPU
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::fused_add_rms_norm(out32, out_bf, *w_gpu, kEps, false);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

// Needs no GPU: CPU tensors are refused before anything touches CUDA.
TEST(NormCudaArgs, RefusesCpuTensors) {
  Tensor x = Tensor::zeros({2, 8}, DType::kF32);
  Tensor w = Tensor::zeros({8}, DType::kF32);
  Tensor out = Tensor::zeros({2, 8}, DType::kF32);
  Status s = cuda::rms_norm(x, w, kEps, false, out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a CUDA tensor"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vllm

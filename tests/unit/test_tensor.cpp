#include <gtest/gtest.h>

#include "tensor/tensor.h"

namespace vllm {
namespace test_tensor {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType d :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kF64,
        DType::kI64, DType::kI32, DType::kI16, DType::kI8, DType::kU8, DType::kBool}) {
    auto parsed = dtype_from_name(dtype_name(d));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, d);
  }
  auto bad = dtype_from_name("F4");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(bad.status().message().find("'F4'"), std::string::npos);
}

TEST(Tensor, EmptyViewSliceClone) {
  Tensor t = Tensor::empty({3, 5, 7}, DType::kF32);
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 420u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (Shape{35, 7, 1}));
  float* p = t.data<float>();
  for (int i = 0; i < 105; ++i) p[i] = static_cast<float>(i);

  Tensor v = t.view({15, -1});
  EXPECT_EQ(v.shape(), (Shape{15, 7}));
  EXPECT_EQ(v.data<float>(), p);

  Tensor s = t.slice(1, 2, 4);  // [3, 2, 7], not contiguous
  EXPECT_EQ(s.shape(), (Shape{3, 2, 7}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data<float>()[0], 14.0f);
  Tensor c = s.clone();
  EXPECT_TRUE(c.is_contiguous());
  const float* cp = c.data<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 7; ++k) EXPECT_EQ(cp[(i * 2 + j) * 7 + k], p[i * 35 + (j + 2) * 7 + k]);
  EXPECT_EQ(t.to_string(), "F32[3, 5, 7] cpu");
}

TEST(Tensor, NumelOverflowIsAnError) {
  auto r = Tensor::try_empty({INT64_MAX / 2, 4}, DType::kF32);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfRange);
  auto n = Tensor::try_empty({2, -3}, DType::kF32);
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.status().code(), ErrorCode::kInvalidArgument);
}

TEST(Tensor, NoCudaAllocatorIsAnError) {
  auto r = Tensor::try_empty({4}, DType::kF32, Device::cuda(0));
  // Either a CUDA backend registered itself or the error names the device.
  if (!r.has_value()) {
    EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos);
  }
}

TEST(Status, ExpectedAndMacros) {
  auto fails = []() -> Expected<int> {
    return make_error(ErrorCode::kNotFound, "tensor '{}' not found", "x");
  };
  auto chained = [&]() -> Expected<int> {
    VLLM_ASSIGN_OR_RETURN(int v, fails());
    return v + 1;
  };
  auto r = chained();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().to_string(), "not found: tensor 'x' not found");
  EXPECT_EQ(r.status().with_context("model.safetensors").message(),
            "model.safetensors: tensor 'x' not found");
  Expected<int> ok = 41;
  EXPECT_EQ(*ok, 41);
}

}  // namespace
}  // namespace test_tensor
}  // namespace vllm

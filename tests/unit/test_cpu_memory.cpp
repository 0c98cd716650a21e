// CPU memory helpers of the backend: the zero-filled mapping behind the KV cache and GDN
// state (cache_memory.h) and the huge-page weight arena (weight_memory.h).
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cache_memory.h"
#include "backend/cpu/weight_memory.h"

namespace vllm {
namespace test_cpu_memory {
namespace {

TEST(CpuCacheMemory, ZeroedMappingReadsZeroAndIsWritable) {
  Tensor view;
  {
    // 64 MiB: more than a start-up memset would want to touch.
    auto t = cpu::zeroed_mapping({16, 1024, 1024}, DType::kF32);
    ASSERT_TRUE(t.has_value()) << t.status().to_string();
    EXPECT_TRUE(t->is_contiguous());
    EXPECT_TRUE(t->device().is_cpu());
    float* p = t->data<float>();
    const int64_t n = t->numel();
    for (int64_t i = 0; i < n; i += 4093) EXPECT_EQ(p[i], 0.0f) << i;
    EXPECT_EQ(p[n - 1], 0.0f);
    p[0] = 1.5f;
    p[n - 1] = -2.0f;
    view = t->view({16, 1024 * 1024});
  }
  // The mapping lives as long as any view of it.
  EXPECT_EQ(view.data<float>()[0], 1.5f);
  EXPECT_EQ(view.data<float>()[view.numel() - 1], -2.0f);
}

TEST(CpuCacheMemory, EmptyShapesAndBadShapes) {
  auto empty = cpu::zeroed_mapping({0, 8}, DType::kBF16);
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->numel(), 0);
  auto negative = cpu::zeroed_mapping({-1, 8}, DType::kF32);
  EXPECT_FALSE(negative.has_value());
}

TEST(CpuWeightArena, CopiesAreEqualAndIndependent) {
  Tensor src = Tensor::zeros({300, 7}, DType::kF32);
  for (int64_t i = 0; i < src.numel(); ++i) src.data<float>()[i] = static_cast<float>(i) * 0.5f;
  cpu::WeightArena arena;
  auto copy = arena.copy(src);
  ASSERT_TRUE(copy.has_value()) << copy.status().to_string();
  ASSERT_EQ(copy->shape(), src.shape());
  EXPECT_EQ(std::memcmp(copy->data_ptr(), src.data_ptr(), src.nbytes()), 0);
  EXPECT_NE(copy->data_ptr(), src.data_ptr());
}

}  // namespace
}  // namespace test_cpu_memory
}  // namespace vllm

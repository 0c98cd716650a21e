// Backend parity for reshape_and_cache (backend/cuda/cache.cuh) against
// cpu::reshape_and_cache: random slot mappings with -1 padding over a NaN-poisoned cache of
// 16-token blocks, F32 and BF16, key/value as slices of a fused qkv buffer (aligned and not)
// and as contiguous [T, Hk, D]. The whole cache is compared bit for bit, so both a missing
// write and a write into a slot not listed show.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cuda/cache.cuh"
#include "cuda_device_util.h"
#include "cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::fill_nan;
using cuda_test::random_tensor;
using cuda_test::same_values;
using cuda_test::to_device;
using cuda_test::to_f32;
using cuda_test::to_host_f32;

constexpr int64_t kBlockSize = 16;

// Distinct slots for `tokens` tokens out of num_slots, about a fifth of them -1 (padding).
Tensor random_slots(int64_t tokens, int64_t num_slots, std::mt19937& rng) {
  // Token 0 takes the cache's last slot (an off-by-one bound shows); the others a random
  // permutation of the rest, so no two tokens share a slot.
  std::vector<int64_t> rest(static_cast<size_t>(num_slots - 1));
  std::iota(rest.begin(), rest.end(), 0);
  std::shuffle(rest.begin(), rest.end(), rng);
  Tensor slots = Tensor::empty({tokens}, DType::kI64);
  std::bernoulli_distribution pad(0.2);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = t == 0 ? num_slots - 1 : rest[static_cast<size_t>(t - 1)];
    slots.data<int64_t>()[t] = (t > 0 && pad(rng)) ? -1 : slot;
  }
  return slots;
}

struct CacheCase {
  int64_t tokens, kv_heads, head_dim, num_blocks;
  DType dtype;
  int64_t column_offset;  // of k within the fused buffer; -1: contiguous [T, Hk, D] tensors

  std::string name() const {
    return fmt::format("T={} Hk={} D={} blocks={} {} offset={}", tokens, kv_heads, head_dim,
                       num_blocks, dtype_name(dtype), column_offset);
  }
};

class CacheCuda : public cuda_test::CudaTest {
 protected:
  std::mt19937 rng_{777};
};

TEST_F(CacheCuda, ReshapeAndCacheMatchesCpu) {
  std::vector<CacheCase> cases;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t offset : {int64_t{-1}, int64_t{0}, int64_t{8}, int64_t{1}}) {
      cases.push_back({1, 4, 256, 3, dtype, offset});
      cases.push_back({13, 1, 64, 2, dtype, offset});
      cases.push_back({100, 2, 128, 9, dtype, offset});
      cases.push_back({37, 3, 5, 4, dtype, offset});  // 15-element rows: element-wise copies
    }
  }
  for (const CacheCase& c : cases) {
    SCOPED_TRACE(c.name());
    const int64_t row = c.kv_heads * c.head_dim;
    const Shape cache_shape{c.num_blocks, 2, kBlockSize, c.kv_heads, c.head_dim};
    const int64_t num_slots = c.num_blocks * kBlockSize;
    ASSERT_LE(c.tokens, num_slots);
    Tensor slots = random_slots(c.tokens, num_slots, rng_);

    Tensor key_host, value_host;  // what the GPU op reads
    Tensor key_f32, value_f32;    // the same values, contiguous F32 [T, row], for the CPU op
    Tensor key_gpu, value_gpu, qkv_gpu;
    if (c.column_offset < 0) {
      key_host = random_tensor({c.tokens, c.kv_heads, c.head_dim}, c.dtype, rng_, 0.0f, 1.0f);
      value_host = random_tensor({c.tokens, c.kv_heads, c.head_dim}, c.dtype, rng_, 0.0f, 1.0f);
      key_f32 = to_f32(key_host).view({c.tokens, row});
      value_f32 = to_f32(value_host).view({c.tokens, row});
      key_gpu = to_device(key_host);
      value_gpu = to_device(value_host);
    } else {
      // [T, offset + q (row) + k (row) + v (row)]: k and v are slices with a row stride.
      const int64_t width = c.column_offset + 3 * row;
      Tensor qkv = random_tensor({c.tokens, width}, c.dtype, rng_, 0.0f, 1.0f);
      const int64_t k0 = c.column_offset + row, v0 = k0 + row;
      Tensor all = to_f32(qkv);
      key_f32 = all.slice(1, k0, v0).clone();
      value_f32 = all.slice(1, v0, width).clone();
      qkv_gpu = to_device(qkv);
      ASSERT_TRUE(qkv_gpu.defined());
      key_gpu = qkv_gpu.slice(1, k0, v0);
      value_gpu = qkv_gpu.slice(1, v0, width);
    }

    Tensor cache_ref = fill_nan(cache_shape, DType::kF32);
    Status s = cpu::reshape_and_cache(key_f32, value_f32, cache_ref, slots);
    ASSERT_TRUE(s.is_ok()) << s.to_string();

    Tensor cache_gpu = to_device(fill_nan(cache_shape, c.dtype));
    s = cuda::reshape_and_cache(key_gpu, value_gpu, cache_gpu, to_device(slots), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(same_values(to_host_f32(cache_gpu), cache_ref));
  }
}

// A slot past the cache is skipped on the device (the CPU op reports it).
TEST_F(CacheCuda, SlotPastTheCacheIsSkipped) {
  const Shape cache_shape{2, 2, kBlockSize, 1, 8};
  Tensor key = random_tensor({3, 8}, DType::kF32, rng_, 0.0f, 1.0f);
  Tensor value = random_tensor({3, 8}, DType::kF32, rng_, 0.0f, 1.0f);
  Tensor slots = Tensor::empty({3}, DType::kI64);
  slots.data<int64_t>()[0] = 4;
  slots.data<int64_t>()[1] = 2 * kBlockSize;  // one past the last slot
  slots.data<int64_t>()[2] = 20;
  Tensor cache_ref = fill_nan(cache_shape, DType::kF32);
  Tensor valid_slots = slots.clone();
  valid_slots.data<int64_t>()[1] = -1;
  ASSERT_TRUE(cpu::reshape_and_cache(key, value, cache_ref, valid_slots).is_ok());
  Tensor cache_gpu = to_device(fill_nan(cache_shape, DType::kF32));
  Status s = cuda::reshape_and_cache(to_device(key), to_device(value), cache_gpu, to_device(slots),
                                     nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(same_values(to_host_f32(cache_gpu), cache_ref));
}

TEST_F(CacheCuda, RejectsBadArguments) {
  Tensor cache = to_device(fill_nan({2, 2, kBlockSize, 2, 8}, DType::kBF16));
  Tensor key_bf = to_device(random_tensor({3, 16}, DType::kBF16, rng_, 0.0f, 1.0f));
  Tensor key_f32 = to_device(random_tensor({3, 16}, DType::kF32, rng_, 0.0f, 1.0f));
  Tensor key_wide = to_device(random_tensor({3, 24}, DType::kBF16, rng_, 0.0f, 1.0f));
  Tensor slots = to_device(Tensor::zeros({3}, DType::kI64));
  Tensor slots32 = to_device(Tensor::zeros({3}, DType::kI32));
  Tensor slots_short = to_device(Tensor::zeros({2}, DType::kI64));
  Status s = cuda::reshape_and_cache(key_f32, key_f32, cache, slots, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("key"), std::string::npos) << s.message();
  s = cuda::reshape_and_cache(key_wide, key_wide, cache, slots, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::reshape_and_cache(key_bf, key_bf, cache, slots32, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::reshape_and_cache(key_bf, key_bf, cache, slots_short, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  Tensor flat_cache = to_device(fill_nan({4, kBlockSize, 16}, DType::kBF16));
  s = cuda::reshape_and_cache(key_bf, key_bf, flat_cache, slots, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

TEST(CacheCudaArgs, RefusesCpuTensors) {
  Tensor cache = Tensor::zeros({2, 2, kBlockSize, 1, 8}, DType::kF32);
  Tensor key = Tensor::zeros({2, 8}, DType::kF32);
  Tensor slots = Tensor::zeros({2}, DType::kI64);
  Status s = cuda::reshape_and_cache(key, key, cache, slots, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("expected a CUDA tensor"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vllm

// Backend parity for the rotary embedding (backend/cuda/rope.cuh) against cpu::rms_norm per
// head followed by cpu::rotary_embedding, with real cos/sin caches from
// vllm::compute_cos_sin_cache: head_dim 64/128/256, full, half and quarter (Qwen3.5) rotary,
// NeoX and GPT-J, no norm / plain norm (Qwen3) / (1 + w) norm (Qwen3.5), F32 and BF16. q and
// k are column slices of one fused qkv buffer, as the models produce them; the v columns must
// come back untouched.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "backend/cpu/ops.h"
#include "backend/cuda/rope.cuh"
#include "cuda_device_util.h"
#include "cuda_test_util.h"
#include "model/layers/rope.h"

namespace vllm {
namespace {

using cuda_test::fill_nan;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::same_values;
using cuda_test::to_device;
using cuda_test::to_f32;
using cuda_test::to_host_f32;

constexpr float kEps = 1e-6f;
constexpr int64_t kMaxPosition = 4096;

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : 1e-2;
}

enum class Norm { kNone, kPlain, kUnitOffset };

const char* norm_name(Norm n) {
  return n == Norm::kNone ? "none" : n == Norm::kPlain ? "w" : "1+w";
}

Tensor rope_cache(int64_t head_dim, double partial, int64_t max_position = kMaxPosition) {
  RopeConfig rope;
  rope.partial_rotary_factor = partial;
  rope.rope_theta = partial < 1.0 ? 1e7 : 1e6;  // Qwen3.5 / Qwen3
  auto cache = compute_cos_sin_cache(rope, head_dim, max_position);
  VLLM_CHECK_MSG(cache.has_value(), "{}", cache.status().to_string());
  return *cache;
}

// The CPU reference on x [T, H * D] (F32, contiguous): per-head RMSNorm when `weight` is
// defined, then the rotation.
Tensor reference(const Tensor& x, const Tensor& positions, const Tensor& cache, int64_t head_dim,
                 bool is_neox, const Tensor& weight, bool unit_offset) {
  Tensor out = x.clone();
  if (weight.defined()) {
    Tensor heads = out.view({-1, head_dim});
    Status s = cpu::rms_norm(heads, weight, kEps, unit_offset, heads);
    VLLM_CHECK_MSG(s.is_ok(), "{}", s.to_string());
  }
  Tensor no_key;
  Status s = cpu::rotary_embedding(positions, out, no_key, head_dim, cache, is_neox);
  VLLM_CHECK_MSG(s.is_ok(), "{}", s.to_string());
  return out;
}

Tensor random_positions(int64_t tokens, std::mt19937& rng, int64_t max_position = kMaxPosition) {
  Tensor p = Tensor::empty({tokens}, DType::kI64);
  std::uniform_int_distribution<int64_t> pick(0, max_position - 1);
  for (int64_t t = 0; t < tokens; ++t) {
    p.data<int64_t>()[t] = t == 0 ? 0 : t == 1 ? max_position - 1 : pick(rng);
  }
  return p;
}

struct QkvCase {
  int64_t tokens, q_heads, k_heads, head_dim;
  double partial;
  bool is_neox;
  Norm norm;
  DType dtype;
  DType weight_dtype;
  int64_t column_offset = 0;  // where qkv starts in its buffer (1: unaligned rows)

  std::string name() const {
    return fmt::format("T={} Hq={} Hk={} D={} partial={} {} norm={} {} weight={} offset={}", tokens,
                       q_heads, k_heads, head_dim, partial, is_neox ? "neox" : "gptj",
                       norm_name(norm), dtype_name(dtype), dtype_name(weight_dtype), column_offset);
  }
};

class RopeCuda : public cuda_test::CudaTest {
 protected:
  // Runs one case on a fused [T, offset + (Hq + 2 Hk) * D] buffer and checks q, k and v.
  void run_qkv_case(const QkvCase& c) {
    SCOPED_TRACE(c.name());
    const int64_t D = c.head_dim, q_width = c.q_heads * D, k_width = c.k_heads * D;
    const int64_t width = c.column_offset + q_width + 2 * k_width;
    Tensor cache = rope_cache(D, c.partial);
    Tensor positions = random_positions(c.tokens, rng_);
    Tensor qkv = random_tensor({c.tokens, width}, c.dtype, rng_, 0.0f, 1.0f);
    Tensor q_weight, k_weight;
    if (c.norm != Norm::kNone) {
      const float mean = c.norm == Norm::kUnitOffset ? 0.0f : 1.0f;
      q_weight = random_tensor({D}, c.weight_dtype, rng_, mean, 0.2f);
      k_weight = random_tensor({D}, c.weight_dtype, rng_, mean, 0.2f);
    }
    const bool unit_offset = c.norm == Norm::kUnitOffset;

    Tensor all_f32 = to_f32(qkv);
    const int64_t q0 = c.column_offset, k0 = q0 + q_width, v0 = k0 + k_width;
    Tensor q_ref = reference(all_f32.slice(1, q0, k0).clone(), positions, cache, D, c.is_neox,
                             q_weight, unit_offset);
    Tensor k_ref = reference(all_f32.slice(1, k0, v0).clone(), positions, cache, D, c.is_neox,
                             k_weight, unit_offset);

    Tensor qkv_gpu = to_device(qkv);
    ASSERT_TRUE(qkv_gpu.defined());
    Tensor query = qkv_gpu.slice(1, q0, k0);
    Tensor key = qkv_gpu.slice(1, k0, v0);
    cuda::RopeParams params;
    params.head_size = D;
    params.is_neox = c.is_neox;
    if (c.norm != Norm::kNone) {
      params.q_norm_weight = to_device(q_weight);
      params.k_norm_weight = to_device(k_weight);
    }
    params.norm_eps = kEps;
    params.norm_unit_offset = unit_offset;
    Status s =
        cuda::rotary_embedding(to_device(positions), query, key, to_device(cache), params, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();

    Tensor got = to_host_f32(qkv_gpu);
    ASSERT_TRUE(got.defined());
    EXPECT_TRUE(relative_l2(got.slice(1, q0, k0).clone(), q_ref, tolerance(c.dtype))) << "query";
    EXPECT_TRUE(relative_l2(got.slice(1, k0, v0).clone(), k_ref, tolerance(c.dtype))) << "key";
    EXPECT_TRUE(same_values(got.slice(1, v0, width).clone(), all_f32.slice(1, v0, width).clone()))
        << "value columns changed";
    if (c.column_offset > 0) {
      EXPECT_TRUE(same_values(got.slice(1, 0, q0).clone(), all_f32.slice(1, 0, q0).clone()))
          << "columns before q changed";
    }
  }

  std::mt19937 rng_{4242};
};

TEST_F(RopeCuda, FusedQkvMatchesCpu) {
  int cases = 0;
  for (int64_t head_dim : {int64_t{64}, int64_t{128}, int64_t{256}}) {
    for (double partial : {1.0, 0.5, 0.25}) {
      for (bool is_neox : {true, false}) {
        for (Norm norm : {Norm::kNone, Norm::kPlain, Norm::kUnitOffset}) {
          for (DType dtype : {DType::kF32, DType::kBF16}) {
            const DType weight_dtype = cases % 2 == 0 ? DType::kBF16 : DType::kF32;
            run_qkv_case({37, 8, 2, head_dim, partial, is_neox, norm, dtype, weight_dtype});
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 108);
}

// Qwen3.5-4B's full-attention layer at decode and prefill sizes: 16 q heads, 4 kv heads,
// head_dim 256, a quarter rotary, (1 + w) q/k norm in BF16.
TEST_F(RopeCuda, Qwen35Shapes) {
  for (int64_t tokens : {int64_t{1}, int64_t{2048}}) {
    run_qkv_case({tokens, 16, 4, 256, 0.25, true, Norm::kUnitOffset, DType::kBF16, DType::kBF16});
  }
}

// qkv starting one element into its buffer: rows are not 16-byte aligned, so the kernel
// loads element by element.
TEST_F(RopeCuda, UnalignedRowsMatchCpu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool is_neox : {true, false}) {
      run_qkv_case({19, 4, 2, 128, 0.5, is_neox, Norm::kPlain, dtype, DType::kF32, 1});
      run_qkv_case({19, 4, 2, 64, 1.0, is_neox, Norm::kNone, dtype, DType::kF32, 1});
    }
  }
}

// Contiguous [T, H, D] query, no key, I32 positions, an odd head size.
TEST_F(RopeCuda, QueryOnly3dWithInt32Positions) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t head_dim : {int64_t{64}, int64_t{72}, int64_t{30}}) {
      SCOPED_TRACE(fmt::format("{} D={}", dtype_name(dtype), head_dim));
      const int64_t tokens = 11, heads = 5;
      Tensor cache = rope_cache(head_dim, 1.0);
      Tensor positions = random_positions(tokens, rng_);
      Tensor pos32 = Tensor::empty({tokens}, DType::kI32);
      for (int64_t t = 0; t < tokens; ++t) {
        pos32.data<int32_t>()[t] = static_cast<int32_t>(positions.data<int64_t>()[t]);
      }
      Tensor q = random_tensor({tokens, heads, head_dim}, dtype, rng_, 0.0f, 1.0f);
      Tensor ref = reference(to_f32(q).view({tokens, heads * head_dim}), positions, cache, head_dim,
                             true, Tensor(), false);
      Tensor q_gpu = to_device(q);
      Tensor no_key;
      cuda::RopeParams params;
      params.head_size = head_dim;
      Status s = cuda::rotary_embedding(to_device(pos32), q_gpu, no_key, to_device(cache), params,
                                        nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      Tensor got = to_host_f32(q_gpu);
      ASSERT_TRUE(got.defined());
      EXPECT_TRUE(relative_l2(got.view({tokens, heads * head_dim}), ref, tolerance(dtype)));
    }
  }
}

// A position outside the cache leaves its row unrotated (normalised when the norm is on).
TEST_F(RopeCuda, PositionOutsideTheCacheIsNotRotated) {
  const int64_t head_dim = 64, heads = 2, tokens = 3;
  for (bool with_norm : {false, true}) {
    SCOPED_TRACE(with_norm ? "with norm" : "without norm");
    Tensor cache = rope_cache(head_dim, 1.0);
    // The reference cache has one more row, cos = 1 and sin = 0, for position kMaxPosition.
    Tensor ref_cache = Tensor::empty({kMaxPosition + 1, head_dim}, DType::kF32);
    std::copy_n(cache.data<float>(), cache.numel(), ref_cache.data<float>());
    for (int64_t i = 0; i < head_dim; ++i) {
      ref_cache.data<float>()[kMaxPosition * head_dim + i] = i < head_dim / 2 ? 1.0f : 0.0f;
    }
    Tensor positions = Tensor::empty({tokens}, DType::kI64);
    positions.data<int64_t>()[0] = 5;
    positions.data<int64_t>()[1] = kMaxPosition;
    positions.data<int64_t>()[2] = 9;
    Tensor q = random_tensor({tokens, heads * head_dim}, DType::kF32, rng_, 0.0f, 1.0f);
    Tensor weight = with_norm ? random_tensor({head_dim}, DType::kF32, rng_, 1.0f, 0.2f) : Tensor();
    Tensor ref = reference(q, positions, ref_cache, head_dim, true, weight, false);
    Tensor q_gpu = to_device(q);
    Tensor no_key;
    cuda::RopeParams params;
    params.head_size = head_dim;
    if (with_norm) params.q_norm_weight = to_device(weight);
    Status s = cuda::rotary_embedding(to_device(positions), q_gpu, no_key, to_device(cache), params,
                                      nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(relative_l2(to_host_f32(q_gpu), ref, 1e-5));
  }
}

TEST_F(RopeCuda, RejectsBadArguments) {
  Tensor cache = to_device(rope_cache(64, 1.0));
  Tensor positions = to_device(random_positions(2, rng_));
  Tensor q = to_device(random_tensor({2, 128}, DType::kF32, rng_, 0.0f, 1.0f));
  Tensor k_bf = to_device(random_tensor({2, 64}, DType::kBF16, rng_, 0.0f, 1.0f));
  Tensor no_key;
  cuda::RopeParams params;
  params.head_size = 48;  // 128 columns are not whole heads of 48
  Status s = cuda::rotary_embedding(positions, q, no_key, cache, params, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  params.head_size = 32;  // rot_dim 64 > head_size
  s = cuda::rotary_embedding(positions, q, no_key, cache, params, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  params.head_size = 64;
  s = cuda::rotary_embedding(positions, q, k_bf, cache, params, nullptr);  // dtypes differ
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  params.q_norm_weight = to_device(Tensor::zeros({32}, DType::kF32));  // not [head_size]
  s = cuda::rotary_embedding(positions, q, no_key, cache, params, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("q_norm_weight"), std::string::npos) << s.message();
  params.q_norm_weight = Tensor();
  params.k_norm_weight = to_device(Tensor::zeros({64}, DType::kF32));  // but no key
  s = cuda::rotary_embedding(positions, q, no_key, cache, params, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

TEST(RopeCudaArgs, RefusesCpuTensors) {
  Tensor positions = Tensor::zeros({2}, DType::kI64);
  Tensor q = Tensor::zeros({2, 64}, DType::kF32);
  Tensor no_key;
  Tensor cache = Tensor::zeros({8, 64}, DType::kF32);
  cuda::RopeParams params;
  params.head_size = 64;
  Status s = cuda::rotary_embedding(positions, q, no_key, cache, params, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("expected a CUDA tensor"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vllm

// Every SIMD variant of the CPU kernels against the portable one, on each variant this
// machine supports (cpu_isa.h): bitwise where the math is the same (weight widening), within
// f32 rounding where the summation order differs (FMA dot products).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/gdn.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/sum_exp.h"
#include "op_test_util.h"

namespace vllm {
namespace test_cpu_simd {
namespace {

using namespace vllm::test;  // NOLINT(google-build-using-namespace)
using cpu::CpuIsa;

// Runs the body with the given ISA active, restoring the previous one afterwards.
class IsaScope {
 public:
  explicit IsaScope(CpuIsa isa) : saved_(cpu::active_isa()) { active_ = cpu::set_active_isa(isa); }
  ~IsaScope() { cpu::set_active_isa(saved_); }
  CpuIsa active() const { return active_; }

 private:
  CpuIsa saved_, active_;
};

// The SIMD ISAs this CPU can run (skipping the test body for the others).
std::vector<CpuIsa> simd_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(cpu::detected_isa())) out.push_back(isa);
  }
  return out;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = values_of(a), bv = values_of(b);
  double num = 0, den = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    num += (av[i] - bv[i]) * (av[i] - bv[i]);
    den += bv[i] * bv[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

TEST(CpuSimd, ReportsTheDetectedIsa) {
  // Not an assertion on the machine: the log says which variants this run compared.
  std::printf("CPU ISA detected: %s (SIMD variants tested: %zu)\n",
              std::string(cpu::isa_name(cpu::detected_isa())).c_str(), simd_isas().size());
  EXPECT_EQ(cpu::isa_name(CpuIsa::kPortable), "portable");
  EXPECT_EQ(cpu::isa_name(CpuIsa::kAvx2), "avx2");
  EXPECT_EQ(cpu::isa_name(CpuIsa::kAvx512), "avx512");
  IsaScope scope(CpuIsa::kAvx512);
  EXPECT_EQ(scope.active(), cpu::detected_isa());  // lowered to what the CPU has
}

struct LinearCase {
  int64_t M, N, K;
};

// Every M of the direct kernel, tails in K (vector width) and N (tile rows), the one-row
// kernels at M = 1 (x in registers for K = 32 * b up to 256; on long rows K >= 1024 whole
// 64-column steps, a last 32-column block, a last partial 16), and above kDirectMaxM the
// AVX-512 tiled direct kernel for BF16/F16 weights (8-row tiles of x with a partial last
// one, blocks of 64 weight rows with a partial last one) and the BLAS path otherwise (the
// same sgemm on the same f32 weights, widened bitwise as the portable kernel does). At
// M = 1 the BF16 rows are read in four quarters side by side (AVX-512: K = 32 * b up to 256
// and K >= 1024; AVX2: K >= 256): N = 1..3 (no quarters, only the rows left over),
// N % 4 = 1..3 (quarters and one to three rows after them), K not a multiple of 8, 16 or
// 32, and N large enough to be split into chunks of row counts that are not multiples of 4
// on several threads.
constexpr LinearCase kLinearCases[] = {
    {1, 1, 1},     {1, 37, 15},   {1, 6, 32},     {1, 9, 96},     {1, 23, 256}, {1, 129, 1000},
    {1, 21, 1024}, {1, 13, 1056}, {1, 11, 1071},  {1, 1, 1024},   {1, 2, 1030}, {1, 3, 1100},
    {1, 4, 1024},  {1, 7, 2048},  {1, 70, 1040},  {1, 515, 1100}, {1, 2, 64},   {1, 3, 256},
    {1, 45, 160},  {1, 38, 300},  {1, 66, 264},   {1, 1027, 256}, {2, 9, 17},   {3, 33, 64},
    {4, 65, 100},  {5, 7, 31},    {6, 19, 250},   {7, 40, 8},     {8, 130, 77}, {9, 33, 70},
    {40, 65, 300}, {19, 130, 77}, {17, 200, 1030}};

TEST(CpuSimd, LinearMatchesPortable) {
  for (CpuIsa isa : simd_isas()) {
    for (LinearCase c : kLinearCases) {
      for (DType dtype : kWeightDTypes) {
        Tensor x = random_f32({c.M, c.K}, 11);
        Tensor w = cast_to(random_f32({c.N, c.K}, 12), dtype);
        Tensor bias = cast_to(random_f32({c.N}, 13), dtype);
        Tensor want = Tensor::empty({c.M, c.N}, DType::kF32);
        Tensor got = Tensor::empty({c.M, c.N}, DType::kF32);
        {
          IsaScope portable(CpuIsa::kPortable);
          ASSERT_TRUE(cpu::linear(x, w, bias, want).is_ok());
        }
        {
          IsaScope simd(isa);
          ASSERT_TRUE(cpu::linear(x, w, bias, got).is_ok());
        }
        const std::string what = fmt::format("{} M={} N={} K={} {}", cpu::isa_name(isa), c.M, c.N,
                                             c.K, dtype_name(dtype));
        if (c.M > 8 && (dtype == DType::kF32 || isa != CpuIsa::kAvx512)) {
          EXPECT_TRUE(bitwise_equal(got, want)) << what;  // same sgemm on the same f32 weights
        } else {
          EXPECT_LT(max_rel_diff(got, want), 2e-6) << what;
        }
      }
    }
  }
}

TEST(CpuSimd, LinearReadsRowStridedViews) {
  for (CpuIsa isa : simd_isas()) {
    const int64_t M = 5, N = 23, K = 45;
    Tensor x_wide = random_f32({M, K + 10}, 21);
    Tensor x = x_wide.slice(1, 5, 5 + K);
    Tensor w = cast_to(random_f32({N, K}, 22), DType::kBF16);
    Tensor out_wide = Tensor::zeros({M, N + 6}, DType::kF32);
    Tensor out = out_wide.slice(1, 2, 2 + N);
    Tensor want = Tensor::empty({M, N}, DType::kF32);
    {
      IsaScope portable(CpuIsa::kPortable);
      ASSERT_TRUE(cpu::linear(x, w, Tensor(), want).is_ok());
    }
    IsaScope simd(isa);
    ASSERT_TRUE(cpu::linear(x, w, Tensor(), out).is_ok());
    EXPECT_LT(max_rel_diff(out.clone(), want), 2e-6) << cpu::isa_name(isa);
    for (int64_t m = 0; m < M; ++m) {  // columns outside the view stay untouched
      for (int64_t n : {int64_t{0}, int64_t{1}, 2 + N, 5 + N}) {
        EXPECT_EQ(out_wide.data<float>()[m * (N + 6) + n], 0.0f);
      }
    }
  }
}

// A request mix with decode rows (one query) and prefill chunks, GQA, and head dims that are
// and are not multiples of the vector widths.
TEST(CpuSimd, PagedAttentionMatchesPortable) {
  for (CpuIsa isa : simd_isas()) {
    for (int64_t head_dim : {int64_t{64}, int64_t{100}, int64_t{7}}) {
      const int64_t blocks = 12, block_size = 16, kv_heads = 2, q_heads = 6;
      Tensor cache = random_f32({blocks, 2, block_size, kv_heads, head_dim}, 41);
      const std::vector<int32_t> qsl = {0, 1, 18, 19}, seq_lens = {40, 17, 70};
      Tensor tables = Tensor::empty({3, 5}, DType::kI32);
      const int32_t table_ids[] = {3, 0, 7, -1, -1, 5, 1, -1, -1, -1, 2, 4, 6, 8, 9};
      std::memcpy(tables.data<int32_t>(), table_ids, sizeof(table_ids));
      Tensor q = random_f32({19, q_heads * head_dim}, 42);
      cpu::PagedAttentionParams p;
      p.query_start_loc = qsl;
      p.seq_lens = seq_lens;
      p.scale = 0.125f;
      Tensor want = Tensor::empty({19, q_heads * head_dim}, DType::kF32);
      Tensor got = Tensor::empty({19, q_heads * head_dim}, DType::kF32);
      {
        IsaScope portable(CpuIsa::kPortable);
        ASSERT_TRUE(cpu::paged_attention(q, cache, tables, p, want).is_ok());
      }
      IsaScope simd(isa);
      ASSERT_TRUE(cpu::paged_attention(q, cache, tables, p, got).is_ok());
      EXPECT_LT(max_rel_diff(got, want), 2e-6) << cpu::isa_name(isa) << " D=" << head_dim;
    }
  }
}

// Two requests (a decode step and a prefill chunk) over existing state, state and outputs
// compared after the call; Dv both a multiple of the vector widths and not.
TEST(CpuSimd, GatedDeltaRuleMatchesPortable) {
  for (CpuIsa isa : simd_isas()) {
    for (int64_t dv : {int64_t{64}, int64_t{20}}) {
      const int64_t tokens = 9, hk = 2, hv = 4, dk = 32, slots = 3;
      Tensor q = random_f32({tokens, hk * dk}, 51), k = random_f32({tokens, hk * dk}, 52);
      Tensor v = random_f32({tokens, hv * dv}, 53);
      Tensor g = random_f32({tokens, hv}, 54, -0.5f, 0.0f);
      Tensor beta = random_f32({tokens, hv}, 55, 0.0f, 1.0f);
      Tensor state0 = random_f32({slots, hv, dk, dv}, 56, -0.2f, 0.2f);
      const std::vector<int32_t> qsl = {0, 1, 9}, slot_ids = {2, 0};
      cpu::GdnBatch batch{qsl, slot_ids};
      Tensor state_want = state0.clone(), state_got = state0.clone();
      Tensor want = Tensor::empty({tokens, hv * dv}, DType::kF32);
      Tensor got = Tensor::empty({tokens, hv * dv}, DType::kF32);
      {
        IsaScope portable(CpuIsa::kPortable);
        ASSERT_TRUE(cpu::gated_delta_rule(q, k, v, g, beta, batch, {}, state_want, want).is_ok());
      }
      IsaScope simd(isa);
      ASSERT_TRUE(cpu::gated_delta_rule(q, k, v, g, beta, batch, {}, state_got, got).is_ok());
      const std::string what = fmt::format("{} Dv={}", cpu::isa_name(isa), dv);
      EXPECT_LT(max_rel_diff(got, want), 1e-5) << what;
      EXPECT_LT(max_rel_diff(state_got, state_want), 1e-5) << what;
    }
  }
}

// The GDN conv, whose SiLU takes a polynomial exponential on AVX-512: two requests (one
// token, and several across a channel block boundary and a partial last block), inputs
// large enough that the SiLU saturates on both sides.
TEST(CpuSimd, CausalConv1dMatchesPortable) {
  for (CpuIsa isa : simd_isas()) {
    const int64_t tokens = 7, channels = 80, width = 4, slots = 3;
    Tensor x = random_f32({tokens, channels}, 61, -30.0f, 30.0f);
    Tensor w = random_f32({channels, width}, 62);
    Tensor bias = random_f32({channels}, 63);
    Tensor state0 = random_f32({slots, channels, width - 1}, 64, -5.0f, 5.0f);
    const std::vector<int32_t> qsl = {0, 1, 7}, slot_ids = {1, 2};
    cpu::GdnBatch batch{qsl, slot_ids};
    Tensor state_want = state0.clone(), state_got = state0.clone();
    Tensor want = Tensor::empty({tokens, channels}, DType::kF32);
    Tensor got = Tensor::empty({tokens, channels}, DType::kF32);
    {
      IsaScope portable(CpuIsa::kPortable);
      ASSERT_TRUE(cpu::causal_conv1d(x, w, bias, batch, state_want, want).is_ok());
    }
    IsaScope simd(isa);
    ASSERT_TRUE(cpu::causal_conv1d(x, w, bias, batch, state_got, got).is_ok());
    const std::string what(cpu::isa_name(isa));
    EXPECT_LT(max_rel_diff(got, want), 1e-6) << what;
    EXPECT_TRUE(bitwise_equal(state_got, state_want)) << what;  // the window is only copied
  }
}

// Each exponential on its own over the range the sampler meets, then
// whole rows: vector tails, -inf entries (masked tokens) and logits far below the maximum.
TEST(CpuSimd, SumExpMatchesPortable) {
  const float kInf = std::numeric_limits<float>::infinity();
  for (CpuIsa isa : simd_isas()) {
    IsaScope simd(isa);
    const std::string name(cpu::isa_name(isa));
    for (int i = 0; i <= 20000; ++i) {
      // 32 copies: the main loop of every variant (a lone element would take a scalar tail).
      const float t = -90.0f + 0.0045f * static_cast<float>(i) + 1e-4f * static_cast<float>(i % 7);
      const std::vector<float> copies(32, t);
      const double want = 32 * cpu::detail::sum_exp_portable(&t, 1, 0.0f);
      const double got = cpu::sum_exp(copies.data(), 32, 0.0f);
      if (t < -87.0f) {
        EXPECT_LE(got, 32 * 1.7e-38) << name << " t=" << t;  // underflow: at most exp(-87)
      } else {
        EXPECT_NEAR(got, want, 2.5e-7 * want) << name << " t=" << t;
      }
    }
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 1000, 151936}) {
      Tensor x = random_f32({n}, 71, -30.0f, 10.0f);
      float* p = x.data<float>();
      for (int64_t i = 3; i < n; i += 5) p[i] = -kInf;
      float m = -kInf;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, p[i]);
      const double want = cpu::detail::sum_exp_portable(p, n, m);
      EXPECT_NEAR(cpu::sum_exp(p, n, m), want, 3e-7 * want) << name << " n=" << n;
    }
    // NaN anywhere, or a row of -inf (max -inf), gives NaN as the reference does.
    std::vector<float> row(40, 0.5f);
    row[37] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(cpu::sum_exp(row.data(), 40, 0.5f))) << name;
    std::vector<float> masked(40, -kInf);
    EXPECT_TRUE(std::isnan(cpu::detail::sum_exp_portable(masked.data(), 40, -kInf)));
    EXPECT_TRUE(std::isnan(cpu::sum_exp(masked.data(), 40, -kInf))) << name;
  }
}

}  // namespace
}  // namespace test_cpu_simd
}  // namespace vllm

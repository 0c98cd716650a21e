// Backend parity for Gated DeltaNet: vllm::cuda::causal_conv1d, gdn_gating, gated_delta_rule
// and gated_rms_norm against the CPU reference ops on fresh random inputs. Outputs start as
// NaN so an element a kernel never wrote fails; the updated conv and recurrent states of all
// slots (those of the batch and the untouched others) are compared too.
//
// Tables cover Qwen3.5-4B / 27B layer shapes and small odd ones, varlen batches mixing decode
// rows (1 token) and prefill rows (up to 1024), distinct random slots among more slots than
// requests, non-zero starting states, F32 and BF16 activations, and the column slices of one
// [T, conv_dim + value_dim] projection the model passes. A layer test runs the four ops as the
// model does and checks that a prefill split over three calls equals one call and the CPU.
//
// BF16 activations are compared with the CPU ops run in f32 on the same (bf16) inputs.
// Tolerances (relative L2): BF16 1e-2 (output rounding); F32 1e-5, except the delta rule's
// output and state, which get kRuleF32Tolerance (see there). States copied from inputs (the
// conv state) must match exactly. Without a GPU every test but the argument check is skipped;
// bench_gdn_cuda.cpp holds the timing mode (VLLM_BENCH=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gdn.h"
#include "backend/cuda/gdn.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_test_util.h"
#include "gdn_cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::fill_nan;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::to_f32;
using gdn_test::Batch;
using gdn_test::dev;
using gdn_test::DeviceBatch;
using gdn_test::host_f32;
using gdn_test::make_batch;
using gdn_test::upload;

constexpr float kNormEps = 1e-6f;
constexpr cudaStream_t kStream = nullptr;  // the legacy default stream: copies wait for it
constexpr double kF32Tolerance = 1e-5;
constexpr double kBf16Tolerance = 1e-2;
// The delta rule in F32: the kernel sums each column's dot products in a different order than
// the CPU loop (four row groups of four partial sums, then shuffles), a few f32 ulps per
// token, and the recurrence carries that through up to 1024 tokens. The update
// S <- exp(g) S (I - beta k k^T) + ... does not amplify it (exp(g) <= 1, k unit length), so it
// grows at most like a sum of independent roundings: the kernel's summation order, run on
// the CPU, differs from the CPU op by 2.4e-7 at 1024 tokens and Dk = 128. The plain F32 bound
// of 1e-5 holds with a wide margin.
constexpr double kRuleF32Tolerance = 1e-5;

double tolerance(DType act) {
  return act == DType::kF32 ? kF32Tolerance : kBf16Tolerance;
}

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    ::vllm::Status status_ = (expr);                     \
    ASSERT_TRUE(status_.is_ok()) << status_.to_string(); \
  } while (0)

class GdnCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA parity tests skipped";
    Status status = cuda::init();
    ASSERT_TRUE(status.is_ok()) << status.to_string();
  }
  std::mt19937 rng_{20250301};
};

const DType kActs[] = {DType::kF32, DType::kBF16};

// Qwen3.5 GDN layer sizes (configs/Qwen3.5-4B, configs/Qwen3.5-27B): 16 key heads of 128,
// 32 (4B) or 48 (27B) value heads of 128, conv kernel 4. conv_dim = 2 * 16 * 128 + Hv * 128.
constexpr int64_t kConvDim4B = 8192, kValueDim4B = 4096;
constexpr int64_t kConvDim27B = 10240, kValueDim27B = 6144;

// ---- causal_conv1d -----------------------------------------------------------------------

struct ConvCase {
  std::string name;
  int64_t channels;
  int64_t width;
  int64_t col_offset;  // x is columns [col_offset, col_offset + channels) of a wider tensor
  int64_t extra_cols;  // ... of channels + extra_cols columns
  std::vector<int32_t> lens;
  int64_t num_slots;
  DType weight_dtype;
  bool bias;
};

void check_conv(const ConvCase& c, DType act, std::mt19937& rng) {
  SCOPED_TRACE(c.name + " x=" + std::string(dtype_name(act)));
  const Batch b = make_batch(c.lens, c.num_slots, rng);
  const int64_t tokens = b.tokens(), channels = c.channels, width = c.width;
  const int64_t col1 = c.col_offset + channels;
  Tensor x = random_tensor({tokens, channels + c.extra_cols}, act, rng, 0.0f, 1.0f);
  Tensor w = random_tensor({channels, width}, c.weight_dtype, rng, 0.0f, 0.5f);
  Tensor bias = c.bias ? random_tensor({channels}, c.weight_dtype, rng, 0.0f, 0.5f) : Tensor();
  Tensor state = random_tensor({c.num_slots, channels, width - 1}, DType::kF32, rng, 0.0f, 1.0f);

  Tensor state_ref = state.clone();
  Tensor out_ref = Tensor::empty({tokens, channels}, DType::kF32);
  ASSERT_OK(cpu::causal_conv1d(to_f32(x).slice(1, c.col_offset, col1), w, bias, b.cpu(), state_ref,
                               out_ref));

  const DeviceBatch db = upload(b);
  Tensor x_gpu = dev(x), w_gpu = dev(w), state_gpu = dev(state);
  Tensor bias_gpu = c.bias ? dev(bias) : Tensor();
  Tensor out_gpu = dev(fill_nan({tokens, channels}, act));
  ASSERT_OK(cuda::causal_conv1d(x_gpu.slice(1, c.col_offset, col1), w_gpu, bias_gpu, db.view,
                                state_gpu, out_gpu, kStream));
  EXPECT_TRUE(relative_l2(host_f32(out_gpu), out_ref, tolerance(act))) << "out";
  EXPECT_TRUE(relative_l2(host_f32(state_gpu), state_ref, 0.0)) << "conv_state (exact copies)";
}

TEST_F(GdnCuda, ConvMatchesCpuSmallShapes) {
  const ConvCase cases[] = {
      // Chunk boundaries of the kernel's 16-row prefill chunks, empty requests, bias.
      {"boundaries", 256, 4, 0, 0, {16, 17, 0, 1, 33, 48, 2, 15}, 11, DType::kBF16, true},
      // Odd channel count and a misaligned slice: the element-wise path.
      {"odd slice", 250, 4, 3, 7, {2, 1, 40, 17}, 9, DType::kF32, false},
      {"width 3", 96, 3, 8, 8, {1, 70, 1, 5}, 6, DType::kF16, true},
      {"width 2", 64, 2, 0, 0, {20, 1, 3}, 4, DType::kBF16, false},
      {"decode only", 136, 4, 0, 0, {1, 1, 1, 1, 1}, 8, DType::kBF16, true},
  };
  for (const ConvCase& c : cases) {
    for (DType act : kActs) check_conv(c, act, rng_);
  }
}

TEST_F(GdnCuda, ConvMatchesCpuQwenShapes) {
  const ConvCase cases[] = {
      {"4B mixed batch",
       kConvDim4B,
       4,
       0,
       kValueDim4B,
       {1, 37, 1, 300, 1, 5},
       16,
       DType::kBF16,
       false},
      {"4B decode x64", kConvDim4B, 4, 0, kValueDim4B, std::vector<int32_t>(64, 1), 100,
       DType::kBF16, false},
      {"27B prefill 1024", kConvDim27B, 4, 0, kValueDim27B, {1024, 1, 1}, 8, DType::kBF16, false},
  };
  for (const ConvCase& c : cases) {
    for (DType act : kActs) check_conv(c, act, rng_);
  }
}

// out aliasing x (allowed) takes the one-chunk-per-request path even for long prefills.
TEST_F(GdnCuda, ConvOutputMayAliasInput) {
  for (DType act : kActs) {
    SCOPED_TRACE(dtype_name(act));
    const Batch b = make_batch({1, 200, 3, 1}, 6, rng_);
    const int64_t channels = 512;
    Tensor x = random_tensor({b.tokens(), channels}, act, rng_, 0.0f, 1.0f);
    Tensor w = random_tensor({channels, 4}, DType::kBF16, rng_, 0.0f, 0.5f);
    Tensor state = random_tensor({6, channels, 3}, DType::kF32, rng_, 0.0f, 1.0f);
    Tensor state_ref = state.clone();
    Tensor out_ref = Tensor::empty({b.tokens(), channels}, DType::kF32);
    ASSERT_OK(cpu::causal_conv1d(to_f32(x), w, Tensor(), b.cpu(), state_ref, out_ref));

    const DeviceBatch db = upload(b);
    Tensor x_gpu = dev(x), w_gpu = dev(w), state_gpu = dev(state);
    ASSERT_OK(cuda::causal_conv1d(x_gpu, w_gpu, Tensor(), db.view, state_gpu, x_gpu, kStream));
    EXPECT_TRUE(relative_l2(host_f32(x_gpu), out_ref, tolerance(act))) << "out";
    EXPECT_TRUE(relative_l2(host_f32(state_gpu), state_ref, 0.0)) << "conv_state";
  }
}

// ---- gated_delta_rule --------------------------------------------------------------------

struct RuleCase {
  std::string name;
  int64_t hk, hv, dk, dv;
  std::vector<int32_t> lens;
  int64_t num_slots;
  bool l2norm = true;
  float scale = 0.0f;
};

// g and beta as the model makes them: gdn_gating of random projections, with decay rates
// spread over heads (some close to 1, so the state remembers many tokens).
void random_gating(int64_t tokens, int64_t hv, std::mt19937& rng, Tensor& g, Tensor& beta) {
  Tensor a = random_tensor({tokens, hv}, DType::kF32, rng, 0.0f, 1.0f);
  Tensor b = random_tensor({tokens, hv}, DType::kF32, rng, 0.0f, 1.5f);
  Tensor A_log = random_tensor({hv}, DType::kF32, rng, -1.0f, 1.5f);
  Tensor dt_bias = random_tensor({hv}, DType::kF32, rng, -1.0f, 0.5f);
  g = Tensor::empty({tokens, hv}, DType::kF32);
  beta = Tensor::empty({tokens, hv}, DType::kF32);
  Status s = cpu::gdn_gating(a, b, A_log, dt_bias, g, beta);
  VLLM_CHECK_MSG(s.is_ok(), "{}", s.to_string());
}

// Runs one case; q, k, v are column slices of one [T, 2 * Hk * Dk + Hv * Dv] tensor. When
// `padding_request` >= 0, that request gets slot -1 on the GPU (a padding row): it must get
// zero outputs and leave every slot alone. The CPU runs it on a spare slot instead.
void check_rule(const RuleCase& c, DType act, std::mt19937& rng, int padding_request = -1) {
  SCOPED_TRACE(c.name + " q/k/v=" + std::string(dtype_name(act)));
  const int64_t spare = padding_request >= 0 ? 1 : 0;
  Batch b = make_batch(c.lens, c.num_slots, rng);
  Batch b_cpu = b;
  if (padding_request >= 0) {
    b.slots[static_cast<size_t>(padding_request)] = -1;
    b_cpu.slots[static_cast<size_t>(padding_request)] = static_cast<int32_t>(c.num_slots);
  }
  const int64_t tokens = b.tokens(), key_dim = c.hk * c.dk, value_dim = c.hv * c.dv;
  const float qk_stddev = c.l2norm ? 1.0f : 0.1f;  // unnormalised k must stay small
  Tensor qkv = random_tensor({tokens, 2 * key_dim + value_dim}, act, rng, 0.0f, qk_stddev);
  Tensor g, beta;
  random_gating(tokens, c.hv, rng, g, beta);
  Tensor state =
      random_tensor({c.num_slots + spare, c.hv, c.dk, c.dv}, DType::kF32, rng, 0.0f, 0.3f);
  cpu::GatedDeltaRuleParams cpu_params;
  cpu_params.use_qk_l2norm = c.l2norm;
  cpu_params.scale = c.scale;
  cuda::GatedDeltaRuleParams gpu_params;
  gpu_params.use_qk_l2norm = c.l2norm;
  gpu_params.scale = c.scale;

  Tensor qkv_f32 = to_f32(qkv);
  Tensor state_ref = state.clone();
  Tensor out_ref = Tensor::empty({tokens, value_dim}, DType::kF32);
  ASSERT_OK(cpu::gated_delta_rule(qkv_f32.slice(1, 0, key_dim),
                                  qkv_f32.slice(1, key_dim, 2 * key_dim),
                                  qkv_f32.slice(1, 2 * key_dim, 2 * key_dim + value_dim), g, beta,
                                  b_cpu.cpu(), cpu_params, state_ref, out_ref));
  if (padding_request >= 0) {
    const int64_t r = padding_request;
    float* rows = out_ref.data<float>() + b.loc[r] * value_dim;
    std::fill(rows, rows + (b.loc[r + 1] - b.loc[r]) * value_dim, 0.0f);
    state_ref = state_ref.slice(0, 0, c.num_slots).clone();
    state = state.slice(0, 0, c.num_slots).clone();
  }

  const DeviceBatch db = upload(b);
  Tensor qkv_gpu = dev(qkv), g_gpu = dev(g), beta_gpu = dev(beta), state_gpu = dev(state);
  Tensor out_gpu = dev(fill_nan({tokens, value_dim}, act));
  ASSERT_OK(cuda::gated_delta_rule(qkv_gpu.slice(1, 0, key_dim),
                                   qkv_gpu.slice(1, key_dim, 2 * key_dim),
                                   qkv_gpu.slice(1, 2 * key_dim, 2 * key_dim + value_dim), g_gpu,
                                   beta_gpu, db.view, gpu_params, state_gpu, out_gpu, kStream));
  const double out_tol = act == DType::kF32 ? kRuleF32Tolerance : kBf16Tolerance;
  EXPECT_TRUE(relative_l2(host_f32(out_gpu), out_ref, out_tol)) << "out";
  // The state is f32 from the same inputs in both dtypes.
  EXPECT_TRUE(relative_l2(host_f32(state_gpu), state_ref, kRuleF32Tolerance)) << "state";
}

TEST_F(GdnCuda, RuleMatchesCpuSmallShapes) {
  const RuleCase cases[] = {
      {"Dk=Dv=32 Hk=2 Hv=4", 2, 4, 32, 32, {3, 1, 64, 1, 129, 0}, 9},
      {"Dk=64 Dv=40 Hk=1 Hv=3", 1, 3, 64, 40, {1, 33, 2}, 5},
      {"Dk=32 Dv=20 Hk=Hv=2", 2, 2, 32, 20, {7, 1, 1}, 3},
      {"no l2norm, scale 0.3", 2, 4, 32, 32, {5, 1, 9}, 4, false, 0.3f},
      // Qwen's Dk = 128 over a 1024-token recurrence, with few value columns.
      {"Dk=128 Dv=24 Hk=1 Hv=2 1024 tokens", 1, 2, 128, 24, {1024, 1}, 3},
  };
  for (const RuleCase& c : cases) {
    for (DType act : kActs) check_rule(c, act, rng_);
  }
}

TEST_F(GdnCuda, RuleMatchesCpuQwenShapes) {
  const RuleCase cases[] = {
      {"4B mixed batch", 16, 32, 128, 128, {1, 1024, 1, 7, 1}, 12},
      {"4B decode x64", 16, 32, 128, 128, std::vector<int32_t>(64, 1), 80},
      {"27B mixed batch", 16, 48, 128, 128, {200, 1, 1, 33}, 6},
  };
  for (const RuleCase& c : cases) {
    for (DType act : kActs) check_rule(c, act, rng_);
  }
}

TEST_F(GdnCuda, RulePaddingRequestWritesZerosAndNoState) {
  const RuleCase c{"padding", 2, 4, 32, 32, {3, 10, 1, 4}, 6};
  for (DType act : kActs) check_rule(c, act, rng_, /*padding_request=*/1);
}

TEST_F(GdnCuda, ConvPaddingRequestWritesZerosAndNoState) {
  for (DType act : kActs) {
    SCOPED_TRACE(dtype_name(act));
    const int64_t channels = 192, num_slots = 5;
    Batch b = make_batch({2, 40, 1}, num_slots, rng_);
    Batch b_cpu = b;
    b.slots[1] = -1;  // the 40-row request is padding on the GPU, on a spare slot on the CPU
    b_cpu.slots[1] = static_cast<int32_t>(num_slots);
    Tensor x = random_tensor({b.tokens(), channels}, act, rng_, 0.0f, 1.0f);
    Tensor w = random_tensor({channels, 4}, DType::kF32, rng_, 0.0f, 0.5f);
    Tensor state = random_tensor({num_slots + 1, channels, 3}, DType::kF32, rng_, 0.0f, 1.0f);
    Tensor state_ref = state.clone();
    Tensor out_ref = Tensor::empty({b.tokens(), channels}, DType::kF32);
    ASSERT_OK(cpu::causal_conv1d(to_f32(x), w, Tensor(), b_cpu.cpu(), state_ref, out_ref));
    std::fill(out_ref.data<float>() + b.loc[1] * channels,
              out_ref.data<float>() + b.loc[2] * channels, 0.0f);

    const DeviceBatch db = upload(b);
    Tensor x_gpu = dev(x), w_gpu = dev(w);
    Tensor state_gpu = dev(state.slice(0, 0, num_slots).clone());
    Tensor out_gpu = dev(fill_nan({b.tokens(), channels}, act));
    ASSERT_OK(cuda::causal_conv1d(x_gpu, w_gpu, Tensor(), db.view, state_gpu, out_gpu, kStream));
    EXPECT_TRUE(relative_l2(host_f32(out_gpu), out_ref, tolerance(act))) << "out";
    EXPECT_TRUE(relative_l2(host_f32(state_gpu), state_ref.slice(0, 0, num_slots).clone(), 0.0))
        << "conv_state";
  }
}

// ---- gdn_gating and gated_rms_norm -------------------------------------------------------

TEST_F(GdnCuda, GatingMatchesCpu) {
  struct Case {
    int64_t tokens, heads;
    DType param_dtype;
  };
  for (Case c : {Case{1, 32, DType::kF32}, Case{37, 48, DType::kBF16}, Case{2048, 32, DType::kF32},
                 Case{5, 3, DType::kF16}}) {
    for (DType act : kActs) {
      SCOPED_TRACE(fmt::format("[{} x {}] a/b={} params={}", c.tokens, c.heads, dtype_name(act),
                               dtype_name(c.param_dtype)));
      // ba as the model's projection: b = columns [0, Hv), a = [Hv, 2 Hv). Large a values
      // cross softplus's threshold of 20.
      Tensor ba = random_tensor({c.tokens, 2 * c.heads}, act, rng_, 2.0f, 12.0f);
      Tensor A_log = random_tensor({c.heads}, c.param_dtype, rng_, 0.0f, 1.0f);
      Tensor dt_bias = random_tensor({c.heads}, c.param_dtype, rng_, 0.0f, 1.0f);
      Tensor ba_f32 = to_f32(ba);
      Tensor g_ref = Tensor::empty({c.tokens, c.heads}, DType::kF32);
      Tensor beta_ref = Tensor::empty({c.tokens, c.heads}, DType::kF32);
      ASSERT_OK(cpu::gdn_gating(ba_f32.slice(1, c.heads, 2 * c.heads), ba_f32.slice(1, 0, c.heads),
                                A_log, dt_bias, g_ref, beta_ref));

      Tensor ba_gpu = dev(ba), A_log_gpu = dev(A_log), dt_bias_gpu = dev(dt_bias);
      Tensor g_gpu = dev(fill_nan({c.tokens, c.heads}, DType::kF32));
      Tensor beta_gpu = dev(fill_nan({c.tokens, c.heads}, DType::kF32));
      ASSERT_OK(cuda::gdn_gating(ba_gpu.slice(1, c.heads, 2 * c.heads), ba_gpu.slice(1, 0, c.heads),
                                 A_log_gpu, dt_bias_gpu, g_gpu, beta_gpu, kStream));
      // f32 outputs from the same inputs in both dtypes.
      EXPECT_TRUE(relative_l2(host_f32(g_gpu), g_ref, kF32Tolerance)) << "g";
      EXPECT_TRUE(relative_l2(host_f32(beta_gpu), beta_ref, kF32Tolerance)) << "beta";
    }
  }
}

TEST_F(GdnCuda, GatedRmsNormMatchesCpu) {
  struct Case {
    int64_t tokens, heads, dim;
    DType weight_dtype;
    bool alias;  // out = x, as the model calls it
  };
  const Case cases[] = {{5, 32, 128, DType::kF32, true},
                        {300, 48, 128, DType::kBF16, false},
                        {3, 4, 37, DType::kF32, false},
                        {1, 1, 1000, DType::kF16, true},
                        {2048, 32, 128, DType::kBF16, true}};
  for (const Case& c : cases) {
    for (DType act : kActs) {
      SCOPED_TRACE(fmt::format("[{} x {} x {}] x={} weight={} alias={}", c.tokens, c.heads, c.dim,
                               dtype_name(act), dtype_name(c.weight_dtype), c.alias));
      const int64_t width = c.heads * c.dim, z_offset = 24;
      Tensor x = random_tensor({c.tokens, width}, act, rng_, 0.0f, 1.0f);
      // z as the model's: a column slice of the wider projection.
      Tensor mixed = random_tensor({c.tokens, z_offset + width}, act, rng_, 0.0f, 2.0f);
      Tensor w = random_tensor({c.dim}, c.weight_dtype, rng_, 1.0f, 0.2f);
      Tensor mixed_f32 = to_f32(mixed);
      Tensor out_ref = Tensor::empty({c.tokens, width}, DType::kF32);
      ASSERT_OK(cpu::gated_rms_norm(to_f32(x), mixed_f32.slice(1, z_offset, z_offset + width), w,
                                    kNormEps, out_ref));

      Tensor x_gpu = dev(x), mixed_gpu = dev(mixed), w_gpu = dev(w);
      Tensor out_gpu = c.alias ? x_gpu : dev(fill_nan({c.tokens, width}, act));
      ASSERT_OK(cuda::gated_rms_norm(x_gpu, mixed_gpu.slice(1, z_offset, z_offset + width), w_gpu,
                                     kNormEps, out_gpu, kStream));
      EXPECT_TRUE(relative_l2(host_f32(out_gpu), out_ref, tolerance(act)));
    }
  }
}

// ---- The layer as the model runs it; a prefill split over several calls ----------------

struct LayerCase {
  std::string name;
  int64_t hk, hv, dk, dv;
  int32_t prefill_len;
  std::vector<int32_t> pieces;  // the prefill's rows in each call (summing to prefill_len)
};

struct LayerDims {
  int64_t key_dim, value_dim, conv_dim, hv;
  explicit LayerDims(const LayerCase& c)
      : key_dim(c.hk * c.dk), value_dim(c.hv * c.dv), conv_dim(2 * key_dim + value_dim), hv(c.hv) {}
};

struct LayerWeights {
  Tensor conv_weight;  // [conv_dim, 4]
  Tensor A_log;        // [Hv]
  Tensor dt_bias;      // [Hv]
  Tensor norm;         // [Dv]
};

struct LayerState {
  Tensor conv;  // [num_slots, conv_dim, 3]
  Tensor ssm;   // [num_slots, Hv, Dk, Dv]
};

// The four ops as qwen3_5.cpp calls them, on the CPU: mixed [T, conv_dim + value_dim] and
// ba [T, 2 Hv] in F32; returns core [T, value_dim].
Tensor layer_cpu(const LayerDims& d, const LayerWeights& w, const Tensor& mixed, const Tensor& ba,
                 const Batch& b, LayerState& st) {
  const int64_t tokens = mixed.size(0), kd = d.key_dim;
  Tensor conv_out = Tensor::empty({tokens, d.conv_dim}, DType::kF32);
  Tensor g = Tensor::empty({tokens, d.hv}, DType::kF32);
  Tensor beta = Tensor::empty({tokens, d.hv}, DType::kF32);
  Tensor core = Tensor::empty({tokens, d.value_dim}, DType::kF32);
  VLLM_CHECK(cpu::causal_conv1d(mixed.slice(1, 0, d.conv_dim), w.conv_weight, Tensor(), b.cpu(),
                                st.conv, conv_out)
                 .is_ok());
  VLLM_CHECK(cpu::gdn_gating(ba.slice(1, d.hv, 2 * d.hv), ba.slice(1, 0, d.hv), w.A_log, w.dt_bias,
                             g, beta)
                 .is_ok());
  VLLM_CHECK(cpu::gated_delta_rule(conv_out.slice(1, 0, kd), conv_out.slice(1, kd, 2 * kd),
                                   conv_out.slice(1, 2 * kd, d.conv_dim), g, beta, b.cpu(),
                                   cpu::GatedDeltaRuleParams{}, st.ssm, core)
                 .is_ok());
  VLLM_CHECK(cpu::gated_rms_norm(core, mixed.slice(1, d.conv_dim, d.conv_dim + d.value_dim), w.norm,
                                 kNormEps, core)
                 .is_ok());
  return core;
}

// The same on the GPU (device weights and state; host inputs in the activation dtype);
// returns core as F32 on the host.
Tensor layer_gpu(const LayerDims& d, const LayerWeights& w, const Tensor& mixed_host,
                 const Tensor& ba_host, const Batch& b, LayerState& st) {
  const int64_t tokens = mixed_host.size(0), kd = d.key_dim;
  const DType act = mixed_host.dtype();
  const DeviceBatch db = upload(b);
  Tensor mixed = dev(mixed_host), ba = dev(ba_host);
  Tensor conv_out = dev(fill_nan({tokens, d.conv_dim}, act));
  Tensor g = dev(fill_nan({tokens, d.hv}, DType::kF32));
  Tensor beta = dev(fill_nan({tokens, d.hv}, DType::kF32));
  Tensor core = dev(fill_nan({tokens, d.value_dim}, act));
  auto check = [](const Status& s) { VLLM_CHECK_MSG(s.is_ok(), "{}", s.to_string()); };
  check(cuda::causal_conv1d(mixed.slice(1, 0, d.conv_dim), w.conv_weight, Tensor(), db.view,
                            st.conv, conv_out, kStream));
  check(cuda::gdn_gating(ba.slice(1, d.hv, 2 * d.hv), ba.slice(1, 0, d.hv), w.A_log, w.dt_bias, g,
                         beta, kStream));
  check(cuda::gated_delta_rule(conv_out.slice(1, 0, kd), conv_out.slice(1, kd, 2 * kd),
                               conv_out.slice(1, 2 * kd, d.conv_dim), g, beta, db.view,
                               cuda::GatedDeltaRuleParams{}, st.ssm, core, kStream));
  check(cuda::gated_rms_norm(core, mixed.slice(1, d.conv_dim, d.conv_dim + d.value_dim), w.norm,
                             kNormEps, core, kStream));
  return host_f32(core);
}

// Copies rows [0, n) of src to rows [at, at + n) of dst (both F32 [*, C] contiguous).
void put_rows(const Tensor& src, Tensor& dst, int64_t at) {
  const int64_t cols = src.size(1);
  std::copy_n(src.data<float>(), src.size(0) * cols, dst.data<float>() + at * cols);
}

// Three requests -- a decode, a prefill, a decode -- run once as one call and once as
// pieces.size() calls (the prefill in the given pieces, each decode one row per call).
// Chunked must equal whole (the same arithmetic: only where the state waits in memory
// differs), and whole must equal the CPU.
void check_layer_in_chunks(const LayerCase& c, DType act, std::mt19937& rng) {
  SCOPED_TRACE(c.name + " act=" + std::string(dtype_name(act)));
  const LayerDims d(c);
  const int64_t num_slots = 7, calls = static_cast<int64_t>(c.pieces.size());
  const int64_t width = d.conv_dim + d.value_dim;
  LayerWeights w_cpu{random_tensor({d.conv_dim, 4}, DType::kBF16, rng, 0.0f, 0.5f),
                     random_tensor({c.hv}, DType::kF32, rng, -1.0f, 1.5f),
                     random_tensor({c.hv}, DType::kF32, rng, -1.0f, 0.5f),
                     random_tensor({c.dv}, DType::kF32, rng, 1.0f, 0.2f)};
  LayerWeights w_gpu{dev(w_cpu.conv_weight), dev(w_cpu.A_log), dev(w_cpu.dt_bias), dev(w_cpu.norm)};
  const LayerState initial{
      random_tensor({num_slots, d.conv_dim, 3}, DType::kF32, rng, 0.0f, 1.0f),
      random_tensor({num_slots, c.hv, c.dk, c.dv}, DType::kF32, rng, 0.0f, 0.3f)};

  // Per-request inputs: request 1 is the prefill.
  const std::vector<int32_t> lens = {static_cast<int32_t>(calls), c.prefill_len,
                                     static_cast<int32_t>(calls)};
  std::vector<Tensor> mixed, ba;
  for (int32_t len : lens) {
    mixed.push_back(random_tensor({len, width}, act, rng, 0.0f, 1.0f));
    ba.push_back(random_tensor({len, 2 * c.hv}, act, rng, 0.0f, 1.0f));
  }
  const Batch whole = make_batch(lens, num_slots, rng);
  auto gather = [&](const std::vector<Tensor>& per_request, const std::vector<int64_t>& begin,
                    const std::vector<int64_t>& end) {
    std::vector<gdn_test::RowRange> parts;
    for (size_t r = 0; r < per_request.size(); ++r)
      parts.push_back({&per_request[r], begin[r], end[r]});
    return gdn_test::gather_rows(parts);
  };
  const std::vector<int64_t> zeros(3, 0), all(lens.begin(), lens.end());
  const Tensor mixed_whole = gather(mixed, zeros, all), ba_whole = gather(ba, zeros, all);

  // CPU, one call.
  LayerState cpu_state{initial.conv.clone(), initial.ssm.clone()};
  const Tensor core_ref =
      layer_cpu(d, w_cpu, to_f32(mixed_whole), to_f32(ba_whole), whole, cpu_state);
  // GPU, one call.
  LayerState whole_state{dev(initial.conv), dev(initial.ssm)};
  const Tensor core_whole = layer_gpu(d, w_gpu, mixed_whole, ba_whole, whole, whole_state);
  // GPU, in calls; the outputs go back to the whole call's row order.
  LayerState split_state{dev(initial.conv), dev(initial.ssm)};
  Tensor core_split = Tensor::empty(core_whole.shape(), DType::kF32);
  int64_t done = 0;
  for (int64_t i = 0; i < calls; ++i) {
    const int32_t piece = c.pieces[static_cast<size_t>(i)];
    Batch b;
    b.add(1, whole.slots[0]);
    b.add(piece, whole.slots[1]);
    b.add(1, whole.slots[2]);
    const std::vector<int64_t> begin = {i, done, i}, end = {i + 1, done + piece, i + 1};
    const Tensor core =
        layer_gpu(d, w_gpu, gather(mixed, begin, end), gather(ba, begin, end), b, split_state);
    put_rows(core.slice(0, 0, 1).clone(), core_split, i);
    put_rows(core.slice(0, 1, 1 + piece).clone(), core_split, calls + done);
    put_rows(core.slice(0, 1 + piece, 2 + piece).clone(), core_split, calls + c.prefill_len + i);
    done += piece;
  }
  ASSERT_EQ(done, c.prefill_len);

  EXPECT_TRUE(relative_l2(core_split, core_whole, 1e-6)) << "chunked vs one call: core";
  EXPECT_TRUE(relative_l2(host_f32(split_state.conv), host_f32(whole_state.conv), 0.0))
      << "chunked vs one call: conv state";
  EXPECT_TRUE(relative_l2(host_f32(split_state.ssm), host_f32(whole_state.ssm), 1e-6))
      << "chunked vs one call: ssm state";
  const double tol = act == DType::kF32 ? kRuleF32Tolerance : kBf16Tolerance;
  EXPECT_TRUE(relative_l2(core_whole, core_ref, tol)) << "vs CPU: core";
  EXPECT_TRUE(relative_l2(host_f32(whole_state.conv), cpu_state.conv, 0.0)) << "vs CPU: conv state";
  EXPECT_TRUE(relative_l2(host_f32(whole_state.ssm), cpu_state.ssm, tol)) << "vs CPU: ssm state";
}

TEST_F(GdnCuda, LayerInChunksMatchesOneCallAndCpuSmallShapes) {
  const LayerCase c{"Dk=Dv=32 Hk=2 Hv=4", 2, 4, 32, 32, 100, {37, 1, 62}};
  for (DType act : kActs) check_layer_in_chunks(c, act, rng_);
}

TEST_F(GdnCuda, LayerInChunksMatchesOneCallAndCpuQwenShapes) {
  const LayerCase c{"Qwen3.5-4B", 16, 32, 128, 128, 1024, {300, 1, 723}};
  for (DType act : kActs) check_layer_in_chunks(c, act, rng_);
}

// ---- Argument checks ----------------------------------------------------------------------

TEST_F(GdnCuda, RejectsBadArguments) {
  const Batch b = make_batch({2, 1}, 4, rng_);
  const DeviceBatch db = upload(b);
  const int64_t tokens = b.tokens();
  Tensor qkv = dev(random_tensor({tokens, 3 * 64}, DType::kF32, rng_, 0.0f, 1.0f));
  Tensor q = qkv.slice(1, 0, 64), k = qkv.slice(1, 64, 128), v = qkv.slice(1, 128, 192);
  Tensor g = dev(Tensor::zeros({tokens, 2}, DType::kF32));
  Tensor beta = dev(Tensor::zeros({tokens, 2}, DType::kF32));
  Tensor state = dev(Tensor::zeros({4, 2, 32, 32}, DType::kF32));
  Tensor out = dev(Tensor::zeros({tokens, 64}, DType::kF32));
  cuda::GatedDeltaRuleParams params;
  ASSERT_OK(cuda::gated_delta_rule(q, k, v, g, beta, db.view, params, state, out, kStream));

  auto expect_error = [](const Status& s, ErrorCode code, const char* word) {
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(word), std::string::npos) << s.message();
  };
  // Dk = 48 has no kernel instantiation.
  Tensor state48 = dev(Tensor::zeros({4, 1, 48, 32}, DType::kF32));
  Tensor qkv48 = dev(Tensor::zeros({tokens, 48}, DType::kF32));
  Tensor out48 = dev(Tensor::zeros({tokens, 32}, DType::kF32));
  Tensor g48 = dev(Tensor::zeros({tokens, 1}, DType::kF32));
  expect_error(cuda::gated_delta_rule(qkv48, qkv48, out48, g48, g48, db.view, params, state48,
                                      out48, kStream),
               ErrorCode::kUnsupported, "key head dim");
  Tensor out_bf16 = dev(Tensor::empty({tokens, 64}, DType::kBF16));
  expect_error(cuda::gated_delta_rule(q, k, v, g, beta, db.view, params, state, out_bf16, kStream),
               ErrorCode::kInvalidArgument, "out");
  expect_error(cuda::gated_delta_rule(q, k, v.slice(1, 0, 32), g, beta, db.view, params, state, out,
                                      kStream),
               ErrorCode::kInvalidArgument, ": v ");
  // A batch whose query_start_loc does not have R + 1 entries, or of the wrong dtype.
  cuda::GdnBatch short_loc{db.loc.slice(0, 0, 2), db.slots, b.max_len};
  expect_error(cuda::gated_delta_rule(q, k, v, g, beta, short_loc, params, state, out, kStream),
               ErrorCode::kInvalidArgument, "query_start_loc");
  cuda::GdnBatch f32_slots{db.loc, dev(Tensor::zeros({2}, DType::kF32)), b.max_len};
  expect_error(cuda::gated_delta_rule(q, k, v, g, beta, f32_slots, params, state, out, kStream),
               ErrorCode::kInvalidArgument, "state_indices");
  cuda::GdnBatch negative{db.loc, db.slots, -1};
  expect_error(cuda::gated_delta_rule(q, k, v, g, beta, negative, params, state, out, kStream),
               ErrorCode::kInvalidArgument, "max_query_len");

  // Conv: a kernel wider than the kernel holds, and a state of the wrong width.
  Tensor x = dev(Tensor::zeros({tokens, 16}, DType::kF32));
  Tensor w5 = dev(Tensor::zeros({16, 5}, DType::kF32));
  Tensor conv_state4 = dev(Tensor::zeros({4, 16, 4}, DType::kF32));
  Tensor conv_out = dev(Tensor::zeros({tokens, 16}, DType::kF32));
  expect_error(cuda::causal_conv1d(x, w5, Tensor(), db.view, conv_state4, conv_out, kStream),
               ErrorCode::kUnsupported, "width");
  Tensor w4 = dev(Tensor::zeros({16, 4}, DType::kF32));
  expect_error(cuda::causal_conv1d(x, w4, Tensor(), db.view, conv_state4, conv_out, kStream),
               ErrorCode::kInvalidArgument, "conv_state");

  // Gating with g of the wrong dtype; norm with a head size that does not divide x.
  Tensor ab = dev(Tensor::zeros({tokens, 2}, DType::kF32));
  Tensor params2 = dev(Tensor::zeros({2}, DType::kF32));
  Tensor g_bf16 = dev(Tensor::empty({tokens, 2}, DType::kBF16));
  expect_error(cuda::gdn_gating(ab, ab, params2, params2, g_bf16, beta, kStream),
               ErrorCode::kInvalidArgument, "g");
  Tensor w7 = dev(Tensor::zeros({7}, DType::kF32));
  expect_error(cuda::gated_rms_norm(out, out, w7, kNormEps, out, kStream),
               ErrorCode::kInvalidArgument, "head size");
}

// Needs no GPU: CPU tensors are refused before anything touches CUDA.
TEST(GdnCudaArgs, RefusesCpuTensors) {
  Tensor x = Tensor::zeros({2, 8}, DType::kF32);
  Tensor w = Tensor::zeros({8, 4}, DType::kF32);
  Tensor conv_state = Tensor::zeros({2, 8, 3}, DType::kF32);
  Tensor loc = gdn_test::i32_tensor({0, 2});
  Tensor slots = gdn_test::i32_tensor({0});
  cuda::GdnBatch batch{loc, slots, 2};
  auto expect_cpu_refused = [](const Status& s) {
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("expected a CUDA tensor"), std::string::npos) << s.message();
  };
  Tensor out = x;
  expect_cpu_refused(cuda::causal_conv1d(x, w, Tensor(), batch, conv_state, out, kStream));
  Tensor g = Tensor::zeros({2, 8}, DType::kF32), beta = g;
  Tensor p8 = Tensor::zeros({8}, DType::kF32);
  expect_cpu_refused(cuda::gdn_gating(x, x, p8, p8, g, beta, kStream));
  Tensor state = Tensor::zeros({2, 1, 8, 8}, DType::kF32);
  Tensor g1 = Tensor::zeros({2, 1}, DType::kF32);
  expect_cpu_refused(cuda::gated_delta_rule(x, x, x, g1, g1, batch, cuda::GatedDeltaRuleParams{},
                                            state, out, kStream));
  expect_cpu_refused(cuda::gated_rms_norm(x, x, p8, kNormEps, out, kStream));
}

}  // namespace
}  // namespace vllm

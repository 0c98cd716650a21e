// Backend parity for Gated DeltaNet: vllm::cuda::causal_conv1d, gdn_gating, gated_delta_rule
// and gated_rms_norm against the CPU reference ops on fresh random inputs. Outputs start as
// NaN so an element a kernel never wrote fails; the updated conv and recurrent states of all
// slots (those of the batch and the untouched others) are compared too.
//
// Tables cover Qwen3.5-4B / 27B layer shapes and small odd ones (every key head dim the delta
// rule's register capacities hold, 1 .. 256), varlen batches mixing decode rows (1 token) and
// prefill rows (up to 1024), distinct random slots among more slots than requests, non-zero
// starting states, F32 and BF16 activations, and the column slices of one
// [T, conv_dim + value_dim] projection the model passes. test_gdn_layer_cuda.cpp runs the four
// ops as the model does, a prefill split over several calls against one call.
//
// BF16 activations are compared with the CPU ops run in f32 on the same (bf16) inputs. The
// delta rule runs in every form the op has: F32 and BF16 token by token, BF16 with the op's
// split (requests of 32 rows or more chunked), BF16 with every request chunked.
// Tolerances (relative L2): BF16 1e-2 (output rounding; the chunked form's state too, its
// products round their operands to BF16); F32 1e-5, also for the token-by-token delta rule's
// output and state in both dtypes (kRuleF32Tolerance: gdn_cuda_test_util.h says why). States copied
// from inputs (the conv state) must match exactly. Without a GPU every test but the argument check
// is skipped; bench_gdn_cuda.cpp holds the timing mode (VLLM_BENCH=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
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

using gdn_test::kActs;
using gdn_test::kBf16Tolerance;
using gdn_test::kF32Tolerance;
using gdn_test::kNormEps;
using gdn_test::kRuleF32Tolerance;
using gdn_test::kStream;
using gdn_test::tolerance;

class GdnCuda : public gdn_test::CudaTest {};

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
  GDN_ASSERT_OK(cpu::causal_conv1d(to_f32(x).slice(1, c.col_offset, col1), w, bias, b.cpu(),
                                   state_ref, out_ref));

  const DeviceBatch db = upload(b);
  Tensor x_gpu = dev(x), w_gpu = dev(w), state_gpu = dev(state);
  Tensor bias_gpu = c.bias ? dev(bias) : Tensor();
  Tensor out_gpu = dev(fill_nan({tokens, channels}, act));
  GDN_ASSERT_OK(cuda::causal_conv1d(x_gpu.slice(1, c.col_offset, col1), w_gpu, bias_gpu, db.view,
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
    GDN_ASSERT_OK(cpu::causal_conv1d(to_f32(x), w, Tensor(), b.cpu(), state_ref, out_ref));

    const DeviceBatch db = upload(b);
    Tensor x_gpu = dev(x), w_gpu = dev(w), state_gpu = dev(state);
    GDN_ASSERT_OK(cuda::causal_conv1d(x_gpu, w_gpu, Tensor(), db.view, state_gpu, x_gpu, kStream));
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
// chunked_min_rows: GatedDeltaRuleParams's (0: the op's default split, INT_MAX: every request
// token by token, 1: every request chunked, decode rows too).
void check_rule(const RuleCase& c, DType act, int chunked_min_rows, std::mt19937& rng,
                int padding_request = -1) {
  SCOPED_TRACE(c.name + " q/k/v=" + std::string(dtype_name(act)) +
               " chunked_min_rows=" + std::to_string(chunked_min_rows));
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
  gpu_params.chunked_min_rows = chunked_min_rows;

  Tensor qkv_f32 = to_f32(qkv);
  Tensor state_ref = state.clone();
  Tensor out_ref = Tensor::empty({tokens, value_dim}, DType::kF32);
  GDN_ASSERT_OK(cpu::gated_delta_rule(qkv_f32.slice(1, 0, key_dim),
                                      qkv_f32.slice(1, key_dim, 2 * key_dim),
                                      qkv_f32.slice(1, 2 * key_dim, 2 * key_dim + value_dim), g,
                                      beta, b_cpu.cpu(), cpu_params, state_ref, out_ref));
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
  gpu_params.workspace =
      gdn_test::rule_workspace(qkv_gpu.slice(1, 0, key_dim), state_gpu, db.view, gpu_params);
  GDN_ASSERT_OK(
      cuda::gated_delta_rule(qkv_gpu.slice(1, 0, key_dim), qkv_gpu.slice(1, key_dim, 2 * key_dim),
                             qkv_gpu.slice(1, 2 * key_dim, 2 * key_dim + value_dim), g_gpu,
                             beta_gpu, db.view, gpu_params, state_gpu, out_gpu, kStream));
  const double out_tol = act == DType::kF32 ? kRuleF32Tolerance : kBf16Tolerance;
  EXPECT_TRUE(relative_l2(host_f32(out_gpu), out_ref, out_tol)) << "out";
  // Token by token the state is f32 arithmetic on the same inputs in both dtypes; the chunked
  // form's products round their operands to BF16.
  const bool may_chunk = act == DType::kBF16 && chunked_min_rows != INT_MAX;
  EXPECT_TRUE(
      relative_l2(host_f32(state_gpu), state_ref, may_chunk ? kBf16Tolerance : kRuleF32Tolerance))
      << "state";
}

// F32 (token by token), BF16 token by token, BF16 with the op's split, BF16 all chunked.
void check_rule_forms(const RuleCase& c, std::mt19937& rng, int padding_request = -1) {
  check_rule(c, DType::kF32, 0, rng, padding_request);
  for (int min_rows : {INT_MAX, 0, 1}) check_rule(c, DType::kBF16, min_rows, rng, padding_request);
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
    check_rule_forms(c, rng_);
  }
}

// Key dims the kernel runs in a partly filled register capacity (32, 64, 128 or 256 rows):
// the golden test checkpoints' 16 / 20 / 24, 40 and 96, the edges 1, 33, 129 and 255, and the
// full 256, each with a prefill longer than any staging of the kernel.
TEST_F(GdnCuda, RuleMatchesCpuAnyKeyDim) {
  const RuleCase cases[] = {
      {"Dk=16 Dv=20 Hk=2 Hv=4", 2, 4, 16, 20, {3, 1, 300, 1}, 6},
      {"Dk=20 Dv=24 Hk=2 Hv=4", 2, 4, 20, 24, {1, 40, 2}, 5},
      {"Dk=24 Dv=16 Hk=2 Hv=4", 2, 4, 24, 16, {17, 1, 70}, 3},
      {"Dk=40 Dv=96 Hk=1 Hv=2", 1, 2, 40, 96, {1, 200, 3}, 4},
      {"Dk=96 Dv=40 Hk=2 Hv=6", 2, 6, 96, 40, {65, 1, 1}, 4},
      {"Dk=Dv=256 Hk=1 Hv=2", 1, 2, 256, 256, {1, 300, 2}, 4},
      {"Dk=256 Dv=20 Hk=Hv=2", 2, 2, 256, 20, {90, 1}, 3},
      {"Dk=Dv=1", 1, 1, 1, 1, {5, 1, 30}, 4},
      {"Dk=33 Dv=129", 1, 1, 33, 129, {20, 1}, 3},
      {"Dk=255 Dv=3 Hk=1 Hv=2", 1, 2, 255, 3, {2, 40}, 3},
      {"Dk=129 Dv=9 no l2norm", 1, 1, 129, 9, {30, 1}, 2, false, 0.2f},
  };
  for (const RuleCase& c : cases) {
    check_rule_forms(c, rng_);
  }
}

TEST_F(GdnCuda, RuleMatchesCpuQwenShapes) {
  const RuleCase cases[] = {
      {"4B mixed batch", 16, 32, 128, 128, {1, 1024, 1, 7, 1}, 12},
      {"4B decode x64", 16, 32, 128, 128, std::vector<int32_t>(64, 1), 80},
      {"27B mixed batch", 16, 48, 128, 128, {200, 1, 1, 33}, 6},
      {"4B chunk edges", 16, 32, 128, 128, {63, 64, 65, 129, 1, 2048}, 8},
  };
  for (const RuleCase& c : cases) {
    check_rule_forms(c, rng_);
  }
}

// A prefill continued from the state an earlier call left, at every alignment of the call
// boundary to the chunked form's 64-token chunks (and past two chunks), all in the chunked
// form: a 200-token request as calls of a and 200 - a rows against one CPU run.
TEST_F(GdnCuda, ChunkedRuleContinuesAtEveryChunkAlignment) {
  const int64_t hk = 2, hv = 4, dk = 128, dv = 64, tokens = 200;
  const int64_t key_dim = hk * dk, value_dim = hv * dv;
  for (int32_t a = 1; a <= 130; a += a < 66 ? 1 : 16) {
    SCOPED_TRACE("first call " + std::to_string(a) + " rows");
    Tensor qkv = random_tensor({tokens, 2 * key_dim + value_dim}, DType::kBF16, rng_, 0.0f, 1.0f);
    Tensor g, beta;
    random_gating(tokens, hv, rng_, g, beta);
    Tensor state = random_tensor({2, hv, dk, dv}, DType::kF32, rng_, 0.0f, 0.3f);
    Tensor qkv_f32 = to_f32(qkv);
    Tensor state_ref = state.clone();
    Tensor out_ref = Tensor::empty({tokens, value_dim}, DType::kF32);
    const std::vector<int32_t> loc = {0, static_cast<int32_t>(tokens)}, slots = {1};
    GDN_ASSERT_OK(cpu::gated_delta_rule(
        qkv_f32.slice(1, 0, key_dim), qkv_f32.slice(1, key_dim, 2 * key_dim),
        qkv_f32.slice(1, 2 * key_dim, 2 * key_dim + value_dim), g, beta, cpu::GdnBatch{loc, slots},
        cpu::GatedDeltaRuleParams{}, state_ref, out_ref));

    Tensor state_gpu = dev(state);
    Tensor out = Tensor::empty({tokens, value_dim}, DType::kF32);
    cuda::GatedDeltaRuleParams params;
    params.chunked_min_rows = 1;
    for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, a}, {a, tokens}}) {
      Batch b;
      b.add(static_cast<int32_t>(end - begin), 1);
      const DeviceBatch db = upload(b);
      Tensor qkv_gpu = dev(qkv.slice(0, begin, end).clone());
      Tensor g_gpu = dev(g.slice(0, begin, end).clone());
      Tensor beta_gpu = dev(beta.slice(0, begin, end).clone());
      Tensor out_gpu = dev(fill_nan({end - begin, value_dim}, DType::kBF16));
      params.workspace =
          gdn_test::rule_workspace(qkv_gpu.slice(1, 0, key_dim), state_gpu, db.view, params);
      GDN_ASSERT_OK(cuda::gated_delta_rule(
          qkv_gpu.slice(1, 0, key_dim), qkv_gpu.slice(1, key_dim, 2 * key_dim),
          qkv_gpu.slice(1, 2 * key_dim, 2 * key_dim + value_dim), g_gpu, beta_gpu, db.view, params,
          state_gpu, out_gpu, kStream));
      const Tensor part = host_f32(out_gpu);
      std::memcpy(out.data<float>() + begin * value_dim, part.data_ptr(), part.nbytes());
    }
    EXPECT_TRUE(relative_l2(out, out_ref, kBf16Tolerance)) << "out";
    EXPECT_TRUE(relative_l2(host_f32(state_gpu), state_ref, kBf16Tolerance)) << "state";
  }
}

TEST_F(GdnCuda, RulePaddingRequestWritesZerosAndNoState) {
  const RuleCase cases[] = {{"padding Dk=32", 2, 4, 32, 32, {3, 10, 1, 4}, 6},
                            {"padding Dk=20 Dv=24", 2, 4, 20, 24, {3, 10, 1, 4}, 6}};
  for (const RuleCase& c : cases) {
    check_rule_forms(c, rng_, /*padding_request=*/1);
  }
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
    GDN_ASSERT_OK(cpu::causal_conv1d(to_f32(x), w, Tensor(), b_cpu.cpu(), state_ref, out_ref));
    std::fill(out_ref.data<float>() + b.loc[1] * channels,
              out_ref.data<float>() + b.loc[2] * channels, 0.0f);

    const DeviceBatch db = upload(b);
    Tensor x_gpu = dev(x), w_gpu = dev(w);
    Tensor state_gpu = dev(state.slice(0, 0, num_slots).clone());
    Tensor out_gpu = dev(fill_nan({b.tokens(), channels}, act));
    GDN_ASSERT_OK(
        cuda::causal_conv1d(x_gpu, w_gpu, Tensor(), db.view, state_gpu, out_gpu, kStream));
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
      GDN_ASSERT_OK(cpu::gdn_gating(ba_f32.slice(1, c.heads, 2 * c.heads),
                                    ba_f32.slice(1, 0, c.heads), A_log, dt_bias, g_ref, beta_ref));

      Tensor ba_gpu = dev(ba), A_log_gpu = dev(A_log), dt_bias_gpu = dev(dt_bias);
      Tensor g_gpu = dev(fill_nan({c.tokens, c.heads}, DType::kF32));
      Tensor beta_gpu = dev(fill_nan({c.tokens, c.heads}, DType::kF32));
      GDN_ASSERT_OK(cuda::gdn_gating(ba_gpu.slice(1, c.heads, 2 * c.heads),
                                     ba_gpu.slice(1, 0, c.heads), A_log_gpu, dt_bias_gpu, g_gpu,
                                     beta_gpu, kStream));
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
                        {2048, 32, 128, DType::kBF16, true},
                        // The golden checkpoints' value head dims and others.
                        {9, 4, 16, DType::kF32, true},
                        {7, 4, 20, DType::kBF16, false},
                        {3, 4, 24, DType::kF32, true},
                        {5, 3, 40, DType::kBF16, true},
                        {2, 2, 96, DType::kF32, false},
                        {4, 2, 256, DType::kBF16, true}};
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
      GDN_ASSERT_OK(cpu::gated_rms_norm(to_f32(x), mixed_f32.slice(1, z_offset, z_offset + width),
                                        w, kNormEps, out_ref));

      Tensor x_gpu = dev(x), mixed_gpu = dev(mixed), w_gpu = dev(w);
      Tensor out_gpu = c.alias ? x_gpu : dev(fill_nan({c.tokens, width}, act));
      GDN_ASSERT_OK(cuda::gated_rms_norm(x_gpu, mixed_gpu.slice(1, z_offset, z_offset + width),
                                         w_gpu, kNormEps, out_gpu, kStream));
      EXPECT_TRUE(relative_l2(host_f32(out_gpu), out_ref, tolerance(act)));
    }
  }
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
  GDN_ASSERT_OK(cuda::gated_delta_rule(q, k, v, g, beta, db.view, params, state, out, kStream));

  auto expect_error = [](const Status& s, ErrorCode code, const char* word) {
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(word), std::string::npos) << s.message();
  };
  // Dk = 257 is past the largest register capacity: refused, not clamped.
  Tensor state257 = dev(Tensor::zeros({4, 1, 257, 8}, DType::kF32));
  Tensor qk257 = dev(Tensor::zeros({tokens, 257}, DType::kF32));
  Tensor v8 = dev(Tensor::zeros({tokens, 8}, DType::kF32));
  Tensor out8 = dev(Tensor::zeros({tokens, 8}, DType::kF32));
  Tensor g1 = dev(Tensor::zeros({tokens, 1}, DType::kF32));
  expect_error(
      cuda::gated_delta_rule(qk257, qk257, v8, g1, g1, db.view, params, state257, out8, kStream),
      ErrorCode::kUnsupported, "key head dim 257 exceeds the 256");
  // out sharing memory with an input other warps still read.
  Tensor out_on_v = qkv.slice(1, 128, 192);
  expect_error(cuda::gated_delta_rule(q, k, v, g, beta, db.view, params, state, out_on_v, kStream),
               ErrorCode::kInvalidArgument, "out overlaps v");

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
  // The chunked form (BF16) without its workspace, or with one byte too few.
  Tensor q16 = dev(random_tensor({tokens, 64}, DType::kBF16, rng_, 0.0f, 1.0f));
  Tensor out16 = dev(Tensor::empty({tokens, 64}, DType::kBF16));
  cuda::GatedDeltaRuleParams chunked;
  chunked.chunked_min_rows = 1;
  const size_t bytes = cuda::gated_delta_rule_workspace_size(q16, state, db.view, chunked);
  ASSERT_GT(bytes, 0u);
  expect_error(
      cuda::gated_delta_rule(q16, q16, q16, g, beta, db.view, chunked, state, out16, kStream),
      ErrorCode::kInvalidArgument, "workspace of");
  chunked.workspace = dev(Tensor::zeros({static_cast<int64_t>(bytes) - 1}, DType::kU8));
  expect_error(
      cuda::gated_delta_rule(q16, q16, q16, g, beta, db.view, chunked, state, out16, kStream),
      ErrorCode::kInvalidArgument, "workspace of");
  chunked.workspace = dev(Tensor::zeros({static_cast<int64_t>(bytes)}, DType::kU8));
  GDN_ASSERT_OK(
      cuda::gated_delta_rule(q16, q16, q16, g, beta, db.view, chunked, state, out16, kStream));

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
  // out may be x itself, but not x shifted by a column: another thread's inputs.
  Tensor conv_state3 = dev(Tensor::zeros({4, 16, 3}, DType::kF32));
  Tensor wide = dev(Tensor::zeros({tokens, 17}, DType::kF32));
  Tensor x_left = wide.slice(1, 0, 16), x_right = wide.slice(1, 1, 17);
  GDN_ASSERT_OK(cuda::causal_conv1d(x_left, w4, Tensor(), db.view, conv_state3, x_left, kStream));
  expect_error(cuda::causal_conv1d(x_left, w4, Tensor(), db.view, conv_state3, x_right, kStream),
               ErrorCode::kInvalidArgument, "out overlaps x");
  // Interleaved column slices of one tensor share no element: allowed.
  Tensor two = dev(Tensor::zeros({tokens, 32}, DType::kF32));
  Tensor two_left = two.slice(1, 0, 16), two_right = two.slice(1, 16, 32);
  GDN_ASSERT_OK(
      cuda::causal_conv1d(two_left, w4, Tensor(), db.view, conv_state3, two_right, kStream));

  // Gating with g of the wrong dtype; norm with a head size that does not divide x.
  Tensor ab = dev(Tensor::zeros({tokens, 2}, DType::kF32));
  Tensor params2 = dev(Tensor::zeros({2}, DType::kF32));
  Tensor g_bf16 = dev(Tensor::empty({tokens, 2}, DType::kBF16));
  expect_error(cuda::gdn_gating(ab, ab, params2, params2, g_bf16, beta, kStream),
               ErrorCode::kInvalidArgument, "g");
  Tensor w7 = dev(Tensor::zeros({7}, DType::kF32));
  expect_error(cuda::gated_rms_norm(out, out, w7, kNormEps, out, kStream),
               ErrorCode::kInvalidArgument, "head size");
  Tensor w32 = dev(Tensor::zeros({32}, DType::kF32));
  Tensor norm_z = dev(Tensor::zeros({tokens, 64}, DType::kF32));
  expect_error(cuda::gated_rms_norm(out, norm_z, w32, kNormEps, norm_z, kStream),
               ErrorCode::kInvalidArgument, "out overlaps z");
  expect_error(cuda::gdn_gating(ab, ab, params2, params2, g, g, kStream),
               ErrorCode::kInvalidArgument, "g overlaps beta");
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

// The Gated DeltaNet layer on the GPU as the model runs it (conv1d, gating, delta rule, gated
// norm over the column slices of one projection), against the same four CPU ops, and a
// prefill split over several calls against one call: the conv and recurrent states a chunk
// leaves in its slot must let the next chunk continue exactly. Covers Qwen3.5-4B's shapes and
// the small and odd head sizes of the golden test checkpoints; and the GdnLayer's fused input
// norm where b | a are a weight apart (FP8 files), bit for bit against the norm run first.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gdn.h"
#include "backend/cuda/gdn.cuh"
#include "cuda_test_util.h"
#include "gdn_cuda_test_util.h"
#include "model/forward_batch.h"
#include "model/layers/gdn.h"
#include "model/step_inputs.h"
#include "model/weights.h"
#include "ops/exec_context.h"
#include "ops/ops.h"

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
using gdn_test::kActs;
using gdn_test::kBf16Tolerance;
using gdn_test::kNormEps;
using gdn_test::kRuleF32Tolerance;
using gdn_test::kStream;
using gdn_test::make_batch;
using gdn_test::upload;

class GdnLayerCuda : public gdn_test::CudaTest {};

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
  cuda::GatedDeltaRuleParams params;
  params.workspace = gdn_test::rule_workspace(conv_out.slice(1, 0, kd), st.ssm, db.view, params);
  check(cuda::gated_delta_rule(conv_out.slice(1, 0, kd), conv_out.slice(1, kd, 2 * kd),
                               conv_out.slice(1, 2 * kd, d.conv_dim), g, beta, db.view, params,
                               st.ssm, core, kStream));
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
// Chunked must equal whole (in F32 the same arithmetic: only where the state waits in memory
// differs; in BF16 within BF16 rounding), and whole must equal the CPU.
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

  // In BF16 the delta rule's chunked form starts its 64-token chunks where each call's rows
  // start (and pieces under 32 rows go token by token), so the split rounds differently.
  const double split_tol = act == DType::kF32 ? 1e-6 : kBf16Tolerance;
  EXPECT_TRUE(relative_l2(core_split, core_whole, split_tol)) << "chunked vs one call: core";
  EXPECT_TRUE(relative_l2(host_f32(split_state.conv), host_f32(whole_state.conv), 0.0))
      << "chunked vs one call: conv state";
  EXPECT_TRUE(relative_l2(host_f32(split_state.ssm), host_f32(whole_state.ssm), split_tol))
      << "chunked vs one call: ssm state";
  const double tol = act == DType::kF32 ? kRuleF32Tolerance : kBf16Tolerance;
  EXPECT_TRUE(relative_l2(core_whole, core_ref, tol)) << "vs CPU: core";
  EXPECT_TRUE(relative_l2(host_f32(whole_state.conv), cpu_state.conv, 0.0)) << "vs CPU: conv state";
  EXPECT_TRUE(relative_l2(host_f32(whole_state.ssm), cpu_state.ssm, tol)) << "vs CPU: ssm state";
}

TEST_F(GdnLayerCuda, LayerInChunksMatchesOneCallAndCpuSmallShapes) {
  const LayerCase c{"Dk=Dv=32 Hk=2 Hv=4", 2, 4, 32, 32, 100, {37, 1, 62}};
  for (DType act : kActs) check_layer_in_chunks(c, act, rng_);
}

TEST_F(GdnLayerCuda, LayerInChunksMatchesOneCallAndCpuQwenShapes) {
  const LayerCase c{"Qwen3.5-4B", 16, 32, 128, 128, 1024, {300, 1, 723}};
  for (DType act : kActs) check_layer_in_chunks(c, act, rng_);
}

// Head sizes other than Qwen's 128, which the delta rule runs in a partly filled register
// capacity: the golden test checkpoints' (tests/golden/*/config.json), 40 and 96, Dk = Dv =
// 256, and 5 x 7, whose odd row widths take the conv's element-wise path.
TEST_F(GdnLayerCuda, LayerInChunksMatchesOneCallAndCpuOddHeadDims) {
  const LayerCase cases[] = {
      {"qwen3_5_moe: Dk=16 Dv=20", 2, 4, 16, 20, 70, {17, 1, 52}},
      {"qwen3_5_dense: Dk=20 Dv=24", 2, 4, 20, 24, 70, {33, 37}},
      {"qwen3_next: Dk=24 Dv=16", 2, 4, 24, 16, 70, {5, 16, 49}},
      {"Dk=40 Dv=96", 1, 3, 40, 96, 100, {40, 60}},
      {"Dk=96 Dv=40", 2, 2, 96, 40, 100, {1, 99}},
      {"Dk=Dv=256", 1, 2, 256, 256, 90, {20, 70}},
      {"Dk=5 Dv=7", 1, 3, 5, 7, 40, {17, 23}},
  };
  for (const LayerCase& c : cases) {
    for (DType act : kActs) check_layer_in_chunks(c, act, rng_);
  }
}

// ---- GdnLayer's fused input norm with b | a apart ------------------------------------------

// The bytes of a contiguous device tensor.
std::vector<uint8_t> device_bytes(const Tensor& gpu) {
  const Tensor host = cuda::copy_to_host(gpu).value();
  const auto* p = static_cast<const uint8_t*>(host.data_ptr());
  return std::vector<uint8_t>(p, p + host.nbytes());
}

// A layer as Qwen's FP8 files make it -- q | k | v | z block-scaled FP8, in_proj_b / in_proj_a
// BF16 beside it -- at the 35B-A3B's GDN shapes, one decode row. forward_add_norm (the residual
// add and input norm inside the q | k | v | z product, which stores the normed row for the
// b | a product) against fused_add_rms_norm then forward, the decoder's two ways: the output,
// the new residual and both state slots equal bit for bit.
TEST_F(GdnLayerCuda, FusedInputNormWithBaApartEqualsNormThenForward) {
  auto rt = DeviceRuntime::create(Device::cuda(), DType::kBF16);
  ASSERT_TRUE(rt.has_value()) << rt.status().to_string();
  const ExecContext& ctx = (*rt)->context();
  GdnSpec spec;
  spec.hidden_size = 2048;
  spec.num_key_heads = 16;
  spec.num_value_heads = 32;
  spec.key_head_dim = 128;
  spec.value_head_dim = 128;
  spec.conv_kernel = 4;
  DummyWeights weights(ctx, 3, WeightBlock{128, 128},
                       {"linear_attn.in_proj_b", "linear_attn.in_proj_a"});
  GdnLayer layer;
  GDN_ASSERT_OK(layer.load(weights, "linear_attn.", spec, ctx));
  ASSERT_TRUE(layer.in_proj().is_fp8());
  ASSERT_TRUE(layer.in_proj_ba().defined());
  ASSERT_FALSE(layer.in_proj_ba().is_fp8());

  // One request at position 4 on state slot 1 of 2.
  ForwardBatch fb;
  fb.token_ids = Tensor::empty({1}, DType::kI64);
  fb.token_ids.data<int64_t>()[0] = 0;
  fb.positions = Tensor::empty({1}, DType::kI64);
  fb.positions.data<int64_t>()[0] = 4;
  fb.slot_mapping = Tensor::empty({1}, DType::kI64);
  fb.slot_mapping.data<int64_t>()[0] = 4;
  fb.block_tables = Tensor::empty({1, 1}, DType::kI32);
  fb.block_tables.data<int32_t>()[0] = 0;
  fb.query_start_loc = {0, 1};
  fb.seq_lens = {5};
  fb.state_indices = {1};
  fb.logits_indices = {0};
  auto in = prepare_step(ctx, fb, 2);
  ASSERT_TRUE(in.has_value()) << in.status().to_string();

  const int64_t hidden = spec.hidden_size;
  const Tensor x_host = random_tensor({1, hidden}, DType::kBF16, rng_, 0.0f, 1.0f);
  const Tensor residual_host = random_tensor({1, hidden}, DType::kF32, rng_, 0.0f, 1.0f);
  const Tensor norm_w = dev(random_tensor({hidden}, DType::kBF16, rng_, 0.0f, 0.1f));
  const Tensor conv0 =
      random_tensor({2, spec.conv_dim(), spec.conv_kernel - 1}, DType::kF32, rng_, 0.0f, 0.5f);
  const Tensor ssm0 =
      random_tensor({2, spec.num_value_heads, spec.key_head_dim, spec.value_head_dim}, DType::kF32,
                    rng_, 0.0f, 0.1f);
  const Tensor x = dev(x_host), residual = dev(residual_host);
  ASSERT_TRUE(layer.fuses_norm(ctx, x, norm_w));

  Tensor conv_fused = dev(conv0), ssm_fused = dev(ssm0);
  Tensor residual_out = dev(fill_nan({1, hidden}, DType::kF32));
  Tensor out_fused = dev(fill_nan({1, hidden}, DType::kBF16));
  GDN_ASSERT_OK(layer.forward_add_norm(
      ctx, ops::AddRmsNorm{x, residual, residual_out, norm_w, kNormEps, true}, *in, conv_fused,
      ssm_fused, out_fused));

  Tensor h = dev(x_host), residual_apart = dev(residual_host);
  GDN_ASSERT_OK(ops::fused_add_rms_norm(ctx, h, residual_apart, norm_w, kNormEps, true));
  Tensor conv_apart = dev(conv0), ssm_apart = dev(ssm0);
  Tensor out_apart = dev(fill_nan({1, hidden}, DType::kBF16));
  GDN_ASSERT_OK(layer.forward(ctx, h, *in, conv_apart, ssm_apart, out_apart));
  GDN_ASSERT_OK((*rt)->synchronize());

  EXPECT_EQ(device_bytes(out_fused), device_bytes(out_apart)) << "out";
  EXPECT_EQ(device_bytes(residual_out), device_bytes(residual_apart)) << "residual";
  EXPECT_EQ(device_bytes(conv_fused), device_bytes(conv_apart)) << "conv state";
  EXPECT_EQ(device_bytes(ssm_fused), device_bytes(ssm_apart)) << "recurrent state";
  const Tensor out_host = host_f32(out_fused);
  for (int64_t i = 0; i < out_host.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(out_host.data<float>()[i])) << i;
  }
}

}  // namespace
}  // namespace vllm

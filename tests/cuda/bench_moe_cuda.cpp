// Timing mode for the MoE layer (not a test: it asserts no speed). Runs only with VLLM_BENCH=1
// on a machine with a GPU:
//   VLLM_BENCH=1 ./vllm_cuda_tests --gtest_filter='MoeCudaBench.*'
// Qwen3.5-35B-A3B's MoE layer (configs/Qwen3.5-35B-A3B: hidden 2048, 256 experts of 512,
// top-8, a shared expert of 512), BF16, dummy weights (uniform in +-1e-3, so the routing is
// close to uniform at random):
//   - batches of 1, 8, 64 and 256 tokens: the whole layer (router GEMM with the shared gate,
//     route, shared expert, experts, combine) and moe_experts alone on each path. Bytes: the
//     weights actually touched (router and shared gate, shared expert, and the distinct
//     experts the batch selects, counted from its routing) plus activations, over the median
//     time, against 4.3 TB/s. Four layers rotate so every call streams its weights from HBM
//     (a layer is 1.6 GB; the L2 holds 50 MB).
//   - a prefill-sized batch of 16384 tokens: FLOPs over the median time, against 790 TFLOP/s.
// Prints a markdown table.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/moe.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_bench_util.h"
#include "model/layers/moe.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace vllm {
namespace {

using cuda_test::kRooflineTBs;
using cuda_test::kRooflineTflops;

constexpr int kLayers = 4;

MoeSpec qwen35_35b_a3b() {
  MoeSpec s;
  s.hidden_size = 2048;
  s.num_experts = 256;
  s.top_k = 8;
  s.intermediate_size = 512;
  s.shared_intermediate_size = 512;
  s.renormalize = true;
  return s;
}

void print_header() {
  std::printf(
      "| what | path | tokens | experts touched | MB | us | GB/s | %% of 4.3 TB/s | TFLOP/s | "
      "%% of 790 |\n|---|---|---|---|---|---|---|---|---|---|\n");
}

void print_row(const char* what, const char* path, int64_t tokens, double experts, double bytes,
               double flops, double us) {
  const double gbs = bytes / (us * 1e-6) / 1e9;
  const double tflops = flops / (us * 1e-6) / 1e12;
  std::printf("| %s | %s | %lld | %.1f | %.1f | %.1f | %.0f | %.1f%% | %.1f | %.1f%% |\n", what,
              path, static_cast<long long>(tokens), experts, bytes / 1e6, us, gbs,
              100.0 * gbs / (kRooflineTBs * 1000.0), tflops, 100.0 * tflops / kRooflineTflops);
}

TEST(MoeCudaBench, Qwen35_35B_A3B) {
  if (!cuda_test::bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time the MoE layer";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto rt = DeviceRuntime::create(Device::cuda(), DType::kBF16);
  ASSERT_TRUE(rt.has_value()) << rt.status().to_string();
  Workspace& ws = (*rt)->workspace();
  // The legacy default stream, which the timer's events are recorded on.
  ExecContext ctx = (*rt)->context();
  ctx.stream = nullptr;
  const MoeSpec spec = qwen35_35b_a3b();
  const int64_t h = spec.hidden_size, e = spec.num_experts, k = spec.top_k;
  const int64_t inter = spec.intermediate_size, shared = spec.shared_intermediate_size;
  DummyWeights dummy(ctx, 1);
  std::vector<MoeLayer> layers(kLayers);
  for (int i = 0; i < kLayers; ++i) {
    Status s = layers[i].load(dummy, "model.layers." + std::to_string(i) + ".mlp.", spec, ctx);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double expert_bytes = 3.0 * h * inter * 2;
  const double fixed_bytes = (e + 1.0) * h * 2 + 3.0 * h * shared * 2;

  print_header();
  for (int64_t tokens : {int64_t{1}, int64_t{8}, int64_t{64}, int64_t{256}, int64_t{16384}}) {
    const bool prefill = tokens > 4096;
    const int warmup = prefill ? 3 : 20, iterations = prefill ? 10 : 200;
    // Per layer: its input and its routing, kept outside the workspace.
    std::vector<Tensor> xs, weights, ids;
    double touched = 0.0;
    for (int i = 0; i < kLayers; ++i) {
      Tensor x = Tensor::try_empty({tokens, h}, DType::kBF16, Device::cuda()).value();
      ASSERT_TRUE(cuda::fill_uniform(x, -1.0f, 1.0f, 100 + i, nullptr).is_ok());
      ASSERT_TRUE(ws.reset().is_ok());
      auto r = layers[i].route(ctx, x);
      ASSERT_TRUE(r.has_value()) << r.status().to_string();
      Tensor w = Tensor::try_empty({tokens, k}, DType::kF32, Device::cuda()).value();
      Tensor id = Tensor::try_empty({tokens, k}, DType::kI64, Device::cuda()).value();
      ASSERT_TRUE(ops::copy(ctx, r->topk_weights, w).is_ok());
      ASSERT_TRUE(ops::copy(ctx, r->topk_ids, id).is_ok());
      Tensor host = cuda::copy_to_host(id).value();
      std::set<int64_t> distinct(host.data<int64_t>(), host.data<int64_t>() + host.numel());
      touched += static_cast<double>(distinct.size()) / kLayers;
      xs.push_back(x);
      weights.push_back(w);
      ids.push_back(id);
    }
    const double act_bytes = 2.0 * tokens * h * 2;
    const double expert_flops = 2.0 * tokens * k * 3 * h * inter;
    const double layer_flops = expert_flops + 2.0 * tokens * ((e + 1) * h + 3 * h * shared);

    const double layer_us = cuda_test::time_launches(
        [&](int i) -> Status {
          VLLM_RETURN_IF_ERROR(ws.reset());
          VLLM_ASSIGN_OR_RETURN(Tensor out, ctx.act({tokens, h}));
          return layers[i].forward(ctx, xs[i], out);
        },
        kLayers, warmup, iterations);
    if (layer_us > 0) {
      print_row("layer", tokens <= cuda::kMoeGemvMaxTokens ? "auto: GEMV" : "auto: grouped", tokens,
                touched, fixed_bytes + touched * expert_bytes + act_bytes, layer_flops, layer_us);
    }
    for (cuda::MoePath path : {cuda::MoePath::kGatherGemv, cuda::MoePath::kGroupedGemm}) {
      const double us = cuda_test::time_launches(
          [&](int i) -> Status {
            VLLM_RETURN_IF_ERROR(ws.reset());
            cuda::MoeExpertsArgs args;
            args.gate_up = layers[i].experts().gate_up;
            args.down = layers[i].experts().down;
            args.path = path;
            VLLM_ASSIGN_OR_RETURN(size_t bytes,
                                  cuda::moe_experts_scratch_bytes(xs[i], ids[i], args));
            VLLM_ASSIGN_OR_RETURN(Tensor scratch,
                                  ctx.alloc({static_cast<int64_t>(bytes)}, DType::kU8));
            VLLM_ASSIGN_OR_RETURN(Tensor out, ctx.act({tokens, h}));
            return cuda::moe_experts(xs[i], weights[i], ids[i], args, scratch, out, nullptr);
          },
          kLayers, warmup, iterations);
      if (us <= 0) continue;
      const bool gemv = path == cuda::MoePath::kGatherGemv;
      const char* name = gemv ? "GEMV"
                              : (tokens * k <= cuda::kMoeSmallTileMaxPairsPerExpert * e
                                     ? "grouped, 32-row tiles"
                                     : "grouped, 128-row tiles");
      print_row("moe_experts", name, tokens, touched, touched * expert_bytes + act_bytes,
                expert_flops, us);
    }
  }
}

}  // namespace
}  // namespace vllm

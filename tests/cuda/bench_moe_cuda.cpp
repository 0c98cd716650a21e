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
// A second table sets our grouped GEMM path (grouping, both projections, SiLU, combine) beside
// cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx, one group per expert that has tokens, plus
// the row gather and SiLU-and-mul it needs) at 256, 2048 and 16384 tokens. cuBLAS takes the
// per-expert token counts from host arrays, so in the product it would cost a device-to-host
// copy and a stream sync per layer (and rule out CUDA graphs); here the counts are prepared
// once outside the timed region, which is the most favourable case for cuBLAS.
// Prints markdown tables.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
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
  // VLLM_BENCH_MOE_FP8=1: the experts (and the shared expert) as block-scaled FP8 in 128 x 128
  // blocks, Qwen3.5-35B-A3B-FP8's layout.
  const char* fp8_env = std::getenv("VLLM_BENCH_MOE_FP8");
  const bool fp8 = fp8_env != nullptr && std::string(fp8_env) == "1";
  DummyWeights dummy(ctx, 1,
                     fp8 ? std::optional<WeightBlock>(WeightBlock{128, 128}) : std::nullopt);
  std::printf("\nexperts: %s\n", fp8 ? "FP8 (W8A16), 128 x 128 blocks" : "BF16");
  std::vector<MoeLayer> layers(kLayers);
  for (int i = 0; i < kLayers; ++i) {
    Status s = layers[i].load(dummy, "model.layers." + std::to_string(i) + ".mlp.", spec, ctx);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double expert_bytes = 3.0 * h * inter * (fp8 ? 1 : 2);
  const double fixed_bytes = (e + 1.0) * h * 2 + 3.0 * h * shared * 2;

  print_header();
  for (int64_t tokens : {int64_t{1}, int64_t{8}, int64_t{64}, int64_t{256}, int64_t{16384}}) {
    const bool prefill = tokens > 4096;
    const int warmup = prefill ? 3 : 20, iterations = prefill ? 10 : 200;
    // Per layer: its input and its routing, kept outside the workspace.
    std::vector<Tensor> xs, weights, ids;
    double touched = 0.0;  // distinct experts per layer, the shared one too when it is a slot
    bool shared_slot = false;
    for (int i = 0; i < kLayers; ++i) {
      Tensor x = Tensor::try_empty({tokens, h}, DType::kBF16, Device::cuda()).value();
      ASSERT_TRUE(cuda::fill_uniform(x, -1.0f, 1.0f, 100 + i, nullptr).is_ok());
      ASSERT_TRUE(ws.reset().is_ok());
      auto r = layers[i].route(ctx, x);
      ASSERT_TRUE(r.has_value()) << r.status().to_string();
      // [T, k], or [T, k + 1] with the shared expert as a routed slot (MoeLayer decides).
      Tensor w = Tensor::try_empty(r->topk_weights.shape(), DType::kF32, Device::cuda()).value();
      Tensor id = Tensor::try_empty(r->topk_ids.shape(), DType::kI64, Device::cuda()).value();
      ASSERT_TRUE(ops::copy(ctx, r->topk_weights, w).is_ok());
      ASSERT_TRUE(ops::copy(ctx, r->topk_ids, id).is_ok());
      Tensor host = cuda::copy_to_host(id).value();
      std::set<int64_t> distinct(host.data<int64_t>(), host.data<int64_t>() + host.numel());
      touched += static_cast<double>(distinct.size()) / kLayers;
      shared_slot = distinct.count(e) > 0;
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
      print_row("layer",
                tokens <= cuda::kMoePairMaxTokens
                    ? "auto: per-pair"
                    : (tokens <= cuda::kMoeGemvMaxTokens ? "auto: GEMV" : "auto: grouped"),
                tokens, touched,
                fixed_bytes + (touched - (shared_slot ? 1.0 : 0.0)) * expert_bytes + act_bytes,
                layer_flops, layer_us);
    }
    for (cuda::MoePath path : {cuda::MoePath::kPairGemv, cuda::MoePath::kGatherGemv,
                               cuda::MoePath::kGroupedGemm, cuda::MoePath::kGroupedGemmW8A8}) {
      if (path == cuda::MoePath::kPairGemv && prefill) continue;
      if (path == cuda::MoePath::kGroupedGemmW8A8 && (!fp8 || tokens <= 8)) continue;
      const double us = cuda_test::time_launches(
          [&](int i) -> Status {
            VLLM_RETURN_IF_ERROR(ws.reset());
            cuda::MoeExpertsArgs args;
            const ops::MoeWeights& ew = layers[i].experts();
            args.gate_up = ew.gate_up;
            args.down = ew.down;
            args.gate_up_scale_inv = ew.gate_up_scale_inv;
            args.down_scale_inv = ew.down_scale_inv;
            args.gate_up_block = ew.gate_up_block;
            args.down_block = ew.down_block;
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
      const char* name = path == cuda::MoePath::kPairGemv          ? "per-pair GEMV"
                         : path == cuda::MoePath::kGroupedGemmW8A8 ? "grouped W8A8, 128-row tiles"
                         : gemv                                    ? "GEMV"
                                : (tokens * k <= cuda::kMoeSmallTileMaxPairsPerExpert * e
                                       ? "grouped, 32-row tiles"
                                       : "grouped, 128-row tiles");
      print_row("moe_experts", name, tokens, touched, touched * expert_bytes + act_bytes,
                expert_flops, us);
    }
  }
}

// One projection of every expert with tokens through cublasGemmGroupedBatchedEx: rows
// [offsets[g], offsets[g + 1]) of `in` [P, K] times expert experts[g]'s [N, K] weight into the
// same rows of `out` [P, N]. Column-major view as in cuda::linear: out^T = W * in^T.
class CublasGrouped {
 public:
  CublasGrouped(const std::vector<int64_t>& experts, const std::vector<int64_t>& offsets,
                const Tensor& weight, const Tensor& in, const Tensor& out) {
    const int64_t n = weight.size(1), k = weight.size(2);
    const auto* w = static_cast<const char*>(weight.data_ptr());
    const auto* x = static_cast<const char*>(in.data_ptr());
    auto* y = static_cast<char*>(out.data_ptr());
    std::vector<const void*> a, b;
    std::vector<void*> c;
    for (size_t g = 0; g < experts.size(); ++g) {
      m_.push_back(static_cast<int>(n));
      n_.push_back(static_cast<int>(offsets[g + 1] - offsets[g]));
      k_.push_back(static_cast<int>(k));
      lda_.push_back(static_cast<int>(k));
      ldb_.push_back(static_cast<int>(k));
      ldc_.push_back(static_cast<int>(n));
      a.push_back(w + experts[g] * n * k * 2);
      b.push_back(x + offsets[g] * k * 2);
      c.push_back(y + offsets[g] * n * 2);
    }
    groups_ = static_cast<int>(experts.size());
    trans_a_.assign(experts.size(), CUBLAS_OP_T);
    trans_b_.assign(experts.size(), CUBLAS_OP_N);
    alpha_.assign(experts.size(), 1.0f);
    beta_.assign(experts.size(), 0.0f);
    sizes_.assign(experts.size(), 1);
    const size_t bytes = experts.size() * sizeof(void*);
    pointers_ =
        Tensor::try_empty({static_cast<int64_t>(3 * bytes)}, DType::kU8, Device::cuda()).value();
    std::vector<char> host(3 * bytes);
    std::memcpy(host.data(), a.data(), bytes);
    std::memcpy(host.data() + bytes, b.data(), bytes);
    std::memcpy(host.data() + 2 * bytes, c.data(), bytes);
    VLLM_CHECK(cudaMemcpy(pointers_.data_ptr(), host.data(), host.size(), cudaMemcpyHostToDevice) ==
               cudaSuccess);
  }

  Status run(cublasHandle_t handle) const {
    auto* base = static_cast<char*>(pointers_.data_ptr());
    const size_t bytes = static_cast<size_t>(groups_) * sizeof(void*);
    const cublasStatus_t s = cublasGemmGroupedBatchedEx(
        handle, trans_a_.data(), trans_b_.data(), m_.data(), n_.data(), k_.data(), alpha_.data(),
        reinterpret_cast<const void* const*>(base), CUDA_R_16BF, lda_.data(),
        reinterpret_cast<const void* const*>(base + bytes), CUDA_R_16BF, ldb_.data(), beta_.data(),
        reinterpret_cast<void* const*>(base + 2 * bytes), CUDA_R_16BF, ldc_.data(), groups_,
        sizes_.data(), CUBLAS_COMPUTE_32F);
    if (s != CUBLAS_STATUS_SUCCESS) {
      return make_error(ErrorCode::kInternal, "cublasGemmGroupedBatchedEx: status {}",
                        static_cast<int>(s));
    }
    return Status::ok();
  }

 private:
  int groups_ = 0;
  std::vector<int> m_, n_, k_, lda_, ldb_, ldc_, sizes_;
  std::vector<cublasOperation_t> trans_a_, trans_b_;
  std::vector<float> alpha_, beta_;
  Tensor pointers_;  // device arrays of A, B and C pointers
};

TEST(MoeCudaBench, GroupedGemmAgainstCublasGrouped) {
  if (!cuda_test::bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time the MoE layer";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(cuda::init().is_ok());
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const MoeSpec spec = qwen35_35b_a3b();
  const int64_t h = spec.hidden_size, e = spec.num_experts, k = spec.top_k;
  const int64_t inter = spec.intermediate_size;
  Tensor gate_up = Tensor::try_empty({e, 2 * inter, h}, DType::kBF16, Device::cuda()).value();
  Tensor down = Tensor::try_empty({e, h, inter}, DType::kBF16, Device::cuda()).value();
  ASSERT_TRUE(cuda::fill_uniform(gate_up, -0.02f, 0.02f, 1, nullptr).is_ok());
  ASSERT_TRUE(cuda::fill_uniform(down, -0.04f, 0.04f, 2, nullptr).is_ok());
  std::printf(
      "| tokens | ours: grouped path, whole op (us) | TFLOP/s | cuBLAS grouped: gather + 2 GEMMs "
      "+ SiLU (us) | TFLOP/s |\n|---|---|---|---|---|\n");
  std::mt19937 rng(3);
  for (int64_t tokens : {int64_t{256}, int64_t{2048}, int64_t{16384}}) {
    // Uniform random routing, k distinct experts per token.
    Tensor ids = Tensor::empty({tokens, k}, DType::kI64);
    Tensor weights = Tensor::empty({tokens, k}, DType::kF32);
    std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(e));
    std::vector<int64_t> all(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) all[static_cast<size_t>(i)] = i;
    for (int64_t t = 0; t < tokens; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      for (int64_t i = 0; i < k; ++i) {
        ids.data<int64_t>()[t * k + i] = all[static_cast<size_t>(i)];
        weights.data<float>()[t * k + i] = 1.0f / static_cast<float>(k);
        rows_of[static_cast<size_t>(all[static_cast<size_t>(i)])].push_back(t);
      }
    }
    std::vector<int64_t> experts, offsets{0}, gather;
    for (int64_t x = 0; x < e; ++x) {
      const auto& r = rows_of[static_cast<size_t>(x)];
      if (r.empty()) continue;
      experts.push_back(x);
      gather.insert(gather.end(), r.begin(), r.end());
      offsets.push_back(static_cast<int64_t>(gather.size()));
    }
    const int64_t pairs = tokens * k;
    Tensor gather_rows = Tensor::empty({pairs}, DType::kI64);
    std::copy(gather.begin(), gather.end(), gather_rows.data<int64_t>());
    Tensor x = Tensor::try_empty({tokens, h}, DType::kBF16, Device::cuda()).value();
    ASSERT_TRUE(cuda::fill_uniform(x, -1.0f, 1.0f, 7, nullptr).is_ok());
    Tensor ids_gpu = cuda::copy_to_device(ids).value();
    Tensor weights_gpu = cuda::copy_to_device(weights).value();
    Tensor rows_gpu = cuda::copy_to_device(gather_rows).value();
    Tensor xs = Tensor::try_empty({pairs, h}, DType::kBF16, Device::cuda()).value();
    Tensor hs = Tensor::try_empty({pairs, 2 * inter}, DType::kBF16, Device::cuda()).value();
    Tensor act = Tensor::try_empty({pairs, inter}, DType::kBF16, Device::cuda()).value();
    Tensor ys = Tensor::try_empty({pairs, h}, DType::kBF16, Device::cuda()).value();
    const CublasGrouped first(experts, offsets, gate_up, xs, hs);
    const CublasGrouped second(experts, offsets, down, act, ys);
    const double cublas_us = cuda_test::time_launches(
        [&](int) -> Status {
          VLLM_RETURN_IF_ERROR(cuda::gather_rows(x, rows_gpu, xs, nullptr));
          VLLM_RETURN_IF_ERROR(first.run(handle));
          VLLM_RETURN_IF_ERROR(cuda::silu_and_mul(hs, act, nullptr));
          return second.run(handle);
        },
        1, 3, 20);

    cuda::MoeExpertsArgs args;
    args.gate_up = gate_up;
    args.down = down;
    args.path = cuda::MoePath::kGroupedGemm;
    const size_t bytes = cuda::moe_experts_scratch_bytes(x, ids_gpu, args).value();
    Tensor scratch =
        Tensor::try_empty({static_cast<int64_t>(bytes)}, DType::kU8, Device::cuda()).value();
    Tensor out = Tensor::try_empty({tokens, h}, DType::kBF16, Device::cuda()).value();
    const double ours_us = cuda_test::time_launches(
        [&](int) {
          return cuda::moe_experts(x, weights_gpu, ids_gpu, args, scratch, out, nullptr);
        },
        1, 3, 20);
    const double flops = 2.0 * pairs * 3 * h * inter;
    std::printf("| %lld | %.1f | %.1f | %.1f | %.1f |\n", static_cast<long long>(tokens), ours_us,
                flops / (ours_us * 1e-6) / 1e12, cublas_us, flops / (cublas_us * 1e-6) / 1e12);
  }
  cublasDestroy(handle);
}

}  // namespace
}  // namespace vllm

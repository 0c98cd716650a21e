// Timing mode for the Gated DeltaNet kernels (not a test: it asserts no speed). Runs only with
// VLLM_BENCH=1 on a machine with a GPU:
//   VLLM_BENCH=1 ./vllm_cuda_tests --gtest_filter='GdnCudaBench.*'
// For the GDN layer shapes of Qwen3.5-4B and 27B (BF16 activations, F32 state):
//   - decode at batch 1, 16 and 64 (one token per request): each op and the layer's four ops
//     in sequence, with the bytes each must move (dominated by the recurrent state, read and
//     written once: 2 MiB per request for 4B, 3 MiB for 27B) over the median time, against
//     the H200's ~4.3 TB/s. The requests' slots rotate over >= 512 MiB of state so each call
//     streams from HBM, not from the 60 MB L2.
//   - prefill of 1 request of 16, 64 and 2048 tokens and of 8 requests of 2048, in tokens/s:
//     the delta rule as the op chooses it (chunked on tensor cores from 32 rows) and token by
//     token ("rule-tt", latency-bound), for the choice of the crossover.
// Prints a markdown table.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gdn.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_bench_util.h"
#include "cuda_test_util.h"
#include "gdn_cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::random_tensor;
using gdn_test::dev;

constexpr int64_t kWidth = 4;  // linear_conv_kernel_dim
constexpr size_t kStateRotationBytes = size_t{1} << 29;
constexpr float kEps = 1e-6f;
constexpr DType kAct = DType::kBF16;

struct GdnShape {
  const char* model;
  int64_t hk, hv, dk, dv;
};

// Everything one GDN layer call touches, on the device.
class LayerBench {
 public:
  LayerBench(const GdnShape& s, int64_t requests, int32_t tokens_per_request, std::mt19937& rng)
      : s_(s), requests_(requests) {
    key_dim_ = s.hk * s.dk;
    value_dim_ = s.hv * s.dv;
    conv_dim_ = 2 * key_dim_ + value_dim_;
    tokens_ = requests * tokens_per_request;
    const size_t slot_bytes =
        static_cast<size_t>(s.hv * s.dk * s.dv + conv_dim_ * (kWidth - 1)) * sizeof(float);
    // Decode rotates the slots over kStateRotationBytes; a prefill is not bandwidth-bound.
    const int64_t num_slots =
        tokens_per_request == 1
            ? std::max<int64_t>(requests, static_cast<int64_t>(kStateRotationBytes / slot_bytes))
            : requests;
    for (int64_t first = 0; first + requests <= num_slots; first += requests) {
      gdn_test::Batch b;
      for (int64_t r = 0; r < requests; ++r)
        b.add(tokens_per_request, static_cast<int32_t>(first + r));
      batches_.push_back(gdn_test::upload(b));
    }
    mixed_ = dev(random_tensor({tokens_, conv_dim_ + value_dim_}, kAct, rng, 0.0f, 1.0f));
    ba_ = dev(random_tensor({tokens_, 2 * s.hv}, kAct, rng, 0.0f, 1.0f));
    conv_weight_ = dev(random_tensor({conv_dim_, kWidth}, DType::kBF16, rng, 0.0f, 0.5f));
    A_log_ = dev(random_tensor({s.hv}, DType::kF32, rng, 0.0f, 1.0f));
    dt_bias_ = dev(random_tensor({s.hv}, DType::kF32, rng, -1.0f, 0.5f));
    norm_ = dev(random_tensor({s.dv}, DType::kBF16, rng, 1.0f, 0.1f));
    conv_out_ = empty({tokens_, conv_dim_}, kAct);
    g_ = empty({tokens_, s.hv}, DType::kF32);
    beta_ = empty({tokens_, s.hv}, DType::kF32);
    core_ = empty({tokens_, value_dim_}, kAct);
    conv_state_ = zeros({num_slots, conv_dim_, kWidth - 1});
    ssm_state_ = zeros({num_slots, s.hv, s.dk, s.dv});
  }

  int sets() const { return static_cast<int>(batches_.size()); }
  int64_t tokens() const { return tokens_; }

  Status conv(int i) {
    return cuda::causal_conv1d(mixed_.slice(1, 0, conv_dim_), conv_weight_, Tensor(), batch(i),
                               conv_state_, conv_out_, nullptr);
  }
  Status gating() {
    return cuda::gdn_gating(ba_.slice(1, s_.hv, 2 * s_.hv), ba_.slice(1, 0, s_.hv), A_log_,
                            dt_bias_, g_, beta_, nullptr);
  }
  // chunked_min_rows: GatedDeltaRuleParams's (0: the op's default, INT_MAX: token by token).
  Status rule(int i, int chunked_min_rows = 0) {
    cuda::GatedDeltaRuleParams params;
    params.chunked_min_rows = chunked_min_rows;
    const Tensor q = conv_out_.slice(1, 0, key_dim_);
    const size_t bytes = cuda::gated_delta_rule_workspace_size(q, ssm_state_, batch(i), params);
    if (bytes > workspace_.nbytes()) {
      workspace_ = empty({static_cast<int64_t>(bytes)}, DType::kU8);
    }
    if (bytes > 0) params.workspace = workspace_;
    return cuda::gated_delta_rule(conv_out_.slice(1, 0, key_dim_),
                                  conv_out_.slice(1, key_dim_, 2 * key_dim_),
                                  conv_out_.slice(1, 2 * key_dim_, conv_dim_), g_, beta_, batch(i),
                                  params, ssm_state_, core_, nullptr);
  }
  Status norm() {
    return cuda::gated_rms_norm(core_, mixed_.slice(1, conv_dim_, conv_dim_ + value_dim_), norm_,
                                kEps, core_, nullptr);
  }
  Status layer(int i) {
    VLLM_RETURN_IF_ERROR(conv(i));
    VLLM_RETURN_IF_ERROR(gating());
    VLLM_RETURN_IF_ERROR(rule(i));
    return norm();
  }

  // Bytes each op must move at least once.
  double conv_bytes() const {
    const double act = dtype_size(kAct);
    return tokens_ * conv_dim_ * act * 2 + requests_ * conv_dim_ * (kWidth - 1) * 4.0 * 2 +
           conv_dim_ * kWidth * 2.0;
  }
  double gating_bytes() const { return tokens_ * s_.hv * (2 * dtype_size(kAct) + 2 * 4.0); }
  double rule_bytes() const {
    const double act = dtype_size(kAct);
    return requests_ * s_.hv * s_.dk * s_.dv * 4.0 * 2 + tokens_ * (conv_dim_ + value_dim_) * act +
           tokens_ * s_.hv * 4.0 * 2;
  }
  double norm_bytes() const { return tokens_ * value_dim_ * dtype_size(kAct) * 3.0; }

 private:
  const cuda::GdnBatch& batch(int i) const {
    return batches_[static_cast<size_t>(i % sets())].view;
  }
  static Tensor empty(const Shape& shape, DType dtype) {
    return Tensor::try_empty(shape, dtype, Device::cuda()).value();
  }
  static Tensor zeros(const Shape& shape) {
    Tensor t = empty(shape, DType::kF32);
    VLLM_CHECK(cudaMemset(t.data_ptr(), 0, t.nbytes()) == cudaSuccess);
    return t;
  }

  GdnShape s_;
  int64_t requests_;
  int64_t key_dim_ = 0, value_dim_ = 0, conv_dim_ = 0, tokens_ = 0;
  std::vector<gdn_test::DeviceBatch> batches_;
  Tensor mixed_, ba_, conv_weight_, A_log_, dt_bias_, norm_;
  Tensor conv_out_, g_, beta_, core_;
  Tensor conv_state_, ssm_state_;
  Tensor workspace_;
};

void print_row(const std::string& model, const std::string& scenario, const char* op, double bytes,
               double tokens, double us) {
  const double gbs = bytes / (us * 1e-6) / 1e9;
  std::printf("| %-11s | %-14s | %-6s | %10.2f | %8.1f | %5.1f%% | %12.0f |\n", model.c_str(),
              scenario.c_str(), op, us, gbs, 100.0 * gbs / cuda_test::kHbmRooflineGBs,
              tokens / (us * 1e-6));
}

TEST(GdnCudaBench, DecodeAndPrefill) {
  if (!cuda_test::bench_enabled()) GTEST_SKIP() << "set VLLM_BENCH=1 to time the GDN kernels";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(cuda::init().is_ok());

  const GdnShape shapes[] = {{"Qwen3.5-4B", 16, 32, 128, 128}, {"Qwen3.5-27B", 16, 48, 128, 128}};
  struct Scenario {
    int64_t requests;
    int32_t tokens_per_request;
  };
  const Scenario scenarios[] = {{1, 1}, {16, 1}, {64, 1}, {1, 16}, {1, 64}, {1, 2048}, {8, 2048}};
  std::mt19937 rng(11);
  std::printf("\n| %-11s | %-14s | %-6s | %10s | %8s | %6s | %12s |\n", "model", "case", "op",
              "median us", "GB/s", "of 4.3TB/s", "tokens/s");
  std::printf(
      "|-------------|----------------|--------|------------|----------|--------|"
      "--------------|\n");
  for (const GdnShape& shape : shapes) {
    for (const Scenario& sc : scenarios) {
      LayerBench bench(shape, sc.requests, sc.tokens_per_request, rng);
      const bool decode = sc.tokens_per_request == 1;
      const std::string scenario = decode ? fmt::format("decode x{}", sc.requests)
                                          : fmt::format("prefill {}", sc.tokens_per_request);
      const int iterations = decode ? 200 : 20;
      const int warmup = decode ? 20 : 3;
      ASSERT_TRUE(bench.layer(0).is_ok());  // real conv outputs and gates for the rule
      struct Op {
        const char* name;
        std::function<Status(int)> run;
        double bytes;
      };
      const Op ops[] = {
          {"conv", [&](int i) { return bench.conv(i); }, bench.conv_bytes()},
          {"gating", [&](int) { return bench.gating(); }, bench.gating_bytes()},
          {"rule", [&](int i) { return bench.rule(i); }, bench.rule_bytes()},
          {"rule-tt", [&](int i) { return bench.rule(i, INT_MAX); }, bench.rule_bytes()},
          {"norm", [&](int) { return bench.norm(); }, bench.norm_bytes()},
          {"layer", [&](int i) { return bench.layer(i); },
           bench.conv_bytes() + bench.gating_bytes() + bench.rule_bytes() + bench.norm_bytes()},
      };
      for (const Op& op : ops) {
        if (decode && std::string(op.name) == "rule-tt") continue;  // the same kernel as rule
        const double us =
            cuda_test::time_launches(op.run, /*sets=*/iterations + warmup, warmup, iterations);
        if (us > 0.0) {
          print_row(shape.model, scenario, op.name, op.bytes, static_cast<double>(bench.tokens()),
                    us);
        }
      }
    }
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace vllm

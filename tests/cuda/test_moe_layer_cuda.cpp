// The MoE layer (model/layers/moe.h) on CUDA against the same layer on the CPU, loaded from one
// set of F32 weights in both checkpoint layouts (per expert, copied into the stack on the
// device as each tensor is read, and fused), with and without a shared expert: the stacked
// weights on the device must be the same for both layouts, and forward (router GEMM with the
// shared gate as an extra row, route, experts on each token count's path, fused shared add)
// must match the CPU's within relative L2 2e-2 in BF16 (1e-4 with F32 activations): a layer
// of several ops, held a little looser than one op (docs/design.md, Numerics). Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/runtime.h"
#include "cuda_device_util.h"
#include "cuda_test_util.h"
#include "model/layers/moe.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace vllm {
namespace {

using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::same_values;
using cuda_test::to_f32;

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    ::vllm::Status status_ = (expr);                     \
    ASSERT_TRUE(status_.is_ok()) << status_.to_string(); \
  } while (0)

// Named host tensors, checked against the requested shape as a checkpoint is.
class MapWeights final : public WeightSource {
 public:
  Expected<Tensor> get(const std::string& name, const Shape& shape) override {
    auto it = tensors.find(name);
    if (it == tensors.end()) return make_error(ErrorCode::kNotFound, "no tensor '{}'", name);
    if (it->second.shape() != shape) {
      return make_error(ErrorCode::kInvalidFormat, "tensor '{}' has shape {}, expected {}", name,
                        shape_to_string(it->second.shape()), shape_to_string(shape));
    }
    return it->second;
  }
  bool contains(const std::string& name) const override { return tensors.count(name) > 0; }

  std::map<std::string, Tensor> tensors;
};

// F32 values that BF16 holds exactly: the device's conversion of the weights loses nothing,
// so a near-tie in the router cannot go different ways on the two backends.
Tensor random_weight(const Shape& shape, std::mt19937& rng, float stddev) {
  return to_f32(random_tensor(shape, DType::kBF16, rng, 0.0f, stddev));
}

// One layer's weights under "mlp.", per expert or fused, from the same random values.
MapWeights layer_weights(const MoeSpec& s, bool fused, uint32_t seed) {
  std::mt19937 rng(seed);
  const float a = 1.0f / std::sqrt(static_cast<float>(s.hidden_size));
  const float b = 1.0f / std::sqrt(static_cast<float>(s.intermediate_size));
  const int64_t e = s.num_experts, h = s.hidden_size, i = s.intermediate_size;
  MapWeights w;
  w.tensors["mlp.gate.weight"] = random_weight({e, h}, rng, a);
  Tensor gate_up = random_weight({e, 2 * i, h}, rng, a);
  Tensor down = random_weight({e, h, i}, rng, b);
  if (fused) {
    w.tensors["mlp.experts.gate_up_proj"] = gate_up;
    w.tensors["mlp.experts.down_proj"] = down;
  } else {
    for (int64_t x = 0; x < e; ++x) {
      const std::string p = "mlp.experts." + std::to_string(x) + ".";
      Tensor one = gate_up.slice(0, x, x + 1).view({2 * i, h});
      w.tensors[p + "gate_proj.weight"] = one.slice(0, 0, i).clone();
      w.tensors[p + "up_proj.weight"] = one.slice(0, i, 2 * i).clone();
      w.tensors[p + "down_proj.weight"] = down.slice(0, x, x + 1).view({h, i}).clone();
    }
  }
  if (s.shared_intermediate_size > 0) {
    const int64_t si = s.shared_intermediate_size;
    w.tensors["mlp.shared_expert.gate_proj.weight"] = random_weight({si, h}, rng, a);
    w.tensors["mlp.shared_expert.up_proj.weight"] = random_weight({si, h}, rng, a);
    w.tensors["mlp.shared_expert.down_proj.weight"] =
        random_weight({h, si}, rng, 1.0f / std::sqrt(static_cast<float>(si)));
    w.tensors["mlp.shared_expert_gate.weight"] = random_weight({1, h}, rng, a);
  }
  return w;
}

struct LayerCase {
  std::string name;
  MoeSpec spec;
};

TEST(MoeLayerCuda, MatchesCpuForBothCheckpointLayouts) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA MoE layer test skipped";
  const LayerCase cases[] = {
      {"golden qwen3_5_moe shapes", {56, 10, 3, 40, 44, true}},
      {"golden qwen3_next shapes", {60, 6, 2, 40, 36, true}},
      {"demo model shapes", {256, 8, 2, 64, 64, true}},
      {"no shared expert, softmax weights", {64, 12, 4, 32, 0, false}},
  };
  std::mt19937 rng(7);
  for (const LayerCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto cpu_rt = DeviceRuntime::create(Device::cpu(), DType::kF32);
    ASSERT_TRUE(cpu_rt.has_value()) << cpu_rt.status().to_string();
    MapWeights cpu_weights = layer_weights(c.spec, /*fused=*/true, 11);
    MoeLayer cpu_layer;
    ASSERT_OK(cpu_layer.load(cpu_weights, "mlp.", c.spec, (*cpu_rt)->context()));
    for (DType act : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(dtype_name(act));
      auto rt = DeviceRuntime::create(Device::cuda(), act);
      ASSERT_TRUE(rt.has_value()) << rt.status().to_string();
      const ExecContext& ctx = (*rt)->context();
      MoeLayer layers[2];
      for (int fused = 0; fused < 2; ++fused) {
        MapWeights source = layer_weights(c.spec, fused == 1, 11);
        DeviceWeights device(source, ctx);
        ASSERT_OK(layers[fused].load(device, "mlp.", c.spec, ctx));
      }
      ASSERT_OK((*rt)->synchronize());
      for (auto get : {&ops::MoeWeights::gate_up, &ops::MoeWeights::down}) {
        EXPECT_TRUE(same_values(cuda_test::to_host_f32(layers[0].experts().*get),
                                cuda_test::to_host_f32(layers[1].experts().*get)))
            << "per-expert and fused loads stack different weights";
      }
      for (int64_t tokens : {int64_t{1}, int64_t{5}, int64_t{100}}) {
        SCOPED_TRACE(std::to_string(tokens) + " tokens");
        // Inputs exactly representable in the activation dtype, so both backends see them.
        Tensor x = to_f32(random_tensor({tokens, c.spec.hidden_size}, act, rng, 0.0f, 1.0f));
        Tensor ref = Tensor::empty({tokens, c.spec.hidden_size}, DType::kF32);
        ASSERT_OK(cpu_layer.forward((*cpu_rt)->context(), x, ref));
        for (const MoeLayer& layer : layers) {
          ASSERT_OK((*rt)->workspace().reset());
          auto x_f32 = ops::upload(ctx, x);
          ASSERT_TRUE(x_f32.has_value()) << x_f32.status().to_string();
          Tensor x_act = *x_f32;
          if (act != DType::kF32) {
            auto converted = ctx.act(x.shape());
            ASSERT_TRUE(converted.has_value());
            x_act = *converted;
            ASSERT_OK(ops::convert(ctx, *x_f32, x_act));
          }
          auto out = ctx.act(x.shape());
          ASSERT_TRUE(out.has_value());
          ASSERT_OK(layer.forward(ctx, x_act, *out));
          auto host = ops::to_host(ctx, *out);
          ASSERT_TRUE(host.has_value()) << host.status().to_string();
          EXPECT_TRUE(relative_l2(to_f32(*host), ref, act == DType::kF32 ? 1e-4 : 2e-2));
        }
      }
    }
  }
}

}  // namespace
}  // namespace vllm

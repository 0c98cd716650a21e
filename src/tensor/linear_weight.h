// The weight of a linear layer, in one of the formats the backends read.
//
//   float      `weight` F32 / BF16 / F16 [N, K] (out_features x in_features, torch.nn.Linear's
//              layout); `scale_inv` undefined.
//   block FP8  `weight` F8_E4M3 [N, K] and `scale_inv` F32 [ceil(N / block.n), ceil(K / block.k)]:
//              one scale per block of block.n rows x block.k columns, the blocks at the right
//              and bottom edges partial where N or K is not a multiple. The weight is
//                w[n][k] = fp8e4m3_to_f32(weight[n][k]) * scale_inv[n / block.n][k / block.k]
//              the product rounded once in f32. This is the `fp8` quant_method with
//              `weight_block_size` of vLLM (Fp8LinearMethod) and transformers (FP8Linear), whose
//              checkpoints store the scale beside the weight as `<name>_scale_inv`
//              (`X.weight_scale_inv`, or `experts.gate_up_proj_scale_inv` for fused experts).
//
// A stack of E experts' weights carries a leading [E] on both tensors (one grid per expert).
// block.n may be 1: a weight fused from parts whose row counts are not multiples of the
// checkpoint's block (model/weights.h) keeps one scale row per weight row, the same values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm {

// One scale covers n rows x k columns (vLLM's weight_block_size = [n, k]).
struct WeightBlock {
  int64_t n = 0;
  int64_t k = 0;
  bool operator==(const WeightBlock&) const = default;
};

struct LinearWeight {
  Tensor weight;      // [N, K] or [E, N, K]
  Tensor scale_inv;   // FP8 only: F32 [ceil(N / block.n), ceil(K / block.k)] (or [E, ...])
  WeightBlock block;  // FP8 only

  LinearWeight() = default;
  // A float weight. Implicit, so that code holding plain weight tensors passes them as is.
  LinearWeight(Tensor w) : weight(std::move(w)) {}  // NOLINT(google-explicit-constructor)
  LinearWeight(Tensor w, Tensor scales, WeightBlock b)
      : weight(std::move(w)), scale_inv(std::move(scales)), block(b) {}

  bool defined() const { return weight.defined(); }
  bool is_fp8() const { return weight.defined() && weight.dtype() == DType::kF8E4M3; }
  DType dtype() const { return weight.dtype(); }
  const Shape& shape() const { return weight.shape(); }
  int ndim() const { return weight.ndim(); }
  int64_t size(int dim) const { return weight.size(dim); }
  Device device() const { return weight.device(); }
  // Bytes of the weight and its scales.
  size_t nbytes() const { return weight.nbytes() + (scale_inv.defined() ? scale_inv.nbytes() : 0); }
  // "F8_E4M3[256, 64] cpu, scales F32[2, 2] per 128x32 block".
  std::string to_string() const;
};

// The scale grid of a weight of `weight_shape` ([.., N, K]): [.., ceil(N / n), ceil(K / k)].
Shape fp8_scale_shape(const Shape& weight_shape, WeightBlock block);

// kInvalidArgument naming `what` unless `w` is a well-formed weight: a float tensor (F32,
// BF16 or F16) of rank >= 2 with no scales, or an F8_E4M3 tensor with a positive block and
// F32 scales of exactly fp8_scale_shape(), on the weight's device.
Status check_linear_weight(std::string_view what, const LinearWeight& w);

}  // namespace vllm

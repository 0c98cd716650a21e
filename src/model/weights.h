// Where a model's weights come from, with each tensor checked against the shape the model
// expects: a mis-shaped or missing tensor fails at load, naming the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "loader/checkpoint.h"
#include "tensor/tensor.h"

namespace vllm {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor `name`, which must have exactly `shape` and a float dtype.
  virtual Expected<Tensor> get(const std::string& name, const Shape& shape) = 0;
  virtual bool contains(const std::string& name) const = 0;
};

class CheckpointWeights final : public WeightSource {
 public:
  explicit CheckpointWeights(Checkpoint checkpoint) : checkpoint_(std::move(checkpoint)) {}
  Expected<Tensor> get(const std::string& name, const Shape& shape) override;
  bool contains(const std::string& name) const override { return checkpoint_.contains(name); }

 private:
  Checkpoint checkpoint_;
};

// vLLM's --load-format dummy: every requested tensor is made up, with values uniform in
// [-1e-3, 1e-3] (vLLM's range) from a seeded generator, in `dtype`, on the CPU -- or, on the
// meta device, as shapes only (no memory), to build and measure any config's real structure.
// Optional tensors (contains() is false) are left out.
class DummyWeights final : public WeightSource {
 public:
  DummyWeights(DType dtype, Device device, uint64_t seed = 0);
  Expected<Tensor> get(const std::string& name, const Shape& shape) override;
  bool contains(const std::string& name) const override { return false; }

  // Elements of all distinct tensors handed out so far, in total and by name.
  int64_t num_parameters() const;
  const std::map<std::string, int64_t>& numel_by_name() const { return numel_by_name_; }

 private:
  DType dtype_;
  Device device_;
  uint64_t state_;
  std::map<std::string, int64_t> numel_by_name_;
};

// Copies the rows of each [n_i, K] tensor (all of one dtype) into one [sum n_i, K] tensor,
// e.g. gate_proj and up_proj into the gate_up weight silu_and_mul expects. Meta parts give a
// meta result.
Expected<Tensor> concat_rows(const std::vector<Tensor>& parts);

}  // namespace vllm

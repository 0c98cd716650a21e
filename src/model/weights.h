// Where a model's weights come from, with each tensor checked against the shape the model
// expects: a mis-shaped or missing tensor fails at load, naming the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "loader/checkpoint.h"
#include "ops/exec_context.h"
#include "tensor/tensor.h"

namespace vllm {

// Elements [begin, end) along dimension `dim` of a weight: one tensor-parallel rank's shard.
struct WeightSlice {
  int dim = 0;
  int64_t begin = 0, end = 0;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor `name`, which must have exactly `shape` and a float dtype.
  virtual Expected<Tensor> get(const std::string& name, const Shape& shape) = 0;
  // The slice of the tensor `name` (whose full shape must be `shape`). The default takes
  // get()'s tensor and slices it: a view, strided when the slice is not along dim 0.
  virtual Expected<Tensor> get_slice(const std::string& name, const Shape& shape,
                                     const WeightSlice& slice);
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

// Puts another source's weights on an execution context's device, once, at load: on the CPU
// they are copied, in the checkpoint's dtype, into the context's weight arena (huge pages,
// cpu/weight_memory.h) or, without one, pass through untouched (mmapped); on CUDA every matrix
// (2-D and up) is converted to the activation dtype on the device and 1-D tensors (norms,
// biases, A_log, dt_bias) keep their F32/BF16 dtype (F16 becomes F32). Running out of device
// memory is an error naming the tensor, its size and the free memory.
//
// Slices (tensor-parallel shards) are placed the same way; a strided one (a column slice of a
// row-parallel weight) is first copied into contiguous memory, so only the shard is kept.
class DeviceWeights final : public WeightSource {
 public:
  DeviceWeights(WeightSource& inner, const ExecContext& ctx) : inner_(inner), ctx_(ctx) {}
  Expected<Tensor> get(const std::string& name, const Shape& shape) override;
  Expected<Tensor> get_slice(const std::string& name, const Shape& shape,
                             const WeightSlice& slice) override;
  bool contains(const std::string& name) const override { return inner_.contains(name); }

 private:
  Expected<Tensor> place(const std::string& name, Tensor host);

  WeightSource& inner_;
  const ExecContext& ctx_;
};

// vLLM's --load-format dummy: every requested tensor is made up, with values uniform in
// [-1e-3, 1e-3] (vLLM's range) from a seeded generator, in `dtype`, on the CPU -- or, on the
// meta device, as shapes only (no memory), to build and measure any config's real structure.
// With an execution context on a GPU the tensors are created and filled on the device
// directly, in the activation dtype (a 27B model is never built on the host).
// Optional tensors (contains() is false) are left out.
//
// Each tensor has its own counter-based stream (base/counter_rng.h), keyed by the order in
// which names are first asked for: on the CPU element i of the full tensor is
// counter_uniform(stream, i), so a slice (a tensor-parallel shard, made alone, at its size)
// holds exactly the elements of the full tensor it covers, and every rank's model is a shard
// of the same single-rank model. On a GPU a slice is filled from index 0 (other values).
class DummyWeights final : public WeightSource {
 public:
  DummyWeights(DType dtype, Device device, uint64_t seed = 0);
  DummyWeights(const ExecContext& ctx, uint64_t seed = 0);
  Expected<Tensor> get(const std::string& name, const Shape& shape) override;
  Expected<Tensor> get_slice(const std::string& name, const Shape& shape,
                             const WeightSlice& slice) override;
  bool contains(const std::string& name) const override { return false; }

  // Elements of all distinct tensors handed out so far (slices: their elements), in total
  // and by name.
  int64_t num_parameters() const;
  const std::map<std::string, int64_t>& numel_by_name() const { return numel_by_name_; }

 private:
  uint64_t stream_of(const std::string& name);

  DType dtype_;
  Device device_;
  const ExecContext* ctx_ = nullptr;  // device fills
  uint64_t seed_ = 0;
  std::map<std::string, int64_t> numel_by_name_;
  std::map<std::string, uint64_t> stream_by_name_;
};

// `t` (a CPU tensor whose last dimension has stride 1) copied into contiguous memory: from
// ctx's weight arena when it has one, else a plain allocation.
Expected<Tensor> contiguous_weight(const Tensor& t, const ExecContext* ctx);

// An uninitialised weight tensor on `device`: from ctx's weight arena on the CPU when it has
// one, else a plain allocation.
Expected<Tensor> empty_weight(const Shape& shape, DType dtype, Device device,
                              const ExecContext* ctx);

// Copies the rows of each [n_i, K] tensor (all of one dtype, on one device) into one
// [sum n_i, K] tensor on that device, e.g. gate_proj and up_proj into the gate_up weight
// silu_and_mul expects. Meta parts give a meta result. Device parts need `ctx` (its stream
// does the copies).
Expected<Tensor> concat_rows(const std::vector<Tensor>& parts, const ExecContext* ctx = nullptr);

}  // namespace vllm

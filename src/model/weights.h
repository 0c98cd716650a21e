// Where a model's weights come from, with each tensor checked against the shape the model
// expects: a mis-shaped or missing tensor fails at load, naming the tensor.
//
// The weights of linear layers are read with get_linear and may be block-scaled FP8
// (tensor/linear_weight.h): as the checkpoint stores them (config.json's
// quantization_config, quant_method "fp8" with weight_block_size; each F8_E4M3 tensor `X`
// beside its F32 or BF16 scales `X_scale_inv`), quantized at load (`--quantization fp8`:
// Fp8QuantizedWeights), or made up (`--load-format dummy`). Everything else -- norms,
// embeddings, lm_head, the MoE router, conv1d, A_log -- is read with get and stays a float
// tensor; an FP8 tensor there is an error naming it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "loader/checkpoint.h"
#include "loader/hf_config.h"
#include "ops/exec_context.h"
#include "tensor/linear_weight.h"
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
  // The tensor `name`, which must have exactly `shape` and a float dtype (F32, BF16, F16).
  virtual Expected<Tensor> get(const std::string& name, const Shape& shape) = 0;
  // The slice of the tensor `name` (whose full shape must be `shape`). The default takes
  // get()'s tensor and slices it: a view, strided when the slice is not along dim 0.
  virtual Expected<Tensor> get_slice(const std::string& name, const Shape& shape,
                                     const WeightSlice& slice);
  virtual bool contains(const std::string& name) const = 0;
  // The weight of a linear layer, `name` its tensor ("...q_proj.weight", or a fused expert
  // stack "...experts.gate_up_proj") of `shape` [N, K] or [E, N, K]: a float tensor, or an
  // FP8 one with its block scales. This default reads get(name, shape).
  virtual Expected<LinearWeight> get_linear(const std::string& name, const Shape& shape);
  // One rank's slice of a linear weight (slice_linear's rules for the FP8 scales). The
  // default slices get_linear()'s weight: views, strided for a column slice.
  virtual Expected<LinearWeight> get_linear_slice(const std::string& name, const Shape& shape,
                                                  const WeightSlice& slice);
};

// The checkpoint's name for the scales of FP8 weight `name`: `name` + "_scale_inv"
// ("X.weight" -> "X.weight_scale_inv", "experts.gate_up_proj" -> "experts.gate_up_proj_scale_inv").
std::string fp8_scale_name(const std::string& name);

// The FP8 block of a checkpoint's quantization_config: quant_method "fp8" with a
// two-element weight_block_size. Anything this engine cannot load (another quant_method, no
// block size -- per-tensor scales --, fmt other than e4m3, static activation scales) is
// kUnsupported naming the field.
Expected<WeightBlock> fp8_weight_block(const QuantizationConfig& quant);

class CheckpointWeights final : public WeightSource {
 public:
  // fp8_block: the checkpoint's FP8 block (fp8_weight_block of its quantization_config), or
  // none: then an FP8 tensor is an error naming it.
  explicit CheckpointWeights(Checkpoint checkpoint, std::optional<WeightBlock> fp8_block = {})
      : checkpoint_(std::move(checkpoint)), fp8_block_(fp8_block) {}
  Expected<Tensor> get(const std::string& name, const Shape& shape) override;
  bool contains(const std::string& name) const override { return checkpoint_.contains(name); }
  // An F8_E4M3 tensor needs its scales `name_scale_inv` of exactly fp8_scale_shape(shape)
  // (F32, or BF16 / F16 widened to F32); a missing or mis-shaped one fails naming it.
  Expected<LinearWeight> get_linear(const std::string& name, const Shape& shape) override;

 private:
  Expected<Tensor> read(const std::string& name, const Shape& shape);

  Checkpoint checkpoint_;
  std::optional<WeightBlock> fp8_block_;
};

// vLLM's `--quantization fp8` for a float checkpoint: every linear weight `inner` hands out
// is quantized on the host to block FP8 (quantize_fp8_blocks, 128x128 blocks as vLLM's
// online block quantization), one checkpoint tensor at a time, so the weights the model
// keeps are those an FP8 checkpoint quantized by the same rule would hold. Weights that are
// FP8 already pass through; get() passes through.
class Fp8QuantizedWeights final : public WeightSource {
 public:
  explicit Fp8QuantizedWeights(WeightSource& inner, WeightBlock block = {128, 128})
      : inner_(inner), block_(block) {}
  Expected<Tensor> get(const std::string& name, const Shape& shape) override {
    return inner_.get(name, shape);
  }
  bool contains(const std::string& name) const override { return inner_.contains(name); }
  Expected<LinearWeight> get_linear(const std::string& name, const Shape& shape) override;

 private:
  WeightSource& inner_;
  WeightBlock block_;
};

// Puts another source's weights on an execution context's device, once, at load: on the CPU
// they are copied, in the checkpoint's dtype, into the context's weight arena (huge pages,
// cpu/weight_memory.h) or, without one, pass through untouched (mmapped); on CUDA every matrix
// (2-D and up) is converted to the activation dtype on the device and 1-D tensors (norms,
// biases, A_log, dt_bias) keep their F32/BF16 dtype (F16 becomes F32). Running out of device
// memory is an error naming the tensor, its size and the free memory.
// FP8 weights (both their tensors) go to the CPU's weight arena likewise; on CUDA the e4m3
// bytes and the F32 scales are placed as they are (the W8A16 kernels read them).
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
  Expected<LinearWeight> get_linear(const std::string& name, const Shape& shape) override;
  Expected<LinearWeight> get_linear_slice(const std::string& name, const Shape& shape,
                                          const WeightSlice& slice) override;

 private:
  Expected<Tensor> place(const std::string& name, const Tensor& host);
  Expected<LinearWeight> place_linear(const std::string& name, LinearWeight w);

  WeightSource& inner_;
  const ExecContext& ctx_;
};

// vLLM's --load-format dummy: every requested tensor is made up, with values uniform in
// [-1e-3, 1e-3] (vLLM's range) from a seeded generator, in `dtype`, on the CPU -- or, on the
// meta device, as shapes only (no memory), to build and measure any config's real structure.
// With an execution context on a GPU the tensors are created and filled on the device
// directly, in the activation dtype (a 27B model is never built on the host); with an FP8
// block there, linear weights are e4m3 codes uniform in [-448, 448] under one scale of
// 1e-3 / 448 for every block (the same [-1e-3, 1e-3] range, the e4m3 value grid).
// With an FP8 block (an FP8 config), linear weights on the CPU are those values quantized to
// block FP8 (quantize_fp8_blocks: real e4m3 codes, one scale per block from the block's
// largest value), and on the meta device FP8 shapes with their scale grids. Modules the
// config's modules_to_not_convert names (`unquantized`: a module, or a parent of it) stay
// float, as they are in the checkpoint.
// Optional tensors (contains() is false) are left out.
//
// Each tensor has its own counter-based stream (base/counter_rng.h), keyed by the order in
// which names are first asked for: on the CPU element i of the full tensor is
// counter_uniform(stream, i), so a slice (a tensor-parallel shard, made alone, at its size)
// holds exactly the elements of the full tensor it covers, and every rank's model is a shard
// of the same single-rank model. On a GPU a slice is filled from index 0 (other values).
class DummyWeights final : public WeightSource {
 public:
  DummyWeights(DType dtype, Device device, uint64_t seed = 0,
               std::optional<WeightBlock> fp8_block = {},
               std::vector<std::string> unquantized = {});
  DummyWeights(const ExecContext& ctx, uint64_t seed = 0, std::optional<WeightBlock> fp8_block = {},
               std::vector<std::string> unquantized = {});
  Expected<Tensor> get(const std::string& name, const Shape& shape) override;
  Expected<Tensor> get_slice(const std::string& name, const Shape& shape,
                             const WeightSlice& slice) override;
  bool contains(const std::string& name) const override { return false; }
  Expected<LinearWeight> get_linear(const std::string& name, const Shape& shape) override;
  Expected<LinearWeight> get_linear_slice(const std::string& name, const Shape& shape,
                                          const WeightSlice& slice) override;

  // Elements of all distinct tensors handed out so far (slices: their elements), in total
  // and by name.
  int64_t num_parameters() const;
  const std::map<std::string, int64_t>& numel_by_name() const { return numel_by_name_; }

 private:
  uint64_t stream_of(const std::string& name);
  // Whether linear weight `name` ("<module>.weight" or an expert stack) is FP8 here.
  bool quantized(const std::string& name) const;

  DType dtype_;
  Device device_;
  std::optional<WeightBlock> fp8_block_;
  std::vector<std::string> unquantized_;
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

// Linear weights of one format, whose rows can be fused into one matrix: the same float
// dtype, or both FP8 with blocks of the same width (block.k).
bool same_weight_format(const LinearWeight& a, const LinearWeight& b);
// "BF16", or "F8_E4M3 (128x128 blocks)".
std::string weight_format(const LinearWeight& w);

// Whether FP8 parts of one format stack into one block grid: the same block, and every part
// but the last a whole number of block rows. True for float parts.
bool fp8_grids_stack(const std::vector<LinearWeight>& parts);

// concat_rows for linear weights of one format (a fused q|k|v or gate|up). FP8 parts keep
// their scale grid where fp8_grids_stack; otherwise the result holds one scale row per weight
// row (block.n = 1), the same values.
Expected<LinearWeight> concat_linear_rows(const std::vector<LinearWeight>& parts,
                                          const ExecContext* ctx = nullptr);
// Rows [begin, end) of a 2-D linear weight: views where the rows start and end on block
// boundaries (or the weight is float), else the weight's rows with one scale row per row.
Expected<LinearWeight> slice_linear_rows(const LinearWeight& w, int64_t begin, int64_t end);
// A slice of a linear weight ([N, K] or a stack [E, N, K]) along any dimension -- a
// tensor-parallel shard: experts (the stack's dim 0) and float weights slice as views; FP8
// rows as slice_linear_rows; FP8 columns (a row-parallel shard) must start on a block
// column and end on one or at K, as vLLM requires, else kInvalidArgument naming `name`.
Expected<LinearWeight> slice_linear(const std::string& name, const LinearWeight& w,
                                    const WeightSlice& slice);
// The scales of FP8 weight w ([.., N, K]) with one row per weight row: [.., N, ceil(K / k)],
// a new tensor (plain memory, not the weight arena) on w's device (CPU or meta).
Expected<Tensor> scales_per_row(const LinearWeight& w);

}  // namespace vllm

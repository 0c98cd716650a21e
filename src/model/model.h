// The model interface the engine calls, and the loader that picks an implementation from a
// Hugging Face folder's config.json ("architectures").
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "loader/hf_config.h"
#include "model/forward_batch.h"
#include "model/step_inputs.h"
#include "ops/exec_context.h"
#include "tensor/tensor.h"

namespace vllm {

struct CacheConfig {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_state_slots = 0;  // GDN state slots (hybrid models)
};

// The shapes of a model's caches on its device: with tensor parallelism, this rank's shard
// (its KV heads, its GDN heads and conv channels), not the config's totals. The GDN states'
// element types come from vLLM's --mamba-cache-dtype / --mamba-ssm-cache-dtype
// (model/mamba_dtype.h).
struct CacheShapes {
  int64_t num_attention_layers = 0;
  int64_t num_kv_heads = 0, head_dim = 0;
  int64_t num_linear_layers = 0;
  int64_t conv_dim = 0, conv_kernel = 0;
  int64_t num_value_heads = 0, key_head_dim = 0, value_head_dim = 0;
  DType conv_state_dtype = DType::kF32, ssm_state_dtype = DType::kF32;
};

// Everything a model keeps between steps, on the model's device: per attention layer a KV
// cache [num_blocks, 2, block_size, kv_heads, head_dim] in Model::kv_cache_dtype() (the
// activation dtype, or F8_E4M3 under --kv-cache-dtype fp8: tensor/kv_cache.h); hybrid models
// (Qwen3.5 / Qwen3-Next) keep it for their full-attention layers only, in layer order, and per
// linear-attention (GDN) layer, in layer order, a conv and a recurrent state per state slot:
//   conv_state [num_state_slots, conv_dim, conv_kernel - 1] (the last inputs, oldest first)
//   ssm_state  [num_state_slots, value_heads, key_head_dim, value_head_dim]
// in CacheShapes::conv_state_dtype / ssm_state_dtype (F32, BF16 or F16).
// A request's slot is ForwardBatch::state_indices[r]; see forward_batch.h for when it is reset.
struct ModelCache {
  CacheConfig config;
  std::vector<Tensor> kv;
  std::vector<Tensor> conv_state;
  std::vector<Tensor> ssm_state;
};

struct LoadOptions {
  int64_t max_model_len = 0;  // 0: the config's max_position_embeddings
  // vLLM's --load-format: "auto" / "safetensors" read the checkpoint; "dummy" makes up
  // random weights of the config's real shapes (config.json is all the folder needs).
  std::string load_format = "auto";
  // vLLM's --quantization: "" (weights as the checkpoint stores them, FP8 ones included) or
  // "fp8" (a float checkpoint's linear weights quantized at load to 128x128-block FP8; CPU).
  std::string quantization;
  // Where the model runs. CPU: F32 activations (the reference). CUDA: activations (and the
  // KV cache) in `dtype` -- kBF16 by default, or kF32.
  Device device = Device::cpu();
  DType dtype = DType::kF32;
  // vLLM's --kv-cache-dtype: "auto" (the activation dtype) or "fp8" / "fp8_e4m3" (an e4m3
  // cache with each attention layer's k_scale / v_scale from the checkpoint, else 1.0;
  // tensor/kv_cache.h). Other values are refused at load.
  std::string kv_cache_dtype = "auto";
  // The runtime to run on; null: load_model / create_model create one for device and dtype.
  std::shared_ptr<DeviceRuntime> runtime;
  // Tensor parallelism: this rank's communicator, which the runtime takes; the model then
  // loads and runs this rank's shard (model/tensor_parallel.h). Null: one rank.
  std::shared_ptr<parallel::Communicator> comm;
  // vLLM's --enable-expert-parallel: with tensor parallelism, MoE layers place whole experts
  // per rank instead of splitting each expert (model/layers/moe.h).
  bool enable_expert_parallel = false;
  // vLLM's --mamba-cache-dtype and --mamba-ssm-cache-dtype (auto | float32 | float16 |
  // bfloat16): the GDN conv and recurrent states' dtypes (model/mamba_dtype.h).
  std::string mamba_cache_dtype = "auto";
  std::string mamba_ssm_cache_dtype = "auto";
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  // The shapes of this rank's caches (KV heads, GDN state): what the KV cache sizing and
  // the state slots are computed from.
  virtual CacheShapes cache_shapes() const = 0;
  // Allocates zeroed caches of cache_shapes() on the model's device.
  Expected<ModelCache> create_cache(const CacheConfig& config) const;
  // Logits F32 [batch.logits_indices.size(), vocab_size] on the model's device. On CUDA they
  // live in the runtime's workspace: valid until the next forward. The batch's tensors may
  // be on the host; they are copied to the device here. Checks the cache, resets the
  // workspace, prepares the inputs (prepare_step), zeroes the GDN state of requests that
  // start at position 0, then runs compute().
  Expected<Tensor> forward(const ForwardBatch& batch, ModelCache& cache);

  // The device work of one step over prepared inputs: ops queued on the context's stream
  // and scratch from its workspace only -- no host synchronisation, no allocation, no
  // decision on values that live on the device -- so a CUDA graph can capture it and replay
  // it with new inputs in the same buffers (model/decode_graphs.h). Logits as forward().
  virtual Expected<Tensor> compute(const StepInputs& in, ModelCache& cache) = 0;
  // kInvalidArgument unless `cache` has this model's cache tensors (create_cache's shape).
  virtual Status check_cache(const ModelCache& cache) const = 0;

  // The device resources the model runs on (its stream, workspace and GEMM handle); the
  // engine samples on the same context.
  DeviceRuntime& runtime() const { return *runtime_; }
  const ExecContext& context() const { return runtime_->context(); }
  // Element type of the KV cache: the activation dtype, or F8_E4M3 (LoadOptions).
  DType kv_cache_dtype() const { return kv_cache_dtype_; }
  // Bytes of GDN state one state slot holds across all layers, in the states' dtypes (0 for
  // attention-only models), on this rank: one running request's state.
  int64_t state_bytes_per_slot() const;

 protected:
  // The runtime the model runs on (runtime_for(options)) and the KV cache dtype `options`
  // asks for on it; an unsupported --kv-cache-dtype is kUnsupported naming it.
  Status set_runtime(std::shared_ptr<DeviceRuntime> runtime, const LoadOptions& options);

 private:
  std::shared_ptr<DeviceRuntime> runtime_;
  DType kv_cache_dtype_ = DType::kF32;
};

Expected<std::unique_ptr<Model>> load_model(const std::filesystem::path& model_dir,
                                            const LoadOptions& options);

}  // namespace vllm

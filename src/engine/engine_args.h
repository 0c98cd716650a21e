// Building an engine from a model folder, as vLLM's EngineArgs -> LLMEngine does: load the
// weights (or dummy ones), generation_config.json, the tokenizer if the folder has one, and
// start an EngineCore with the model's EOS ids. Shared by `vllm generate`, `vllm bench
// throughput|latency` (and the server), so every entry point builds the same engine from the
// same flags (src/cli/engine_flags.h registers them).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "base/status.h"
#include "engine/engine_core.h"
#include "engine/parallel_config.h"
#include "loader/hf_config.h"
#include "tokenizer/tokenizer.h"

namespace vllm::engine {

struct EngineArgs {
  std::string model;                 // Hugging Face model folder
  std::string load_format = "auto";  // auto | safetensors | dummy
  std::string quantization;          // "" | fp8 (vLLM's --quantization; see LoadOptions)
  std::string device = "auto";       // auto (cuda when a GPU is usable) | cuda | cpu
  std::string dtype = "auto";        // auto (bfloat16 on cuda, float32 on cpu) | bfloat16 | float32
  std::string kv_cache_dtype = "auto";  // auto (the dtype) | fp8 | fp8_e4m3 (tensor/kv_cache.h)
  bool calculate_kv_scales = false;     // vLLM's --calculate-kv-scales: refused (not implemented)
  int64_t max_model_len = 0;            // 0: the config's max_position_embeddings
  EngineConfig engine;                  // scheduler limits, block size, KV budget
  std::optional<int32_t> num_gpu_blocks_override;
  bool enable_prefix_caching = true;
  std::optional<int64_t> seed;  // engine seed (sampling without a per-request seed)
  ParallelConfig parallel;      // tensor parallelism (worker_group.h)
  // vLLM's --mamba-cache-dtype / --mamba-ssm-cache-dtype: the GDN states' dtypes (LoadOptions).
  std::string mamba_cache_dtype = "auto";
  std::string mamba_ssm_cache_dtype = "auto";
};

struct LoadedEngine {
  std::unique_ptr<EngineCore> core;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the folder has no tokenizer.json
  GenerationConfig generation;
};

// Errors say which stage failed ("cannot load model: ...", "cannot start the engine: ...").
// With --tensor-parallel-size N > 1 this process is rank 0: it starts the N - 1 workers,
// loads its own shard while they load theirs, and owns them through the EngineCore.
Expected<LoadedEngine> build_engine(const EngineArgs& args);

// --device and --dtype resolved: auto picks cuda when this build has CUDA and a GPU is
// usable, else cpu; dtype auto is bfloat16 on cuda and float32 on cpu. A combination the
// backends cannot run (cuda without a GPU or without the CUDA build; bfloat16 on cpu) is
// kUnsupported saying why.
Expected<std::pair<Device, DType>> resolve_device(const std::string& device,
                                                  const std::string& dtype);

}  // namespace vllm::engine

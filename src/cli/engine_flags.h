// The flags every engine-running subcommand shares (`vllm generate`, `vllm serve`), and how
// a model folder plus those flags become a running engine: the model, its tokenizer, its
// generation_config.json defaults and an EngineCore. One place, so that `generate` and
// `serve` build the same engine from the same flags -- which the server's end-to-end tests
// rely on when they compare its outputs with `vllm generate --json`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "engine/engine_core.h"
#include "engine/sampling_params.h"
#include "loader/hf_config.h"
#include "tokenizer/tokenizer.h"

namespace vllm::cli {

struct EngineFlags {
  std::string load_format = "auto";
  engine::EngineConfig engine;
  std::optional<int32_t> num_gpu_blocks_override;
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
};

// --load-format --max-num-seqs --max-num-batched-tokens --max-model-len --block-size
// --num-gpu-blocks-override --kv-cache-memory-bytes --[no-]enable-prefix-caching.
void add_engine_flags(CLI::App* cmd, EngineFlags* flags);

struct LoadedEngine {
  std::unique_ptr<engine::EngineCore> core;
  GenerationConfig generation;           // the model folder's generation_config.json
  std::unique_ptr<Tokenizer> tokenizer;  // null when the folder has no tokenizer.json
};

// Loads DIR's model, generation config and tokenizer and creates the engine. `seed` is the
// engine's seed (requests without their own seed draw from it).
Expected<LoadedEngine> load_engine(const std::string& model_dir, const EngineFlags& flags,
                                   std::optional<int64_t> seed);

// vLLM's default sampling params under --generation-config auto: its defaults, overridden by
// the sampling fields generation_config.json sets (temperature, top_p, top_k, min_p,
// repetition_penalty).
SamplingParams generation_defaults(const GenerationConfig& generation);

}  // namespace vllm::cli

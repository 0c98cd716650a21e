// The flags every engine-running subcommand shares (`vllm generate`, `vllm serve`), and how
// a model folder's generation_config.json becomes default sampling params; the engine itself is
// built by engine::build_engine (engine_args.h). One place, so that `generate`, `serve` and
// `bench` build the same engine from the same flags -- which the server's end-to-end tests
// rely on when they compare its outputs with `vllm generate --json`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "engine/engine_args.h"
#include "engine/sampling_params.h"
#include "loader/hf_config.h"
#include "tokenizer/tokenizer.h"

namespace vllm::cli {

// --load-format --quantization --max-num-seqs --max-num-batched-tokens --max-model-len --block-size
// --num-gpu-blocks-override --kv-cache-memory-bytes --[no-]enable-prefix-caching --device
// --dtype --kv-cache-dtype --calculate-kv-scales (refused) --gpu-memory-utilization
// --mamba-cache-interval --mamba-cache-memory-fraction --num-mamba-snapshots-override
// --mamba-cache-dtype --mamba-ssm-cache-dtype --enforce-eager --cuda-graph-sizes
// --tensor-parallel-size (-tp) --enable-expert-parallel --nnodes --node-rank --master-addr
// --master-port.
void add_engine_flags(CLI::App* cmd, engine::EngineArgs* args);

// The sampling knobs every generating command shares; unset ones keep the model's default.
struct SamplerFlags {
  std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty,
      repetition_penalty;
  std::optional<int32_t> top_k;
};

// --temperature --top-p --top-k --min-p --presence-penalty --frequency-penalty
// --repetition-penalty.
void add_sampler_flags(CLI::App* cmd, SamplerFlags* flags);

// generation_defaults(generation) with the flags that were given laid over it.
SamplingParams sampler_params(const GenerationConfig& generation, const SamplerFlags& flags);

// vLLM's default sampling params under --generation-config auto: its defaults, overridden by
// the sampling fields generation_config.json sets (temperature, top_p, top_k, min_p,
// repetition_penalty).
SamplingParams generation_defaults(const GenerationConfig& generation);

}  // namespace vllm::cli

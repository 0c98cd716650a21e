#include "cli/engine_flags.h"

#include <filesystem>
#include <utility>
#include <vector>

namespace vllm::cli {

void add_engine_flags(CLI::App* cmd, engine::EngineArgs* flags) {
  cmd->add_option("--load-format", flags->load_format, "auto | safetensors | dummy (random weights)")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
  cmd->add_option("--max-num-seqs", flags->engine.scheduler.max_num_seqs)->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", flags->engine.scheduler.max_num_batched_tokens)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", flags->max_model_len)->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", flags->engine.block_size)->check(CLI::Range(1, 1024));
  cmd->add_option("--num-gpu-blocks-override", flags->num_gpu_blocks_override)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-cache-memory-bytes", flags->engine.kv_cache_memory_bytes,
                  "KV cache budget (default 1 GiB)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", flags->enable_prefix_caching);
}

SamplingParams generation_defaults(const GenerationConfig& generation) {
  SamplingParams p;
  if (generation.temperature) p.temperature = *generation.temperature;
  if (generation.top_p) p.top_p = *generation.top_p;
  if (generation.top_k) p.top_k = static_cast<int32_t>(*generation.top_k);
  if (generation.min_p) p.min_p = *generation.min_p;
  if (generation.repetition_penalty) p.repetition_penalty = *generation.repetition_penalty;
  return p;
}

}  // namespace vllm::cli

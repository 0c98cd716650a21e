#include "cli/engine_flags.h"

#include <filesystem>
#include <utility>
#include <vector>

namespace vllm::cli {

void add_engine_flags(CLI::App* cmd, EngineFlags* flags) {
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

Expected<LoadedEngine> load_engine(const std::string& model_dir, const EngineFlags& flags,
                                   std::optional<int64_t> seed) {
  LoadOptions load;
  load.max_model_len = flags.max_model_len;
  load.load_format = flags.load_format;
  auto model = load_model(model_dir, load);
  if (!model) return model.status().with_context("cannot load model");
  LoadedEngine loaded;
  VLLM_ASSIGN_OR_RETURN(loaded.generation, load_generation_config(model_dir));
  const std::filesystem::path tokenizer_path = std::filesystem::path(model_dir) / "tokenizer.json";
  if (std::filesystem::exists(tokenizer_path)) {
    VLLM_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::from_file(tokenizer_path));
    loaded.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer));
  }
  std::vector<int32_t> eos;
  for (int64_t id : (*model)->config().eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  for (int64_t id : loaded.generation.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  engine::EngineConfig config = flags.engine;
  config.scheduler.max_model_len = flags.max_model_len;
  config.num_gpu_blocks_override = flags.num_gpu_blocks_override;
  config.enable_prefix_caching = flags.enable_prefix_caching;
  if (seed) config.seed = static_cast<uint64_t>(*seed);
  auto core = engine::EngineCore::create(std::move(*model), config, eos);
  if (!core) return core.status().with_context("cannot start the engine");
  loaded.core = std::move(*core);
  return loaded;
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

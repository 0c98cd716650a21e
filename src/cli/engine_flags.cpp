// Shared engine flags; see engine_flags.h.
#include "cli/engine_flags.h"

namespace vllm::cli {

void add_engine_flags(CLI::App* cmd, engine::EngineArgs& args) {
  cmd->add_option("--model", args.model, "Model folder (Hugging Face layout)")->required();
  cmd->add_option("--load-format", args.load_format, "auto | safetensors | dummy (random weights)")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
  cmd->add_option("--max-num-seqs", args.engine.scheduler.max_num_seqs)->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", args.engine.scheduler.max_num_batched_tokens)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", args.max_model_len)->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", args.engine.block_size)->check(CLI::Range(1, 1024));
  cmd->add_option("--num-gpu-blocks-override", args.num_gpu_blocks_override)->check(CLI::PositiveNumber);
  cmd->add_option("--kv-cache-memory-bytes", args.engine.kv_cache_memory_bytes,
                  "KV cache budget (default 1 GiB)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", args.enable_prefix_caching);
}

}  // namespace vllm::cli

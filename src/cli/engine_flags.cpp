#include "cli/engine_flags.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "model/mamba_dtype.h"
#include "tensor/kv_cache.h"

namespace vllm::cli {

void add_engine_flags(CLI::App* cmd, engine::EngineArgs* flags) {
  cmd->add_option("--load-format", flags->load_format,
                  "auto | safetensors | dummy (random weights)")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
  cmd->add_option("--quantization", flags->quantization,
                  "fp8: quantize a float checkpoint's linear weights to 128x128-block FP8 at "
                  "load (FP8 checkpoints are read as they are without it); cpu only for now")
      ->check(CLI::IsMember({"fp8"}));
  cmd->add_option("--max-num-seqs", flags->engine.scheduler.max_num_seqs)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", flags->engine.scheduler.max_num_batched_tokens)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", flags->max_model_len)->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", flags->engine.block_size)->check(CLI::Range(1, 1024));
  cmd->add_option("--num-gpu-blocks-override", flags->num_gpu_blocks_override)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-cache-memory-bytes", flags->engine.kv_cache_memory_bytes,
                  "KV cache budget (default: 1 GiB on cpu; on cuda what "
                  "--gpu-memory-utilization leaves)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", flags->device, "auto | cuda | cpu (auto: cuda when a GPU is usable)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("--dtype", flags->dtype,
                  "auto | bfloat16 | float32 (auto: bfloat16 on cuda, float32 on cpu)")
      ->check(CLI::IsMember({"auto", "bfloat16", "bf16", "float32", "float"}));
  cmd->add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                  "auto (the --dtype) | fp8 | fp8_e4m3: an e4m3 KV cache with per-layer "
                  "k_scale / v_scale from the checkpoint (else 1.0), half the bytes per token")
      ->check(CLI::Validator(
          [](const std::string& value) -> std::string {
            auto dtype = kv_cache_dtype_from_name(value, DType::kF32);
            return dtype.has_value() ? "" : dtype.status().message();
          },
          "auto|fp8|fp8_e4m3", "kv-cache-dtype"));
  cmd->add_flag("--calculate-kv-scales", flags->calculate_kv_scales,
                "vLLM's computed FP8 KV-cache scales: not supported (refused)");
  cmd->add_option("--gpu-memory-utilization", flags->engine.gpu_memory_utilization,
                  "fraction of GPU memory for weights, activations and KV cache (default 0.9)")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_flag("--enforce-eager", flags->engine.enforce_eager,
                "CUDA: run every step eagerly (no CUDA graphs for decode steps)");
  cmd->add_option("--cuda-graph-sizes", flags->engine.cuda_graph_sizes,
                  "CUDA: decode batch sizes to capture graphs for (one value: 1, 2, 4, 8, 16, "
                  "... up to it; default up to --max-num-seqs)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching",
                flags->enable_prefix_caching);
  cmd->add_option("--mamba-cache-interval", flags->engine.mamba_cache_interval,
                  "Hybrid models: prompt tokens between GDN state snapshots (a multiple of "
                  "--block-size; 0: only prompt ends, shared-prefix junctions and outputs; "
                  "default 512, rounded up to a multiple of --block-size)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--mamba-cache-memory-fraction", flags->engine.mamba_cache_memory_fraction,
                  "Hybrid models: share of the cache budget for GDN state snapshots")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--num-mamba-snapshots-override", flags->engine.num_mamba_snapshots_override,
                  "Hybrid models: number of GDN state snapshots, whatever the budget")
      ->check(CLI::NonNegativeNumber);
  // vLLM's MambaDType choices; any other value is refused naming it and them.
  const CLI::Validator mamba_dtype(
      [](std::string& value) {
        return parse_mamba_dtype("", value) ? std::string()
                                            : "invalid choice '" + value + "' (choose from " +
                                                  std::string(kMambaDTypeChoices) + ")";
      },
      "auto|float32|float16|bfloat16");
  cmd->add_option("--mamba-cache-dtype", flags->mamba_cache_dtype,
                  "Hybrid models: dtype of the GDN conv state, and of the recurrent state too "
                  "unless --mamba-ssm-cache-dtype says otherwise (auto: the model dtype)")
      ->check(mamba_dtype);
  cmd->add_option("--mamba-ssm-cache-dtype", flags->mamba_ssm_cache_dtype,
                  "Hybrid models: dtype of the GDN recurrent state (auto: config.json's "
                  "mamba_ssm_dtype, else the conv state's dtype; bfloat16 halves its memory)")
      ->check(mamba_dtype);
  engine::ParallelConfig& p = flags->parallel;
  cmd->add_option("--tensor-parallel-size", p.tensor_parallel_size,
                  "ranks to shard the model over (-tp; this process is rank 0 and starts the "
                  "others as worker processes)")
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--enable-expert-parallel", p.enable_expert_parallel,
                "MoE layers: whole experts per rank instead of a slice of every expert");
  cmd->add_option("--nnodes", p.nnodes, "hosts the ranks run on (torchrun's name)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--node-rank", p.node_rank, "this host's index among --nnodes")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--master-addr", p.master_addr,
                  "where rank 0 listens for the other ranks (default 127.0.0.1)");
  cmd->add_option("--master-port", p.master_port,
                  "the rendezvous port (default: a free port on one host, 29501 across hosts)")
      ->check(CLI::Range(1, 65535));
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

void add_sampler_flags(CLI::App* cmd, SamplerFlags* flags) {
  cmd->add_option("--temperature", flags->temperature);
  cmd->add_option("--top-p", flags->top_p);
  cmd->add_option("--top-k", flags->top_k);
  cmd->add_option("--min-p", flags->min_p);
  cmd->add_option("--presence-penalty", flags->presence_penalty);
  cmd->add_option("--frequency-penalty", flags->frequency_penalty);
  cmd->add_option("--repetition-penalty", flags->repetition_penalty);
}

SamplingParams sampler_params(const GenerationConfig& generation, const SamplerFlags& flags) {
  SamplingParams p = generation_defaults(generation);
  if (flags.temperature) p.temperature = *flags.temperature;
  if (flags.top_p) p.top_p = *flags.top_p;
  if (flags.top_k) p.top_k = *flags.top_k;
  if (flags.min_p) p.min_p = *flags.min_p;
  if (flags.presence_penalty) p.presence_penalty = *flags.presence_penalty;
  if (flags.frequency_penalty) p.frequency_penalty = *flags.frequency_penalty;
  if (flags.repetition_penalty) p.repetition_penalty = *flags.repetition_penalty;
  return p;
}

}  // namespace vllm::cli

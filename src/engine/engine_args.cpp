// Model folder -> running EngineCore; see engine_args.h.
#include "engine/engine_args.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "structured/vocab.h"
#include "tensor/kv_cache.h"

namespace vllm::engine {

Expected<std::pair<Device, DType>> resolve_device(const std::string& device_name,
                                                  const std::string& dtype_name) {
  Device device;
  if (device_name == "auto") {
    device = cuda_available() ? Device::cuda() : Device::cpu();
  } else if (device_name == "cuda" || device_name == "cuda:0") {
    device = Device::cuda();
  } else if (device_name == "cpu") {
    device = Device::cpu();
  } else {
    return make_error(ErrorCode::kInvalidArgument, "--device '{}' is not one of auto, cuda, cpu",
                      device_name);
  }
  DType dtype;
  if (dtype_name == "auto") {
    dtype = device.is_cuda() ? DType::kBF16 : DType::kF32;
  } else if (dtype_name == "bfloat16" || dtype_name == "bf16") {
    dtype = DType::kBF16;
  } else if (dtype_name == "float32" || dtype_name == "float") {
    dtype = DType::kF32;
  } else {
    return make_error(ErrorCode::kInvalidArgument,
                      "--dtype '{}' is not one of auto, bfloat16, float32", dtype_name);
  }
  if (device.is_cpu() && dtype != DType::kF32) {
    return make_error(ErrorCode::kUnsupported,
                      "the CPU backend computes in float32; --dtype {} needs --device cuda",
                      dtype_name);
  }
  if (device.is_cuda() && !cuda_available()) {
    return make_error(ErrorCode::kUnsupported,
                      "--device cuda: no usable CUDA GPU{} (use --device cpu)",
                      cuda_available() ? "" : " (or this build has no CUDA backend)");
  }
  return std::make_pair(device, dtype);
}

namespace {

// Tensor parallelism: checks that need no worker, then the workers started (they load their
// shards while rank 0 loads its own).
Expected<std::unique_ptr<WorkerGroup>> start_workers(const EngineArgs& args, Device device) {
  const ParallelConfig& p = args.parallel;
  if (device.is_cuda()) {
    return make_error(ErrorCode::kUnsupported,
                      "--tensor-parallel-size {} on cuda needs the NCCL communicator, which this "
                      "build does not have yet; --device cpu runs it on the CPU",
                      p.tensor_parallel_size);
  }
  VLLM_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(args.model));
  VLLM_RETURN_IF_ERROR(check_tensor_parallel(config, p.tensor_parallel_size));
  // The host's cores shared among the ranks, unless VLLM_CPU_THREADS says otherwise (the
  // workers get the same count through their environment).
  if (std::getenv("VLLM_CPU_THREADS") == nullptr) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    set_default_num_threads(std::max(1, cores / p.tensor_parallel_size));
  }
  WorkerLoadSpec spec;
  spec.model = args.model;
  spec.load_format = args.load_format;
  spec.device = args.device;
  spec.dtype = args.dtype;
  spec.max_model_len = args.max_model_len;
  spec.enable_expert_parallel = p.enable_expert_parallel;
  spec.quantization = args.quantization;
  spec.mamba_cache_dtype = args.mamba_cache_dtype;
  spec.mamba_ssm_cache_dtype = args.mamba_ssm_cache_dtype;
  spec.kv_cache_dtype = args.kv_cache_dtype;
  return WorkerGroup::start(p, spec);
}

}  // namespace

Expected<LoadedEngine> build_engine(const EngineArgs& args) {
  LoadOptions load;
  load.max_model_len = args.max_model_len;
  load.load_format = args.load_format;
  load.quantization = args.quantization;
  load.mamba_cache_dtype = args.mamba_cache_dtype;
  load.mamba_ssm_cache_dtype = args.mamba_ssm_cache_dtype;
  load.kv_cache_dtype = args.kv_cache_dtype;
  VLLM_ASSIGN_OR_RETURN(auto placement, resolve_device(args.device, args.dtype));
  load.device = placement.first;
  load.dtype = placement.second;
  // Before any worker starts: an unsupported cache dtype fails here, naming the value.
  VLLM_ASSIGN_OR_RETURN(const DType kv_dtype,
                        kv_cache_dtype_from_name(args.kv_cache_dtype, load.dtype));
  if (args.calculate_kv_scales) {
    return make_error(ErrorCode::kUnsupported,
                      "--calculate-kv-scales is not supported: an FP8 KV cache takes each "
                      "attention layer's k_scale / v_scale from the checkpoint, else 1.0");
  }
  if (kv_dtype == DType::kF8E4M3) {
    VLLM_LOG_INFO(
        "Using fp8 data type to store kv cache. It reduces the GPU memory footprint and boosts "
        "the performance. Meanwhile, it may cause accuracy drop without a proper scaling factor");
  }
  std::unique_ptr<WorkerGroup> workers;
  if (args.parallel.tensor_parallel_size != 1 || args.parallel.nnodes != 1) {
    auto started = start_workers(args, load.device);
    if (!started) return started.status().with_context("cannot start tensor parallelism");
    workers = std::move(*started);
    load.comm = workers->communicator();
    load.enable_expert_parallel = args.parallel.enable_expert_parallel;
  }
  auto model = load_model(args.model, load);
  if (!model) {
    // The workers need not finish loading: the group goes down at once.
    if (workers) workers->abort(model.status());
    return model.status().with_context("cannot load model");
  }
  if (workers) {
    Status ready = workers->wait_ready();
    if (!ready.is_ok()) return ready.with_context("cannot load model");
  }
  LoadedEngine out;
  VLLM_ASSIGN_OR_RETURN(out.generation, load_generation_config(args.model));
  const std::filesystem::path tokenizer_file = std::filesystem::path(args.model) / "tokenizer.json";
  if (std::filesystem::exists(tokenizer_file)) {
    VLLM_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::from_file(tokenizer_file));
    out.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer));
  }
  std::vector<int32_t> eos;
  for (int64_t id : (*model)->config().eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  for (int64_t id : out.generation.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  EngineConfig config = args.engine;
  config.scheduler.max_model_len = args.max_model_len;
  config.num_gpu_blocks_override = args.num_gpu_blocks_override;
  config.enable_prefix_caching = args.enable_prefix_caching;
  if (args.seed) config.seed = static_cast<uint64_t>(*args.seed);
  // Structured outputs work on the tokenizer's token bytes; the EOS ids end a grammar.
  std::shared_ptr<const structured::TokenVocabulary> vocab;
  if (out.tokenizer) {
    auto v = structured::TokenVocabulary::from_tokenizer(
        *out.tokenizer, static_cast<int32_t>((*model)->config().vocab_size), eos);
    if (!v) return v.status().with_context("cannot read the tokenizer's vocabulary");
    vocab = std::move(*v);
  }
  auto core = EngineCore::create(std::move(*model), config, std::move(eos), std::move(vocab),
                                 std::move(workers));
  if (!core) return core.status().with_context("cannot start the engine");
  out.core = std::move(*core);
  return out;
}

}  // namespace vllm::engine

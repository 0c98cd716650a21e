// Model folder -> running EngineCore; see engine_args.h.
#include "engine/engine_args.h"

#include <filesystem>

#include "model/model.h"
#include "structured/vocab.h"

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

Expected<LoadedEngine> build_engine(const EngineArgs& args) {
  LoadOptions load;
  load.max_model_len = args.max_model_len;
  load.load_format = args.load_format;
  load.quantization = args.quantization;
  VLLM_ASSIGN_OR_RETURN(auto placement, resolve_device(args.device, args.dtype));
  load.device = placement.first;
  load.dtype = placement.second;
  auto model = load_model(args.model, load);
  if (!model) return model.status().with_context("cannot load model");
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
  auto core = EngineCore::create(std::move(*model), config, std::move(eos), std::move(vocab));
  if (!core) return core.status().with_context("cannot start the engine");
  out.core = std::move(*core);
  return out;
}

}  // namespace vllm::engine

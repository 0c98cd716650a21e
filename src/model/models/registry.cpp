#include "model/models/registry.h"

#include <fmt/format.h>

#include <optional>

#include "base/logging.h"
#include "model/decoder.h"

namespace vllm {

const ModelRegistry& model_registry() {
  static const ModelRegistry registry = [] {
    ModelRegistry r;
    register_llama_models(r);
    register_qwen3_5_models(r);
    register_qwen3_next_models(r);
    return r;
  }();
  return registry;
}

Expected<std::unique_ptr<Model>> create_model(const ModelConfig& config, WeightSource& weights,
                                              const LoadOptions& options) {
  const ModelRegistry& registry = model_registry();
  for (const std::string& arch : config.architectures) {
    if (ModelFactory factory = registry.find(arch)) return factory(config, weights, options);
  }
  return make_error(ErrorCode::kUnsupported,
                    "model architectures [{}] are not supported (supported: {})",
                    fmt::join(config.architectures, ", "), fmt::join(registry.names(), ", "));
}

Expected<std::unique_ptr<Model>> load_model(const std::filesystem::path& model_dir,
                                            const LoadOptions& given) {
  VLLM_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(model_dir));
  LoadOptions options = given;
  auto build = [&]() -> Expected<std::unique_ptr<Model>> {
    // FP8 weights: the checkpoint's own (quantization_config), or --quantization fp8 of a
    // float checkpoint, quantized at load in vLLM's 128x128 blocks.
    std::optional<WeightBlock> checkpoint_fp8;
    if (config.quantization) {
      auto block = fp8_weight_block(*config.quantization);
      if (!block) return block.status().with_context("config.json");
      checkpoint_fp8 = *block;
    }
    if (!options.quantization.empty() && options.quantization != "fp8") {
      return make_error(ErrorCode::kInvalidArgument,
                        "--quantization '{}' is not supported (fp8 is)", options.quantization);
    }
    const bool quantize = options.quantization == "fp8" && !checkpoint_fp8;
    if (quantize && options.device.is_cuda() && options.load_format != "dummy") {
      return make_error(ErrorCode::kUnsupported,
                        "--quantization fp8 of a float checkpoint quantizes on the host, which "
                        "the CUDA backend does not do yet: use an FP8 checkpoint, --load-format "
                        "dummy or --device cpu");
    }
    const std::optional<WeightBlock> fp8 =
        quantize ? std::optional<WeightBlock>(WeightBlock{128, 128}) : checkpoint_fp8;
    // Dummy FP8 weights leave float what the checkpoint leaves float.
    std::vector<std::string> unquantized;
    if (checkpoint_fp8) unquantized = config.quantization->modules_to_not_convert;
    VLLM_ASSIGN_OR_RETURN(options.runtime, runtime_for(options));
    if (options.load_format == "dummy" && options.device.is_cuda()) {
      // Made on the device directly, in the activation dtype; linear weights in FP8 for FP8
      // configs (and --quantization fp8).
      DummyWeights weights(options.runtime->context(), 0, fp8, unquantized);
      return create_model(config, weights, options);
    }
    if (options.load_format == "dummy") {
      // The checkpoint's own 16-bit dtype where config.json names one, else f32; linear
      // weights in FP8 for FP8 configs (and --quantization fp8).
      const DType dtype = config.dtype == "bfloat16"  ? DType::kBF16
                          : config.dtype == "float16" ? DType::kF16
                                                      : DType::kF32;
      DummyWeights weights(dtype, Device::cpu(), 0, fp8, unquantized);
      return create_model(config, weights, options);
    }
    if (options.load_format == "auto" || options.load_format == "safetensors") {
      VLLM_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::open(model_dir));
      CheckpointWeights weights(std::move(checkpoint), checkpoint_fp8);
      if (!quantize) return create_model(config, weights, options);
      Fp8QuantizedWeights quantized(weights, *fp8);
      return create_model(config, quantized, options);
    }
    return make_error(ErrorCode::kInvalidArgument,
                      "--load-format '{}' is not supported (auto, safetensors, dummy)",
                      options.load_format);
  };
  auto model = build();
  if (!model) return model.status().with_context(model_dir.string());
  return model;
}

}  // namespace vllm

// GDN state dtypes from vLLM's flags and config.json; see mamba_dtype.h.
#include "model/mamba_dtype.h"

#include "base/logging.h"

namespace vllm {

Expected<std::optional<DType>> parse_mamba_dtype(std::string_view flag, std::string_view value) {
  if (value == "auto") return std::optional<DType>();
  if (value == "float32") return std::optional<DType>(DType::kF32);
  if (value == "bfloat16") return std::optional<DType>(DType::kBF16);
  if (value == "float16") return std::optional<DType>(DType::kF16);
  return make_error(ErrorCode::kInvalidArgument, "{}: invalid choice '{}' (choose from {})", flag,
                    value, kMambaDTypeChoices);
}

std::string_view mamba_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kF32:
      return "float32";
    default:
      return dtype_name(dtype);
  }
}

Expected<MambaStateDTypes> resolve_mamba_state_dtypes(const ModelConfig& config, DType model_dtype,
                                                      std::string_view mamba_cache_dtype,
                                                      std::string_view mamba_ssm_cache_dtype) {
  VLLM_ASSIGN_OR_RETURN(std::optional<DType> conv,
                        parse_mamba_dtype("--mamba-cache-dtype", mamba_cache_dtype));
  VLLM_ASSIGN_OR_RETURN(std::optional<DType> ssm,
                        parse_mamba_dtype("--mamba-ssm-cache-dtype", mamba_ssm_cache_dtype));
  // Qwen3.5's config hook: config.json's mamba_ssm_dtype stands in for an "auto" flag.
  if (!config.mamba_ssm_dtype.empty()) {
    auto from_config = parse_mamba_dtype("config.json mamba_ssm_dtype", config.mamba_ssm_dtype);
    if (!from_config || !from_config->has_value()) {
      return make_error(ErrorCode::kInvalidFormat,
                        "config.json: mamba_ssm_dtype '{}' is not one of float32, float16, "
                        "bfloat16",
                        config.mamba_ssm_dtype);
    }
    if (!ssm) {
      ssm = *from_config;
    } else if (*ssm != **from_config) {
      VLLM_LOG_WARNING(
          "The model specifies mamba_ssm_dtype='{}' in its config, but "
          "--mamba-ssm-cache-dtype='{}' was passed. Using the user-specified value.",
          config.mamba_ssm_dtype, mamba_ssm_cache_dtype);
    }
  }
  MambaStateDTypes out;
  out.conv = conv.value_or(model_dtype);
  out.ssm = ssm.value_or(out.conv);
  return out;
}

}  // namespace vllm

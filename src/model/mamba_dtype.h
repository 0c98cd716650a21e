// The element types of a hybrid model's GDN state (the conv state and the recurrent "ssm"
// state), as vLLM chooses them from --mamba-cache-dtype, --mamba-ssm-cache-dtype and the
// checkpoint's config (vllm/config/cache.py, MambaStateDtypeCalculator in
// vllm/model_executor/layers/mamba/mamba_utils.py, Qwen3_5ForConditionalGenerationConfig in
// vllm/model_executor/models/config.py):
//   conv = --mamba-cache-dtype, or the model dtype (the activations') when "auto";
//   ssm  = --mamba-ssm-cache-dtype; when "auto", config.json's mamba_ssm_dtype where it has
//          one (Qwen3.5 / 3.6: "float32"), else the conv state's dtype.
// An explicit --mamba-ssm-cache-dtype that differs from config.json's mamba_ssm_dtype wins,
// with a warning, as in vLLM. The choices are vLLM's MambaDType: auto, float32, float16,
// bfloat16. How the ops store state in a 16-bit dtype: backend/cpu/gdn.h.
#pragma once

#include <optional>
#include <string_view>

#include "base/status.h"
#include "loader/hf_config.h"
#include "tensor/dtype.h"

namespace vllm {

// vLLM's MambaDType values, for flags' help and messages.
inline constexpr std::string_view kMambaDTypeChoices = "auto, float32, float16, bfloat16";

// `value` of flag `flag` (e.g. "--mamba-ssm-cache-dtype"): nullopt for "auto", else its
// dtype; anything else is kInvalidArgument naming the value and the choices.
Expected<std::optional<DType>> parse_mamba_dtype(std::string_view flag, std::string_view value);

struct MambaStateDTypes {
  DType conv = DType::kF32;  // conv_state
  DType ssm = DType::kF32;   // ssm_state (the recurrent state)
};

// The state dtypes of `config` under activations of `model_dtype` and the two flags' values
// (vLLM's spellings; "auto" for unset). Errors name the bad flag value or config field.
Expected<MambaStateDTypes> resolve_mamba_state_dtypes(const ModelConfig& config, DType model_dtype,
                                                      std::string_view mamba_cache_dtype,
                                                      std::string_view mamba_ssm_cache_dtype);

// "float32", "bfloat16", "float16": vLLM's name of a state dtype, for logs.
std::string_view mamba_dtype_name(DType dtype);

}  // namespace vllm

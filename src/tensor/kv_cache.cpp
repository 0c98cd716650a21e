// KV-cache formats (kv_cache.h).
#include "tensor/kv_cache.h"

#include <cmath>
#include <utility>

namespace vllm {

Status check_kv_cache_scales(const KvCacheScales& scales) {
  const std::pair<const char*, float> named[] = {{"k_scale", scales.k_scale},
                                                 {"v_scale", scales.v_scale}};
  for (const auto& [name, value] : named) {
    if (!std::isfinite(value) || value <= 0.0f) {
      return make_error(ErrorCode::kInvalidArgument,
                        "FP8 KV cache {} is {}; it must be finite and positive", name, value);
    }
  }
  return Status::ok();
}

Expected<DType> kv_cache_dtype_from_name(std::string_view name, DType act_dtype) {
  if (name == "auto") return act_dtype;
  if (name == "fp8" || name == "fp8_e4m3") return DType::kF8E4M3;
  return make_error(ErrorCode::kUnsupported,
                    "--kv-cache-dtype '{}' is not supported (auto, fp8 and fp8_e4m3 are)", name);
}

}  // namespace vllm

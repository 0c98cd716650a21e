// The element formats of the paged KV cache: the activation dtype (vLLM's `--kv-cache-dtype
// auto`) or vLLM's FP8 cache (`fp8`, `fp8_e4m3`): e4m3 bytes, with one f32 scale per attention
// layer for its keys and one for its values (vLLM's per-tensor k_scale / v_scale). A value x
// is stored as e4m3(x / scale), saturated to +-448 as CUDA's __NV_SATFINITE conversion does
// (what vLLM's reshape_and_cache kernels write through scaled_convert), and read back as
// e4m3_to_f32(byte) * scale. The host functions below are that definition: the CPU backend
// computes with them and the CUDA kernels are tested against them.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/float_convert.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace vllm {

// One attention layer's FP8 KV-cache scales (vLLM's layer._k_scale / _v_scale): 1.0 unless
// the checkpoint has them (vLLM's default without --calculate-kv-scales). Float caches
// ignore them, as vLLM does under --kv-cache-dtype auto.
struct KvCacheScales {
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// The e4m3 byte an FP8 cache stores for x under `scale` (x / scale in f32, then saturating).
inline uint8_t fp8_kv_quantize(float x, float scale) {
  return f32_to_fp8e4m3_satfinite(x / scale);
}
// The value a stored byte stands for: its e4m3 value times `scale`, rounded once in f32.
inline float fp8_kv_dequantize(uint8_t q, float scale) {
  return fp8e4m3_to_f32(q) * scale;
}

// kInvalidArgument unless both scales are finite and positive (what an FP8 cache can use).
Status check_kv_cache_scales(const KvCacheScales& scales);

// vLLM's --kv-cache-dtype: "auto" is the activation dtype, "fp8" and "fp8_e4m3" F8_E4M3 (fp8
// means e4m3 on NVIDIA GPUs, as in vLLM). vLLM's other values (fp8_e5m2, fp8_inc,
// fp8_ds_mla, bfloat16, ...) and unknown ones are kUnsupported naming the value and the
// supported ones.
Expected<DType> kv_cache_dtype_from_name(std::string_view name, DType act_dtype);

}  // namespace vllm

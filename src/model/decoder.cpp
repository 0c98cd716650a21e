#include "model/decoder.h"

#include "backend/cpu/cache_memory.h"
#include "ops/ops.h"

namespace vllm {

Expected<std::shared_ptr<DeviceRuntime>> runtime_for(const LoadOptions& options) {
  std::shared_ptr<DeviceRuntime> runtime = options.runtime;
  if (!runtime) {
    VLLM_ASSIGN_OR_RETURN(auto created, DeviceRuntime::create(options.device, options.dtype));
    runtime = std::move(created);
  }
  if (options.comm) runtime->set_communicator(options.comm);
  return runtime;
}

namespace {

Expected<Tensor> zeroed(const ExecContext& ctx, const Shape& shape, DType dtype, const char* what) {
  // CPU: a fresh mapping is already zero, and only the pages used get touched.
  auto t = ctx.device.is_cpu() ? cpu::zeroed_mapping(shape, dtype)
                               : Tensor::try_empty(shape, dtype, ctx.device);
  if (!t) {
    const DeviceMemory m = device_memory(ctx.device);
    return make_error(t.status().code(), "cannot allocate the {} {} on {}: {} ({:.2f} GiB free)",
                      what, shape_to_string(shape), ctx.device.to_string(), t.status().message(),
                      static_cast<double>(m.free_bytes) / (1 << 30));
  }
  if (!ctx.device.is_cpu()) VLLM_RETURN_IF_ERROR(ops::zero(ctx, *t));
  return *t;
}

}  // namespace

Expected<ModelCache> allocate_cache(const ExecContext& ctx, const CacheConfig& config,
                                    const CacheShapes& s, DType kv_dtype) {
  if (s.num_linear_layers > 0 && config.num_state_slots <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "CacheConfig.num_state_slots is {}; this hybrid model needs at least one "
                      "GDN state slot per running request",
                      config.num_state_slots);
  }
  ModelCache cache;
  cache.config = config;
  for (int64_t i = 0; i < s.num_attention_layers; ++i) {
    VLLM_ASSIGN_OR_RETURN(
        Tensor kv,
        zeroed(ctx, {config.num_blocks, 2, config.block_size, s.num_kv_heads, s.head_dim}, kv_dtype,
               "KV cache"));
    cache.kv.push_back(std::move(kv));
  }
  const Shape conv_shape = {config.num_state_slots, s.conv_dim, s.conv_kernel - 1};
  const Shape ssm_shape = {config.num_state_slots, s.num_value_heads, s.key_head_dim,
                           s.value_head_dim};
  if (ctx.device.is_cpu() && s.num_linear_layers > 0) {
    // One mapping for every layer's state, so that it is large enough for huge pages
    // (cache_memory.h): one layer's state of a few slots is smaller than 2 MiB, and resetting
    // a slot in 4 KiB pages took the demo model's 8-request prefill 10 ms of page faults.
    auto bytes_of = [](const Shape& shape, DType dtype) {
      auto n = static_cast<int64_t>(dtype_size(dtype));
      for (int64_t d : shape) n *= d;
      return (n + 255) / 256 * 256;
    };
    const int64_t conv_bytes = bytes_of(conv_shape, s.conv_state_dtype);
    const int64_t ssm_bytes = bytes_of(ssm_shape, s.ssm_state_dtype);
    auto states =
        cpu::zeroed_storage(static_cast<size_t>((conv_bytes + ssm_bytes) * s.num_linear_layers));
    if (!states) return states.status().with_context("allocating the GDN state");
    char* at = static_cast<char*>((*states)->data());
    for (int64_t i = 0; i < s.num_linear_layers; ++i) {
      cache.conv_state.push_back(
          Tensor::borrow(at, conv_shape, s.conv_state_dtype, Device::cpu(), *states));
      cache.ssm_state.push_back(
          Tensor::borrow(at + conv_bytes, ssm_shape, s.ssm_state_dtype, Device::cpu(), *states));
      at += conv_bytes + ssm_bytes;
    }
    return cache;
  }
  for (int64_t i = 0; i < s.num_linear_layers; ++i) {
    VLLM_ASSIGN_OR_RETURN(Tensor conv,
                          zeroed(ctx, conv_shape, s.conv_state_dtype, "GDN conv state"));
    VLLM_ASSIGN_OR_RETURN(Tensor ssm,
                          zeroed(ctx, ssm_shape, s.ssm_state_dtype, "GDN recurrent state"));
    cache.conv_state.push_back(std::move(conv));
    cache.ssm_state.push_back(std::move(ssm));
  }
  return cache;
}

}  // namespace vllm

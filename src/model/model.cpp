#include "model/model.h"

#include "model/decoder.h"
#include "ops/ops.h"
#include "tensor/kv_cache.h"

namespace vllm {

Expected<Tensor> Model::forward(const ForwardBatch& batch, ModelCache& cache) {
  const ExecContext& ctx = context();
  VLLM_RETURN_IF_ERROR(check_cache(cache));
  VLLM_RETURN_IF_ERROR(runtime().workspace().reset());
  const int64_t slots = cache.conv_state.empty() ? 0 : cache.conv_state[0].size(0);
  VLLM_ASSIGN_OR_RETURN(StepInputs in, prepare_step(ctx, batch, slots));
  // Requests that start at position 0 start from zeroed GDN state.
  if (in.reset_slots.defined()) {
    for (std::vector<Tensor>* states : {&cache.conv_state, &cache.ssm_state}) {
      for (Tensor& s : *states) VLLM_RETURN_IF_ERROR(ops::zero_slots(ctx, s, in.reset_slots));
    }
  }
  return compute(in, cache);
}

Expected<ModelCache> Model::create_cache(const CacheConfig& config) const {
  return allocate_cache(context(), config, cache_shapes(), kv_cache_dtype_);
}

Status Model::set_runtime(std::shared_ptr<DeviceRuntime> runtime, const LoadOptions& options) {
  VLLM_ASSIGN_OR_RETURN(kv_cache_dtype_, kv_cache_dtype_from_name(options.kv_cache_dtype,
                                                                  runtime->context().act_dtype));
  runtime_ = std::move(runtime);
  return Status::ok();
}

int64_t Model::state_bytes_per_slot() const {
  const CacheShapes s = cache_shapes();
  if (s.num_linear_layers == 0) return 0;
  const int64_t conv =
      s.conv_dim * (s.conv_kernel - 1) * static_cast<int64_t>(dtype_size(s.conv_state_dtype));
  const int64_t ssm = s.num_value_heads * s.key_head_dim * s.value_head_dim *
                      static_cast<int64_t>(dtype_size(s.ssm_state_dtype));
  return s.num_linear_layers * (conv + ssm);
}

}  // namespace vllm

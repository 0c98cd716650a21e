#include "model/model.h"

#include <algorithm>

#include "ops/ops.h"

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

int64_t Model::state_bytes_per_slot() const {
  const ModelConfig& c = config();
  const auto linear = static_cast<int64_t>(
      std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kLinearAttention));
  if (linear == 0) return 0;
  const int64_t conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim +
                           c.linear_num_value_heads * c.linear_value_head_dim;
  const int64_t conv = conv_dim * (c.linear_conv_kernel_dim - 1);
  const int64_t ssm = c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;
  return linear * (conv + ssm) * static_cast<int64_t>(sizeof(float));
}

}  // namespace vllm

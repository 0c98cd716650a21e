#include "model/model.h"

#include <algorithm>

namespace vllm {

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

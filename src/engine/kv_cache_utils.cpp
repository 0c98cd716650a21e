// KV-cache sizing (see kv_cache_utils.h).
#include "engine/kv_cache_utils.h"

#include <algorithm>
#include <limits>

#include "base/logging.h"

namespace vllm::engine {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Block 0 is the null block, so one more is needed for anything to run.
constexpr int32_t kMinNumGpuBlocks = 2;

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

Status validate_spec(const KVCacheSpec& spec) {
  if (spec.block_size <= 0 || spec.num_kv_heads <= 0 || spec.head_dim <= 0 ||
      spec.dtype_size <= 0 || spec.num_attention_layers <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "KV cache spec needs positive block_size ({}), num_kv_heads ({}), "
                      "head_dim ({}), dtype_size ({}) and num_attention_layers ({})",
                      spec.block_size, spec.num_kv_heads, spec.head_dim, spec.dtype_size,
                      spec.num_attention_layers);
  }
  return Status::ok();
}

}  // namespace

int64_t kv_cache_page_size_bytes(const KVCacheSpec& spec) {
  return 2LL * spec.block_size * spec.num_kv_heads * spec.head_dim * spec.dtype_size;
}

int64_t kv_cache_bytes_per_block(const KVCacheSpec& spec) {
  return kv_cache_page_size_bytes(spec) * spec.num_attention_layers;
}

int64_t max_memory_usage_bytes(const KVCacheSpec& spec, int64_t max_model_len) {
  return cdiv(max_model_len, spec.block_size) * kv_cache_bytes_per_block(spec);
}

Expected<int32_t> determine_num_gpu_blocks(const KVCacheSpec& spec,
                                           const KVCacheSizingConfig& config) {
  VLLM_RETURN_IF_ERROR(validate_spec(spec));
  if (config.max_model_len <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "max_model_len must be positive, got {}",
                      config.max_model_len);
  }
  const int64_t bytes_per_block = kv_cache_bytes_per_block(spec);

  int32_t num_blocks = 0;
  if (config.num_gpu_blocks_override.has_value()) {
    num_blocks = *config.num_gpu_blocks_override;
    if (num_blocks < kMinNumGpuBlocks) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--num-gpu-blocks-override {} is too small: block 0 is reserved, so at "
                        "least {} blocks are needed",
                        num_blocks, kMinNumGpuBlocks);
    }
    VLLM_LOG_INFO("Overriding num_gpu_blocks={} with num_gpu_blocks_override={}",
                  config.available_memory_bytes / bytes_per_block, num_blocks);
  } else {
    const int64_t available = config.available_memory_bytes;
    if (available <= 0) {
      return make_error(ErrorCode::kResourceExhausted,
                        "No available memory for the cache blocks ({} bytes). Try increasing "
                        "`gpu_memory_utilization` or set --num-gpu-blocks-override.",
                        available);
    }
    const int64_t needed = max_memory_usage_bytes(spec, config.max_model_len);
    if (needed > available) {
      const int64_t estimated_max_len = available / bytes_per_block * spec.block_size;
      return make_error(
          ErrorCode::kResourceExhausted,
          "To serve at least one request with the model's max seq len ({}), {:.2f} GiB KV "
          "cache is needed, which is larger than the available KV cache memory ({:.2f} GiB). "
          "Based on the available memory, the estimated maximum model length is {}. Try "
          "increasing `gpu_memory_utilization` or decreasing `max_model_len`.",
          config.max_model_len, needed / kGiB, available / kGiB, estimated_max_len);
    }
    const int64_t blocks = available / bytes_per_block;
    num_blocks =
        static_cast<int32_t>(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max()));
    if (num_blocks < kMinNumGpuBlocks) {
      return make_error(ErrorCode::kResourceExhausted,
                        "the KV cache budget of {} bytes holds {} blocks of {} bytes; at least "
                        "{} are needed",
                        available, num_blocks, bytes_per_block, kMinNumGpuBlocks);
    }
  }
  VLLM_LOG_INFO("KV cache size: {} tokens ({} blocks of {} tokens, {})",
                kv_cache_size_tokens(num_blocks, spec.block_size), num_blocks, spec.block_size,
                dtype_name(spec.dtype));
  VLLM_LOG_INFO("Maximum concurrency for {} tokens per request: {:.2f}x", config.max_model_len,
                max_concurrency(num_blocks, spec.block_size, config.max_model_len));
  return num_blocks;
}

int64_t gdn_state_bytes_per_slot(const ModelConfig& c, DType conv_dtype, DType ssm_dtype) {
  const auto num_linear_layers = static_cast<int64_t>(
      std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kLinearAttention));
  const int64_t conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim +
                           c.linear_num_value_heads * c.linear_value_head_dim;
  const int64_t conv = conv_dim * std::max<int64_t>(c.linear_conv_kernel_dim - 1, 0);
  const int64_t ssm = c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;
  return num_linear_layers * (conv * static_cast<int64_t>(dtype_size(conv_dtype)) +
                              ssm * static_cast<int64_t>(dtype_size(ssm_dtype)));
}

int64_t kv_cache_size_tokens(int32_t num_gpu_blocks, int32_t block_size) {
  return static_cast<int64_t>(num_gpu_blocks) * block_size;
}

double max_concurrency(int32_t num_gpu_blocks, int32_t block_size, int64_t max_model_len) {
  const int64_t blocks_per_request = cdiv(max_model_len, block_size);
  return blocks_per_request > 0 ? static_cast<double>(num_gpu_blocks) / blocks_per_request : 0.0;
}

}  // namespace vllm::engine

// Rotary position embedding applied in place, vLLM's rotary_embedding op.
//
// The cache row of a position holds cos | sin for the rot_dim/2 frequencies. The products are
// formed in f32 as transformers' apply_rotary_pos_emb forms them (x1*cos - x2*sin,
// x2*cos + x1*sin), so results match it bit for bit given the same cache.
#include "backend/cpu/common.h"
#include "backend/cpu/ops.h"
#include "base/thread_pool.h"

namespace vllm::cpu {
namespace {

using detail::Rows;

// Checks query/key layout; returns its row view and sets *num_heads.
Expected<Rows> head_rows(std::string_view arg, const Tensor& t, int64_t num_tokens,
                         int64_t head_size, int64_t* num_heads) {
  constexpr std::string_view kOp = "rotary_embedding";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, arg, t, {DType::kF32}, -1));
  if (t.ndim() != 2 && t.ndim() != 3) {
    return make_error(ErrorCode::kInvalidArgument,
                      "rotary_embedding: {} has shape {}, expected [num_tokens, num_heads * {}] "
                      "or [num_tokens, num_heads, {}]",
                      arg, shape_to_string(t.shape()), head_size, head_size);
  }
  if (t.size(0) != num_tokens) {
    return make_error(ErrorCode::kInvalidArgument,
                      "rotary_embedding: {} has shape {}, expected {} rows (one per position)", arg,
                      shape_to_string(t.shape()), num_tokens);
  }
  if ((t.ndim() == 3 && t.size(2) != head_size) || (t.ndim() == 2 && t.size(1) % head_size != 0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "rotary_embedding: {} has shape {}, which does not split into heads of "
                      "head_size {}",
                      arg, shape_to_string(t.shape()), head_size);
  }
  VLLM_ASSIGN_OR_RETURN(Rows rows, detail::as_rows(kOp, arg, t));
  *num_heads = rows.cols / head_size;
  return rows;
}

void rotate_heads(float* row, int64_t num_heads, int64_t head_size, int64_t rot_dim,
                  const float* cos, const float* sin, bool is_neox) {
  const int64_t half = rot_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* x = row + h * head_size;
    if (is_neox) {
      for (int64_t i = 0; i < half; ++i) {
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * cos[i] - x2 * sin[i];
        x[i + half] = x2 * cos[i] + x1 * sin[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        float x1 = x[2 * i], x2 = x[2 * i + 1];
        x[2 * i] = x1 * cos[i] - x2 * sin[i];
        x[2 * i + 1] = x2 * cos[i] + x1 * sin[i];
      }
    }
  }
}

}  // namespace

Status rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_size,
                        const Tensor& cos_sin_cache, bool is_neox) {
  constexpr std::string_view kOp = "rotary_embedding";
  VLLM_RETURN_IF_ERROR(
      detail::check_tensor(kOp, "positions", positions, {DType::kI64, DType::kI32}, 1));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "positions", positions));
  if (head_size <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "rotary_embedding: head_size is {}, expected a positive size", head_size);
  }
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "cos_sin_cache", cos_sin_cache, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "cos_sin_cache", cos_sin_cache));
  const int64_t max_position = cos_sin_cache.size(0);
  const int64_t rot_dim = cos_sin_cache.size(1);
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_size) {
    return make_error(ErrorCode::kInvalidArgument,
                      "rotary_embedding: cos_sin_cache has shape {}: its rot_dim {} must be even, "
                      "positive and at most head_size {}",
                      shape_to_string(cos_sin_cache.shape()), rot_dim, head_size);
  }
  const int64_t num_tokens = positions.size(0);
  int64_t q_heads = 0, k_heads = 0;
  VLLM_ASSIGN_OR_RETURN(Rows q_rows, head_rows("query", query, num_tokens, head_size, &q_heads));
  Rows k_rows;
  if (key.defined()) {
    VLLM_ASSIGN_OR_RETURN(k_rows, head_rows("key", key, num_tokens, head_size, &k_heads));
  }

  const bool pos64 = positions.dtype() == DType::kI64;
  const void* pos_data = num_tokens ? positions.data_ptr() : nullptr;
  auto position_at = [&](int64_t t) -> int64_t {
    return pos64 ? static_cast<const int64_t*>(pos_data)[t]
                 : static_cast<const int32_t*>(pos_data)[t];
  };
  for (int64_t t = 0; t < num_tokens; ++t) {
    int64_t pos = position_at(t);
    if (pos < 0 || pos >= max_position) {
      return make_error(ErrorCode::kOutOfRange,
                        "rotary_embedding: position {} of token {} is outside the cos/sin cache "
                        "[0, {})",
                        pos, t, max_position);
    }
  }
  if (num_tokens == 0) return Status::ok();

  const float* cache = cos_sin_cache.data<float>();
  const int64_t work_per_token = (q_heads + k_heads) * rot_dim;
  parallel_for(0, num_tokens, detail::grain_for(work_per_token), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* cos = cache + position_at(t) * rot_dim;
      const float* sin = cos + rot_dim / 2;
      rotate_heads(q_rows.row<float>(t), q_heads, head_size, rot_dim, cos, sin, is_neox);
      if (k_heads > 0) {
        rotate_heads(k_rows.row<float>(t), k_heads, head_size, rot_dim, cos, sin, is_neox);
      }
    }
  });
  return Status::ok();
}

}  // namespace vllm::cpu

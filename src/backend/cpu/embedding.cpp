// Token embedding lookup: one decoded table row per token (or, for one rank's shard of a
// vocab-parallel table, a zero row for tokens outside the shard). Ids are validated before
// anything is written, so a bad id leaves `out` untouched.
#include <algorithm>

#include "backend/cpu/common.h"
#include "backend/cpu/ops.h"
#include "base/thread_pool.h"

namespace vllm::cpu {

using detail::Rows;

Status embedding(const Tensor& token_ids, const Tensor& table, Tensor& out) {
  return embedding_shard(token_ids, table, 0,
                         table.defined() && table.ndim() == 2 ? table.size(0) : 0, out);
}

Status embedding_shard(const Tensor& token_ids, const Tensor& table, int64_t vocab_start,
                       int64_t vocab_size, Tensor& out) {
  constexpr std::string_view kOp = "embedding";
  VLLM_RETURN_IF_ERROR(
      detail::check_tensor(kOp, "token_ids", token_ids, {DType::kI32, DType::kI64}, 1));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "token_ids", token_ids));
  VLLM_RETURN_IF_ERROR(detail::check_weight(kOp, "table", table));
  VLLM_RETURN_IF_ERROR(detail::check_ndim(kOp, "table", table, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  const int64_t num_tokens = token_ids.size(0);
  const int64_t vocab = vocab_size;
  const int64_t rows = table.size(0);
  const int64_t hidden = table.size(1);
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "out", out, {num_tokens, hidden},
                                           "([num_tokens, hidden_size] of token_ids and table)"));
  VLLM_ASSIGN_OR_RETURN(Rows out_rows, detail::as_rows(kOp, "out", out));
  if (num_tokens == 0) return Status::ok();

  const bool ids64 = token_ids.dtype() == DType::kI64;
  const void* ids_data = token_ids.data_ptr();
  auto id_at = [&](int64_t t) -> int64_t {
    return ids64 ? static_cast<const int64_t*>(ids_data)[t]
                 : static_cast<const int32_t*>(ids_data)[t];
  };
  for (int64_t t = 0; t < num_tokens; ++t) {
    int64_t id = id_at(t);
    if (id < 0 || id >= vocab) {
      return make_error(ErrorCode::kOutOfRange,
                        "embedding: token id {} at position {} is outside the vocabulary [0, {})",
                        id, t, vocab);
    }
  }
  if (hidden == 0) return Status::ok();

  const char* table_data = static_cast<const char*>(table.data_ptr());
  const size_t row_bytes = static_cast<size_t>(hidden) * table.element_size();
  const DType table_dtype = table.dtype();
  parallel_for(0, num_tokens, detail::grain_for(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row = id_at(t) - vocab_start;
      float* dst = out_rows.row<float>(t);
      if (row < 0 || row >= rows) {
        std::fill_n(dst, hidden, 0.0f);  // another rank's token
        continue;
      }
      detail::decode_to_f32(table_data + static_cast<size_t>(row) * row_bytes, table_dtype, hidden,
                            dst);
    }
  });
  return Status::ok();
}

}  // namespace vllm::cpu

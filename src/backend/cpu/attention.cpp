// Paged attention and the KV-cache write on the CPU (attention.h). Work items are (query row,
// head) pairs; the inner loop over the context is the portable reference below or its AVX2 /
// AVX-512 variant (vec_kernels.h), by cpu_isa.h. An FP8 cache runs the same inner loop on an
// f32 copy of what a work item's rows see (fp8_attention below).
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/vec_kernels.h"
#include "base/thread_pool.h"

namespace vllm::cpu {
namespace {

// The reference inner loop (see vec_kernels.h): scores in f32, softmax weights and the
// weighted sum of values in double.
void attention_row_portable(const detail::AttentionRow& a, double* acc) {
  const int64_t bs = a.block_size, head_dim = a.head_dim;
  float max_score = -INFINITY;
  for (int64_t j = 0; j < a.ctx; ++j) {
    const float* k = a.cache + (a.table[j / bs] * 2 * bs + j % bs) * a.kv_row + a.kv_offset;
    float dot = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) dot += a.q[d] * k[d];
    a.scores[j] = dot * a.scale;
    max_score = std::max(max_score, a.scores[j]);
  }
  double denom = 0.0;
  std::fill(acc, acc + head_dim, 0.0);
  for (int64_t j = 0; j < a.ctx; ++j) {
    const double p = std::exp(static_cast<double>(a.scores[j] - max_score));
    denom += p;
    const float* v = a.cache + ((a.table[j / bs] * 2 + 1) * bs + j % bs) * a.kv_row + a.kv_offset;
    for (int64_t d = 0; d < head_dim; ++d) acc[d] += p * v[d];
  }
  for (int64_t d = 0; d < head_dim; ++d) a.out[d] = static_cast<float>(acc[d] / denom);
}

struct CacheDims {
  int64_t num_blocks, block_size, kv_heads, head_dim;
};

Expected<CacheDims> cache_dims(const Tensor& kv_cache) {
  if (!kv_cache.defined() ||
      (kv_cache.dtype() != DType::kF32 && kv_cache.dtype() != DType::kF8E4M3) ||
      kv_cache.ndim() != 5 || kv_cache.size(1) != 2 || !kv_cache.is_contiguous() ||
      !kv_cache.device().is_cpu()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "kv_cache must be a contiguous CPU F32 or F8_E4M3 [num_blocks, 2, "
                      "block_size, kv_heads, head_dim] tensor, got {}",
                      kv_cache.to_string());
  }
  return CacheDims{kv_cache.size(0), kv_cache.size(2), kv_cache.size(3), kv_cache.size(4)};
}

// Accepts [T, H, D] or [T, H * D] contiguous F32 and checks H * D.
Status check_rows(const Tensor& t, const char* name, int64_t heads, int64_t head_dim) {
  const bool ok = t.defined() && t.dtype() == DType::kF32 && t.is_contiguous() &&
                  t.device().is_cpu() &&
                  ((t.ndim() == 3 && t.size(1) == heads && t.size(2) == head_dim) ||
                   (t.ndim() == 2 && t.size(1) == heads * head_dim));
  if (!ok) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} must be contiguous CPU F32 [T, {}, {}] or [T, {}], got {}", name, heads,
                      head_dim, heads * head_dim, t.to_string());
  }
  return Status::ok();
}

// Runs one (query row, query head) work item's inner loop.
void attention_row(CpuIsa isa, detail::AttentionRow& a, double* acc) {
  switch (isa) {
    case CpuIsa::kAvx512:
      detail::attention_row_avx512(a);
      break;
    case CpuIsa::kAvx2:
      detail::attention_row_avx2(a);
      break;
    default:
      attention_row_portable(a, acc);
  }
}

// Query rows per work item of an FP8 cache: the rows share one dequantized copy of the keys
// and values the last of them sees, so a prefill's dequantization costs 1/16 of its products.
constexpr int64_t kFp8RowsPerItem = 16;

// Attention over an F8_E4M3 cache. A work item (request, kv head, up to kFp8RowsPerItem
// consecutive query rows) dequantizes the keys and values its last row sees into an f32 copy
// laid out as the cache of one kv head ([blocks, 2, block_size, head_dim], blocks in block
// table order, read through the identity table) and runs each (row, query head) of the
// group on it with the F32 inner loop: bit for bit the F32 op over dequantized values.
void fp8_attention(const Tensor& query, const Tensor& kv_cache, const Tensor& block_tables,
                   const PagedAttentionParams& params, const CacheDims& dims, int64_t q_heads,
                   Tensor& out) {
  struct Item {
    int64_t request, row_begin, row_end;  // rows [row_begin, row_end) of the batch
  };
  std::vector<Item> items;
  const auto num_requests = static_cast<int64_t>(params.seq_lens.size());
  for (int64_t r = 0; r < num_requests; ++r) {
    for (int64_t t = params.query_start_loc[r]; t < params.query_start_loc[r + 1];
         t += kFp8RowsPerItem) {
      items.push_back(
          {r, t, std::min<int64_t>(t + kFp8RowsPerItem, params.query_start_loc[r + 1])});
    }
  }
  const int64_t bs = dims.block_size, head_dim = dims.head_dim, kv_heads = dims.kv_heads;
  const int64_t group = q_heads / kv_heads;
  const int64_t row = kv_heads * head_dim;  // elements per cache slot
  const int64_t max_blocks = block_tables.size(1);
  const CpuIsa isa = active_isa();
  const auto* cache = kv_cache.data<uint8_t>();
  const int32_t* tables = block_tables.data<int32_t>();
  const float* q_all = query.data<float>();
  float* out_all = out.data<float>();
  const float k_scale = params.kv_scales.k_scale, v_scale = params.kv_scales.v_scale;

  parallel_for(
      0, static_cast<int64_t>(items.size()) * kv_heads, 1, [&](int64_t begin, int64_t end) {
        thread_local std::vector<float> scores, copy;
        thread_local std::vector<double> acc;
        thread_local std::vector<int32_t> identity;
        acc.resize(static_cast<size_t>(head_dim));
        for (int64_t w = begin; w < end; ++w) {
          const Item& item = items[static_cast<size_t>(w / kv_heads)];
          const int64_t kh = w % kv_heads;
          const int64_t r = item.request;
          const int64_t q_len = params.query_start_loc[r + 1] - params.query_start_loc[r];
          const int64_t pos0 = params.seq_lens[r] - q_len - params.query_start_loc[r];
          const int64_t keys = pos0 + item.row_end;  // what the last row sees: [0, its position]
          const int64_t blocks = (keys + bs - 1) / bs;
          const int32_t* table = tables + r * max_blocks;
          copy.resize(static_cast<size_t>(blocks * 2 * bs * head_dim));
          if (identity.size() < static_cast<size_t>(blocks)) {
            identity.resize(static_cast<size_t>(blocks));
            for (size_t b = 0; b < identity.size(); ++b) identity[b] = static_cast<int32_t>(b);
          }
          for (int64_t j = 0; j < keys; ++j) {
            const int64_t b = j / bs, o = j % bs;
            const uint8_t* k = cache + ((table[b] * 2 * bs) + o) * row + kh * head_dim;
            const uint8_t* v = k + bs * row;
            float* k_dst = copy.data() + ((b * 2) * bs + o) * head_dim;
            float* v_dst = k_dst + bs * head_dim;
            for (int64_t d = 0; d < head_dim; ++d) {
              k_dst[d] = fp8_kv_dequantize(k[d], k_scale);
              v_dst[d] = fp8_kv_dequantize(v[d], v_scale);
            }
          }
          if (scores.size() < static_cast<size_t>(keys)) scores.resize(static_cast<size_t>(keys));
          for (int64_t t = item.row_begin; t < item.row_end; ++t) {
            for (int64_t g = 0; g < group; ++g) {
              const int64_t h = kh * group + g;
              detail::AttentionRow a;
              a.cache = copy.data();
              a.table = identity.data();
              a.block_size = bs;
              a.kv_row = head_dim;
              a.kv_offset = 0;
              a.head_dim = head_dim;
              a.scale = params.scale;
              a.ctx = pos0 + t + 1;  // keys [0, position]
              a.q = q_all + (t * q_heads + h) * head_dim;
              a.out = out_all + (t * q_heads + h) * head_dim;
              a.scores = scores.data();
              attention_row(isa, a, acc.data());
            }
          }
        }
      });
}

}  // namespace

Status reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& kv_cache,
                         const Tensor& slot_mapping, const KvCacheScales& scales) {
  VLLM_ASSIGN_OR_RETURN(CacheDims dims, cache_dims(kv_cache));
  VLLM_RETURN_IF_ERROR(check_rows(key, "key", dims.kv_heads, dims.head_dim));
  VLLM_RETURN_IF_ERROR(check_rows(value, "value", dims.kv_heads, dims.head_dim));
  const int64_t tokens = key.size(0);
  if (value.size(0) != tokens || slot_mapping.dtype() != DType::kI64 || slot_mapping.ndim() != 1 ||
      slot_mapping.size(0) != tokens) {
    return make_error(ErrorCode::kInvalidArgument,
                      "reshape_and_cache: key {} / value {} / slot_mapping {} disagree on tokens "
                      "(slot_mapping must be I64 [T])",
                      key.to_string(), value.to_string(), slot_mapping.to_string());
  }
  const bool fp8 = kv_cache.dtype() == DType::kF8E4M3;
  if (fp8) VLLM_RETURN_IF_ERROR(check_kv_cache_scales(scales));
  const int64_t row = dims.kv_heads * dims.head_dim;
  const int64_t num_slots = dims.num_blocks * dims.block_size;
  const int64_t* slots = slot_mapping.data<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] >= num_slots) {
      return make_error(ErrorCode::kOutOfRange,
                        "slot_mapping[{}] = {} is past the cache's {} slots", t, slots[t],
                        num_slots);
    }
  }
  const float* k = key.data<float>();
  const float* v = value.data<float>();
  // Element (slot, kv) of the cache, kv 0 = key, 1 = value.
  auto slot_offset = [&](int64_t slot, int64_t kv) {
    const int64_t block = slot / dims.block_size, offset = slot % dims.block_size;
    return ((block * 2 + kv) * dims.block_size + offset) * row;
  };
  if (!fp8) {
    float* cache = kv_cache.data<float>();
    for (int64_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      std::copy_n(k + t * row, row, cache + slot_offset(slots[t], 0));
      std::copy_n(v + t * row, row, cache + slot_offset(slots[t], 1));
    }
    return Status::ok();
  }
  auto* cache = kv_cache.data<uint8_t>();
  parallel_for(0, tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (slots[t] < 0) continue;
      uint8_t* k_dst = cache + slot_offset(slots[t], 0);
      uint8_t* v_dst = cache + slot_offset(slots[t], 1);
      for (int64_t i = 0; i < row; ++i) {
        k_dst[i] = fp8_kv_quantize(k[t * row + i], scales.k_scale);
        v_dst[i] = fp8_kv_quantize(v[t * row + i], scales.v_scale);
      }
    }
  });
  return Status::ok();
}

Status paged_attention(const Tensor& query, const Tensor& kv_cache, const Tensor& block_tables,
                       const PagedAttentionParams& params, Tensor& out) {
  VLLM_ASSIGN_OR_RETURN(CacheDims dims, cache_dims(kv_cache));
  if (query.ndim() < 2 || query.dtype() != DType::kF32) {
    return make_error(ErrorCode::kInvalidArgument, "query must be F32 [T, Hq, D], got {}",
                      query.to_string());
  }
  const int64_t head_dim = dims.head_dim;
  const int64_t q_heads = query.ndim() == 3 ? query.size(1) : query.size(1) / head_dim;
  VLLM_RETURN_IF_ERROR(check_rows(query, "query", q_heads, head_dim));
  VLLM_RETURN_IF_ERROR(check_rows(out, "out", q_heads, head_dim));
  if (q_heads % dims.kv_heads != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "query heads {} are not a multiple of kv heads {}", q_heads, dims.kv_heads);
  }
  const int64_t num_requests = static_cast<int64_t>(params.seq_lens.size());
  const int64_t tokens = query.size(0);
  if (static_cast<int64_t>(params.query_start_loc.size()) != num_requests + 1 ||
      params.query_start_loc.front() != 0 || params.query_start_loc.back() != tokens ||
      out.size(0) != tokens) {
    return make_error(ErrorCode::kInvalidArgument,
                      "query_start_loc must have {} entries from 0 to {} tokens", num_requests + 1,
                      tokens);
  }
  if (block_tables.dtype() != DType::kI32 || block_tables.ndim() != 2 ||
      block_tables.size(0) < num_requests || !block_tables.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "block_tables must be contiguous I32 [R >= {}, max_blocks], got {}",
                      num_requests, block_tables.to_string());
  }
  const int64_t max_blocks = block_tables.size(1);
  for (int64_t r = 0; r < num_requests; ++r) {
    const int64_t q_len = params.query_start_loc[r + 1] - params.query_start_loc[r];
    const int64_t seq_len = params.seq_lens[r];
    if (q_len < 0 || q_len > seq_len || seq_len > max_blocks * dims.block_size) {
      return make_error(ErrorCode::kInvalidArgument,
                        "request {}: {} queries for a context of {} (block table holds {} tokens)",
                        r, q_len, seq_len, max_blocks * dims.block_size);
    }
  }

  for (int64_t r = 0; r < num_requests; ++r) {
    const int32_t* table = block_tables.data<int32_t>() + r * max_blocks;
    for (int64_t b = 0; b < (params.seq_lens[r] + dims.block_size - 1) / dims.block_size; ++b) {
      if (table[b] < 0 || table[b] >= dims.num_blocks) {
        return make_error(ErrorCode::kOutOfRange, "block_tables[{}][{}] = {} is not a block id", r,
                          b, table[b]);
      }
    }
  }
  if (kv_cache.dtype() == DType::kF8E4M3) {
    VLLM_RETURN_IF_ERROR(check_kv_cache_scales(params.kv_scales));
    fp8_attention(query, kv_cache, block_tables, params, dims, q_heads, out);
    return Status::ok();
  }
  // Each query row's request, so rows can be spread over threads independently.
  std::vector<int32_t> row_request(static_cast<size_t>(tokens));
  for (int64_t r = 0; r < num_requests; ++r) {
    for (int64_t t = params.query_start_loc[r]; t < params.query_start_loc[r + 1]; ++t) {
      row_request[static_cast<size_t>(t)] = static_cast<int32_t>(r);
    }
  }
  const int32_t* row_req = row_request.data();

  const int64_t group = q_heads / dims.kv_heads;
  const CpuIsa isa = active_isa();
  detail::AttentionRow base;
  base.cache = kv_cache.data<float>();
  base.block_size = dims.block_size;
  base.kv_row = dims.kv_heads * head_dim;
  base.head_dim = head_dim;
  base.scale = params.scale;
  const int32_t* tables = block_tables.data<int32_t>();
  const float* q_all = query.data<float>();
  float* out_all = out.data<float>();

  // Scratch reused per thread across calls: no allocation once the longest context was seen.
  parallel_for(0, tokens * q_heads, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    thread_local std::vector<double> acc;
    acc.resize(static_cast<size_t>(head_dim));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / q_heads, h = item % q_heads;
      const int64_t r = row_req[t];
      const int64_t q_len = params.query_start_loc[r + 1] - params.query_start_loc[r];
      const int64_t position = params.seq_lens[r] - q_len + (t - params.query_start_loc[r]);
      detail::AttentionRow a = base;
      a.ctx = position + 1;  // keys [0, position]
      a.table = tables + r * max_blocks;
      a.q = q_all + item * head_dim;
      a.out = out_all + item * head_dim;
      a.kv_offset = (h / group) * head_dim;
      if (scores.size() < static_cast<size_t>(a.ctx)) scores.resize(static_cast<size_t>(a.ctx));
      a.scores = scores.data();
      attention_row(isa, a, acc.data());
    }
  });
  return Status::ok();
}

}  // namespace vllm::cpu

// Random paged-attention batches for the parity tests (GPU and CPU emulation): block ids
// shuffled, and everything the kernels must not read poisoned with NaN (cache blocks no
// request owns, slots of a request's last block past its context, block-table entries past a
// request's context, which hold poisoned block ids or ids outside the cache).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "cuda_test_util.h"
#include "tensor/kv_cache.h"
#include "tensor/tensor.h"

namespace vllm::cuda_test {

struct AttnCase {
  const char* name;
  std::vector<int32_t> q_lens;
  std::vector<int32_t> seq_lens;
  int64_t kv_heads;
  int64_t group;  // query heads per kv head
  int64_t head_dim;
  int64_t block_size;
  bool workspace = true;  // false: no key splitting
};

// One batch on the host: what the CPU reference reads and what is copied to the GPU.
struct HostBatch {
  Tensor query;         // [T, Hq * D] in the case's dtype
  Tensor kv_cache;      // [num_blocks, 2, block_size, Hk, D] in the case's dtype
  Tensor block_tables;  // I32 [R, max_blocks]
  std::vector<int32_t> query_start_loc;
  std::vector<int32_t> seq_lens;
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
};

// Sets every element of cache[block, :, offsets [begin, end), :, :] to NaN.
inline void poison_slots(Tensor& cache, int64_t block, int64_t begin, int64_t end) {
  const int64_t bs = cache.size(2), row = cache.size(3) * cache.size(4);
  for (int64_t kv = 0; kv < 2; ++kv) {
    const int64_t first = ((block * 2 + kv) * bs + begin) * row;
    const int64_t count = (end - begin) * row;
    if (cache.dtype() == DType::kF32) {
      std::fill_n(cache.data<float>() + first, count, std::nanf(""));
    } else {
      std::fill_n(cache.data<uint16_t>() + first, count, uint16_t{0x7FC0});
    }
  }
}

inline HostBatch make_batch(const AttnCase& c, DType dtype, std::mt19937& rng) {
  HostBatch b;
  const size_t num_requests = c.q_lens.size();
  b.seq_lens = c.seq_lens;
  b.query_start_loc.assign(1, 0);
  int64_t used_blocks = 0;
  int64_t widest = 1;
  for (size_t r = 0; r < num_requests; ++r) {
    b.query_start_loc.push_back(b.query_start_loc.back() + c.q_lens[r]);
    b.max_query_len = std::max(b.max_query_len, c.q_lens[r]);
    b.max_seq_len = std::max(b.max_seq_len, c.seq_lens[r]);
    const int64_t blocks = (c.seq_lens[r] + c.block_size - 1) / c.block_size;
    used_blocks += blocks;
    widest = std::max(widest, blocks);
  }
  const int64_t spare_blocks = used_blocks / 8 + 2;
  const int64_t num_blocks = used_blocks + spare_blocks;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  b.kv_cache =
      random_tensor({num_blocks, 2, c.block_size, c.kv_heads, c.head_dim}, dtype, rng, 0.0f, 1.0f);
  for (int64_t i = used_blocks; i < num_blocks; ++i) {
    poison_slots(b.kv_cache, ids[static_cast<size_t>(i)], 0, c.block_size);
  }
  const int64_t max_blocks = widest + 2;  // garbage columns past every request's context
  b.block_tables = Tensor::empty({static_cast<int64_t>(num_requests), max_blocks}, DType::kI32);
  const int32_t garbage[] = {-1, static_cast<int32_t>(num_blocks), 0x7fffffff, -123456};
  std::uniform_int_distribution<int64_t> pick(0, spare_blocks + 3);
  int64_t next = 0;
  for (size_t r = 0; r < num_requests; ++r) {
    int32_t* row = b.block_tables.data<int32_t>() + static_cast<int64_t>(r) * max_blocks;
    const int64_t blocks = (c.seq_lens[r] + c.block_size - 1) / c.block_size;
    for (int64_t j = 0; j < max_blocks; ++j) {
      if (j < blocks) {
        row[j] = ids[static_cast<size_t>(next++)];
        continue;
      }
      const int64_t g = pick(rng);  // a poisoned block or an id outside the cache
      row[j] =
          g < spare_blocks ? ids[static_cast<size_t>(used_blocks + g)] : garbage[g - spare_blocks];
    }
    const int64_t filled = c.seq_lens[r] % c.block_size;
    if (blocks > 0 && filled != 0) poison_slots(b.kv_cache, row[blocks - 1], filled, c.block_size);
  }
  const int64_t q_heads = c.kv_heads * c.group;
  b.query = random_tensor({b.query_start_loc.back(), q_heads * c.head_dim}, dtype, rng, 0.0f, 1.0f);
  return b;
}

inline Tensor cpu_reference(const HostBatch& b, const AttnCase& c) {
  Tensor ref = Tensor::empty(b.query.shape(), DType::kF32);
  cpu::PagedAttentionParams p;
  p.query_start_loc = b.query_start_loc;
  p.seq_lens = b.seq_lens;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  Status s = cpu::paged_attention(to_f32(b.query), to_f32(b.kv_cache), b.block_tables, p, ref);
  VLLM_CHECK_MSG(s.is_ok(), "{}", s.to_string());
  return ref;
}

// The batch's cache as an F8_E4M3 cache under `scales`: each element fp8_kv_quantize'd, keys
// with k_scale and values with v_scale (the NaN poison stays NaN: 0x7F).
inline Tensor fp8_cache(const Tensor& cache, const KvCacheScales& scales) {
  Tensor f32 = to_f32(cache);
  Tensor out = Tensor::empty(cache.shape(), DType::kF8E4M3);
  const int64_t half = cache.size(2) * cache.size(3) * cache.size(4);  // one block's K or V
  for (int64_t i = 0; i < f32.numel(); ++i) {
    const float scale = (i / half) % 2 == 1 ? scales.v_scale : scales.k_scale;
    out.data<uint8_t>()[i] = fp8_kv_quantize(f32.data<float>()[i], scale);
  }
  return out;
}

// The CPU op over an FP8 cache (fp8_cache of the batch's) with the batch's queries.
inline Tensor cpu_reference_fp8(const HostBatch& b, const AttnCase& c, const Tensor& fp8,
                                const KvCacheScales& scales) {
  Tensor ref = Tensor::empty(b.query.shape(), DType::kF32);
  cpu::PagedAttentionParams p;
  p.query_start_loc = b.query_start_loc;
  p.seq_lens = b.seq_lens;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.kv_scales = scales;
  Status s = cpu::paged_attention(to_f32(b.query), fp8, b.block_tables, p, ref);
  VLLM_CHECK_MSG(s.is_ok(), "{}", s.to_string());
  return ref;
}

inline Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

inline std::string describe(const AttnCase& c, DType dtype) {
  return fmt::format("{} {} Hk={} G={} D={} block_size={} R={}{}", c.name, dtype_name(dtype),
                     c.kv_heads, c.group, c.head_dim, c.block_size, c.q_lens.size(),
                     c.workspace ? "" : " (no workspace)");
}

}  // namespace vllm::cuda_test

// A minimal stand-in for the engine's model runner in model tests: each Seq owns a list of
// KV blocks and a count of computed tokens; step() builds one ForwardBatch from several
// sequences' next tokens and returns the logits of every row.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "model/model.h"

namespace vllm::testing {

inline Tensor i64(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

inline double rel_l2(const float* a, const float* b, int64_t n) {
  double err = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(err / norm);
}

// One request's view of the caches: its blocks, its GDN state slot, how many tokens are done.
struct Seq {
  std::vector<int64_t> tokens;
  std::vector<int32_t> blocks;
  int32_t slot = 0;
  int64_t computed = 0;
};

inline constexpr int64_t kBlockSize = 4;

// One step's batch: each (seq, n) computes its next n tokens (and counts them computed);
// logits of every row.
inline ForwardBatch make_batch(const std::vector<std::pair<Seq*, int64_t>>& work) {
  ForwardBatch batch;
  std::vector<int64_t> ids, pos, slots;
  int64_t max_blocks = 0;
  for (auto& [seq, n] : work) max_blocks = std::max<int64_t>(max_blocks, seq->blocks.size());
  batch.block_tables = Tensor::zeros({static_cast<int64_t>(work.size()), max_blocks}, DType::kI32);
  batch.query_start_loc = {0};
  for (size_t r = 0; r < work.size(); ++r) {
    auto& [seq, n] = work[r];
    for (int64_t i = seq->computed; i < seq->computed + n; ++i) {
      ids.push_back(seq->tokens[static_cast<size_t>(i)]);
      pos.push_back(i);
      slots.push_back(seq->blocks[static_cast<size_t>(i / kBlockSize)] * kBlockSize +
                      i % kBlockSize);
    }
    std::copy(seq->blocks.begin(), seq->blocks.end(),
              batch.block_tables.data<int32_t>() + r * max_blocks);
    seq->computed += n;
    batch.query_start_loc.push_back(static_cast<int32_t>(ids.size()));
    batch.seq_lens.push_back(static_cast<int32_t>(seq->computed));
    batch.state_indices.push_back(seq->slot);
  }
  batch.token_ids = i64(ids);
  batch.positions = i64(pos);
  batch.slot_mapping = i64(slots);
  batch.logits_indices.resize(ids.size());
  std::iota(batch.logits_indices.begin(), batch.logits_indices.end(), 0);
  return batch;
}

// Runs one step: each (seq, n) computes its next n tokens. Returns logits of every row.
inline Tensor step(Model& model, ModelCache& cache, std::vector<std::pair<Seq*, int64_t>> work) {
  auto logits = model.forward(make_batch(work), cache);
  EXPECT_TRUE(logits.has_value()) << logits.status().to_string();
  return logits.has_value() ? *logits : Tensor();
}

}  // namespace vllm::testing

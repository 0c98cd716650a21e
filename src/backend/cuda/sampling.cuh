// Token sampling on the GPU: the CUDA counterpart of the CPU sampler's per-row steps
// (src/engine/sampling_ops.h holds the exact semantics; tests/cuda/test_sampling_cuda.cpp
// checks this against them).
//
// F32 logits [R, V] stay on the device; per row the caller gives plain parameters (no engine
// types) and gets back the sampled id, its raw logprob and rank, and the top-N raw logprobs
// when asked for. Per row, in the CPU sampler's order:
//   masked_tokens -> -inf (min_tokens), logit_bias, penalties (repetition, then frequency and
//   presence), then either greedy (argmax, ties to the lowest id) or temperature, min_p,
//   top_k (ties at the threshold stay), top_p (vLLM's rule, ties ordered by lower id) and one
//   inverse-CDF draw with `uniform`, scanning ids in order.
// The draw `uniform` is computed by the caller (the engine's counter-based streams), so a
// seeded row gives the same token whatever else is in the batch: each row is sampled by its
// own thread block, and everything that decides the token (maxima, radix selects, weight
// sums in fixed point) is exact and independent of the other rows.
//
// A DeviceSampler owns persistent device and pinned host buffers; a step makes one
// host->device copy of the packed parameters, one kernel launch and one device->host copy
// of the results, then waits for them. Buffers grow (cudaMalloc) only when a step needs more
// rows, sparse entries or rows with sparse entries than any step before.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// Top-N raw logprobs computed on the device; callers wanting more take the CPU path.
inline constexpr int32_t kMaxDeviceLogprobs = 20;

// A token seen before by the request: repetition_penalty applies when it is in the prompt or
// the output, frequency (per occurrence) and presence penalties when it is in the output.
struct PenaltyToken {
  int32_t token_id = 0;
  int32_t output_count = 0;  // occurrences among the generated tokens
  bool in_prompt = false;
};

struct TokenBias {
  int32_t token_id = 0;
  float bias = 0.0f;  // added to the logit
};

// What one row asks for. Spans must stay valid for the call; token ids must be in [0, V).
struct SamplingRow {
  bool greedy = false;              // argmax; temperature, min_p, top_k, top_p and uniform unused
  double temperature = 1.0;         // logits are divided by float(temperature) (> 0)
  double min_p = 0.0;               // <= 0: off
  int32_t top_k = 0;                // <= 0 or >= V: off
  double top_p = 1.0;               // in (0, 1]; 1: off
  double uniform = 0.0;             // the draw, in [0, 1)
  double repetition_penalty = 1.0;  // > 0; 1: off. Applied as float, like the CPU sampler
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  int32_t num_logprobs = 0;                      // top-N raw logprobs, 0..kMaxDeviceLogprobs
  std::span<const PenaltyToken> penalty_tokens;  // unique ids
  std::span<const TokenBias> logit_bias;         // unique ids
  std::span<const int32_t> masked_tokens;        // set to -inf first (duplicates allowed)
};

struct SampledToken {
  int32_t token_id = -1;
  float logprob = 0.0f;  // log_softmax of the raw logits at token_id
  int64_t rank = 0;      // tokens whose raw logit is >= token_id's
  // How many tokens the draw chose among after min_p / top_k / top_p (1 for greedy rows):
  // the kept set is always the first num_kept tokens by (logit desc, id asc).
  int32_t num_kept = 0;
  std::vector<int32_t> top_token_ids;  // num_logprobs most likely raw tokens, ties to lower id
  std::vector<float> top_logprobs;
};

class DeviceSampler {
 public:
  // Buffers for `max_rows` rows of `vocab_size` logits on `device` (a CUDA device; needs
  // cuda::init()). Larger steps later grow them.
  static Expected<std::unique_ptr<DeviceSampler>> create(Device device, int32_t max_rows,
                                                         int32_t vocab_size);
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  // logits F32 [R, V] on this sampler's device (unit stride along V, any row stride >= V),
  // one entry of `rows` per logits row. Fills `out` with R results. Runs on `stream`
  // (nullptr: the legacy default stream) and waits for it. Bad parameters are
  // kInvalidArgument naming the row and the field.
  Status sample(const Tensor& logits, std::span<const SamplingRow> rows,
                std::vector<SampledToken>& out, cudaStream_t stream = nullptr);

  Device device() const { return device_; }

 private:
  struct Buffers;
  DeviceSampler(Device device, std::unique_ptr<Buffers> buffers);
  Status reserve(size_t rows, size_t edits, size_t work_rows, int64_t vocab);

  Device device_;
  std::unique_ptr<Buffers> buffers_;
  std::vector<int32_t> edit_slot_;  // [V] host scratch: index of a token's entry, or -1
};

}  // namespace vllm::cuda

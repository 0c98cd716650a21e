// Sampler: turns the logits of the rows that sample into next tokens, one per request.
//
// vLLM V1's order (vllm/v1/sample/sampler.py), per row:
//   0. the structured-output bitmask, which vLLM applies to the logits before the sampler
//      (so masked tokens are -inf in the returned logprobs too)
//   1. logprobs of the raw logits are what is returned (logprobs_mode "raw_logprobs")
//   2. min_tokens: EOS and stop_token_ids masked while fewer than min_tokens generated
//   3. logit_bias
//   4. penalties: repetition (prompt + output), frequency and presence (output)
//   5. greedy rows (temperature < 1e-5): argmax, ties to the lowest id
//   6. otherwise temperature, min_p, top_k, top_p, then one random draw
// Random draws: a request with a seed reads its own counter-based stream at position
// "tokens generated so far", so the same seed gives the same tokens whatever else is in
// the batch, in any row order, and after preemption. Requests without a seed take their
// draws from the engine's stream, in row order. The engine thread owns a Sampler; rows
// are processed in parallel on the CPU thread pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/sampling_ops.h"
#include "engine/sampling_params.h"
#include "tensor/tensor.h"

namespace vllm {

class ThreadPool;
class DeviceRowSampler;  // the path for logits on a GPU (sampler_device.h)

// What the sampler needs of one request for one step. Spans must stay valid for the call.
struct SamplingRequestState {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_token_ids;  // repetition penalty
  // Tokens generated so far: penalties, min_tokens, and the seeded stream's position.
  std::span<const int32_t> output_token_ids;
  // The model's EOS ids (config eos plus generation_config's), masked with stop_token_ids
  // until min_tokens is reached -- also under ignore_eos, as vLLM does.
  std::span<const int32_t> eos_token_ids;
  // Structured outputs: the tokens the request's grammar allows, one bit per token (bit
  // id % 32 of word id / 32). Empty: every token is allowed.
  std::span<const uint32_t> allowed_token_bitmask;
};

// One sampled token: token_id, its raw logprob and rank always; top-N when
// params->logprobs asks for them (N = vocab for -1).
using SampleResult = TokenLogprobs;

class Sampler {
 public:
  // `seed` starts the engine stream used by requests without a seed. `pool` (not owned)
  // runs rows in parallel; nullptr means the process-wide default pool.
  explicit Sampler(uint64_t seed = 0, ThreadPool* pool = nullptr);
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;

  // logits F32 [num_rows, vocab_size] (rows may be strided; the vocab dim is contiguous),
  // one row per entry of `requests`, in the same order. Each params must have passed
  // validate(vocab_size). Logits on the CPU are sampled here; in CUDA builds, logits on a
  // GPU are sampled there with the same draws, and only the results come back. GPU logits
  // rows with an allowed_token_bitmask are masked on the device, in place (they are left
  // masked); CPU logits are not changed.
  std::vector<SampleResult> sample(const Tensor& logits,
                                   std::span<const SamplingRequestState> requests);

  // The uniform draw of each row for one step, in row order: 0 for greedy rows, a seeded
  // request's own stream at position output_token_ids.size(), otherwise the next draw of
  // the engine stream (which this advances). sample() takes its draws from here.
  std::vector<double> take_draws(std::span<const SamplingRequestState> requests);

  // The CUDA stream GPU logits are produced on (the model's); the GPU path queues its work
  // after it. nullptr: the legacy default stream.
  void set_device_stream(void* stream) { device_stream_ = stream; }

  // Draws taken from the engine stream so far (one per unseeded, non-greedy row).
  uint64_t engine_draws() const { return engine_counter_; }

 private:
  uint64_t engine_seed_;
  uint64_t engine_counter_ = 0;
  ThreadPool* pool_;
  std::unique_ptr<DeviceRowSampler> device_;  // created at the first GPU step
  void* device_stream_ = nullptr;             // cudaStream_t the GPU path runs on
};

// Samples one row with the uniform draw `u` in [0, 1) (ignored by greedy rows). The row
// is copied; `raw_logits` is not changed.
SampleResult sample_row(std::span<const float> raw_logits, const SamplingRequestState& request,
                        double u);

// Prompt logprobs: row i of `logits` F32 [num_positions, vocab_size] is the model's
// prediction after prompt position i, and next_token_ids[i] the prompt token that really
// followed (logits on a GPU are copied to the host first). Returns that token's logprob and
// rank and the top num_logprobs (-1: vocab) tokens per row. For a prompt of P tokens vLLM
// reports P - 1 of these (the first prompt token has none).
std::vector<TokenLogprobs> compute_prompt_logprobs(const Tensor& logits,
                                                   std::span<const int32_t> next_token_ids,
                                                   int32_t num_logprobs,
                                                   ThreadPool* pool = nullptr);

}  // namespace vllm

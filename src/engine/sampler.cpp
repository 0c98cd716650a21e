// Sampler: the batch driver over the per-row steps of sampling_ops.h (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <functional>

#include "base/thread_pool.h"
#include "engine/sampler_device.h"

namespace vllm {
namespace {

// Keeps the engine stream apart from a request stream that has the same seed value.
constexpr uint64_t kEngineStreamSalt = 0x6A09E667F3BCC908ULL;

void check_logits(const Tensor& logits, size_t num_rows, const char* what) {
  VLLM_CHECK_MSG(logits.defined() && logits.device().is_cpu() && logits.dtype() == DType::kF32 &&
                     logits.ndim() == 2,
                 "{}: logits must be F32 [rows, vocab] on the CPU, got {}", what,
                 logits.defined() ? logits.to_string() : std::string("undefined"));
  VLLM_CHECK_MSG(logits.size(0) == static_cast<int64_t>(num_rows),
                 "{}: {} logits rows for {} entries", what, logits.size(0), num_rows);
  VLLM_CHECK_MSG(logits.size(1) > 0 && (logits.stride(1) == 1 || logits.size(1) == 1),
                 "{}: the vocab dim of {} must be non-empty and contiguous", what,
                 logits.to_string());
}

std::span<const float> row_of(const Tensor& logits, int64_t row) {
  const float* base = static_cast<const float*>(logits.data_ptr());
  return {base + row * logits.stride(0), static_cast<size_t>(logits.size(1))};
}

void for_each_row(ThreadPool* pool, size_t num_rows, const std::function<void(size_t)>& fn) {
  if (num_rows <= 1) {
    for (size_t r = 0; r < num_rows; ++r) fn(r);
    return;
  }
  ThreadPool& p = pool ? *pool : default_thread_pool();
  p.parallel_for(0, static_cast<int64_t>(num_rows), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(static_cast<size_t>(r));
  });
}

}  // namespace

SampleResult sample_row(std::span<const float> raw_logits, const SamplingRequestState& request,
                        double u) {
  VLLM_CHECK(request.params != nullptr);
  const SamplingParams& params = *request.params;
  const bool min_tokens_active =
      params.min_tokens > 0 &&
      request.output_token_ids.size() < static_cast<size_t>(params.min_tokens);
  if (params.is_greedy() && !min_tokens_active && params.logit_bias.empty() &&
      !params.has_penalties() && request.allowed_token_bitmask.empty()) {
    // Nothing changes the row: the argmax of the raw logits, without a copy of the vocabulary.
    return gather_logprobs(raw_logits, argmax(raw_logits), params.logprobs.value_or(0));
  }
  std::vector<float> logits(raw_logits.begin(), raw_logits.end());
  const std::span<float> row(logits);
  std::vector<float> masked;
  if (!request.allowed_token_bitmask.empty()) {
    apply_token_bitmask(row, request.allowed_token_bitmask);
    masked = logits;
    raw_logits = masked;
  }

  // Processors that can change the argmax, then penalties (vLLM's apply_logits_processors).
  apply_min_tokens(row, params.min_tokens, request.output_token_ids.size(), params.stop_token_ids,
                   request.eos_token_ids);
  apply_logit_bias(row, params.logit_bias);
  if (params.has_penalties()) {
    apply_penalties(
        row, request.prompt_token_ids, request.output_token_ids,
        Penalties{params.presence_penalty, params.frequency_penalty, params.repetition_penalty});
  }

  int32_t token = 0;
  if (params.is_greedy()) {
    token = argmax(row);
  } else {
    apply_temperature(row, std::max(params.temperature, kMinTemperature));
    apply_min_p(row, params.min_p);
    apply_top_k(row, params.top_k);
    apply_top_p(row, params.top_p);
    token = sample_from_logits(row, u);
  }
  return gather_logprobs(raw_logits, token, params.logprobs.value_or(0));
}

Sampler::Sampler(uint64_t seed, ThreadPool* pool)
    : engine_seed_(seed ^ kEngineStreamSalt), pool_(pool) {}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

std::vector<double> Sampler::take_draws(std::span<const SamplingRequestState> requests) {
  std::vector<double> draws(requests.size(), 0.0);
  for (size_t r = 0; r < requests.size(); ++r) {
    const SamplingParams* params = requests[r].params;
    VLLM_CHECK_MSG(params != nullptr, "Sampler::sample: row {} has no SamplingParams", r);
    if (params->is_greedy()) continue;
    if (params->seed.has_value()) {
      draws[r] = uniform_from_stream(static_cast<uint64_t>(*params->seed),
                                     requests[r].output_token_ids.size());
    } else {
      draws[r] = uniform_from_stream(engine_seed_, engine_counter_++);
    }
  }
  return draws;
}

std::vector<SampleResult> Sampler::sample(const Tensor& logits,
                                          std::span<const SamplingRequestState> requests) {
  if (logits.defined() && logits.device().is_cuda()) {
#ifdef VLLM_WITH_CUDA
    // Draws are fixed on the host, in row order, exactly as for CPU logits.
    const std::vector<double> draws = take_draws(requests);
    if (!device_ || device_->device() != logits.device()) {
      device_ = make_device_row_sampler(logits.device(), device_stream_);
    }
    return device_->sample(logits, requests, draws);
#else
    VLLM_CHECK_MSG(false, "Sampler::sample: logits {} are on a GPU, but this build has no CUDA",
                   logits.to_string());
#endif
  }
  check_logits(logits, requests.size(), "Sampler::sample");
  // Draws are fixed here, in row order, so that running rows in parallel changes nothing.
  const std::vector<double> draws = take_draws(requests);
  std::vector<SampleResult> results(requests.size());
  for_each_row(pool_, requests.size(), [&](size_t r) {
    results[r] = sample_row(row_of(logits, static_cast<int64_t>(r)), requests[r], draws[r]);
  });
  return results;
}

std::vector<TokenLogprobs> compute_prompt_logprobs(const Tensor& logits,
                                                   std::span<const int32_t> next_token_ids,
                                                   int32_t num_logprobs, ThreadPool* pool) {
  if (logits.defined() && logits.device().is_cuda()) {
    // Prompt logprobs are rare: the rows come to the host and take the CPU path.
#ifdef VLLM_WITH_CUDA
    return compute_prompt_logprobs(logits_to_host(logits), next_token_ids, num_logprobs, pool);
#else
    VLLM_CHECK_MSG(false,
                   "compute_prompt_logprobs: logits {} are on a GPU, but this build has no CUDA",
                   logits.to_string());
#endif
  }
  check_logits(logits, next_token_ids.size(), "compute_prompt_logprobs");
  std::vector<TokenLogprobs> results(next_token_ids.size());
  for_each_row(pool, next_token_ids.size(), [&](size_t r) {
    results[r] =
        gather_logprobs(row_of(logits, static_cast<int64_t>(r)), next_token_ids[r], num_logprobs);
  });
  return results;
}

}  // namespace vllm

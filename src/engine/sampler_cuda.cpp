// The sampler's GPU path (built with VLLM_CUDA): turns each request's SamplingParams and
// token history into cuda::SamplingRow (the kernel's plain parameters, with the same
// float/double conversions the CPU steps make) and runs cuda::DeviceSampler. Rows asking
// for more logprobs than the device computes (-1: the whole vocabulary) get their token on
// the device and their logprobs from that one row copied to the host. Rows with a
// structured-output bitmask have it applied on the device first, in place in the logits
// (cuda::TokenBitmaskApplier), so their logprobs are of the masked logits, as on the CPU.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling.cuh"
#include "backend/cuda/token_bitmask.cuh"
#include "engine/sampler_device.h"

namespace vllm {
namespace {

// Spans into the step's flat lists, recorded as offsets while the lists grow.
struct RowLists {
  size_t penalty_begin = 0, penalty_count = 0;
  size_t bias_begin = 0, bias_count = 0;
  size_t masked_begin = 0, masked_count = 0;
};

class CudaRowSampler final : public DeviceRowSampler {
 public:
  CudaRowSampler(Device device, void* stream)
      : device_(device), stream_(static_cast<cudaStream_t>(stream)) {}

  Device device() const override { return device_; }

  std::vector<SampleResult> sample(const Tensor& logits,
                                   std::span<const SamplingRequestState> requests,
                                   std::span<const double> draws) override {
    VLLM_CHECK_MSG(logits.ndim() == 2 && logits.size(0) == static_cast<int64_t>(requests.size()),
                   "Sampler::sample: logits {} for {} requests", logits.to_string(),
                   requests.size());
    VLLM_CHECK(draws.size() == requests.size());
    const int64_t vocab = logits.size(1);
    if (!sampler_) {
      auto created = cuda::DeviceSampler::create(
          device_, static_cast<int32_t>(std::max<size_t>(requests.size(), 64)),
          static_cast<int32_t>(vocab));
      VLLM_CHECK_MSG(created.has_value(), "Sampler on {}: {}", device_.to_string(),
                     created.status().to_string());
      sampler_ = std::move(created).value();
    }
    apply_bitmasks(logits, requests);
    pack(requests, draws, vocab);
    const Status status = sampler_->sample(logits, rows_, sampled_, stream_);
    VLLM_CHECK_MSG(status.is_ok(), "Sampler::sample on {}: {}", device_.to_string(),
                   status.to_string());

    std::vector<SampleResult> results(requests.size());
    for (size_t r = 0; r < requests.size(); ++r) {
      cuda::SampledToken& t = sampled_[r];
      const int32_t asked = requests[r].params->logprobs.value_or(0);
      if (asked == -1 || asked > cuda::kMaxDeviceLogprobs) {
        results[r] = gather_logprobs(host_row(logits, static_cast<int64_t>(r)), t.token_id, asked);
        continue;
      }
      results[r].token_id = t.token_id;
      results[r].logprob = t.logprob;
      results[r].rank = t.rank;
      results[r].top_token_ids = std::move(t.top_token_ids);
      results[r].top_logprobs = std::move(t.top_logprobs);
    }
    return results;
  }

 private:
  // Fills rows_ (and the lists its spans point into) for this step.
  void pack(std::span<const SamplingRequestState> requests, std::span<const double> draws,
            int64_t vocab) {
    penalty_tokens_.clear();
    biases_.clear();
    masked_.clear();
    lists_.assign(requests.size(), RowLists{});
    if (token_index_.size() < static_cast<size_t>(vocab)) {
      token_index_.assign(static_cast<size_t>(vocab), -1);
    }
    for (size_t r = 0; r < requests.size(); ++r) {
      const SamplingRequestState& request = requests[r];
      const SamplingParams& p = *request.params;
      RowLists& lists = lists_[r];
      // min_tokens: stop ids and EOS masked until enough tokens were generated.
      lists.masked_begin = masked_.size();
      if (p.min_tokens > 0 && request.output_token_ids.size() < static_cast<size_t>(p.min_tokens)) {
        masked_.insert(masked_.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
        masked_.insert(masked_.end(), request.eos_token_ids.begin(), request.eos_token_ids.end());
      }
      lists.masked_count = masked_.size() - lists.masked_begin;
      lists.bias_begin = biases_.size();
      for (const auto& [id, bias] : p.logit_bias) biases_.push_back(cuda::TokenBias{id, bias});
      lists.bias_count = biases_.size() - lists.bias_begin;
      lists.penalty_begin = penalty_tokens_.size();
      if (p.has_penalties()) add_penalty_tokens(request, vocab);
      lists.penalty_count = penalty_tokens_.size() - lists.penalty_begin;
    }

    rows_.assign(requests.size(), cuda::SamplingRow{});
    for (size_t r = 0; r < requests.size(); ++r) {
      const SamplingParams& p = *requests[r].params;
      const RowLists& lists = lists_[r];
      cuda::SamplingRow& row = rows_[r];
      row.greedy = p.is_greedy();
      row.temperature = std::max(p.temperature, kMinTemperature);
      row.min_p = p.min_p;
      row.top_k = p.top_k;
      row.top_p = p.top_p;
      row.uniform = draws[r];
      row.repetition_penalty = p.repetition_penalty;
      row.frequency_penalty = p.frequency_penalty;
      row.presence_penalty = p.presence_penalty;
      const int32_t asked = p.logprobs.value_or(0);
      row.num_logprobs = asked > 0 && asked <= cuda::kMaxDeviceLogprobs ? asked : 0;
      row.penalty_tokens = std::span<const cuda::PenaltyToken>(penalty_tokens_)
                               .subspan(lists.penalty_begin, lists.penalty_count);
      row.logit_bias =
          std::span<const cuda::TokenBias>(biases_).subspan(lists.bias_begin, lists.bias_count);
      row.masked_tokens =
          std::span<const int32_t>(masked_).subspan(lists.masked_begin, lists.masked_count);
    }
  }

  // Structured outputs: disallowed tokens -> -inf on the device, queued before the sampler
  // on the same stream.
  void apply_bitmasks(const Tensor& logits, std::span<const SamplingRequestState> requests) {
    bitmasks_.clear();
    for (size_t r = 0; r < requests.size(); ++r) {
      if (!requests[r].allowed_token_bitmask.empty()) {
        bitmasks_.push_back({static_cast<int64_t>(r), requests[r].allowed_token_bitmask});
      }
    }
    if (bitmasks_.empty()) return;
    if (!bitmask_applier_) bitmask_applier_ = std::make_unique<cuda::TokenBitmaskApplier>(device_);
    const Status status = bitmask_applier_->apply(logits, bitmasks_, stream_);
    VLLM_CHECK_MSG(status.is_ok(), "Sampler::sample on {}: grammar bitmasks: {}",
                   device_.to_string(), status.to_string());
  }

  // One entry per distinct token: in the prompt (only needed for the repetition penalty)
  // and its count among the generated tokens.
  void add_penalty_tokens(const SamplingRequestState& request, int64_t vocab) {
    const SamplingParams& p = *request.params;
    const size_t begin = penalty_tokens_.size();
    auto entry = [&](int32_t id) -> cuda::PenaltyToken& {
      VLLM_CHECK_MSG(id >= 0 && id < vocab, "token id {} outside the logits row of {} entries", id,
                     vocab);
      int32_t& index = token_index_[static_cast<size_t>(id)];
      if (index < 0) {
        index = static_cast<int32_t>(penalty_tokens_.size() - begin);
        penalty_tokens_.push_back(cuda::PenaltyToken{id, 0, false});
      }
      return penalty_tokens_[begin + static_cast<size_t>(index)];
    };
    if (p.repetition_penalty != 1.0) {
      for (int32_t id : request.prompt_token_ids) entry(id).in_prompt = true;
    }
    for (int32_t id : request.output_token_ids) ++entry(id).output_count;
    for (size_t i = begin; i < penalty_tokens_.size(); ++i) {
      token_index_[static_cast<size_t>(penalty_tokens_[i].token_id)] = -1;
    }
  }

  // Row r of GPU logits, copied to the host.
  std::vector<float> host_row(const Tensor& logits, int64_t r) const {
    std::vector<float> row(static_cast<size_t>(logits.size(1)));
    const float* src = static_cast<const float*>(logits.data_ptr()) + r * logits.stride(0);
    cuda::DeviceGuard guard(device_);
    const Status status = cuda::cuda_status(
        cudaMemcpy(row.data(), src, row.size() * sizeof(float), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
    VLLM_CHECK_MSG(status.is_ok(), "Sampler: copying logits row {} to the host: {}", r,
                   status.to_string());
    return row;
  }

  Device device_;
  cudaStream_t stream_;
  std::unique_ptr<cuda::DeviceSampler> sampler_;
  std::unique_ptr<cuda::TokenBitmaskApplier> bitmask_applier_;  // at the first masked row
  std::vector<cuda::RowBitmask> bitmasks_;
  // Per-step scratch, kept to avoid reallocating.
  std::vector<cuda::SamplingRow> rows_;
  std::vector<RowLists> lists_;
  std::vector<cuda::PenaltyToken> penalty_tokens_;
  std::vector<cuda::TokenBias> biases_;
  std::vector<int32_t> masked_;
  std::vector<int32_t> token_index_;  // [vocab]: a token's entry in the current row, or -1
  std::vector<cuda::SampledToken> sampled_;
};

}  // namespace

std::unique_ptr<DeviceRowSampler> make_device_row_sampler(Device device, void* stream) {
  VLLM_CHECK_MSG(device.is_cuda(), "no sampler for logits on {}", device.to_string());
  return std::make_unique<CudaRowSampler>(device, stream);
}

Tensor logits_to_host(const Tensor& logits) {
  VLLM_CHECK_MSG(logits.defined() && logits.device().is_cuda() && logits.dtype() == DType::kF32 &&
                     logits.ndim() == 2 && (logits.stride(1) == 1 || logits.size(1) == 1),
                 "logits_to_host: expected F32 [rows, vocab] on a GPU with a contiguous vocab "
                 "dim, got {}",
                 logits.defined() ? logits.to_string() : std::string("undefined"));
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  Tensor host = Tensor::empty({rows, vocab}, DType::kF32);
  if (rows == 0 || vocab == 0) return host;
  const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
  const size_t pitch = rows > 1 ? static_cast<size_t>(logits.stride(0)) * sizeof(float) : row_bytes;
  cuda::DeviceGuard guard(logits.device());
  const Status status =
      cuda::cuda_status(cudaMemcpy2D(host.data_ptr(), row_bytes, logits.data_ptr(), pitch,
                                     row_bytes, static_cast<size_t>(rows), cudaMemcpyDeviceToHost),
                        "cudaMemcpy2D");
  VLLM_CHECK_MSG(status.is_ok(), "logits_to_host {}: {}", logits.to_string(), status.to_string());
  return host;
}

}  // namespace vllm

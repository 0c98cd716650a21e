// SamplingParams::normalize and validate: vLLM's rules and messages (sampling_params.py,
// _verify_args then verify()), checked in vLLM's order so the first error matches.
#include "engine/sampling_params.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "base/logging.h"

namespace vllm {
namespace {

// A double as Python prints it ("2.0", "0.5", "inf"), since the messages copy vLLM's.
std::string py_float(double value) {
  std::string text = fmt::format("{}", value);
  if (std::isfinite(value) && text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

Status invalid(std::string message) {
  return Status(ErrorCode::kInvalidArgument, std::move(message));
}

// "[-1, 70000]": the offending ids, as vLLM lists them.
std::string id_list(const std::vector<int64_t>& ids) {
  return fmt::format("[{}]", fmt::join(ids, ", "));
}

Status check_logprobs_limit(const char* what, const char* field,
                            const std::optional<int32_t>& requested, int32_t vocab_size,
                            int32_t max_logprobs) {
  if (!requested.has_value() || *requested == 0) return Status::ok();
  const int64_t limit = max_logprobs == -1 ? vocab_size : max_logprobs;
  const int64_t count = *requested == -1 ? vocab_size : *requested;
  if (count > limit) {
    return invalid(
        fmt::format("{}: Requested {} logprobs of {}, which is greater than max "
                    "allowed: {}",
                    field, what, count, limit));
  }
  return Status::ok();
}

}  // namespace

void SamplingParams::normalize() {
  if (temperature > 0.0 && temperature < kMinTemperature) {
    VLLM_LOG_WARNING(
        "temperature {} is less than {}, which may cause numerical errors nan or inf in "
        "tensors. We have maxed it out to {}.",
        temperature, kMinTemperature, kMinTemperature);
    temperature = kMinTemperature;
  }
  if (seed.has_value() && *seed == -1) seed.reset();
  std::unordered_set<int32_t> seen;
  std::vector<int32_t> unique_ids;
  unique_ids.reserve(stop_token_ids.size());
  for (int32_t id : stop_token_ids) {
    if (seen.insert(id).second) unique_ids.push_back(id);
  }
  stop_token_ids = std::move(unique_ids);
}

Status SamplingParams::validate(int32_t vocab_size, int32_t max_logprobs) const {
  // Value ranges (vLLM's _verify_args).
  if (n < 1) return invalid(fmt::format("n must be at least 1, got {}.", n));
  if (n > kMaxNSequences) {
    return invalid(fmt::format("n must be at most {}, got {}.", kMaxNSequences, n));
  }
  if (!(-2.0 <= presence_penalty && presence_penalty <= 2.0)) {
    return invalid(
        fmt::format("presence_penalty must be in [-2, 2], got {}.", py_float(presence_penalty)));
  }
  if (!(-2.0 <= frequency_penalty && frequency_penalty <= 2.0)) {
    return invalid(
        fmt::format("frequency_penalty must be in [-2, 2], got {}.", py_float(frequency_penalty)));
  }
  if (!std::isfinite(repetition_penalty)) {
    return invalid(fmt::format("repetition_penalty must be a finite number, got {}.",
                               py_float(repetition_penalty)));
  }
  if (repetition_penalty <= 0.0) {
    return invalid(fmt::format("repetition_penalty must be greater than zero, got {}.",
                               py_float(repetition_penalty)));
  }
  if (!std::isfinite(temperature)) {
    return invalid(
        fmt::format("temperature must be a finite number, got {}.", py_float(temperature)));
  }
  if (temperature < 0.0) {
    return invalid(fmt::format("temperature must be non-negative, got {}.", py_float(temperature)));
  }
  if (temperature > 2.0) {
    return invalid(fmt::format("temperature must be in [0, 2], got {}.", py_float(temperature)));
  }
  if (!(0.0 < top_p && top_p <= 1.0)) {
    return invalid(fmt::format("top_p must be in (0, 1], got {}.", py_float(top_p)));
  }
  if (top_k < -1) {
    return invalid(fmt::format("top_k must be 0 (disable), or at least 1, got {}.", top_k));
  }
  if (!(0.0 <= min_p && min_p <= 1.0)) {
    return invalid(fmt::format("min_p must be in [0, 1], got {}.", py_float(min_p)));
  }
  if (max_tokens.has_value() && *max_tokens < 1) {
    return invalid(fmt::format("max_tokens must be at least 1, got {}.", *max_tokens));
  }
  if (min_tokens < 0) {
    return invalid(
        fmt::format("min_tokens must be greater than or equal to 0, got {}.", min_tokens));
  }
  if (max_tokens.has_value() && min_tokens > *max_tokens) {
    return invalid(fmt::format("min_tokens must be less than or equal to max_tokens={}, got {}.",
                               *max_tokens, min_tokens));
  }
  if (logprobs.has_value() && *logprobs != -1 && *logprobs < 0) {
    return invalid(fmt::format("logprobs must be non-negative or -1, got {}.", *logprobs));
  }
  if (prompt_logprobs.has_value() && *prompt_logprobs != -1 && *prompt_logprobs < 0) {
    return invalid(
        fmt::format("prompt_logprobs must be non-negative or -1, got {}.", *prompt_logprobs));
  }
  if (std::any_of(stop.begin(), stop.end(), [](const std::string& s) { return s.empty(); })) {
    return invalid("stop cannot contain an empty string.");
  }
  if (is_greedy() && n > 1) {
    return invalid(fmt::format("n must be 1 when using greedy sampling, got {}.", n));
  }

  // Checks against the model (vLLM's verify()).
  VLLM_RETURN_IF_ERROR(
      check_logprobs_limit("sample", "logprobs", logprobs, vocab_size, max_logprobs));
  VLLM_RETURN_IF_ERROR(
      check_logprobs_limit("prompt", "prompt_logprobs", prompt_logprobs, vocab_size, max_logprobs));
  std::vector<int64_t> bad_ids;
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) bad_ids.push_back(id);
  }
  if (!bad_ids.empty()) {
    return invalid(fmt::format(
        "token_id(s) {} in stop_token_ids contain out-of-vocab token ids. Vocabulary size: {}",
        id_list(bad_ids), vocab_size));
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) bad_ids.push_back(id);
  }
  if (!bad_ids.empty()) {
    return invalid(fmt::format(
        "token_id(s) {} in logit_bias contain out-of-vocab token ids. Vocabulary size: {}",
        id_list(bad_ids), vocab_size));
  }
  for (const auto& [id, bias] : logit_bias) {
    if (!std::isfinite(bias)) {
      return invalid(fmt::format("logit_bias for token {} must be a finite number, got {}.", id,
                                 py_float(bias)));
    }
  }
  return Status::ok();
}

}  // namespace vllm

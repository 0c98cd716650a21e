// SamplingParams::from_json: the sampling fields of an OpenAI / vLLM request body.
//
// Requests are untrusted input: every field is type-checked and a wrong type is an error
// naming the field, never an exception (nlohmann's get<> / at() are not used).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/json_util.h"
#include "engine/sampling_params.h"
#include "structured/structured_outputs.h"

namespace vllm {
namespace {

using nlohmann::json;

Status wrong_type(std::string_view key, std::string_view expected, const json& got) {
  return make_error(ErrorCode::kInvalidArgument, "'{}' must be {}, got {}", key, expected,
                    json_type_name(got));
}

// An integer (or a float with no fractional part, as pydantic accepts) in [lo, hi].
Status to_int(std::string_view key, const json& value, int64_t lo, int64_t hi, int64_t* out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get_ref<const json::number_unsigned_t&>();
    if (v > static_cast<uint64_t>(hi)) {
      return make_error(ErrorCode::kInvalidArgument, "'{}' is out of range [{}, {}], got {}", key,
                        lo, hi, v);
    }
    *out = static_cast<int64_t>(v);
  } else if (value.is_number_integer()) {
    *out = value.get_ref<const json::number_integer_t&>();
  } else if (value.is_number_float()) {
    const double v = value.get_ref<const json::number_float_t&>();
    // 2^63 as a double: every integral double below it converts to int64 exactly.
    if (std::floor(v) != v || !(std::fabs(v) < 9223372036854775808.0)) {
      return wrong_type(key, "an integer", value);
    }
    *out = static_cast<int64_t>(v);
  } else {
    return wrong_type(key, "an integer", value);
  }
  if (*out < lo || *out > hi) {
    return make_error(ErrorCode::kInvalidArgument, "'{}' is out of range [{}, {}], got {}", key, lo,
                      hi, *out);
  }
  return Status::ok();
}

Status to_int32(std::string_view key, const json& value, int32_t* out) {
  int64_t v = 0;
  VLLM_RETURN_IF_ERROR(to_int(key, value, std::numeric_limits<int32_t>::min(),
                              std::numeric_limits<int32_t>::max(), &v));
  *out = static_cast<int32_t>(v);
  return Status::ok();
}

Status read_int32(const json& request, std::string_view key, int32_t* out) {
  const json* value = json_find(request, key);
  return value ? to_int32(key, *value, out) : Status::ok();
}

Status read_int32(const json& request, std::string_view key, std::optional<int32_t>* out) {
  const json* value = json_find(request, key);
  if (!value) return Status::ok();
  int32_t v = 0;
  VLLM_RETURN_IF_ERROR(to_int32(key, *value, &v));
  *out = v;
  return Status::ok();
}

Status read_double(const json& request, std::string_view key, double* out) {
  const json* value = json_find(request, key);
  if (!value) return Status::ok();
  if (!value->is_number()) return wrong_type(key, "a number", *value);
  *out = value->get<double>();
  return Status::ok();
}

Status read_bool(const json& request, std::string_view key, bool* out) {
  const json* value = json_find(request, key);
  if (!value) return Status::ok();
  if (!value->is_boolean()) return wrong_type(key, "a boolean", *value);
  *out = value->get<bool>();
  return Status::ok();
}

Status read_stop(const json& request, std::vector<std::string>* out) {
  const json* value = json_find(request, "stop");
  if (!value) return Status::ok();
  if (value->is_string()) {
    *out = {value->get<std::string>()};
    return Status::ok();
  }
  if (!value->is_array()) return wrong_type("stop", "a string or a list of strings", *value);
  std::vector<std::string> stop;
  for (const json& item : *value) {
    if (!item.is_string()) return wrong_type("stop", "a string or a list of strings", item);
    stop.push_back(item.get<std::string>());
  }
  *out = std::move(stop);
  return Status::ok();
}

Status read_stop_token_ids(const json& request, std::vector<int32_t>* out) {
  const json* value = json_find(request, "stop_token_ids");
  if (!value) return Status::ok();
  if (!value->is_array()) return wrong_type("stop_token_ids", "a list of integers", *value);
  std::vector<int32_t> ids;
  for (const json& item : *value) {
    int32_t id = 0;
    if (!item.is_number()) return wrong_type("stop_token_ids", "a list of integers", item);
    VLLM_RETURN_IF_ERROR(to_int32("stop_token_ids", item, &id));
    ids.push_back(id);
  }
  *out = std::move(ids);
  return Status::ok();
}

// Python's int(str): optional surrounding whitespace, optional sign, decimal digits.
std::optional<int32_t> parse_token_id(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  int32_t id = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return id;
}

Status read_logit_bias(const json& request, std::map<int32_t, float>* out) {
  const json* value = json_find(request, "logit_bias");
  if (!value) return Status::ok();
  if (!value->is_object()) {
    return wrong_type("logit_bias", "an object mapping token ids to biases", *value);
  }
  std::map<int32_t, float> biases;
  std::vector<std::string> bad_keys;
  for (auto it = value->begin(); it != value->end(); ++it) {
    std::optional<int32_t> id = parse_token_id(it.key());
    if (!id) {
      bad_keys.push_back(fmt::format("'{}'", it.key()));
      continue;
    }
    if (!it.value().is_number()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "'logit_bias' values must be numbers, got {} for token '{}'",
                        json_type_name(it.value()), it.key());
    }
    const double bias = it.value().get<double>();
    const double limit = kMaxLogitBias;
    biases[*id] = static_cast<float>(std::clamp(bias, -limit, limit));
  }
  if (!bad_keys.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "logit_bias contains key(s) that cannot be converted to integer token IDs: "
                      "[{}]",
                      fmt::join(bad_keys, ", "));
  }
  *out = std::move(biases);
  return Status::ok();
}

// logprobs is an integer (completions) or a boolean with top_logprobs beside it (chat).
Status read_logprobs(const json& request, std::optional<int32_t>* out) {
  const json* value = json_find(request, "logprobs");
  const json* top = json_find(request, "top_logprobs");
  std::optional<int32_t> top_logprobs;
  VLLM_RETURN_IF_ERROR(read_int32(request, "top_logprobs", &top_logprobs));
  if (top_logprobs && *top_logprobs < 0 && *top_logprobs != -1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "'top_logprobs' must be a positive value or -1, got {}", *top_logprobs);
  }
  if (value && value->is_boolean()) {
    if (value->get<bool>()) {
      *out = top_logprobs.value_or(0);
      return Status::ok();
    }
    out->reset();
  } else if (value) {
    if (!value->is_number()) return wrong_type("logprobs", "an integer or a boolean", *value);
    int32_t n = 0;
    VLLM_RETURN_IF_ERROR(to_int32("logprobs", *value, &n));
    *out = n;
    return Status::ok();
  }
  if (top && top_logprobs.value_or(0) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "'top_logprobs': when using `top_logprobs`, `logprobs` must be set to true");
  }
  return Status::ok();
}

}  // namespace

Expected<SamplingParams> SamplingParams::from_json(const json& request,
                                                   const SamplingParams& defaults) {
  if (!request.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "request must be a JSON object, got {}",
                      json_type_name(request));
  }
  SamplingParams params = defaults;
  VLLM_RETURN_IF_ERROR(read_int32(request, "n", &params.n));
  VLLM_RETURN_IF_ERROR(read_double(request, "presence_penalty", &params.presence_penalty));
  VLLM_RETURN_IF_ERROR(read_double(request, "frequency_penalty", &params.frequency_penalty));
  VLLM_RETURN_IF_ERROR(read_double(request, "repetition_penalty", &params.repetition_penalty));
  VLLM_RETURN_IF_ERROR(read_double(request, "temperature", &params.temperature));
  VLLM_RETURN_IF_ERROR(read_double(request, "top_p", &params.top_p));
  VLLM_RETURN_IF_ERROR(read_int32(request, "top_k", &params.top_k));
  VLLM_RETURN_IF_ERROR(read_double(request, "min_p", &params.min_p));
  if (const json* seed = json_find(request, "seed")) {
    int64_t value = 0;
    VLLM_RETURN_IF_ERROR(to_int("seed", *seed, std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max(), &value));
    params.seed = value;
  }
  VLLM_RETURN_IF_ERROR(read_stop(request, &params.stop));
  VLLM_RETURN_IF_ERROR(read_stop_token_ids(request, &params.stop_token_ids));
  VLLM_RETURN_IF_ERROR(read_bool(request, "ignore_eos", &params.ignore_eos));
  VLLM_RETURN_IF_ERROR(read_int32(request, "max_tokens", &params.max_tokens));
  VLLM_RETURN_IF_ERROR(read_int32(request, "max_completion_tokens", &params.max_tokens));
  VLLM_RETURN_IF_ERROR(read_int32(request, "min_tokens", &params.min_tokens));
  VLLM_RETURN_IF_ERROR(read_logprobs(request, &params.logprobs));
  VLLM_RETURN_IF_ERROR(read_int32(request, "prompt_logprobs", &params.prompt_logprobs));
  VLLM_RETURN_IF_ERROR(read_bool(request, "skip_special_tokens", &params.skip_special_tokens));
  VLLM_RETURN_IF_ERROR(
      read_bool(request, "spaces_between_special_tokens", &params.spaces_between_special_tokens));
  VLLM_RETURN_IF_ERROR(
      read_bool(request, "include_stop_str_in_output", &params.include_stop_str_in_output));
  VLLM_RETURN_IF_ERROR(read_logit_bias(request, &params.logit_bias));
  VLLM_ASSIGN_OR_RETURN(auto structured, structured::parse_structured_outputs(request, false));
  if (structured) params.structured_outputs = std::move(*structured);
  params.normalize();
  return params;
}

Expected<SamplingParams> SamplingParams::from_json(const json& request) {
  return from_json(request, SamplingParams());
}

}  // namespace vllm

#include "server/request_logger.h"

#include <fmt/format.h>

#include <cmath>

#include "base/logging.h"

namespace vllm::server {
namespace {

// Python's repr() of a float: "1.0", "0.7", "inf".
std::string py_float(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string py_bool(bool b) {
  return b ? "True" : "False";
}

template <typename T>
std::string py_optional(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : "None";
}

template <typename T>
std::string py_list(std::span<const T> items, std::optional<int64_t> limit = {}) {
  std::string out = "[";
  size_t n = items.size();
  if (limit && *limit >= 0) n = std::min<size_t>(n, static_cast<size_t>(*limit));
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    if constexpr (std::is_same_v<T, std::string>) {
      out += python_repr(items[i]);
    } else {
      out += fmt::format("{}", items[i]);
    }
  }
  return out + "]";
}

// The first `limit` code points of a UTF-8 text (Python slices str by code point).
std::string_view cut(std::string_view text, std::optional<int64_t> limit) {
  if (!limit || *limit < 0) return text;
  int64_t points = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (points++ == *limit) return text.substr(0, i);
  }
  return text;
}

}  // namespace

std::string python_repr(std::string_view text) {
  const bool double_quotes =
      text.find('\'') != std::string_view::npos && text.find('"') == std::string_view::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

std::string sampling_params_repr(const SamplingParams& p) {
  std::string stop = py_list<std::string>(p.stop);
  return fmt::format(
      "SamplingParams(n={}, presence_penalty={}, frequency_penalty={}, repetition_penalty={}, "
      "temperature={}, top_p={}, top_k={}, min_p={}, seed={}, stop={}, stop_token_ids={}, "
      "bad_words=[], include_stop_str_in_output={}, ignore_eos={}, max_tokens={}, "
      "min_tokens={}, logprobs={}, prompt_logprobs={}, skip_special_tokens={}, "
      "spaces_between_special_tokens={}, truncate_prompt_tokens=None, "
      "structured_outputs=None, extra_args=None)",
      p.n, py_float(p.presence_penalty), py_float(p.frequency_penalty),
      py_float(p.repetition_penalty), py_float(p.temperature), py_float(p.top_p), p.top_k,
      py_float(p.min_p), py_optional(p.seed), stop, py_list<int32_t>(p.stop_token_ids),
      py_bool(p.include_stop_str_in_output), py_bool(p.ignore_eos), py_optional(p.max_tokens),
      p.min_tokens, py_optional(p.logprobs), py_optional(p.prompt_logprobs),
      py_bool(p.skip_special_tokens), py_bool(p.spaces_between_special_tokens));
}

void RequestLogger::log_inputs(std::string_view request_id, const std::string* prompt,
                               std::span<const int32_t> prompt_token_ids,
                               const SamplingParams& params) const {
  if (log::enabled(log::Level::kDebug)) {
    VLLM_LOG_DEBUG(
        "Request {} details: prompt: {}, prompt_token_ids: {}, prompt_embeds shape: None.",
        request_id, prompt != nullptr ? python_repr(cut(*prompt, options_.max_log_len)) : "None",
        py_list<int32_t>(prompt_token_ids, options_.max_log_len));
  }
  VLLM_LOG_INFO("Received request {}: params: {}, lora_request: None.", request_id,
                sampling_params_repr(params));
}

void RequestLogger::log_added(std::string_view request_id) const {
  VLLM_LOG_INFO("Added request {}.", request_id);
}

void RequestLogger::log_aborted(std::string_view request_id) const {
  VLLM_LOG_INFO("Aborted request {}.", request_id);
}

void RequestLogger::log_outputs(std::string_view request_id, std::string_view text,
                                std::span<const int32_t> token_ids,
                                std::string_view finish_reason) const {
  if (!options_.log_outputs) return;
  VLLM_LOG_INFO("Generated response {}: output: {}, output_token_ids: {}, finish_reason: {}",
                request_id, python_repr(cut(text, options_.max_log_len)),
                py_list<int32_t>(token_ids, options_.max_log_len), finish_reason);
}

}  // namespace vllm::server

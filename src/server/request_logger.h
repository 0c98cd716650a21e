// Request logging for `vllm serve --enable-log-requests` (and --enable-log-outputs,
// --max-log-len), with vLLM's wording (vllm/entrypoints/logger.py, AsyncLLM):
//   INFO  Received request cmpl-...-0: params: SamplingParams(n=1, ...), lora_request: None.
//   DEBUG Request cmpl-...-0 details: prompt: '...', prompt_token_ids: [...], prompt_embeds shape:
//   None. INFO  Added request cmpl-...-0. INFO  Aborted request cmpl-...-0.           (the client
//   went away) INFO  Generated response cmpl-...-0: output: '...', output_token_ids: [...],
//   finish_reason: stop
// Prompts, outputs and token id lists are cut to --max-log-len characters / ids.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/sampling_params.h"

namespace vllm::server {

struct RequestLoggerOptions {
  std::optional<int64_t> max_log_len;  // none: unlimited
  bool log_outputs = false;            // --enable-log-outputs
};

class RequestLogger {
 public:
  explicit RequestLogger(RequestLoggerOptions options) : options_(options) {}

  // `prompt` may be null (a token-id prompt).
  void log_inputs(std::string_view request_id, const std::string* prompt,
                  std::span<const int32_t> prompt_token_ids, const SamplingParams& params) const;
  void log_added(std::string_view request_id) const;
  void log_aborted(std::string_view request_id) const;
  void log_outputs(std::string_view request_id, std::string_view text,
                   std::span<const int32_t> token_ids, std::string_view finish_reason) const;

 private:
  RequestLoggerOptions options_;
};

// Python's repr() of a str: single quotes unless the text has ' and no ", escapes for
// \\ \n \r \t and other control characters; UTF-8 text is kept as is.
std::string python_repr(std::string_view text);
// vLLM's SamplingParams.__repr__ for the fields we have.
std::string sampling_params_repr(const SamplingParams& params);

}  // namespace vllm::server

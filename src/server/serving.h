// The OpenAI endpoints behind the HTTP layer: request body in, response body (or a stream of
// server-sent events) out, as vLLM's OpenAIServingCompletion / OpenAIServingChat /
// OpenAIServingTokenization / OpenAIServingModels do. Nothing here knows about sockets: the
// HTTP layer (http_server.h) moves bytes and turns a returned Status into an OpenAI error.
//
// Per request: parse and check the body (protocol.h), check the model name, tokenize (chat:
// render the template first), check the prompt against max_model_len, start a Generation,
// and hand the HTTP layer a ResponseStream: it yields "data: {...}\n\n" chunks and finally
// "data: [DONE]\n\n" for a streaming request, one JSON object at the end otherwise. The
// HTTP layer polls it when woken, never waiting on it. Destroying a ResponseStream before it
// ends (the client went away) aborts its engine requests.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine_client.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/request_logger.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vllm::server {

struct ServingOptions {
  std::vector<std::string> served_model_names;  // the first is reported in responses
  std::string model_root;                       // the model folder, /v1/models' "root"
  std::optional<std::string> tool_call_parser;  // "hermes", "qwen3_coder"
  bool enable_auto_tool_choice = false;
  std::optional<std::string> reasoning_parser;  // "qwen3"
  SamplingParams default_params;                // vLLM's, then generation_config.json's
  std::optional<int32_t> default_max_tokens;    // generation_config.json's max_new_tokens
  bool log_requests = false;                    // --enable-log-requests
  RequestLoggerOptions log_options;             // --max-log-len, --enable-log-outputs
  // vLLM's --enable-prompt-tokens-details: usage.prompt_tokens_details.cached_tokens (the
  // prompt tokens a prefix-cache hit skipped) when there were any.
  bool enable_prompt_tokens_details = false;
};

// A response the engine is still producing. One caller at a time.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;  // unfinished: aborts its engine requests

  // Server-sent events (a body that grows chunk by chunk), or one JSON body at the end.
  virtual bool streaming() const = 0;
  // Appends what is ready to send, without blocking; returns false once complete (the
  // rest appended: for a non-streaming response, the whole body). Idempotent at the end.
  virtual bool poll(std::string* out) = 0;
  // The HTTP status of a non-streaming response, once poll() returned false: 200, or 500
  // when the engine died under it.
  virtual int status() const = 0;
  // `wake` is called, from any thread, whenever poll() may have progress (at once if it has
  // already); null clears it.
  virtual void set_wake(std::function<void()> wake) = 0;

  // Blocks until complete and returns everything (tests, tools).
  std::string drain();
};

class OpenAIServing {
 public:
  // `tokenizer` and `chat_template` may be null: text prompts resp. chat are then refused.
  OpenAIServing(engine::EngineClient* client, const Tokenizer* tokenizer,
                std::unique_ptr<ChatTemplate> chat_template, nlohmann::json special_tokens,
                ServerMetrics* metrics, ServingOptions options);
  ~OpenAIServing();

  Expected<std::unique_ptr<ResponseStream>> completions(std::string_view body);
  Expected<std::unique_ptr<ResponseStream>> chat_completions(std::string_view body);
  Expected<std::string> tokenize(std::string_view body);
  Expected<std::string> detokenize(std::string_view body);
  std::string models() const;

  const ServingOptions& options() const { return options_; }
  int64_t max_model_len() const { return client_->max_model_len(); }

  // --- for the endpoint implementations (serving_*.cpp) ---
  // kNotFound "The model `x` does not exist." unless `model` is absent or a served name.
  Status check_model(const std::optional<std::string>& model) const;
  const std::string& model_name() const { return options_.served_model_names.front(); }
  // Sets max_tokens as vLLM does: the request's (or the server default), capped by what the
  // context leaves; errors when the prompt alone fills the context or the request's
  // max_tokens does not fit beside it.
  Status fit_to_context(size_t prompt_len, bool max_tokens_given, SamplingParams* params) const;
  Expected<std::vector<int32_t>> encode(const std::string& text, bool add_special_tokens) const;
  // One token as text, for logprobs ("token_id:<id>" without a tokenizer).
  std::string token_text(int32_t id) const;
  // The chat template applied to a parsed chat request.
  struct RenderedChat {
    std::string prompt;
    std::vector<int32_t> token_ids;
  };
  Expected<RenderedChat> render_chat(const ChatRequest& request) const;

  engine::EngineClient* client() const { return client_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  ServerMetrics* metrics() const { return metrics_; }
  // Null unless --enable-log-requests.
  const RequestLogger* request_logger() const {
    return request_logger_ ? &*request_logger_ : nullptr;
  }

 private:
  engine::EngineClient* client_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  nlohmann::json special_tokens_;
  ServerMetrics* metrics_;
  ServingOptions options_;
  std::optional<RequestLogger> request_logger_;
  int64_t created_;
};

// "<prefix><32 random hex digits>", e.g. "cmpl-...", "chatcmpl-...".
std::string random_request_id(std::string_view prefix);
// The JSON text of a response or chunk (invalid UTF-8 replaced, never throws).
std::string dump_json(const nlohmann::ordered_json& value);
// logprob values as vLLM reports them: -inf clamped to -9999.0.
double clamp_logprob(float logprob);
// What a request gets when the engine died under it: the OpenAI error JSON, and the same
// as a server-sent event followed by "data: [DONE]".
std::string engine_dead_error_body();
std::string engine_dead_error_events();

}  // namespace vllm::server

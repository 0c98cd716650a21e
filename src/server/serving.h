// The OpenAI endpoints behind the HTTP layer: request body in, response body (or a stream of
// server-sent events) out, as vLLM's OpenAIServingCompletion / OpenAIServingChat /
// OpenAIServingTokenization / OpenAIServingModels do. Nothing here knows about sockets: the
// HTTP layer (http_server.h) moves bytes and turns a returned Status into an OpenAI error.
//
// Per request: parse and check the body (protocol.h), check the model name, tokenize (chat:
// render the template first), check the prompt against max_model_len, start a Generation,
// then either wait for it and answer one JSON object, or hand the HTTP layer an EventStream
// that yields "data: {...}\n\n" chunks and finally "data: [DONE]\n\n". Dropping an
// EventStream before it ends (the client went away) aborts its engine requests.
#pragma once

#include <chrono>
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
  // vLLM's --enable-prompt-tokens-details: usage.prompt_tokens_details.cached_tokens (the
  // prompt tokens a prefix-cache hit skipped) when there were any.
  bool enable_prompt_tokens_details = false;
};

class EventStream {
 public:
  virtual ~EventStream() = default;
  // Waits up to `timeout` for progress and appends the SSE text to send (possibly nothing);
  // returns false once the stream is complete (its final text appended).
  virtual bool next(std::chrono::milliseconds timeout, std::string* out) = 0;
};

struct ServingResponse {
  std::string body;                     // the JSON answer, when not streaming
  std::unique_ptr<EventStream> stream;  // set when streaming
};

class OpenAIServing {
 public:
  // `tokenizer` and `chat_template` may be null: text prompts resp. chat are then refused.
  OpenAIServing(engine::EngineClient* client, const Tokenizer* tokenizer,
                std::unique_ptr<ChatTemplate> chat_template, nlohmann::json special_tokens,
                ServerMetrics* metrics, ServingOptions options);
  ~OpenAIServing();

  Expected<ServingResponse> completions(std::string_view body);
  Expected<ServingResponse> chat_completions(std::string_view body);
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

 private:
  engine::EngineClient* client_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  nlohmann::json special_tokens_;
  ServerMetrics* metrics_;
  ServingOptions options_;
  int64_t created_;
};

// "<prefix><32 random hex digits>", e.g. "cmpl-...", "chatcmpl-...".
std::string random_request_id(std::string_view prefix);
// The JSON text of a response or chunk (invalid UTF-8 replaced, never throws).
std::string dump_json(const nlohmann::ordered_json& value);
// logprob values as vLLM reports them: -inf clamped to -9999.0.
double clamp_logprob(float logprob);

}  // namespace vllm::server

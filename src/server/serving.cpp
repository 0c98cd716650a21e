// What the endpoints share: model names, the context-length rules, tokenizing, the chat
// template, token texts for logprobs; and GET /v1/models.
#include "server/serving.h"

#include <fmt/format.h>

#include <condition_variable>
#include <ctime>
#include <mutex>
#include <random>
#include <utility>

#include "server/api_error.h"
#include "server/protocol.h"

namespace vllm::server {

std::string ResponseStream::drain() {
  std::mutex mutex;
  std::condition_variable cv;
  bool woken = false;
  set_wake([&] {
    {
      std::lock_guard<std::mutex> lock(mutex);
      woken = true;
    }
    cv.notify_one();
  });
  std::string out;
  while (poll(&out)) {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return woken; });
    woken = false;
  }
  set_wake(nullptr);
  return out;
}

std::string engine_dead_error_body() {
  // vLLM's EngineDeadError, answered as a 500.
  return make_api_error(500,
                        "EngineCore encountered an issue and stopped; see the server log for "
                        "the cause.")
      .body();
}

std::string engine_dead_error_events() {
  return "data: " + engine_dead_error_body() + "\n\ndata: [DONE]\n\n";
}

std::string random_request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

std::string dump_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

double clamp_logprob(float logprob) {
  return std::max(static_cast<double>(logprob), -9999.0);
}

OpenAIServing::OpenAIServing(engine::EngineClient* client, const Tokenizer* tokenizer,
                             std::unique_ptr<ChatTemplate> chat_template,
                             nlohmann::json special_tokens, ServerMetrics* metrics,
                             ServingOptions options)
    : client_(client),
      tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      special_tokens_(std::move(special_tokens)),
      metrics_(metrics),
      options_(std::move(options)),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  if (options_.log_requests) request_logger_.emplace(options_.log_options);
}

OpenAIServing::~OpenAIServing() = default;

Status OpenAIServing::check_model(const std::optional<std::string>& model) const {
  if (!model) return Status::ok();
  for (const std::string& name : options_.served_model_names) {
    if (name == *model) return Status::ok();
  }
  return make_error(ErrorCode::kNotFound, "The model `{}` does not exist.", *model);
}

Status OpenAIServing::fit_to_context(size_t prompt_len, bool max_tokens_given,
                                     SamplingParams* params) const {
  const int64_t max_len = client_->max_model_len();
  const auto input_len = static_cast<int64_t>(prompt_len);
  if (input_len >= max_len) {
    return make_error(ErrorCode::kInvalidArgument,
                      "This model's maximum context length is {} tokens. However, your request "
                      "has {} input tokens. Please reduce the length of the input messages.",
                      max_len, input_len);
  }
  if (max_tokens_given && params->max_tokens && input_len + *params->max_tokens > max_len) {
    return make_error(ErrorCode::kInvalidArgument,
                      "'max_tokens' or 'max_completion_tokens' is too large: {}. This model's "
                      "maximum context length is {} tokens and your request has {} input tokens "
                      "({} > {} - {}).",
                      *params->max_tokens, max_len, input_len, *params->max_tokens, max_len,
                      input_len);
  }
  // vLLM's get_max_tokens: the smallest of what the context leaves, the request's value and
  // the server's default (generation_config.json max_new_tokens).
  int64_t max_tokens = max_len - input_len;
  if (params->max_tokens) max_tokens = std::min<int64_t>(max_tokens, *params->max_tokens);
  if (!max_tokens_given && options_.default_max_tokens) {
    max_tokens = std::min<int64_t>(max_tokens, *options_.default_max_tokens);
  }
  if (!params->max_tokens || max_tokens < *params->max_tokens) {
    params->max_tokens = static_cast<int32_t>(max_tokens);
  }
  return Status::ok();
}

Expected<std::vector<int32_t>> OpenAIServing::encode(const std::string& text,
                                                     bool add_special_tokens) const {
  if (tokenizer_ == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      "text prompts need a tokenizer and the model folder has no tokenizer.json "
                      "(send token ids instead)");
  }
  return tokenizer_->encode(text, add_special_tokens);
}

std::string OpenAIServing::token_text(int32_t id) const {
  if (tokenizer_ == nullptr) return fmt::format("token_id:{}", id);
  DecodeOptions options;
  options.skip_special_tokens = false;
  const int32_t ids[] = {id};
  auto text = tokenizer_->decode(ids, options);
  return text ? *text : fmt::format("token_id:{}", id);
}

Expected<OpenAIServing::RenderedChat> OpenAIServing::render_chat(const ChatRequest& request) const {
  if (chat_template_ == nullptr || tokenizer_ == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      "this model has no chat template (give one with --chat-template) or no "
                      "tokenizer.json; use /v1/completions");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) {
    context[it.key()] = it.value();
  }
  context["tools"] = request.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = request.add_generation_prompt;
  context["messages"] = request.messages;
  for (auto it = request.chat_template_kwargs.begin(); it != request.chat_template_kwargs.end();
       ++it) {
    context[it.key()] = it.value();
  }
  auto rendered = chat_template_->render(context);
  if (!rendered) return rendered.status().with_context("chat template");
  RenderedChat out;
  out.prompt = std::move(*rendered);
  if (request.continue_final_message) {
    // As transformers: cut the rendering right after the final message's content, so the
    // model continues it instead of starting a new turn.
    const nlohmann::ordered_json& last = request.messages.back();
    auto content = last.find("content");
    if (content != last.end() && content->is_string()) {
      std::string text = content->get<std::string>();
      const size_t b = text.find_first_not_of(" \t\r\n");
      const size_t e = text.find_last_not_of(" \t\r\n");
      text = b == std::string::npos ? "" : text.substr(b, e - b + 1);
      const size_t at = out.prompt.rfind(text);
      if (!text.empty() && at != std::string::npos) out.prompt.resize(at + text.size());
    }
  }
  VLLM_ASSIGN_OR_RETURN(out.token_ids, tokenizer_->encode(out.prompt, request.add_special_tokens));
  return out;
}

std::string OpenAIServing::models() const {
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  for (const std::string& name : options_.served_model_names) {
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", created_},
                    {"owned_by", "vllm"},
                    {"root", options_.model_root},
                    {"parent", nullptr},
                    {"max_model_len", client_->max_model_len()}});
  }
  return dump_json({{"object", "list"}, {"data", data}});
}

}  // namespace vllm::server

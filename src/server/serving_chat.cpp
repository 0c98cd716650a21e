// POST /v1/chat/completions (vLLM's OpenAIServingChat): messages rendered with the chat
// template, the answer split into reasoning_content (--reasoning-parser qwen3), content and
// tool_calls (--enable-auto-tool-choice --tool-call-parser hermes|qwen3_coder), whole or as
// streamed deltas; logprobs in the chat shape ({"content": [{token, logprob, bytes,
// top_logprobs}]}).
#include <algorithm>
#include <ctime>
#include <utility>

#include "server/forced_tool_calls.h"
#include "server/generation.h"
#include "server/protocol.h"
#include "server/reasoning_parser.h"
#include "server/serving.h"
#include "server/tool_parser.h"

namespace vllm::server {
namespace {

using nlohmann::ordered_json;

ordered_json token_entry(const std::string& text, float logprob) {
  ordered_json bytes = ordered_json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return {{"token", text}, {"logprob", clamp_logprob(logprob)}, {"bytes", std::move(bytes)}};
}

// Chat logprobs entries for tokens [from, to) of `c`.
ordered_json chat_logprobs(const OpenAIServing& s, const engine::CompletionOutput& c, size_t from,
                           int num_top) {
  ordered_json content = ordered_json::array();
  for (size_t i = from; i < c.token_ids.size() && i < c.logprobs.size(); ++i) {
    const TokenLogprobs& lp = c.logprobs[i];
    ordered_json entry = token_entry(s.token_text(c.token_ids[i]), lp.logprob);
    ordered_json top = ordered_json::array();
    for (size_t k = 0; k < lp.top_token_ids.size() && static_cast<int>(k) < num_top; ++k) {
      top.push_back(token_entry(s.token_text(lp.top_token_ids[k]), lp.top_logprobs[k]));
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}};
}

ordered_json tool_call_json(const ToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

ordered_json stop_reason(const engine::CompletionOutput& c) {
  if (c.stop_string) return *c.stop_string;
  if (c.stop_token) return *c.stop_token;
  return nullptr;
}

// cached_tokens: the prefix-cache hit, reported (as vLLM does) only when details are on and
// there was one.
ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                        const OpenAIServing* details = nullptr, int64_t cached_tokens = 0) {
  ordered_json usage = {{"prompt_tokens", prompt_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens},
                        {"completion_tokens", completion_tokens},
                        {"prompt_tokens_details", nullptr}};
  if (details != nullptr && details->options().enable_prompt_tokens_details && cached_tokens > 0) {
    usage["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  }
  return usage;
}

struct PreparedChat {
  ChatRequest request;
  std::vector<int32_t> prompt;
  ToolChoice::Kind forced = ToolChoice::Kind::kNone;  // kRequired / kNamed: forced tool calls
  bool parse_tools = false;
  bool parse_reasoning = false;
  bool starts_in_reasoning = false;
  std::unique_ptr<Generation> generation;
  std::string id;
  int64_t created = 0;
};

Expected<PreparedChat> prepare(const OpenAIServing& s, std::string_view body) {
  const auto arrival = Generation::Clock::now();
  VLLM_ASSIGN_OR_RETURN(nlohmann::ordered_json json, parse_ordered_json_object(body));
  PreparedChat p;
  VLLM_ASSIGN_OR_RETURN(p.request, parse_chat_request(json, s.options().default_params));
  VLLM_RETURN_IF_ERROR(s.check_model(p.request.model));
  switch (p.request.tool_choice.kind) {
    case ToolChoice::Kind::kNone:
      break;
    case ToolChoice::Kind::kAuto:
      if (!s.options().enable_auto_tool_choice || !s.options().tool_call_parser) {
        return make_error(ErrorCode::kInvalidArgument,
                          "\"auto\" tool choice requires --enable-auto-tool-choice and "
                          "--tool-call-parser to be set");
      }
      p.parse_tools = true;
      break;
    case ToolChoice::Kind::kRequired:
    case ToolChoice::Kind::kNamed: {
      // As vLLM: the output is constrained to the tools' parameter schemas.
      if (p.request.params.structured_outputs) {
        return make_error(ErrorCode::kInvalidArgument,
                          "tool_choice \"required\" or a named function cannot be combined with "
                          "response_format or structured_outputs");
      }
      VLLM_ASSIGN_OR_RETURN(std::string schema,
                            forced_tool_schema(p.request.tool_choice, p.request.tools));
      structured::StructuredOutputsParams forced;
      forced.json = std::move(schema);
      p.request.params.structured_outputs = std::move(forced);
      p.forced = p.request.tool_choice.kind;
      break;
    }
  }
  VLLM_ASSIGN_OR_RETURN(auto rendered, s.render_chat(p.request));
  p.prompt = std::move(rendered.token_ids);
  if (s.options().reasoning_parser) {
    p.parse_reasoning = true;
    p.starts_in_reasoning = prompt_opens_thinking(rendered.prompt);
    // As vLLM's qwen3 reasoner: unless the request turns thinking off, the model thinks
    // first and the grammar applies after its </think>.
    if (p.request.params.structured_outputs) {
      const auto& kwargs = p.request.chat_template_kwargs;
      auto thinking = kwargs.find("enable_thinking");
      const bool off = thinking != kwargs.end() && thinking->is_boolean() && !thinking->get<bool>();
      p.request.params.structured_outputs->await_reasoning_end = !off;
    }
  }
  if (p.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  VLLM_RETURN_IF_ERROR(
      s.fit_to_context(p.prompt.size(), p.request.max_tokens_given, &p.request.params));
  p.id = random_request_id("chatcmpl-");
  p.created = static_cast<int64_t>(std::time(nullptr));
  if (const RequestLogger* logger = s.request_logger()) {
    logger->log_inputs(p.id + "-0", &rendered.prompt, p.prompt, p.request.params);
  }
  VLLM_ASSIGN_OR_RETURN(
      p.generation, Generation::start(s.client(), s.tokenizer(), s.metrics(), s.request_logger(),
                                      p.id, {p.prompt}, p.request.params, arrival));
  return p;
}

class ChatStream final : public ResponseStream {
 public:
  ChatStream(const OpenAIServing& s, PreparedChat p) : s_(s), p_(std::move(p)) {
    choices_.resize(static_cast<size_t>(std::max(p_.request.params.n, 1)));
    for (Choice& c : choices_) {
      if (p_.parse_reasoning)
        c.reasoning = std::make_unique<ReasoningStreamParser>(p_.starts_in_reasoning);
      if (p_.parse_tools) {
        c.tools = make_tool_parser(*s_.options().tool_call_parser, p_.request.tools).value();
      }
    }
  }

  bool streaming() const override { return true; }
  int status() const override { return 200; }
  void set_wake(std::function<void()> wake) override { p_.generation->set_wake(std::move(wake)); }

  bool poll(std::string* out) override {
    if (done_) return false;
    if (!sent_roles_) {
      // vLLM opens each choice with the role before any token.
      for (size_t i = 0; i < choices_.size(); ++i) {
        ordered_json item = {{"index", i},
                             {"delta", {{"role", "assistant"}, {"content", ""}}},
                             {"logprobs", nullptr},
                             {"finish_reason", nullptr}};
        write_chunk(ordered_json::array({item}), 0, out);
      }
      sent_roles_ = true;
      return true;
    }
    for (const Generation::Update& u : p_.generation->next(std::chrono::milliseconds(0))) {
      num_cached_tokens_ = u.output.num_cached_tokens;
      for (const engine::CompletionOutput& c : u.output.outputs) emit(c, out);
    }
    if (!p_.generation->finished()) return true;
    done_ = true;
    if (p_.generation->engine_died()) {
      out->append(engine_dead_error_events());
      return false;
    }
    if (p_.request.stream_options.include_usage) {
      int64_t completion_tokens = 0;
      for (const Choice& c : choices_) completion_tokens += static_cast<int64_t>(c.num_tokens);
      ordered_json chunk = header();
      chunk["choices"] = ordered_json::array();
      chunk["usage"] = usage_json(static_cast<int64_t>(p_.prompt.size()), completion_tokens, &s_,
                                  num_cached_tokens_);
      out->append("data: ").append(dump_json(chunk)).append("\n\n");
    }
    out->append("data: [DONE]\n\n");
    return false;
  }

 private:
  struct Choice {
    std::unique_ptr<ReasoningStreamParser> reasoning;
    std::unique_ptr<ToolParser> tools;
    RequiredToolCallStream required;  // tool_choice "required"
    std::string named_call_id;        // tool_choice named: set once the call has started
    size_t num_tokens = 0;
    size_t num_logprobs = 0;
    int num_tool_calls = 0;
    bool finished = false;
  };

  ordered_json header() const {
    return {{"id", p_.id},
            {"object", "chat.completion.chunk"},
            {"created", p_.created},
            {"model", s_.model_name()}};
  }

  void write_chunk(ordered_json choices, int64_t completion_tokens, std::string* out) const {
    ordered_json chunk = header();
    chunk["choices"] = std::move(choices);
    if (p_.request.stream_options.include_usage &&
        p_.request.stream_options.continuous_usage_stats) {
      chunk["usage"] = usage_json(static_cast<int64_t>(p_.prompt.size()), completion_tokens);
    }
    out->append("data: ").append(dump_json(chunk)).append("\n\n");
  }

  void emit(const engine::CompletionOutput& c, std::string* out) {
    Choice& choice = choices_[static_cast<size_t>(c.index)];
    if (choice.finished) return;
    std::string reasoning, content;
    if (choice.reasoning) {
      choice.reasoning->feed(c.delta, &reasoning, &content);
      if (c.finished()) choice.reasoning->finish(&reasoning, &content);
    } else {
      content = c.delta;
    }
    std::vector<ToolCall> calls;
    if (choice.tools) {
      std::string plain;
      choice.tools->feed(content, &plain, &calls);
      if (c.finished()) choice.tools->finish(&plain, &calls);
      content = std::move(plain);
    }
    ordered_json named_delta;  // tool_choice named: the arguments text streams as it comes
    if (p_.forced == ToolChoice::Kind::kRequired) {
      choice.required.feed(content, &calls);
      content.clear();
    } else if (p_.forced == ToolChoice::Kind::kNamed && !content.empty()) {
      ordered_json function = {{"arguments", content}};
      named_delta = {{"index", 0}, {"function", {}}};
      if (choice.named_call_id.empty()) {
        choice.named_call_id = make_tool_call_id();
        function = {{"name", p_.request.tool_choice.name}, {"arguments", content}};
        named_delta = {{"id", choice.named_call_id}, {"type", "function"}, {"index", 0}};
      }
      named_delta["function"] = std::move(function);
      content.clear();
    }
    const bool want_logprobs = p_.request.logprobs && p_.request.params.logprobs.has_value();
    const bool new_logprobs = want_logprobs && c.logprobs.size() > choice.num_logprobs;
    choice.num_tokens = c.token_ids.size();
    if (reasoning.empty() && content.empty() && calls.empty() && named_delta.is_null() &&
        !new_logprobs && !c.finished()) {
      return;
    }
    ordered_json delta = ordered_json::object();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!content.empty()) delta["content"] = content;
    if (!calls.empty()) {
      ordered_json list = ordered_json::array();
      for (const ToolCall& call : calls) {
        ordered_json j = tool_call_json(call);
        j["index"] = choice.num_tool_calls++;
        list.push_back(std::move(j));
      }
      delta["tool_calls"] = std::move(list);
    }
    if (!named_delta.is_null()) delta["tool_calls"] = ordered_json::array({std::move(named_delta)});
    ordered_json item = {{"index", c.index}, {"delta", std::move(delta)}};
    if (want_logprobs) {
      item["logprobs"] = chat_logprobs(s_, c, choice.num_logprobs, *p_.request.params.logprobs);
      choice.num_logprobs = c.logprobs.size();
    } else {
      item["logprobs"] = nullptr;
    }
    if (c.finished()) {
      choice.finished = true;
      const bool calls_finish = choice.num_tool_calls > 0 &&
                                (p_.forced != ToolChoice::Kind::kRequired ||
                                 c.finish_reason == "stop");
      item["finish_reason"] = calls_finish ? std::string("tool_calls") : c.finish_reason;
      item["stop_reason"] = stop_reason(c);
    } else {
      item["finish_reason"] = nullptr;
    }
    write_chunk(ordered_json::array({item}), static_cast<int64_t>(c.token_ids.size()), out);
  }

  const OpenAIServing& s_;
  PreparedChat p_;
  std::vector<Choice> choices_;
  int64_t num_cached_tokens_ = 0;
  bool sent_roles_ = false;
  bool done_ = false;
};

// The non-streaming answer: keeps the latest outputs, builds the whole body at the end.
class ChatCollector final : public ResponseStream {
 public:
  ChatCollector(const OpenAIServing& s, PreparedChat p) : s_(s), p_(std::move(p)) {}

  bool streaming() const override { return false; }
  int status() const override { return status_; }
  void set_wake(std::function<void()> wake) override { p_.generation->set_wake(std::move(wake)); }

  bool poll(std::string* out) override {
    if (done_) return false;
    for (Generation::Update& u : p_.generation->next(std::chrono::milliseconds(0))) {
      last_ = std::move(u.output);
    }
    if (!p_.generation->finished()) return true;
    done_ = true;
    if (p_.generation->engine_died()) {
      status_ = 500;
      out->append(engine_dead_error_body());
    } else {
      out->append(body());
    }
    return false;
  }

 private:
  std::string body() {
    ordered_json choices = ordered_json::array();
    int64_t completion_tokens = 0;
    for (const engine::CompletionOutput& c : last_.outputs) {
      completion_tokens += static_cast<int64_t>(c.token_ids.size());
      std::optional<std::string> reasoning;
      std::optional<std::string> content = c.text;
      if (p_.parse_reasoning) {
        ReasoningSplit split = split_reasoning(c.text);
        reasoning = std::move(split.reasoning);
        content = std::move(split.content);
      }
      ordered_json tool_calls = ordered_json::array();
      if (p_.forced == ToolChoice::Kind::kNamed && content) {
        tool_calls.push_back(tool_call_json(
            ToolCall{make_tool_call_id(), p_.request.tool_choice.name, *content}));
        content = "";
      } else if (p_.forced == ToolChoice::Kind::kRequired && content) {
        if (auto calls = parse_required_tool_calls(*content)) {
          for (const ToolCall& call : *calls) tool_calls.push_back(tool_call_json(call));
          content = "";
        }
      } else if (p_.parse_tools && content) {
        auto parser = make_tool_parser(*s_.options().tool_call_parser, p_.request.tools).value();
        ToolParseResult parsed = parser->parse(*content);
        for (const ToolCall& call : parsed.tool_calls) tool_calls.push_back(tool_call_json(call));
        content = std::move(parsed.content);
      }
      ordered_json message = {{"role", "assistant"}};
      message["content"] = content ? ordered_json(*content) : ordered_json(nullptr);
      message["reasoning_content"] = reasoning ? ordered_json(*reasoning) : ordered_json(nullptr);
      message["tool_calls"] = tool_calls;
      ordered_json item = {{"index", c.index}, {"message", std::move(message)}};
      item["logprobs"] = p_.request.logprobs && p_.request.params.logprobs
                             ? chat_logprobs(s_, c, 0, *p_.request.params.logprobs)
                             : ordered_json(nullptr);
      // As vLLM: forced named calls keep the engine's reason; parsed calls report "tool_calls".
      const bool calls_finish =
          !tool_calls.empty() && (p_.forced == ToolChoice::Kind::kRequired
                                      ? c.finish_reason == "stop"
                                      : p_.forced != ToolChoice::Kind::kNamed);
      item["finish_reason"] = calls_finish ? std::string("tool_calls") : c.finish_reason;
      item["stop_reason"] = stop_reason(c);
      choices.push_back(std::move(item));
    }
    ordered_json out = {
        {"id", p_.id},
        {"object", "chat.completion"},
        {"created", p_.created},
        {"model", s_.model_name()},
        {"choices", std::move(choices)},
        {"usage", usage_json(static_cast<int64_t>(p_.prompt.size()), completion_tokens, &s_,
                             last_.num_cached_tokens)}};
    return dump_json(out);
  }

  const OpenAIServing& s_;
  PreparedChat p_;
  engine::RequestOutput last_;
  int status_ = 200;
  bool done_ = false;
};

}  // namespace

Expected<std::unique_ptr<ResponseStream>> OpenAIServing::chat_completions(std::string_view body) {
  VLLM_ASSIGN_OR_RETURN(PreparedChat p, prepare(*this, body));
  std::unique_ptr<ResponseStream> stream;
  if (p.request.stream) {
    stream = std::make_unique<ChatStream>(*this, std::move(p));
  } else {
    stream = std::make_unique<ChatCollector>(*this, std::move(p));
  }
  return stream;
}

}  // namespace vllm::server

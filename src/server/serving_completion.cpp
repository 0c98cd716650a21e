// POST /v1/completions (vLLM's OpenAIServingCompletion): prompts in, text out, with echo,
// logprobs in the legacy completions shape (tokens / token_logprobs / top_logprobs /
// text_offset), n samples and batches of prompts (choice index = prompt * n + sample).
#include <algorithm>
#include <ctime>
#include <map>
#include <utility>

#include "server/generation.h"
#include "server/protocol.h"
#include "server/serving.h"

namespace vllm::server {
namespace {

using nlohmann::ordered_json;

// Python's len() of a UTF-8 string: its code points.
size_t code_points(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The completions logprobs object, accumulated token by token.
struct CompletionLogprobs {
  ordered_json tokens = ordered_json::array();
  ordered_json token_logprobs = ordered_json::array();
  ordered_json top_logprobs = ordered_json::array();
  ordered_json text_offset = ordered_json::array();
  size_t offset = 0;  // code points before the next token

  // One step; `lp` null for a prompt's first token (it has no logprob).
  void add(const OpenAIServing& s, int32_t token, const TokenLogprobs* lp, int num_top) {
    const std::string text = s.token_text(token);
    tokens.push_back(text);
    text_offset.push_back(offset);
    offset += code_points(text);
    if (lp == nullptr) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      return;
    }
    token_logprobs.push_back(clamp_logprob(lp->logprob));
    // vLLM: the sampled token first, then the top num_top (a dict: repeats collapse).
    ordered_json top = ordered_json::object();
    top[text] = clamp_logprob(lp->logprob);
    for (size_t i = 0; i < lp->top_token_ids.size() && static_cast<int>(i) < num_top; ++i) {
      const std::string t = s.token_text(lp->top_token_ids[i]);
      if (!top.contains(t)) top[t] = clamp_logprob(lp->top_logprobs[i]);
    }
    top_logprobs.push_back(std::move(top));
  }
  ordered_json take() {
    ordered_json j = {{"text_offset", std::move(text_offset)},
                      {"token_logprobs", std::move(token_logprobs)},
                      {"tokens", std::move(tokens)},
                      {"top_logprobs", std::move(top_logprobs)}};
    *this = CompletionLogprobs{offset};
    return j;
  }
  explicit CompletionLogprobs(size_t start_offset = 0) : offset(start_offset) {}
};

ordered_json stop_reason(const engine::CompletionOutput& c) {
  if (c.stop_string) return *c.stop_string;
  if (c.stop_token) return *c.stop_token;
  return nullptr;
}

struct PreparedCompletion {
  CompletionRequest request;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // for echo
  std::unique_ptr<Generation> generation;
  std::string id;
  int64_t created = 0;
};

Expected<PreparedCompletion> prepare(const OpenAIServing& s, std::string_view body) {
  const auto arrival = Generation::Clock::now();
  VLLM_ASSIGN_OR_RETURN(nlohmann::ordered_json json, parse_ordered_json_object(body));
  PreparedCompletion p;
  VLLM_ASSIGN_OR_RETURN(p.request, parse_completion_request(json, s.options().default_params));
  VLLM_RETURN_IF_ERROR(s.check_model(p.request.model));
  for (const PromptInput& input : p.request.prompts) {
    if (input.text) {
      VLLM_ASSIGN_OR_RETURN(auto ids, s.encode(*input.text, p.request.add_special_tokens));
      p.prompts.push_back(std::move(ids));
      p.prompt_texts.push_back(*input.text);
    } else {
      p.prompts.push_back(input.token_ids);
      std::string text;
      if (p.request.echo && s.tokenizer() != nullptr) {
        DecodeOptions options;
        options.skip_special_tokens = false;
        auto decoded = s.tokenizer()->decode(input.token_ids, options);
        if (decoded) text = std::move(*decoded);
      }
      p.prompt_texts.push_back(std::move(text));
    }
  }
  size_t longest = 0;
  for (const auto& prompt : p.prompts) {
    if (prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
    longest = std::max(longest, prompt.size());
  }
  VLLM_RETURN_IF_ERROR(s.fit_to_context(longest, p.request.max_tokens_given, &p.request.params));
  p.id = random_request_id("cmpl-");
  p.created = static_cast<int64_t>(std::time(nullptr));
  if (const RequestLogger* logger = s.request_logger()) {
    for (size_t i = 0; i < p.prompts.size(); ++i) {
      const PromptInput& input = p.request.prompts[i];
      logger->log_inputs(p.id + "-" + std::to_string(i), input.text ? &*input.text : nullptr,
                         p.prompts[i], p.request.params);
    }
  }
  VLLM_ASSIGN_OR_RETURN(
      p.generation, Generation::start(s.client(), s.tokenizer(), s.metrics(), s.request_logger(),
                                      p.id, p.prompts, p.request.params, arrival));
  return p;
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

class CompletionStream final : public ResponseStream {
 public:
  CompletionStream(const OpenAIServing& s, PreparedCompletion p) : s_(s), p_(std::move(p)) {
    const int n = std::max(p_.request.params.n, 1);
    choices_.resize(p_.prompts.size() * static_cast<size_t>(n));
  }

  bool streaming() const override { return true; }
  int status() const override { return 200; }
  void set_wake(std::function<void()> wake) override { p_.generation->set_wake(std::move(wake)); }

  bool poll(std::string* out) override {
    if (done_) return false;
    for (const Generation::Update& u : p_.generation->next(std::chrono::milliseconds(0))) {
      num_cached_tokens_ = u.output.num_cached_tokens;
      for (const engine::CompletionOutput& c : u.output.outputs) emit(u, c, out);
    }
    if (!p_.generation->finished()) return true;
    done_ = true;
    if (p_.generation->engine_died()) {
      out->append(engine_dead_error_events());
      return false;
    }
    if (p_.request.stream_options.include_usage) {
      ordered_json chunk = header();
      chunk["choices"] = ordered_json::array();
      chunk["usage"] = usage_json(prompt_tokens(), completion_tokens(), &s_, num_cached_tokens_);
      out->append("data: ").append(dump_json(chunk)).append("\n\n");
    }
    out->append("data: [DONE]\n\n");
    return false;
  }

 private:
  struct Choice {
    size_t num_tokens = 0;  // tokens already reported
    size_t num_logprobs = 0;
    bool started = false;
    bool finished = false;
    size_t text_offset = 0;
  };

  ordered_json header() const {
    return {{"id", p_.id},
            {"object", "text_completion"},
            {"created", p_.created},
            {"model", s_.model_name()}};
  }
  int64_t prompt_tokens() const {
    int64_t n = 0;
    for (const auto& prompt : p_.prompts) n += static_cast<int64_t>(prompt.size());
    return n;
  }
  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const Choice& c : choices_) n += static_cast<int64_t>(c.num_tokens);
    return n;
  }

  void emit(const Generation::Update& u, const engine::CompletionOutput& c, std::string* out) {
    const int n = std::max(p_.request.params.n, 1);
    const size_t index = u.prompt_index * static_cast<size_t>(n) + static_cast<size_t>(c.index);
    Choice& choice = choices_[index];
    if (choice.finished) return;
    const bool new_tokens = c.token_ids.size() > choice.num_tokens;
    if (!new_tokens && !c.finished() && c.delta.empty()) return;
    std::string text;
    const bool want_logprobs = p_.request.params.logprobs.has_value();
    const int num_top = p_.request.params.logprobs.value_or(0);
    CompletionLogprobs logprobs(choice.text_offset);
    if (!choice.started && p_.request.echo) {
      text = p_.prompt_texts[u.prompt_index];
      if (want_logprobs) {
        const auto& prompt = p_.prompts[u.prompt_index];
        for (size_t i = 0; i < prompt.size(); ++i) {
          const TokenLogprobs* lp = i > 0 && i - 1 < u.output.prompt_logprobs.size()
                                        ? &u.output.prompt_logprobs[i - 1]
                                        : nullptr;
          logprobs.add(s_, prompt[i], lp, num_top);
        }
      }
    }
    choice.started = true;
    text += c.delta;
    if (want_logprobs) {
      for (size_t i = choice.num_logprobs; i < c.logprobs.size() && i < c.token_ids.size(); ++i) {
        logprobs.add(s_, c.token_ids[i], &c.logprobs[i], num_top);
      }
      choice.num_logprobs = std::min(c.logprobs.size(), c.token_ids.size());
    }
    choice.num_tokens = c.token_ids.size();
    choice.text_offset = logprobs.offset;
    ordered_json item = {{"index", index}, {"text", text}};
    item["logprobs"] = want_logprobs ? logprobs.take() : ordered_json(nullptr);
    if (c.finished()) {
      choice.finished = true;
      item["finish_reason"] = c.finish_reason;
      item["stop_reason"] = stop_reason(c);
    } else {
      item["finish_reason"] = nullptr;
      item["stop_reason"] = nullptr;
    }
    ordered_json chunk = header();
    chunk["choices"] = ordered_json::array({item});
    if (p_.request.stream_options.include_usage &&
        p_.request.stream_options.continuous_usage_stats) {
      chunk["usage"] = usage_json(static_cast<int64_t>(p_.prompts[u.prompt_index].size()),
                                  static_cast<int64_t>(c.token_ids.size()));
    }
    out->append("data: ").append(dump_json(chunk)).append("\n\n");
  }

  const OpenAIServing& s_;
  PreparedCompletion p_;
  std::vector<Choice> choices_;
  int64_t num_cached_tokens_ = 0;  // of the last prompt that reported, as vLLM's
  bool done_ = false;
};

// The non-streaming answer: collects the outputs, and builds the whole body at the end.
class CompletionCollector final : public ResponseStream {
 public:
  CompletionCollector(const OpenAIServing& s, PreparedCompletion p) : s_(s), p_(std::move(p)) {}

  bool streaming() const override { return false; }
  int status() const override { return status_; }
  void set_wake(std::function<void()> wake) override { p_.generation->set_wake(std::move(wake)); }

  bool poll(std::string* out) override {
    if (done_) return false;
    for (Generation::Update& u : p_.generation->next(std::chrono::milliseconds(0))) {
      last_[u.prompt_index] = std::move(u.output);
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
    const PreparedCompletion& p = p_;
    const int n = std::max(p.request.params.n, 1);
    const bool want_logprobs = p.request.params.logprobs.has_value();
    const int num_top = p.request.params.logprobs.value_or(0);
    ordered_json choices = ordered_json::array();
    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (size_t i = 0; i < p.prompts.size(); ++i) {
      const engine::RequestOutput& r = last_[i];
      prompt_tokens += static_cast<int64_t>(p.prompts[i].size());
      for (const engine::CompletionOutput& c : r.outputs) {
        completion_tokens += static_cast<int64_t>(c.token_ids.size());
        std::string text = p.request.echo ? p.prompt_texts[i] + c.text : c.text;
        ordered_json item = {{"index", i * static_cast<size_t>(n) + static_cast<size_t>(c.index)},
                             {"text", std::move(text)}};
        if (want_logprobs) {
          CompletionLogprobs lp;
          if (p.request.echo) {
            for (size_t k = 0; k < p.prompts[i].size(); ++k) {
              const TokenLogprobs* plp =
                  k > 0 && k - 1 < r.prompt_logprobs.size() ? &r.prompt_logprobs[k - 1] : nullptr;
              lp.add(s_, p.prompts[i][k], plp, num_top);
            }
          }
          for (size_t k = 0; k < c.token_ids.size() && k < c.logprobs.size(); ++k) {
            lp.add(s_, c.token_ids[k], &c.logprobs[k], num_top);
          }
          item["logprobs"] = lp.take();
        } else {
          item["logprobs"] = nullptr;
        }
        item["finish_reason"] = c.finish_reason;
        item["stop_reason"] = stop_reason(c);
        item["prompt_logprobs"] = nullptr;
        choices.push_back(std::move(item));
      }
    }
    ordered_json out = {{"id", p.id},
                        {"object", "text_completion"},
                        {"created", p.created},
                        {"model", s_.model_name()},
                        {"choices", std::move(choices)},
                        {"usage", usage_json(prompt_tokens, completion_tokens, &s_,
                                             last_[p.prompts.size() - 1].num_cached_tokens)}};
    return dump_json(out);
  }

  const OpenAIServing& s_;
  PreparedCompletion p_;
  std::map<size_t, engine::RequestOutput> last_;
  int status_ = 200;
  bool done_ = false;
};

}  // namespace

Expected<std::unique_ptr<ResponseStream>> OpenAIServing::completions(std::string_view body) {
  VLLM_ASSIGN_OR_RETURN(PreparedCompletion p, prepare(*this, body));
  std::unique_ptr<ResponseStream> stream;
  if (p.request.stream) {
    stream = std::make_unique<CompletionStream>(*this, std::move(p));
  } else {
    stream = std::make_unique<CompletionCollector>(*this, std::move(p));
  }
  return stream;
}

}  // namespace vllm::server

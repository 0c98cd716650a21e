// Chat templates: the Jinja2 subset that Hugging Face chat templates use, rendered byte-exact
// to transformers' apply_chat_template (its Jinja environment: trim_blocks, lstrip_blocks,
// the raise_exception global, tojson as transformers configures it, ...).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace vllm {

// Bounds on one render, so that a hostile template ends with an error instead of running
// forever or exhausting memory; the defaults are far above what real chat templates need.
struct ChatTemplateOptions {
  size_t max_output_bytes = size_t{64} << 20;  // also the largest string a template may build
  size_t max_items = size_t{1} << 22;          // largest list a template may build
  int64_t max_steps = 50'000'000;              // statements, iterations, calls, filters
  int max_call_depth = 64;                     // nested macro calls
  int64_t now_unix = -1;  // the clock strftime_now() reads (local time); -1 = system clock
};

class ChatTemplate {
 public:
  // Parses a template. A syntax error or an unsupported construct is kInvalidArgument whose
  // message names `name`, the line and the column.
  static Expected<ChatTemplate> parse(std::string_view source, std::string_view name);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Renders with `context` as the template's variables (messages, tools,
  // add_generation_prompt, bos_token, eos_token, enable_thinking, ...). raise_exception()
  // in the template and run-time errors (undefined attribute access where Jinja raises,
  // type errors) are kInvalidArgument with line and column.
  Expected<std::string> render(const nlohmann::json& context) const;
  // The same with the context's object key order kept. nlohmann::json sorts object keys, and
  // the order is visible in output (tojson of tools, |items of tool-call arguments), so callers
  // that must match transformers byte for byte pass an ordered_json parsed from the request.
  Expected<std::string> render(const nlohmann::ordered_json& context,
                               const ChatTemplateOptions& options = {}) const;

  struct Impl;

 private:
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A model folder's chat template and the variables transformers passes along with it.
struct ModelChatTemplate {
  std::string source;               // template text
  nlohmann::json special_tokens;    // {"bos_token": "...", "eos_token": "...", ...} as strings
};

// Finds the template as transformers does: chat_template.jinja in `model_dir`, else
// tokenizer_config.json's "chat_template" (a string, or a list of {name, template} from
// which "default" is taken). `override_path` (vLLM's --chat-template) wins when given.
// Special tokens come from tokenizer_config.json (strings or {"content": ...} objects).
Expected<ModelChatTemplate> load_model_chat_template(const std::filesystem::path& model_dir,
                                                    const std::filesystem::path& override_path = {});

}  // namespace vllm

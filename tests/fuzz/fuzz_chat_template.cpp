// libFuzzer target for chat templates: template text comes from model folders and from
// --chat-template, so parsing and rendering must survive anything. Any input must either be
// rejected with a Status whose message names the template, or render; a render must respect
// the output bound it was given. Hangs, crashes, leaks (namespace cycles) and stack
// exhaustion are what libFuzzer / ASan report.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tokenizer/chat_template/chat_template.h"

namespace {

void require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_chat_template invariant broken: %s\n", what);
    std::abort();
  }
}

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
    "enable_thinking": false, "documents": null,
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Héllo 👋 <tool_response>x</tool_response>"},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHi", "reasoning_content": "r",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]},
      {"role": "tool", "content": "{\"ok\": 1}"},
      {"role": "user", "content": [{"type": "text", "text": "t"}, {"type": "image"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]
  })");
  return kContext;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = vllm::ChatTemplate::parse(source, "fuzz");
  if (!tmpl.has_value()) {
    require(tmpl.status().message().find("chat template 'fuzz'") == 0, "parse error without location");
    return 0;
  }
  vllm::ChatTemplateOptions options;
  options.max_output_bytes = 1 << 20;
  options.max_items = 1 << 16;
  options.max_steps = 200000;
  options.max_call_depth = 32;
  options.now_unix = 1754395200;
  auto rendered = tmpl->render(context(), options);
  if (rendered.has_value()) {
    require(rendered->size() <= options.max_output_bytes, "output over its bound");
  } else {
    require(!rendered.status().message().empty(), "render error without a message");
  }
  return 0;
}
